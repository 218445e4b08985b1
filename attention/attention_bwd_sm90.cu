// Backward of fused masked attention on Hopper (sm90a: wgmma), same math and the same
// deterministic split as attention_bwd.cu (no atomics: every output written by one block):
//
//   P = exp(S - lse)  (S = scale Q K^T + mask, recomputed),  Drow = rowsum(dO * O) and lse in
//   log2 units from attention_bwd.cu's pre-pass
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - Drow),  dQ = scale dS K,  dK = scale dS^T Q
//   Q, K, V, dO, dQ, dK, dV: bf16 [T, H, D];  lse, Drow: fp32 [H, T];  D in {64, 128}.
//
// dK/dV: one block of two warpgroups owns 128 keys (64 a warpgroup) and walks the query tiles
// of 64 that see them. Per tile, each warpgroup computes the transposed scores with keys as rows,
//   S^T = K Q^T, dP^T = V dO^T          wgmma, all operands in shared memory
//   P^T, dS^T                            registers (accumulator layout = next A fragment)
//   dV += P^T dO, dK += dS^T Q           wgmma, A from registers, left running into the next tile
// dQ: one block owns 128 queries and walks key tiles of 64:
//   S = Q K^T, dP = dO V^T;  dS;  dQ += dS K.
// Tiles stream through 4 shared buffers with cp.async, two tiles ahead, signalled by mbarriers
// (wgmma.cuh TilePipe: a buffer is rewritten once every warp has released it), so the two
// warpgroups never meet at a block barrier inside the loop. The dQ kernel runs on a second
// stream beside the dK/dV kernel (launch_bwd_sm90).
#include <cmath>

#include "attention/attention_sm90.h"
#include "attention/own_intervals.cuh"
#include "attention/softmax.cuh"
#include "attention/wgmma.cuh"

