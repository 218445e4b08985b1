// Matrix products through cuBLASLt in bf16 with fp32 accumulation (docs/model.md), row-major:
//   C[m][n] (+)= op(A)[m][k] * op(B)[k][n]
//   A is stored [m][k], or [k][m] when trans_a;  B is stored [k][n], or [n][k] when trans_b;
//   C is bf16, or fp32 when c_fp32 (gradients); accumulate adds to C (beta = 1).
//   add(): D = C + op(A) op(B) in bf16 with C and D separate buffers (a residual connection
//   written to a new tensor without a copy), or the same one.
// Forward y = x W is (x, W); backward dx = dy W^T is (dy, W, trans_b) and dW = x^T dy is
// (x, dy, trans_a). cuBLASLt is column-major, so the call computes C^T = op(B)^T op(A)^T.
// Batched: the same product for batch.count operand sets at fixed strides in elements (a stride
// of 0: one operand for all), as one cuBLASLt call: the model's q, k and v projections share
// their input, and one call of three fills the GPU better than three calls (results/matmul/README.md,
// The q, k, v projections batched, in the step).
// Errors come back as a message naming the shape, never as a raw status code.
//
// Which algorithm. Each shape's descriptors and algorithm are chosen once and kept, so every
// later call runs the same kernel. cuBLASLt's heuristic ranks its algorithms; its first choice
// is not always its fastest on the model's shapes (bench/bench_matmul.cu; results/matmul/README.md,
// cuBLASLt's first choice against its others).
// By default (kTuned) the first call of a shape whose product is not all zero times those of
// the heuristic's first kCandidates choices that do the first choice's arithmetic (the same
// algorithm id, split-K count and reduction scheme) on the call's own operands, and keeps the
// fastest whose output has the same bits as the first choice's (the 64-bit checksum of
// layers/checksum.cuh over the whole output). So the numbers a run computes are the first
// choice's whichever candidate wins, and runs stay bit-reproducible though timings vary. The
// tuning call's output is written once: where the call adds into its output in place, the
// output is saved before the trials and restored before the real call (tune() says more). A
// rank >= 0 (benchmarks) takes that heuristic choice untimed; algorithm() says which runs.
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>

#include "common/cuda_check.h"
#include "layers/checksum.cuh"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace layers {

// *flag = 1 when some 32-bit word of d differs from c's (c == nullptr: from zero)
__global__ void differs_kernel(const uint32_t* __restrict__ d, const uint32_t* __restrict__ c, size_t n, unsigned long long* flag) {
  bool diff = false;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n && !diff; i += (size_t)gridDim.x * blockDim.x)
    diff = d[i] != (c ? c[i] : 0u);
  if (__any_sync(0xffffffffu, diff) && (threadIdx.x & 31) == 0) *flag = 1;
}

// batch.count products: A_i = A + i a, B_i = B + i b, C_i = C + i c (elements)
struct Batch {
  int count = 1;
  long long a = 0, b = 0, c = 0;
};

class Matmul {
 public:
  static constexpr int kTuned = -1, kCandidates = 10;
  // rank: kTuned (the fastest choice with the first choice's bits), or which of cuBLASLt's
  // heuristic choices to take, 0 = its first (benchmarks try others)
  explicit Matmul(size_t workspace_bytes = 32u << 20, int rank = kTuned) : ws_bytes_(workspace_bytes), rank_(rank) {
    if (rank < kTuned || rank >= kCandidates)
      throw std::invalid_argument("matmul: heuristic rank must lie in [0, " + std::to_string(kCandidates) + ") or be kTuned");
    check(cublasLtCreate(&handle_), "cublasLtCreate");
    if (cudaMalloc(&workspace_, ws_bytes_) != cudaSuccess) throw std::runtime_error("matmul: cannot allocate the cuBLASLt workspace");
    if (cudaMalloc(&scratch_, 2 * sizeof(unsigned long long)) != cudaSuccess) throw std::runtime_error("matmul: cannot allocate 16 bytes");
    // pinned: a copy into pageable memory would block the host until the stream is done, before
    // the installed wait could watch the clock
    if (cudaMallocHost(&readback_, 2 * sizeof(unsigned long long)) != cudaSuccess)
      throw std::runtime_error("matmul: cannot allocate 16 bytes of pinned host memory");
    cuda_check(cudaEventCreate(&e0_), "matmul: timing events");
    cuda_check(cudaEventCreate(&e1_), "matmul: timing events");
  }
  ~Matmul() {
    for (auto& kv : plans_) destroy(kv.second);
    cudaFree(workspace_);
    cudaFree(scratch_);
    cudaFreeHost(readback_);
    cudaEventDestroy(e0_);
    cudaEventDestroy(e1_);
    cublasLtDestroy(handle_);
  }
  Matmul(const Matmul&) = delete;
  // How the host waits for the stream while a shape is tuned (tune() reads timings and
  // checksums back). By default cudaStreamSynchronize. A data-parallel trainer installs a wait
  // with a deadline: after the gradients' all-reduce the compute stream waits for the peers,
  // and a plain synchronisation would wait forever for a peer that hangs. The wait may throw;
  // the error then reaches the matmul's caller.
  using HostWait = std::function<void(cudaStream_t, const std::string& what)>;
  void set_host_wait(HostWait wait) { host_wait_ = std::move(wait); }
  Matmul& operator=(const Matmul&) = delete;

