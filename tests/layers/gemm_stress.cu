// The stress test of the trainer's own Hopper GEMM (gemm/gemm.cuh): every product the model runs
// through it, at every shape it may see, many times back to back, against a plain GPU reference
// and against its own first repetition to the bit.
//   products: mlp_up_relu2 (r = relu(h Wfc)^2), mlp_down_dx_relu2 (du = 2 sqrt(r) dx Wproj^T),
//             qkv_norm_rotary (head dims 64 and 128), head_ce_forward (+ the finalize's loss);
//   sweep:    K = 64, 128, .., 1024 (every multiple of 64; q, k, v: the widths that are multiples
//             of 256), N over the MLP widths the flags allow (8, 264, 512, 1024, 3072 and 4 K;
//             q, k, v: 3 K; the head: the vocabulary, 50304), M = 1, 300, 1024, 8192, 8328 and
//             16384 (the head: 1, 300, 8192, 16384, its chunk's largest), kSweepReps repetitions;
//   soak:     the presets' own shapes (default, tiny, speedrun), kSoakReps repetitions each.
// A case's repetitions run back to back on one stream, each followed by its outputs' checksums,
// reading rotating copies of the same inputs whose sum is at least twice L2, so that the GEMM's
// loads come from HBM as in the training step, where the race gemm/config.cuh describes showed.
// Checks, each case:
//   every repetition's outputs have the first one's checksums (layers/checksum.cuh: any changed
//     bit changes one but for a chance of 2^-64);
//   the last repetition against the reference: the fp32 product of exact inputs (h multiples of
//     1/8 in [-1, 1], weights multiples of 1/64 in [-1/8, 1/8]: every product and partial sum is
//     exact in fp32 in any order), rounded to bf16, then the unfused layer's pass
//     (layers/relu2.cuh, qk_norm_rotary.cuh, softcap_ce.cuh). So r, du and v equal the reference
//     to the bit; qn and kn within 4e-3 relative Frobenius (the epilogue's angles are fp16,
//     2^-12 absolute, the pass's fp32) and rstd within 1e-5; the head's loss within 1e-5
//     relative, absolute below 1 (fp32 sums over the vocabulary in another order);
//   rows past M are never written (guard rows stay poisoned);
//   no case hangs: a case not done in kWatchdogSeconds ends the test (exit 1) naming it.
// The reference GEMM is itself checked against an fp64 product on the CPU first, to the bit.
// Prints the count of cases and repetitions; under a minute on one H100 or H200.
// --quick: the default preset's shapes and a small edge of each product, twice each, for runs
// under compute-sanitizer (memcheck, racecheck, synccheck), where every access is checked.
#include "tests/layers/gpu_test.h"
#include "gemm/gemm.cuh"
#include "layers/checksum.cuh"
#include "gemm/head_ce.cuh"
#include "layers/qk_norm_rotary.cuh"
#include "layers/relu2.cuh"
#include "layers/rotary.cuh"
#include "layers/softcap_ce.cuh"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

constexpr int kSweepReps = 8, kSoakReps = 2000, kSpeedrunSoakReps = 100, kWatchdogSeconds = 60, kGuardRows = 4;
constexpr int kVocab = 50304;