namespace attn {

constexpr int kB90Own = 128, kB90Walk = 64, kB90Threads = 256, kB90Stages = 4;
[[maybe_unused]] constexpr int kB90Ahead = kB90Stages - 2;  // tiles loaded ahead of the one computed

__device__ __forceinline__ unsigned char* align1024(unsigned char* p) {
  return p + ((1024 - (sm80::smem_addr(p) & 1023)) & 1023);
}

// ---------------------------------------------------------------------------------- dK, dV
template <int D>
constexpr size_t dkdv_sm90_smem() {
  return (size_t)(2 * kB90Own + 2 * kB90Stages * kB90Walk) * D * sizeof(bf16) + 2 * kB90Stages * kB90Walk * sizeof(float) +
         kB90Own * sizeof(int32_t) + 2 * kB90Stages * sizeof(uint64_t) + 1024;
}

template <int D>
__global__ void __launch_bounds__(kB90Threads, 1)
    attention_bwd_dkdv_sm90_kernel(const bf16* __restrict__ Q, const bf16* __restrict__ K, const bf16* __restrict__ V,
                                   const bf16* __restrict__ dO, const float* __restrict__ LSE2, const float* __restrict__ drow,
                                   bf16* __restrict__ dK, bf16* __restrict__ dV, int T, int H, MaskBounds mb,
                                   float scale_log2, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  constexpr int BK = kB90Own, BQ = kB90Walk, S = kB90Stages;
  extern __shared__ unsigned char smem_raw[];
  bf16* sK = reinterpret_cast<bf16*>(align1024(smem_raw));
  bf16* sV = sK + BK * D;
  bf16* sQ = sV + BK * D;         // S buffers
  bf16* sdO = sQ + S * BQ * D;    // S buffers
  float* sLse = reinterpret_cast<float*>(sdO + S * BQ * D);  // S x BQ
  float* sDr = sLse + S * BQ;                                 // S x BQ
  int32_t* s_ids = reinterpret_cast<int32_t*>(sDr + S * BQ); // BK document ids
  TilePipe<S> pipe;
  pipe.full = reinterpret_cast<uint64_t*>(s_ids + BK);
  pipe.empty = pipe.full + S;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x & 31;
  const int k0 = blockIdx.x * BK, h = blockIdx.y;

  const int key0 = k0 + wg * 64 + warp * 16 + (lane >> 2);  // this thread's keys: key0, key0 + 8
  const int keys[2] = {key0, key0 + 8};
  int q_lo, q_hi, q_lo2[2], q_hi2[2];  // the block's query range; the queries each key is kept by
  own_intervals<BK, 2>(mb, k0, false, s_ids, keys, q_lo2, q_hi2, q_lo, q_hi);
  const TileWalk walk(mb, k0, k0 + BK, BQ, q_hi >= q_lo ? q_hi / BQ + 1 : 0, false);
  auto load_q_side = [&](int qt, int i) {  // this thread's copies of query tile qt, the i-th of the walk
    {
      const int qs = qt * BQ, st = i % S;
      load_tile<D, BQ, kB90Threads>(sQ + st * BQ * D, Q, qs, T, H, h);
      load_tile<D, BQ, kB90Threads>(sdO + st * BQ * D, dO, qs, T, H, h);
      for (int r = threadIdx.x; r < 2 * BQ; r += kB90Threads) {
        const int j = r % BQ, row = qs + j;
        const float* src = (r < BQ ? LSE2 : drow) + (size_t)h * T + (row < T ? row : 0);
        sm80::cp_async4(smem_addr((r < BQ ? sLse : sDr) + st * BQ + j), src, row < T);
      }
    }
    pipe.arrive_full(i);
  };
  if (threadIdx.x == 0) pipe.init(kB90Threads);
  __syncthreads();

  WalkAhead<kB90Ahead> ahead;  // tile[0] computed now, the others loaded or loading
  ahead.start(walk, mb, q_lo / BQ);
  load_tile<D, BK, kB90Threads>(sK, K, k0, T, H, h);
  load_tile<D, BK, kB90Threads>(sV, V, k0, T, H, h);
#pragma unroll
  for (int a = 0; a < kB90Ahead; a++)  // K and V ride on the first tile's arrival
    if (ahead.tile[a] < walk.end) load_q_side(ahead.tile[a], a);

  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  uint32_t pa[BQ / 16][4], dsa[BQ / 16][4];  // P^T and dS^T of the previous tile
  float s[BQ / 8][4], dp[BQ / 8][4];         // S^T and dP^T: keys as rows
  // Per tile j: issue S^T_j, dP^T_j and the dV, dK updates of tile j - 1, then the load of
  // tile j + 2; P^T_j and dS^T_j are computed while the updates run.
  int it = 0;
  while (ahead.tile[0] < walk.end) {
    const int st = it % S, st_prev = (it + S - 1) % S;
    pipe.wait_full(it);
    const bf16* q_tile = sQ + st * BQ * D;
    const bf16* do_tile = sdO + st * BQ * D;
    wgmma_fence();
    gemm_ss<BQ, D / 16, BK>(s, sK, wg * 64, q_tile, false);
    gemm_ss<BQ, D / 16, BK>(dp, sV, wg * 64, do_tile, false);
    wgmma_commit();
    if (it > 0) {
      gemm_rs<D, BQ / 16, BQ>(dv, pa, sdO + st_prev * BQ * D);
      gemm_rs<D, BQ / 16, BQ>(dk, dsa, sQ + st_prev * BQ * D);
    }
    wgmma_commit();
    if (ahead.tile[kB90Ahead] < walk.end) {
      pipe.wait_empty(it + kB90Ahead);
      load_q_side(ahead.tile[kB90Ahead], it + kB90Ahead);
    }
    TileKind kind_after;
    const int after = walk.next(mb, ahead.tile[kB90Ahead] + 1, kind_after);

    wgmma_wait<1>();  // S^T_j, dP^T_j
    reg_fence(s);
    reg_fence(dp);
    const float* lse_t = sLse + st * BQ;
    const float* dr_t = sDr + st * BQ;
    if (ahead.kind[0] != kFull) apply_mask_interval(s, q_lo2, q_hi2, ahead.tile[0] * BQ + 2 * (lane & 3));
#pragma unroll
    for (int nb = 0; nb < BQ / 8; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int j = nb * 8 + 2 * (lane & 3) + (e & 1);  // query within the tile
        const float p = exp2f(fmaf(s[nb][e], scale_log2, -lse_t[j]));
        s[nb][e] = p;
        dp[nb][e] = p * (dp[nb][e] - dr_t[j]);  // dS^T
      }
    wgmma_wait<0>();  // the updates of tile j - 1 (they read pa, dsa)
    reg_fence(dk);
    reg_fence(dv);
    if (it > 0) pipe.release(it - 1);
#pragma unroll
    for (int j = 0; j < BQ / 16; j++) {
      sm80::c_to_a(pa[j], s[2 * j], s[2 * j + 1]);
      sm80::c_to_a(dsa[j], dp[2 * j], dp[2 * j + 1]);
    }
    ahead.push(after, kind_after);
    it++;
  }
  if (it > 0) {
    const int st = (it - 1) % S;
    wgmma_fence();
    gemm_rs<D, BQ / 16, BQ>(dv, pa, sdO + st * BQ * D);
    gemm_rs<D, BQ / 16, BQ>(dk, dsa, sQ + st * BQ * D);
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(dk);
    reg_fence(dv);
  }
  sm80::cp_async_wait<0>();
  const float dk_scale[2] = {scale, scale}, dv_scale[2] = {1.f, 1.f};
  sm80::store_rows<D>(dK, dk, key0, T, H, h, lane, dk_scale);
  sm80::store_rows<D>(dV, dv, key0, T, H, h, lane, dv_scale);
#else
  __trap();  // built for another architecture: the launcher only picks this kernel on sm90
#endif
}

// ---------------------------------------------------------------------------------- dQ
template <int D>
constexpr size_t dq_sm90_smem() {
  return (size_t)(2 * kB90Own + 2 * kB90Stages * kB90Walk) * D * sizeof(bf16) + kB90Own * sizeof(int32_t) +
         2 * kB90Stages * sizeof(uint64_t) + 1024;
}

template <int D>
__global__ void __launch_bounds__(kB90Threads, 1)
    attention_bwd_dq_sm90_kernel(const bf16* __restrict__ Q, const bf16* __restrict__ K, const bf16* __restrict__ V,
                                 const bf16* __restrict__ dO, const float* __restrict__ LSE2, const float* __restrict__ drow,
                                 bf16* __restrict__ dQ, int T, int H, MaskBounds mb, float scale_log2, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  constexpr int BQ = kB90Own, BK = kB90Walk, S = kB90Stages;
  extern __shared__ unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(align1024(smem_raw));
  bf16* sdO = sQ + BQ * D;
  bf16* sK = sdO + BQ * D;       // S buffers
  bf16* sV = sK + S * BK * D;    // S buffers
  int32_t* s_ids = reinterpret_cast<int32_t*>(sV + S * BK * D);  // BQ document ids
  TilePipe<S> pipe;
  pipe.full = reinterpret_cast<uint64_t*>(s_ids + BQ);
  pipe.empty = pipe.full + S;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x & 31;
  const int n_qt = (T + BQ - 1) / BQ;
  const int q0 = (n_qt - 1 - blockIdx.x) * BQ, h = blockIdx.y;

  const int row0 = q0 + wg * 64 + warp * 16 + (lane >> 2);  // this thread's rows: row0, row0 + 8
  const int rows[2] = {row0, row0 + 8};
  int k_lo, k_hi, key_lo[2], key_hi[2];  // the block's key range; the keys each row keeps
  own_intervals<BQ, 2>(mb, q0, true, s_ids, rows, key_lo, key_hi, k_lo, k_hi);
  const TileWalk walk(mb, q0, q0 + BQ, BK, k_hi >= k_lo ? k_hi / BK + 1 : 0, true);
  auto load_kv = [&](int kt, int i) {  // this thread's copies of key tile kt, the i-th of the walk
    load_tile<D, BK, kB90Threads>(sK + (i % S) * BK * D, K, kt * BK, T, H, h);
    load_tile<D, BK, kB90Threads>(sV + (i % S) * BK * D, V, kt * BK, T, H, h);
    pipe.arrive_full(i);
  };
  if (threadIdx.x == 0) pipe.init(kB90Threads);
  __syncthreads();

  float lse2[2], dr[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int row = row0 + 8 * r;
    lse2[r] = row < T ? LSE2[(size_t)h * T + row] : INFINITY;
    dr[r] = row < T ? drow[(size_t)h * T + row] : 0.f;
  }

  WalkAhead<kB90Ahead> ahead;  // tile[0] computed now, the others loaded or loading
  ahead.start(walk, mb, k_lo / BK);
  load_tile<D, BQ, kB90Threads>(sQ, Q, q0, T, H, h);
  load_tile<D, BQ, kB90Threads>(sdO, dO, q0, T, H, h);
#pragma unroll
  for (int a = 0; a < kB90Ahead; a++)  // Q and dO ride on the first tile's arrival
    if (ahead.tile[a] < walk.end) load_kv(ahead.tile[a], a);

  float acc[D / 8][4] = {};
  uint32_t dsa[BK / 16][4];  // dS of the previous tile
  float s[BK / 8][4], dp[BK / 8][4];
  // Per tile j: issue S_j, dP_j and dQ += dS_{j-1} K_{j-1}, then the load of tile j + 2; dS_j
  // is computed while the update runs.
  int it = 0;
  while (ahead.tile[0] < walk.end) {
    const int st = it % S, st_prev = (it + S - 1) % S;
    pipe.wait_full(it);
    wgmma_fence();
    gemm_ss<BK, D / 16, BQ>(s, sQ, wg * 64, sK + st * BK * D, false);
    gemm_ss<BK, D / 16, BQ>(dp, sdO, wg * 64, sV + st * BK * D, false);
    wgmma_commit();
    if (it > 0) gemm_rs<D, BK / 16, BK>(acc, dsa, sK + st_prev * BK * D);
    wgmma_commit();
    if (ahead.tile[kB90Ahead] < walk.end) {
      pipe.wait_empty(it + kB90Ahead);
      load_kv(ahead.tile[kB90Ahead], it + kB90Ahead);
    }
    TileKind kind_after;
    const int after = walk.next(mb, ahead.tile[kB90Ahead] + 1, kind_after);

    wgmma_wait<1>();  // S_j, dP_j
    reg_fence(s);
    reg_fence(dp);
    if (ahead.kind[0] != kFull) apply_mask_interval(s, key_lo, key_hi, ahead.tile[0] * BK + 2 * (lane & 3));
#pragma unroll
    for (int nb = 0; nb < BK / 8; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const float p = exp2f(fmaf(s[nb][e], scale_log2, -lse2[e >> 1]));
        dp[nb][e] = p * (dp[nb][e] - dr[e >> 1]);  // dS
      }
    wgmma_wait<0>();  // the update of tile j - 1 (it reads dsa)
    reg_fence(acc);
    if (it > 0) pipe.release(it - 1);
#pragma unroll
    for (int j = 0; j < BK / 16; j++) sm80::c_to_a(dsa[j], dp[2 * j], dp[2 * j + 1]);
    ahead.push(after, kind_after);
    it++;
  }
  if (it > 0) {
    wgmma_fence();
    gemm_rs<D, BK / 16, BK>(acc, dsa, sK + ((it - 1) % S) * BK * D);
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(acc);
  }
  sm80::cp_async_wait<0>();
  const float dq_scale[2] = {scale, scale};
  sm80::store_rows<D>(dQ, acc, row0, T, H, h, lane, dq_scale);
#else
  __trap();  // built for another architecture: the launcher only picks this kernel on sm90
#endif
}

// The dQ kernel runs on a second stream beside the dK/dV kernel (they share only inputs), so
// that each fills the SMs the other's last blocks leave idle; the caller's stream waits for both.
// One side stream and two events per device, made on first use.
struct SideStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
};
static cudaError_t side_stream(SideStream*& out) {
  static SideStream side[64];
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev < 0 || dev >= 64) return cudaErrorInvalidDevice;
  SideStream& s = side[dev];
  if (!s.stream) {
    if ((err = cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking)) != cudaSuccess) return err;
    if ((err = cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming)) != cudaSuccess) return err;
    if ((err = cudaEventCreateWithFlags(&s.join, cudaEventDisableTiming)) != cudaSuccess) return err;
  }
  out = &s;
  return cudaSuccess;
}