  // Named for what they compute, for a layer y[rows][out] = x[rows][in] W[in][out]:
  void xW(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int rows, int in, int out) {
    (*this)(x, W, y, rows, out, in, false, false);
  }
  // y = c + x W (c and y may be one buffer)
  void xW_plus(const __nv_bfloat16* x, const __nv_bfloat16* W, const __nv_bfloat16* c, __nv_bfloat16* y, int rows, int in, int out) {
    add(x, W, c, y, rows, out, in, false, false);
  }
  // dx[rows][in] = dy[rows][out] W^T (+= with accumulate), bf16
  void dX(const __nv_bfloat16* dy, const __nv_bfloat16* W, __nv_bfloat16* dx, int rows, int in, int out, bool accumulate = false) {
    (*this)(dy, W, dx, rows, in, out, false, true, accumulate);
  }
  // dW[in][out] += x^T dy, fp32 (gradients accumulate over micro-steps)
  void dW(const __nv_bfloat16* x, const __nv_bfloat16* dy, float* dW, int rows, int in, int out) {
    (*this)(x, dy, dW, in, out, rows, true, false, true, true);
  }
  // y_i = x W_i for i < count, with W_i = W + i sW and y_i = y + i sy (one x for all)
  void xW_batched(const __nv_bfloat16* x, const __nv_bfloat16* W, long long sW, __nv_bfloat16* y, long long sy, int count, int rows,
                  int in, int out) {
    batched(x, W, y, rows, out, in, false, false, false, false, {count, 0, sW, sy});
  }