// ------------------------------------------------------------------------ device helpers
enum Fill { kEighths, kSixtyFourths, kSquares };  // h-like, weight-like, r = (eighths)^2
__global__ void fill_kernel(bf16* p, size_t n, uint64_t seed, int kind) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const int v = (int)(layers::mix64(seed ^ (i * 0xD1B54A32D192ED03ull)) % 17) - 8;
    const float f = kind == kEighths ? v / 8.f : kind == kSixtyFourths ? v / 64.f : (v / 8.f) * (v / 8.f);
    p[i] = __float2bfloat16(f);  // exact: at most 8 significant bits
  }
}
__global__ void targets_kernel(int* t, int n, int V, uint64_t seed) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) t[i] = (int)(layers::mix64(seed ^ (uint64_t)i) % (uint64_t)V);
}
// out[M][N] = bf16(A B), fp32 sums: A [M][K]; B [K][N] (b_kmajor false) or [N][K]. 64 x 64
// outputs a block, 4 x 4 a thread, K in steps of 16 through shared memory.
__global__ void __launch_bounds__(256) ref_gemm_kernel(const bf16* __restrict__ A, const bf16* __restrict__ B, bool b_kmajor,
                                                       bf16* __restrict__ out, int M, int N, int K) {
  __shared__ float sa[16][64 + 1], sb[16][64 + 1];
  const int m0 = blockIdx.y * 64, n0 = blockIdx.x * 64, tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += 16) {
    for (int e = threadIdx.x; e < 16 * 64; e += 256) {
      const int kk = e % 16, r = e / 16;  // A: row r, column k0 + kk
      sa[kk][r] = m0 + r < M && k0 + kk < K ? __bfloat162float(A[(size_t)(m0 + r) * K + k0 + kk]) : 0.f;
      int kb, c;
      if (b_kmajor) kb = e % 16, c = e / 16;
      else kb = e / 64, c = e % 64;
      const bool in = n0 + c < N && k0 + kb < K;
      sb[kb][c] = !in ? 0.f : __bfloat162float(b_kmajor ? B[(size_t)(n0 + c) * K + k0 + kb] : B[(size_t)(k0 + kb) * N + n0 + c]);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; kk++)
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] += sa[kk][ty + 16 * i] * sb[kk][tx + 16 * j];
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int r = m0 + ty + 16 * i, c = n0 + tx + 16 * j;
      if (r < M && c < N) out[(size_t)r * N + c] = __float2bfloat16(acc[i][j]);
    }
}
// x against ref, n bf16: elements whose bits differ, elements not finite, and the sums of
// squares of the difference and of ref (relative Frobenius error)
struct Diff {
  unsigned long long differ, nonfinite;
  double num, den;
};
__global__ void diff_kernel(const bf16* __restrict__ x, const bf16* __restrict__ ref, size_t n, Diff* d) {
  unsigned long long differ = 0, nonfinite = 0;
  double num = 0, den = 0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const float a = __bfloat162float(x[i]), b = __bfloat162float(ref[i]);
    differ += __bfloat16_as_ushort(x[i]) != __bfloat16_as_ushort(ref[i]);
    nonfinite += !isfinite(a);
    num += (double)(a - b) * (a - b), den += (double)b * b;
  }
  for (int o = 16; o; o >>= 1) {
    differ += __shfl_xor_sync(0xffffffff, differ, o), nonfinite += __shfl_xor_sync(0xffffffff, nonfinite, o);
    num += __shfl_xor_sync(0xffffffff, num, o), den += __shfl_xor_sync(0xffffffff, den, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&d->differ, differ), atomicAdd(&d->nonfinite, nonfinite);
    atomicAdd(&d->num, num), atomicAdd(&d->den, den);
  }
}
// n values (16-bit words) still holding the poison 0xFFFF, into *count
__global__ void poisoned_kernel(const uint16_t* __restrict__ p, size_t n, unsigned long long* count) {
  unsigned long long c = 0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) c += p[i] == 0xFFFF;
  for (int o = 16; o; o >>= 1) c += __shfl_xor_sync(0xffffffff, c, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(count, c);
}

// ------------------------------------------------------------------------ host helpers
constexpr unsigned kGrid = 1024, kBlock = 256;
uint64_t g_seed = 12345;

struct Buf {  // a device buffer that grows, reused by every case
  void* p = nullptr;
  size_t bytes = 0;
  void* get(size_t want) {
    if (want > bytes) {
      if (p) CUDA_CHECK(cudaFree(p));
      CUDA_CHECK(cudaMalloc(&p, want));
      bytes = want;
    }
    return p;
  }
  template <typename T>
  T* as(size_t count) { return reinterpret_cast<T*>(get(std::max<size_t>(count, 1) * sizeof(T))); }
};