template <int D>
static cudaError_t launch_bwd_sm90(const bf16* q, const bf16* k, const bf16* v, const bf16* dout, const float* lse2,
                                   bf16* dq, bf16* dk, bf16* dv, const float* drow, int T, int H, const MaskDesc& mask,
                                   cudaStream_t stream) {
  const MaskBounds mb = make_bounds(mask, T);
  const float scale = (float)(1.0 / std::sqrt((double)D)), scale_log2 = (float)(M_LOG2E / std::sqrt((double)D));
  const dim3 grid((T + kB90Own - 1) / kB90Own, H);
  constexpr size_t smem_dkdv = dkdv_sm90_smem<D>(), smem_dq = dq_sm90_smem<D>();
  cudaError_t err = cudaFuncSetAttribute(attention_bwd_dkdv_sm90_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dkdv);
  if (err != cudaSuccess) return err;
  err = cudaFuncSetAttribute(attention_bwd_dq_sm90_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dq);
  if (err != cudaSuccess) return err;
  SideStream* side = nullptr;
  if ((err = side_stream(side)) != cudaSuccess) return err;

  if ((err = cudaEventRecord(side->fork, stream)) != cudaSuccess) return err;
  if ((err = cudaStreamWaitEvent(side->stream, side->fork, 0)) != cudaSuccess) return err;
  attention_bwd_dkdv_sm90_kernel<D><<<grid, kB90Threads, smem_dkdv, stream>>>(q, k, v, dout, lse2, drow, dk, dv, T, H, mb,
                                                                               scale_log2, scale);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  attention_bwd_dq_sm90_kernel<D><<<grid, kB90Threads, smem_dq, side->stream>>>(q, k, v, dout, lse2, drow, dq, T, H, mb,
                                                                                 scale_log2, scale);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  if ((err = cudaEventRecord(side->join, side->stream)) != cudaSuccess) return err;
  return cudaStreamWaitEvent(stream, side->join, 0);
}

cudaError_t attention_backward_sm90(const bf16* q, const bf16* k, const bf16* v, const bf16* dout, const float* lse2,
                                    bf16* dq, bf16* dk, bf16* dv, const float* drow, int T, int H, int D,
                                    const MaskDesc& mask, cudaStream_t stream) {
  if (D == 64) return launch_bwd_sm90<64>(q, k, v, dout, lse2, dq, dk, dv, drow, T, H, mask, stream);
  if (D == 128) return launch_bwd_sm90<128>(q, k, v, dout, lse2, dq, dk, dv, drow, T, H, mask, stream);
  return cudaErrorInvalidValue;
}

}  // namespace attn