  // The algorithm a call runs (after its first call; before it, the untimed first choice):
  // cuBLASLt's id, tile, stages and split-K, and its rank among the heuristic's choices.
  // adds: the call reads its output (accumulate, add()).
  std::string algorithm(int m, int n, int k, bool trans_a, bool trans_b, bool c_fp32, bool adds, Batch batch = {}) {
    const Plan& p = plan(m, n, k, trans_a, trans_b, c_fp32, adds, batch);
    int id = 0, tile = 0, stages = 0, splitk = 0;
    size_t w = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &w);
    return "algo " + std::to_string(id) + " tile " + std::to_string(tile) + " stages " + std::to_string(stages) + " split-K " +
           std::to_string(splitk) + " (choice " + std::to_string(p.rank) + " of " + std::to_string(p.offered) +
           (p.tuned ? ", " + std::to_string(p.same_bits) + " with the first's bits)" : ")");
  }

  void operator()(const __nv_bfloat16* A, const __nv_bfloat16* B, void* C, int m, int n, int k, bool trans_a, bool trans_b,
                  bool accumulate = false, bool c_fp32 = false, cudaStream_t stream = 0) {
    run(A, B, C, C, m, n, k, trans_a, trans_b, accumulate ? 1.f : 0.f, c_fp32, {}, stream);
  }
  void batched(const __nv_bfloat16* A, const __nv_bfloat16* B, void* C, int m, int n, int k, bool trans_a, bool trans_b, bool accumulate,
               bool c_fp32, Batch batch, cudaStream_t stream = 0) {
    if (batch.count < 1 || batch.a < 0 || batch.b < 0 || batch.c < (long long)m * n)
      throw std::invalid_argument(shape_name(m, n, k) + ": a batch needs a count >= 1, strides >= 0 and outputs that do not overlap");
    run(A, B, C, C, m, n, k, trans_a, trans_b, accumulate ? 1.f : 0.f, c_fp32, batch, stream);
  }
  void add(const __nv_bfloat16* A, const __nv_bfloat16* B, const __nv_bfloat16* C, __nv_bfloat16* D, int m, int n, int k,
           bool trans_a, bool trans_b, cudaStream_t stream = 0) {
    run(A, B, C, D, m, n, k, trans_a, trans_b, 1.f, false, {}, stream);
  }

 private:
  // Descriptors and the heuristic's algorithm for one shape, built on first use and kept: a
  // training step calls a few dozen shapes thousands of times.
  struct Plan {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t lx, ly, lz;
    cublasLtMatmulAlgo_t algo;
    cublasLtMatmulAlgo_t choices[kCandidates];  // the heuristic's, best first
    int offered;                                // how many it gave
    int rank;                                   // which of them runs
    bool tuned = false;                         // chosen (kTuned: by timing, at the first call with a nonzero product)
    int attempts = 0;                           // calls that tried to tune it
    int same_bits = 0;                          // choices that gave the first choice's bits
  };
  static std::string shape_name(int m, int n, int k) {
    return "matmul m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
  }
  // adds: beta != 0 (the output is read), which gets its own plan: its choice is tuned on calls that add
  Plan& plan(int m, int n, int k, bool trans_a, bool trans_b, bool c_fp32, bool adds, Batch batch) {
    const auto key = std::make_tuple(m, n, k, trans_a, trans_b, c_fp32, adds, batch.count, batch.a, batch.b, batch.c);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    const std::string shape = shape_name(m, n, k);
    Plan p;
    check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), shape);
    const cublasOperation_t tx = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, ty = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &tx, sizeof(tx)), shape);
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &ty, sizeof(ty)), shape);
    // column-major views: X = B buffer, Y = A buffer, Z = C^T
    check(cublasLtMatrixLayoutCreate(&p.lx, CUDA_R_16BF, trans_b ? k : n, trans_b ? n : k, trans_b ? k : n), shape);
    check(cublasLtMatrixLayoutCreate(&p.ly, CUDA_R_16BF, trans_a ? m : k, trans_a ? k : m, trans_a ? m : k), shape);
    check(cublasLtMatrixLayoutCreate(&p.lz, c_fp32 ? CUDA_R_32F : CUDA_R_16BF, n, m, n), shape);
    if (batch.count > 1) {
      const std::pair<cublasLtMatrixLayout_t, long long> strides[] = {{p.lx, batch.b}, {p.ly, batch.a}, {p.lz, batch.c}};
      for (const auto& [layout, stride] : strides) {
        check(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch.count, sizeof(batch.count)), shape);
        check(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)), shape);
      }
    }
    cublasLtMatmulPreference_t pref;
    check(cublasLtMatmulPreferenceCreate(&pref), shape);
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes_, sizeof(ws_bytes_)), shape);
    cublasLtMatmulHeuristicResult_t heur[kCandidates];
    const int want = rank_ == kTuned ? kCandidates : rank_ + 1;
    int found = 0;
    check(cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.lx, p.ly, p.lz, p.lz, pref, want, heur, &found), shape);
    cublasLtMatmulPreferenceDestroy(pref);
    const int rank = rank_ == kTuned ? 0 : rank_;
    if (found <= rank) {
      destroy(p);
      throw std::runtime_error(shape + (found ? ": cuBLASLt offers " + std::to_string(found) + " algorithms, fewer than choice " +
                                                    std::to_string(rank) + " needs"
                                              : ": cuBLASLt has no algorithm for this shape (dimensions must be multiples of 8)"));
    }
    for (int i = 0; i < found; i++) p.choices[i] = heur[i].algo;
    p.offered = found;
    p.rank = rank;
    p.algo = heur[rank].algo;
    return plans_.emplace(key, p).first->second;
  }
  void run(const __nv_bfloat16* A, const __nv_bfloat16* B, const void* C, void* D, int m, int n, int k, bool trans_a, bool trans_b,
           float beta, bool c_fp32, Batch batch, cudaStream_t stream) {
    if (((uintptr_t)A | (uintptr_t)B | (uintptr_t)C | (uintptr_t)D) % 16 || (batch.a | batch.b | batch.c) % 8)
      throw std::runtime_error(shape_name(m, n, k) + ": operands must be 16-byte aligned for cuBLASLt");
    Plan& p = plan(m, n, k, trans_a, trans_b, c_fp32, beta != 0.f, batch);
    if (rank_ == kTuned && !p.tuned) tune(p, A, B, C, D, m, n, k, beta, c_fp32, batch, stream);
    launch(p, p.algo, A, B, C, D, beta, stream, shape_name(m, n, k));
  }
  cublasStatus_t try_launch(const Plan& p, const cublasLtMatmulAlgo_t& algo, const void* A, const void* B, const void* C, void* D,
                            float beta, cudaStream_t stream) {
    const float alpha = 1.f;
    return cublasLtMatmul(handle_, p.op, &alpha, B, p.lx, A, p.ly, &beta, C, p.lz, D, p.lz, &algo, workspace_, ws_bytes_, stream);
  }
  void launch(const Plan& p, const cublasLtMatmulAlgo_t& algo, const void* A, const void* B, const void* C, void* D, float beta,
              cudaStream_t stream, const std::string& what) {
    check(try_launch(p, algo, A, B, C, D, beta, stream), what);
  }
  // The tuning of a shape (kTuned), at its first call whose product is not all zero: the first
  // choice runs once from the starting output, and if the output comes back unchanged (beta = 0:
  // all zero; otherwise equal to C) the product carried no information -- the model's zero-
  // initialised projections make every gradient product of the first step zero, and on zeros
  // every algorithm gives the same bits -- so the call runs untuned and a later one tries again
  // (up to kTuneAttempts calls, then the first choice stays). Otherwise each candidate of the
  // same arithmetic as the first choice (cuBLASLt's algorithm id, split-K count and reduction
  // scheme: a split-K other than the first choice's sums in another order) runs from the same
  // starting output, three times, timed by CUDA events; its output's checksum after the last
  // run is compared with the first choice's, and the fastest with equal checksums is kept. An
  // in-place add (beta != 0 and C == D) saves the output first and restores it before every
  // run and before the real call; when that copy cannot be allocated the first choice is kept.
  static constexpr int kTuneAttempts = 1000;
  void tune(Plan& p, const void* A, const void* B, const void* C, void* D, int m, int n, int k, float beta, bool c_fp32, Batch batch,
            cudaStream_t stream) {
    if (p.offered < 2 || ++p.attempts > kTuneAttempts) {
      p.tuned = true, p.same_bits = 1;  // the first choice, untimed
      return;
    }
    const std::string shape = shape_name(m, n, k);
    const size_t bytes = ((size_t)(batch.count - 1) * batch.c + (size_t)m * n) * (c_fp32 ? 4 : 2);  // the outputs' span
    void* saved = nullptr;
    const bool in_place = beta != 0.f && C == D;
    if (in_place) {  // stream-ordered: no device-wide synchronisation (other streams may be exchanging gradients)
      if (cudaMallocAsync(&saved, bytes, stream) != cudaSuccess) {
        cudaGetLastError();  // the allocation's error is not sticky; clear it
        p.tuned = true, p.same_bits = 1;
        return;
      }
      cuda_check(cudaMemcpyAsync(saved, D, bytes, cudaMemcpyDeviceToDevice, stream), shape.c_str());
    }
    auto restore = [&] {
      if (in_place) cuda_check(cudaMemcpyAsync(D, saved, bytes, cudaMemcpyDeviceToDevice, stream), shape.c_str());
    };
    auto done = [&] {
      restore();
      if (saved) cuda_check(cudaFreeAsync(saved, stream), shape.c_str());
    };
    launch(p, p.choices[0], A, B, C, D, beta, stream, shape);
    if (!changed(D, in_place ? saved : beta != 0.f ? C : nullptr, bytes, stream, shape)) return done();  // a zero product
    p.tuned = true;
    unsigned long long first = 0;
    float best_ms = 0;
    for (int i = 0; i < p.offered; i++) {
      if (!same_arithmetic(p.choices[i], p.choices[0])) continue;
      float ms = 1e30f;
      bool ok = true;
      for (int rep = 0; rep < 3 && ok; rep++) {
        restore();
        cuda_check(cudaEventRecord(e0_, stream), shape.c_str());
        ok = try_launch(p, p.choices[i], A, B, C, D, beta, stream) == CUBLAS_STATUS_SUCCESS;
        cuda_check(cudaEventRecord(e1_, stream), shape.c_str());
        wait_host(stream, shape);  // e1_ is the stream's last work
        float t = 0;
        cuda_check(cudaEventElapsedTime(&t, e0_, e1_), shape.c_str());
        ms = std::min(ms, t);
      }
      if (!ok) {
        if (i == 0) launch(p, p.choices[0], A, B, C, D, beta, stream, shape);  // the first choice must run: report its error
        continue;
      }
      cuda_check(checksum(D, bytes, scratch_, stream), shape.c_str());
      cuda_check(cudaMemcpyAsync(readback_, scratch_, sizeof(*readback_), cudaMemcpyDeviceToHost, stream), shape.c_str());
      wait_host(stream, shape);
      const unsigned long long sum = readback_[0];
      if (i == 0) first = sum;
      if (sum != first) continue;
      p.same_bits++;
      if (i == 0 || ms < best_ms) best_ms = ms, p.algo = p.choices[i], p.rank = i;
    }
    done();
  }
  // whether a and b (same id, split-K and reduction scheme) sum in the same order
  static bool same_arithmetic(const cublasLtMatmulAlgo_t& a, const cublasLtMatmulAlgo_t& b) {
    for (cublasLtMatmulAlgoConfigAttributes_t at :
         {CUBLASLT_ALGO_CONFIG_ID, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME}) {
      uint32_t va = 0, vb = 0;
      size_t w = 0;
      cublasLtMatmulAlgoConfigGetAttribute(&a, at, &va, sizeof(va), &w);
      cublasLtMatmulAlgoConfigGetAttribute(&b, at, &vb, sizeof(vb), &w);
      if (va != vb) return false;
    }
    return true;
  }
  // whether the bytes at d differ from those at c (c == nullptr: from zero)
  bool changed(const void* d, const void* c, size_t bytes, cudaStream_t stream, const std::string& what) {
    cuda_check(cudaMemsetAsync(scratch_ + 1, 0, sizeof(*scratch_), stream), what.c_str());
    differs_kernel<<<264, 256, 0, stream>>>((const uint32_t*)d, (const uint32_t*)c, bytes / 4, scratch_ + 1);
    cuda_check(cudaGetLastError(), what.c_str());
    cuda_check(cudaMemcpyAsync(readback_ + 1, scratch_ + 1, sizeof(*readback_), cudaMemcpyDeviceToHost, stream), what.c_str());
    wait_host(stream, what);
    return readback_[1] != 0;
  }
  void wait_host(cudaStream_t stream, const std::string& what) {
    if (host_wait_) host_wait_(stream, what);
    else cuda_check(cudaStreamSynchronize(stream), what.c_str());
  }
  static void destroy(Plan& p) {
    cublasLtMatrixLayoutDestroy(p.lx);
    cublasLtMatrixLayoutDestroy(p.ly);
    cublasLtMatrixLayoutDestroy(p.lz);
    cublasLtMatmulDescDestroy(p.op);
  }
  static void check(cublasStatus_t s, const std::string& what) {
    if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(what + ": cuBLASLt error " + std::to_string((int)s));
  }
  std::map<std::tuple<int, int, int, bool, bool, bool, bool, int, long long, long long, long long>, Plan> plans_;
  cublasLtHandle_t handle_;
  void* workspace_ = nullptr;
  size_t ws_bytes_;
  int rank_;
  unsigned long long* scratch_ = nullptr;  // two device words: a checksum, a flag
  unsigned long long* readback_ = nullptr;  // their pinned host copies
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
  HostWait host_wait_;
};

}  // namespace layers