void fill(bf16* p, size_t n, int kind) {
  fill_kernel<<<kGrid, kBlock>>>(p, n, g_seed++, kind);
  CUDA_CHECK(cudaGetLastError());
}
void ref_gemm(const bf16* A, const bf16* B, bool b_kmajor, bf16* out, int M, int N, int K) {
  ref_gemm_kernel<<<dim3((N + 63) / 64, (M + 63) / 64), 256>>>(A, B, b_kmajor, out, M, N, K);
  CUDA_CHECK(cudaGetLastError());
}
Diff diff(const bf16* x, const bf16* ref, size_t n, Buf& scratch) {
  Diff* d = scratch.as<Diff>(1);
  CUDA_CHECK(cudaMemset(d, 0, sizeof(Diff)));
  diff_kernel<<<kGrid, kBlock>>>(x, ref, n, d);
  CUDA_CHECK(cudaGetLastError());
  Diff h;
  CUDA_CHECK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
  return h;
}
size_t poisoned_count(const void* p, size_t bf16s, Buf& scratch) {
  unsigned long long* c = scratch.as<unsigned long long>(1);
  CUDA_CHECK(cudaMemset(c, 0, sizeof *c));
  poisoned_kernel<<<kGrid, kBlock>>>(reinterpret_cast<const uint16_t*>(p), bf16s, c);
  CUDA_CHECK(cudaGetLastError());
  unsigned long long h = 0;
  CUDA_CHECK(cudaMemcpy(&h, c, sizeof h, cudaMemcpyDeviceToHost));
  return (size_t)h;
}

// Waits for the stream with a deadline: a case that hangs ends the test naming it.
void wait_or_die(cudaStream_t st, const std::string& name) {
  cudaEvent_t ev;
  CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(ev, st));
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady) {
      std::printf("FAIL gemm_stress %s: %s\n", name.c_str(), cudaGetErrorString(e));
      std::fflush(stdout);
      std::_Exit(1);
    }
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(kWatchdogSeconds)) {
      std::printf("FAIL gemm_stress %s: not done after %d s (a hang)\n", name.c_str(), kWatchdogSeconds);
      std::fflush(stdout);
      std::_Exit(1);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  CUDA_CHECK(cudaEventDestroy(ev));
}

// Copies of a case's inputs (identical), enough that one pass over them all is twice L2.
int copies_for(size_t input_bytes) {
  static size_t l2 = 0;
  if (!l2) {
    int dev = 0, v = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, dev));
    l2 = (size_t)v;
  }
  return (int)std::min<size_t>(8, std::max<size_t>(1, (2 * l2 + input_bytes - 1) / input_bytes));
}
void replicate(void* base, size_t bytes, int copies) {  // copy 0 into copies 1..
  for (int c = 1; c < copies; c++) CUDA_CHECK(cudaMemcpy((char*)base + c * bytes, base, bytes, cudaMemcpyDeviceToDevice));
}

struct Stats {
  long long cases = 0, reps = 0;
} g_stats;

// The repetitions of one case: run(copy) enqueues one product on st reading input copy `copy`;
// outputs: the (pointer, bytes) pairs whose checksums (layers/checksum.cuh) are taken after each.
// Returns whether every repetition's checksums are the first one's.
template <typename Run>
bool repeat(const std::string& name, int reps, int copies, Run&& run, std::initializer_list<std::pair<const void*, size_t>> outputs,
            cudaStream_t st, Buf& checksums) {
  const size_t nout = outputs.size();
  unsigned long long* h = checksums.as<unsigned long long>(reps * nout);
  for (int i = 0; i < reps; i++) {
    const cudaError_t e = run(i % copies);
    if (e != cudaSuccess) {
      std::printf("FAIL gemm_stress %s: launch %d: %s\n", name.c_str(), i, cudaGetErrorString(e));
      std::fflush(stdout);
      std::_Exit(1);
    }
    size_t k = 0;
    for (const auto& o : outputs) CUDA_CHECK(layers::checksum(o.first, o.second, h + i * nout + k++, st));
  }
  wait_or_die(st, name);
  std::vector<unsigned long long> got(reps * nout);
  CUDA_CHECK(cudaMemcpy(got.data(), h, got.size() * sizeof *h, cudaMemcpyDeviceToHost));
  int differ = 0;
  for (int i = 1; i < reps; i++) differ += !std::equal(got.begin() + i * nout, got.begin() + (i + 1) * nout, got.begin());
  CHECK(differ == 0, "gemm_stress %s: %d of %d repetitions differ from the first", name.c_str(), differ, reps);
  g_stats.cases++, g_stats.reps += reps;
  return differ == 0;
}

std::string shape_name(const char* what, int M, int K, int N) {
  return std::string(what) + " M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N);
}

struct Bufs {
  Buf a, b, r, out, ref, ref2, rstd, rstd_ref, tg, scratch, loss, loss_ref, checksums, small;
};

// ------------------------------------------------------------------------ the products
// r = relu(h Wfc)^2: h [M][K], Wfc [K][N]
void up_case(int M, int K, int N, int reps, cudaStream_t st, Bufs& b) {
  const std::string name = shape_name("mlp_up_relu2", M, K, N);
  const size_t in_bytes = (size_t)M * K * sizeof(bf16), MN = (size_t)M * N;
  const int copies = copies_for(in_bytes);
  bf16* h = b.a.as<bf16>((size_t)copies * M * K);
  bf16* W = b.b.as<bf16>((size_t)K * N);
  bf16* out = b.out.as<bf16>(MN + (size_t)kGuardRows * N);
  bf16* u = b.ref.as<bf16>(MN);
  bf16* want = b.ref2.as<bf16>(MN);
  fill(h, (size_t)M * K, kEighths), fill(W, (size_t)K * N, kSixtyFourths);
  replicate(h, in_bytes, copies);
  ref_gemm(h, W, false, u, M, N, K);
  CUDA_CHECK(layers::relu2_forward(u, want, MN));
  CUDA_CHECK(cudaMemset(out, 0xFF, (MN + (size_t)kGuardRows * N) * sizeof(bf16)));
  CUDA_CHECK(cudaDeviceSynchronize());
  repeat(name, reps, copies, [&](int c) { return gemm::mlp_up_relu2(h + (size_t)c * M * K, W, out, M, K, N, st); },
         {{out, MN * sizeof(bf16)}}, st, b.checksums);
  const Diff d = diff(out, want, MN, b.small);
  const size_t guard = poisoned_count(out + MN, (size_t)kGuardRows * N, b.small);
  CHECK(d.differ == 0 && guard == (size_t)kGuardRows * N, "gemm_stress %s: %llu of %zu elements differ from the reference, guard rows %s",
        name.c_str(), d.differ, MN, guard == (size_t)kGuardRows * N ? "untouched" : "written");
}

// du = 2 sqrt(r) (dx Wproj^T): dx [M][K], Wproj [N][K], r [M][N]
void down_case(int M, int K, int N, int reps, cudaStream_t st, Bufs& b) {
  const std::string name = shape_name("mlp_down_dx_relu2", M, K, N);
  const size_t MK = (size_t)M * K, MN = (size_t)M * N;
  const int copies = copies_for((MK + MN) * sizeof(bf16));
  bf16* dx = b.a.as<bf16>((size_t)copies * MK);
  bf16* r = b.r.as<bf16>((size_t)copies * MN);
  bf16* W = b.b.as<bf16>((size_t)N * K);
  bf16* out = b.out.as<bf16>(MN + (size_t)kGuardRows * N);
  bf16* dr = b.ref.as<bf16>(MN);
  bf16* want = b.ref2.as<bf16>(MN);
  fill(dx, MK, kEighths), fill(W, (size_t)N * K, kSixtyFourths), fill(r, MN, kSquares);
  replicate(dx, MK * sizeof(bf16), copies), replicate(r, MN * sizeof(bf16), copies);
  ref_gemm(dx, W, true, dr, M, N, K);
  CUDA_CHECK(layers::relu2_backward_from_r(r, dr, want, MN));
  CUDA_CHECK(cudaMemset(out, 0xFF, (MN + (size_t)kGuardRows * N) * sizeof(bf16)));
  CUDA_CHECK(cudaDeviceSynchronize());
  repeat(name, reps, copies, [&](int c) { return gemm::mlp_down_dx_relu2(dx + (size_t)c * MK, W, r + (size_t)c * MN, out, M, K, N, st); },
         {{out, MN * sizeof(bf16)}}, st, b.checksums);
  const Diff d = diff(out, want, MN, b.small);
  const size_t guard = poisoned_count(out + MN, (size_t)kGuardRows * N, b.small);
  CHECK(d.differ == 0 && guard == (size_t)kGuardRows * N, "gemm_stress %s: %llu of %zu elements differ from the reference, guard rows %s",
        name.c_str(), d.differ, MN, guard == (size_t)kGuardRows * N ? "untouched" : "written");
}

// The angles of positions 0.. for head dim D, both forms (the epilogue's fp16 words, the pass's
// fp32 table), made once for the most positions asked (a position's row does not depend on T).
struct Angles {
  int T = 0;
  uint32_t* words = nullptr;
  float2* table = nullptr;
};
Angles& angles(int T, int D) {
  static Angles a[2];
  Angles& x = a[D == 128];
  if (T > x.T) {
    if (x.words) CUDA_CHECK(cudaFree(x.words)), CUDA_CHECK(cudaFree(x.table));
    const std::vector<uint32_t> w = gemm::rotary_angles_fp16(T, D);
    const std::vector<float2> t = layers::rotary_table(T, D);
    CUDA_CHECK(cudaMalloc(&x.words, w.size() * sizeof(uint32_t)));
    CUDA_CHECK(cudaMalloc(&x.table, t.size() * sizeof(float2)));
    CUDA_CHECK(cudaMemcpy(x.words, w.data(), w.size() * sizeof(uint32_t), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(x.table, t.data(), t.size() * sizeof(float2), cudaMemcpyHostToDevice));
    x.T = T;
  }
  return x;
}

// q, k, v = h [Wq Wk Wv], q and k normed per head and rotated: h [M][C], W [3][C][C], head dim D
void qkv_case(int M, int C, int D, int reps, cudaStream_t st, Bufs& b) {
  const std::string name = shape_name("qkv_norm_rotary", M, C, 3 * C) + " D=" + std::to_string(D);
  const int H = C / D;
  const size_t MC = (size_t)M * C, rows = (size_t)M * H;
  const int copies = copies_for(MC * sizeof(bf16));
  const float eps = 1.f / 128;
  Angles& ang = angles(M, D);
  bf16* h = b.a.as<bf16>((size_t)copies * MC);
  bf16* W = b.b.as<bf16>(3 * (size_t)C * C);
  bf16* out = b.out.as<bf16>(3 * MC + (size_t)kGuardRows * C);
  float* rstd = b.rstd.as<float>(2 * rows);
  bf16* u = b.ref.as<bf16>(3 * MC);
  bf16* want = b.ref2.as<bf16>(2 * MC);
  float* rstd_want = b.rstd_ref.as<float>(2 * rows);
  fill(h, MC, kEighths), fill(W, 3 * (size_t)C * C, kSixtyFourths);
  replicate(h, MC * sizeof(bf16), copies);
  for (int z = 0; z < 3; z++) ref_gemm(h, W + (size_t)z * C * C, false, u + z * MC, M, C, C);
  CUDA_CHECK(layers::qk_norm_rotary_forward({u, u + MC}, {want, want + MC}, {rstd_want, rstd_want + rows}, ang.table, M, H, D, eps));
  CUDA_CHECK(cudaMemset(out, 0xFF, (3 * MC + (size_t)kGuardRows * C) * sizeof(bf16)));
  CUDA_CHECK(cudaDeviceSynchronize());
  repeat(name, reps, copies, [&](int c) { return gemm::qkv_norm_rotary(h + (size_t)c * MC, W, out, rstd, ang.words, M, C, D, eps, st); },
         {{out, 3 * MC * sizeof(bf16)}, {rstd, 2 * rows * sizeof(float)}}, st, b.checksums);
  const Diff dq = diff(out, want, 2 * MC, b.small), dv = diff(out + 2 * MC, u + 2 * MC, MC, b.small);
  const size_t guard = poisoned_count(out + 3 * MC, (size_t)kGuardRows * C, b.small);
  std::vector<float> got(2 * rows), ref(2 * rows);
  CUDA_CHECK(cudaMemcpy(got.data(), rstd, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(ref.data(), rstd_want, ref.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double rerr = 0;
  for (size_t i = 0; i < got.size(); i++) rerr = std::max(rerr, std::fabs((double)got[i] - ref[i]) / ref[i]);
  const double qk = dq.den > 0 ? std::sqrt(dq.num / dq.den) : 0.0;
  // tolerances: qn, kn 4e-3 relative Frobenius (fp16 angles against fp32), v bitwise, rstd 1e-5
  CHECK(dq.nonfinite == 0 && qk < 4e-3 && dv.differ == 0 && rerr < 1e-5 && !(rerr != rerr) && guard == (size_t)kGuardRows * C,
        "gemm_stress %s: qn, kn %.2e (non-finite %llu), v %llu elements differ, rstd %.2e, guard rows %s", name.c_str(), qk, dq.nonfinite,
        dv.differ, rerr, guard == (size_t)kGuardRows * C ? "untouched" : "written");
}

// The head's product with the cross-entropy's first pass, then the loss: h [M][K], W [K][V]
void head_case(int M, int K, int reps, cudaStream_t st, Bufs& b) {
  const int N = kVocab;
  const std::string name = shape_name("head_ce_forward", M, K, N);
  const size_t MK = (size_t)M * K, MN = (size_t)M * N, scratch_floats = gemm::head_ce_scratch_floats(M, N);
  const int copies = copies_for(MK * sizeof(bf16));
  bf16* h = b.a.as<bf16>((size_t)copies * MK);
  bf16* W = b.b.as<bf16>((size_t)K * N);
  bf16* g = b.out.as<bf16>(MN + (size_t)kGuardRows * N);
  bf16* z = b.ref.as<bf16>(MN);
  float* scratch = b.scratch.as<float>(scratch_floats);
  float* loss = b.loss.as<float>(M);
  float* loss_want = b.loss_ref.as<float>(M);
  int* tg = b.tg.as<int>(M + 1);  // then a flag: an out-of-range target
  fill(h, MK, kEighths), fill(W, (size_t)K * N, kEighths);  // (eighths: z up to K, which saturates the softcap as trained heads do)
  replicate(h, MK * sizeof(bf16), copies);
  targets_kernel<<<(M + 255) / 256, 256>>>(tg, M, N, g_seed++);
  CUDA_CHECK(cudaGetLastError());
  ref_gemm(h, W, false, z, M, N, K);
  CUDA_CHECK(cudaMemset(tg + M, 0, sizeof(int)));
  CUDA_CHECK(layers::softcap_ce(z, tg, nullptr, loss_want, M, N, 1.f, tg + M));
  CUDA_CHECK(cudaMemset(g, 0xFF, (MN + (size_t)kGuardRows * N) * sizeof(bf16)));
  CUDA_CHECK(cudaDeviceSynchronize());
  repeat(name, reps, copies, [&](int c) { return gemm::head_ce_forward(h + (size_t)c * MK, W, tg, g, scratch, M, K, N, st); },
         {{g, MN * sizeof(bf16)}, {scratch, scratch_floats * sizeof(float)}}, st, b.checksums);
  CUDA_CHECK(gemm::head_ce_finalize(scratch, tg, h, nullptr, nullptr, nullptr, loss, M, K, N, 1.f, tg + M));
  std::vector<float> got(M), ref(M);
  int bad = 0;
  CUDA_CHECK(cudaMemcpy(got.data(), loss, M * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(ref.data(), loss_want, M * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(&bad, tg + M, sizeof(int), cudaMemcpyDeviceToHost));
  double le = 0;
  for (int i = 0; i < M; i++) le = std::max(le, std::fabs((double)got[i] - ref[i]) / std::max(1.0, std::fabs((double)ref[i])));
  const size_t guard = poisoned_count(g + MN, (size_t)kGuardRows * N, b.small);
  // tolerance: the loss, fp32 sums over the vocabulary in another order, 1e-5 relative (absolute
  // below a loss of 1, where the sum's rounding no longer shrinks with the loss)
  CHECK(le < 1e-5 && !(le != le) && bad == 0 && guard == (size_t)kGuardRows * N, "gemm_stress %s: loss %.2e, bad targets %d, guard rows %s",
        name.c_str(), le, bad, guard == (size_t)kGuardRows * N ? "untouched" : "written");
}

// The reference GEMM against an fp64 product on the CPU, both layouts of B, to the bit (exact inputs).
void check_reference(Bufs& b) {
  const int M = 77, N = 136, K = 200;
  for (bool kmajor : {false, true}) {
    bf16* A = b.a.as<bf16>((size_t)M * K);
    bf16* B = b.b.as<bf16>((size_t)K * N);
    bf16* out = b.out.as<bf16>((size_t)M * N);
    fill(A, (size_t)M * K, kEighths), fill(B, (size_t)K * N, kSixtyFourths);
    ref_gemm(A, B, kmajor, out, M, N, K);
    const std::vector<double> a = from_device(A, (size_t)M * K), w = from_device(B, (size_t)K * N), got = from_device(out, (size_t)M * N);
    size_t differ = 0;
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += a[(size_t)i * K + k] * (kmajor ? w[(size_t)j * K + k] : w[(size_t)k * N + j]);
        differ += (double)__bfloat162float(__float2bfloat16((float)s)) != got[(size_t)i * N + j];
      }
    CHECK(differ == 0, "gemm_stress reference GEMM (B %s) against fp64: %zu of %d elements differ", kmajor ? "[N][K]" : "[K][N]", differ, M * N);
  }
}

void test_gemm_stress(bool quick) {
  if (!gemm::available()) {
    std::printf("gemm_stress: skipped, the trainer's own GEMM needs an sm90 device\n");
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Bufs b;
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  check_reference(b);
  const int failed0 = g_failed;
  if (quick) {
    for (const auto& s : {std::make_pair(8192, 256), std::make_pair(300, 64)}) {
      up_case(s.first, s.second, 4 * s.second + 8 * (s.first == 300), 2, st, b);
      down_case(s.first, s.second, 4 * s.second + 8 * (s.first == 300), 2, st, b);
      qkv_case(s.first, 256, s.first == 300 ? 64 : 128, 2, st, b);
      head_case(s.first, s.second, 2, st, b);
    }
    CUDA_CHECK(cudaStreamDestroy(st));
    std::printf("gemm_stress --quick: %lld cases, %lld repetitions, %d failed\n", g_stats.cases, g_stats.reps, g_failed - failed0);
    return;
  }
  // the sweep
  const int Ms[] = {1, 300, 1024, 8192, 8328, 16384}, head_Ms[] = {1, 300, 8192, 16384};
  for (int K = 64; K <= 1024; K += 64) {
    std::vector<int> Ns = {8, 264, 512, 1024, 3072, 4 * K};
    std::sort(Ns.begin(), Ns.end());
    Ns.erase(std::unique(Ns.begin(), Ns.end()), Ns.end());
    for (int M : Ms)
      for (int N : Ns) up_case(M, K, N, kSweepReps, st, b), down_case(M, K, N, kSweepReps, st, b);
    if (gemm::qkv_norm_rotary_shape(K, 64))
      for (int M : Ms)
        for (int D : {64, 128}) qkv_case(M, K, D, kSweepReps, st, b);
    for (int M : head_Ms) head_case(M, K, kSweepReps, st, b);
    std::printf("gemm_stress: K = %d swept (%lld cases so far, %.1f s)\n", K, g_stats.cases,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::fflush(stdout);
  }
  // the soak: the presets' shapes (tokens a micro-step, width, hidden, head dim; the head's chunk)
  struct Preset { const char* name; int T, C, F, D, reps; } presets[] = {
      {"default", 8192, 256, 1024, 128, kSoakReps}, {"tiny", 1024, 128, 512, 64, kSoakReps}, {"speedrun", 65536, 768, 3072, 128, kSpeedrunSoakReps}};
  for (const Preset& p : presets) {
    up_case(p.T, p.C, p.F, p.reps, st, b);
    down_case(p.T, p.C, p.F, p.reps, st, b);
    if (gemm::qkv_norm_rotary_shape(p.C, p.D)) qkv_case(p.T, p.C, p.D, p.reps, st, b);
    head_case(std::min(p.T, 16384), p.C, p.reps / 10, st, b);
    std::printf("gemm_stress: the %s preset's shapes soaked (%d repetitions each, the head's %d)\n", p.name, p.reps, p.reps / 10);
    std::fflush(stdout);
  }
  CUDA_CHECK(cudaStreamDestroy(st));
  std::printf("gemm_stress: %lld cases, %lld repetitions, %d failed, %.1f s\n", g_stats.cases, g_stats.reps, g_failed - failed0,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc == 2 && std::string(argv[1]) == "--quick";
  if (argc > 2 || (argc == 2 && !quick)) {
    std::fprintf(stderr, "usage: gemm_stress [--quick]\n");
    return 2;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("layer-gemm_stress: no GPU\n");
    return 1;
  }
  test_gemm_stress(quick);
  return test_summary("layer-gemm_stress");
}
