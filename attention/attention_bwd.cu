// Backward of fused masked attention (sm80 mma.sync), deterministic: no atomics.
//
//   P = exp(S - lse)  (S = scale Q K^T + mask, recomputed),  Drow = rowsum(dO * O)
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - Drow),  dQ = scale dS K,  dK = scale dS^T Q
//   Q, K, V, O, dO, dQ, dK, dV: bf16 [T, H, D];  lse, Drow: fp32 [H, T];  D in {64, 128}.
//
// Two kernels after the pre-pass (bwd_preprocess.cu: Drow): dK/dV, one block per 64 keys walking the query tiles that
// see them (own_intervals.cuh, mask.h TileWalk, as the sm90 kernels), accumulating in registers; dQ, one block per 64
// queries walking key tiles like the forward. Computing dQ in its own pass costs two extra
// small matmuls per tile (S and dP again) but leaves every output written by one block, in
// a fixed order: the same inputs give the same bits on every run.
#include <cmath>

#include "attention/attention.h"
#include "attention/kernels.h"
#include "attention/tile_scheduler.cuh"
#include "attention/mma.cuh"
#include "attention/own_intervals.cuh"
#include "attention/norm_rotary_bwd.cuh"
#include "attention/softmax.cuh"

namespace attn {
using namespace sm80;

constexpr int kBwdBlock = 64, kBwdThreads = 128;


// ---------------------------------------------------------------------------------- dQ
template <int D>
__global__ void __launch_bounds__(kBwdThreads) attention_bwd_dq_kernel(
    const bf16* __restrict__ Q, const bf16* __restrict__ K, const bf16* __restrict__ V, const bf16* __restrict__ dO,
    const float* __restrict__ LSE, const float* __restrict__ drow, bf16* __restrict__ dQ, int T, int H, MaskBounds mb,
    float scale_log2, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sdO = sQ + kBwdBlock * D;
  bf16* sK = sdO + kBwdBlock * D;     // 2 buffers
  bf16* sV = sK + 2 * kBwdBlock * D;  // 2 buffers
  int32_t* s_ids = reinterpret_cast<int32_t*>(sV + 2 * kBwdBlock * D);  // kBwdBlock document ids
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_qt = (T + kBwdBlock - 1) / kBwdBlock;
  const int q0 = query_tile_longest_first(n_qt) * kBwdBlock, h = blockIdx.y;

  const int row0 = q0 + warp * 16 + (lane >> 2);  // this thread's rows: row0, row0 + 8
  const int rows[2] = {row0, row0 + 8};
  int key_lo[2], key_hi[2];  // the keys each of them keeps
  RangeEnds ends;
  own_intervals<kBwdBlock, 2>(mb, q0, true, s_ids, rows, key_lo, key_hi, ends);
  const TileWalk walk(ends, kBwdBlock, T);
  TileKind kind;
  int kt = walk.next(walk.begin, kind);

  load_tile<D, kBwdBlock, kBwdThreads>(sQ, Q, q0, T, H, h);
  load_tile<D, kBwdBlock, kBwdThreads>(sdO, dO, q0, T, H, h);
  cp_async_commit();
  if (kt < walk.end) {
    load_tile<D, kBwdBlock, kBwdThreads>(sK, K, kt * kBwdBlock, T, H, h);
    load_tile<D, kBwdBlock, kBwdThreads>(sV, V, kt * kBwdBlock, T, H, h);
  }
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();
  uint32_t qf[D / 16][4], dof[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) {
    ldsm_x4(qf[kk], addr_a<D>(sQ, warp * 16, kk, lane));
    ldsm_x4(dof[kk], addr_a<D>(sdO, warp * 16, kk, lane));
  }
  float lse2[2], dr[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int row = row0 + 8 * r;
    lse2[r] = row < T ? lse_log2(LSE[(size_t)h * T + row]) : INFINITY;
    dr[r] = row < T ? drow[(size_t)h * T + row] : 0.f;
  }

  float acc[D / 8][4] = {};
  int buf = 0;
  while (kt < walk.end) {
    TileKind kind_next;
    const int kt_next = walk.next(kt + 1, kind_next);
    if (kt_next < walk.end) {
      load_tile<D, kBwdBlock, kBwdThreads>(sK + (buf ^ 1) * kBwdBlock * D, K, kt_next * kBwdBlock, T, H, h);
      load_tile<D, kBwdBlock, kBwdThreads>(sV + (buf ^ 1) * kBwdBlock * D, V, kt_next * kBwdBlock, T, H, h);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const bf16* k_tile = sK + buf * kBwdBlock * D;
    const bf16* v_tile = sV + buf * kBwdBlock * D;

    float s[kBwdBlock / 8][4] = {}, dp[kBwdBlock / 8][4] = {};
    mma_a_reg_bt<D, kBwdBlock / 8, D / 16>(s, qf, k_tile, lane);
    mma_a_reg_bt<D, kBwdBlock / 8, D / 16>(dp, dof, v_tile, lane);
    const int k0 = kt * kBwdBlock;
    if (kind != kFull) apply_mask_interval(s, key_lo, key_hi, k0 + 2 * (lane & 3));
#pragma unroll
    for (int nb = 0; nb < kBwdBlock / 8; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const float p = ex2_approx(fmaf(s[nb][e], scale_log2, -lse2[e >> 1]));
        s[nb][e] = p * (dp[nb][e] - dr[e >> 1]);  // dS
      }
    mma_c_reg_b<D, kBwdBlock / 16>(acc, s, k_tile, lane);
    __syncthreads();
    buf ^= 1;
    kt = kt_next;
    kind = kind_next;
  }
  cp_async_wait<0>();
  const float dq_scale[2] = {scale, scale};
  store_rows<D>(dQ, acc, row0, T, H, h, lane, dq_scale);
}

// ---------------------------------------------------------------------------------- dK, dV
// Each warp owns 16 keys and computes transposed scores S^T = K Q^T (keys as rows), so that
// P^T and dS^T come out in the A layout that dV += P^T dO and dK += dS^T Q consume.
template <int D>
__global__ void __launch_bounds__(kBwdThreads) attention_bwd_dkdv_kernel(
    const bf16* __restrict__ Q, const bf16* __restrict__ K, const bf16* __restrict__ V, const bf16* __restrict__ dO,
    const float* __restrict__ LSE, const float* __restrict__ drow, bf16* __restrict__ dK, bf16* __restrict__ dV, int T,
    int H, MaskBounds mb, float scale_log2, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sK = reinterpret_cast<bf16*>(smem);
  bf16* sV = sK + kBwdBlock * D;
  bf16* sQ = sV + kBwdBlock * D;       // 2 buffers
  bf16* sdO = sQ + 2 * kBwdBlock * D;  // 2 buffers
  float* sLse = reinterpret_cast<float*>(sdO + 2 * kBwdBlock * D);  // 2 x kBwdBlock
  float* sDr = sLse + 2 * kBwdBlock;                                // 2 x kBwdBlock
  int32_t* s_ids = reinterpret_cast<int32_t*>(sDr + 2 * kBwdBlock);  // kBwdBlock document ids
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int k0 = blockIdx.x * kBwdBlock, h = blockIdx.y;

  const int key0 = k0 + warp * 16 + (lane >> 2);  // this thread's keys: key0 and key0 + 8
  const int keys[2] = {key0, key0 + 8};
  int q_lo2[2], q_hi2[2];  // the queries that keep each of them
  RangeEnds ends;
  own_intervals<kBwdBlock, 2>(mb, k0, false, s_ids, keys, q_lo2, q_hi2, ends);
  const TileWalk walk(ends, kBwdBlock, T);
  auto load_q_side = [&](int qt, int b) {
    const int qs = qt * kBwdBlock;
    load_tile<D, kBwdBlock, kBwdThreads>(sQ + b * kBwdBlock * D, Q, qs, T, H, h);
    load_tile<D, kBwdBlock, kBwdThreads>(sdO + b * kBwdBlock * D, dO, qs, T, H, h);
    for (int i = threadIdx.x; i < 2 * kBwdBlock; i += kBwdThreads) {
      const int j = i % kBwdBlock, row = qs + j;
      const float* src = (i < kBwdBlock ? LSE : drow) + (size_t)h * T + (row < T ? row : 0);
      cp_async4(smem_addr((i < kBwdBlock ? sLse : sDr) + b * kBwdBlock + j), src, row < T);
    }
  };
  TileKind kind;
  int qt = walk.next(walk.begin, kind);

  load_tile<D, kBwdBlock, kBwdThreads>(sK, K, k0, T, H, h);
  load_tile<D, kBwdBlock, kBwdThreads>(sV, V, k0, T, H, h);
  cp_async_commit();
  if (qt < walk.end) load_q_side(qt, 0);
  cp_async_commit();

  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  int buf = 0;
  while (qt < walk.end) {
    TileKind kind_next;
    const int qt_next = walk.next(qt + 1, kind_next);
    if (qt_next < walk.end) load_q_side(qt_next, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const bf16* q_tile = sQ + buf * kBwdBlock * D;
    const bf16* do_tile = sdO + buf * kBwdBlock * D;
    const float* lse_t = sLse + buf * kBwdBlock;
    const float* dr_t = sDr + buf * kBwdBlock;

    float st[kBwdBlock / 8][4] = {}, dpt[kBwdBlock / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
      uint32_t kf[4], vf[4];
      ldsm_x4(kf, addr_a<D>(sK, warp * 16, kk, lane));
      ldsm_x4(vf, addr_a<D>(sV, warp * 16, kk, lane));
#pragma unroll
      for (int p = 0; p < kBwdBlock / 16; p++) {
        uint32_t r[4];
        ldsm_x4(r, addr_b<D>(q_tile, p * 16, kk, lane));
        mma(st[2 * p], kf, r[0], r[1]);
        mma(st[2 * p + 1], kf, r[2], r[3]);
        ldsm_x4(r, addr_b<D>(do_tile, p * 16, kk, lane));
        mma(dpt[2 * p], vf, r[0], r[1]);
        mma(dpt[2 * p + 1], vf, r[2], r[3]);
      }
    }
    const int q0 = qt * kBwdBlock;
    if (kind != kFull) apply_mask_interval(st, q_lo2, q_hi2, q0 + 2 * (lane & 3));  // -inf: p = 0
#pragma unroll
    for (int nb = 0; nb < kBwdBlock / 8; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int j = nb * 8 + 2 * (lane & 3) + (e & 1);  // query within the tile
        const float p = ex2_approx(fmaf(st[nb][e], scale_log2, -lse_log2(lse_t[j])));
        st[nb][e] = p;
        dpt[nb][e] = p * (dpt[nb][e] - dr_t[j]);  // dS^T
      }
    mma_c_reg_b<D, kBwdBlock / 16>(dv, st, do_tile, lane);
    mma_c_reg_b<D, kBwdBlock / 16>(dk, dpt, q_tile, lane);
    __syncthreads();
    buf ^= 1;
    qt = qt_next;
    kind = kind_next;
  }
  cp_async_wait<0>();
  const float dk_scale[2] = {scale, scale}, dv_scale[2] = {1.f, 1.f};
  store_rows<D>(dK, dk, key0, T, H, h, lane, dk_scale);
  store_rows<D>(dV, dv, key0, T, H, h, lane, dv_scale);
}

template <int D>
static cudaError_t launch_bwd(const bf16* q, const bf16* k, const bf16* v, const bf16* dout, const float* lse, bf16* dq,
                              bf16* dk, bf16* dv, const BwdWorkspace& ws, int T, int H, const MaskDesc& mask,
                              cudaStream_t stream) {
  const float* drow = ws.drow;
  const MaskBounds mb = make_bounds(mask, T);
  const float scale = (float)(1.0 / std::sqrt((double)D)), scale_log2 = (float)(M_LOG2E / std::sqrt((double)D));
  const size_t smem_dkdv = (size_t)6 * kBwdBlock * D * sizeof(bf16) + 4 * kBwdBlock * sizeof(float) + kBwdBlock * sizeof(int32_t);
  cudaError_t err = cudaFuncSetAttribute(attention_bwd_dkdv_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dkdv);
  if (err != cudaSuccess) return err;
  dim3 grid((T + kBwdBlock - 1) / kBwdBlock, H);
  attention_bwd_dkdv_kernel<D><<<grid, kBwdThreads, smem_dkdv, stream>>>(q, k, v, dout, lse, drow, dk, dv, T, H, mb, scale_log2, scale);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;

  const size_t smem_dq = (size_t)6 * kBwdBlock * D * sizeof(bf16) + kBwdBlock * sizeof(int32_t);
  err = cudaFuncSetAttribute(attention_bwd_dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dq);
  if (err != cudaSuccess) return err;
  attention_bwd_dq_kernel<D><<<grid, kBwdThreads, smem_dq, stream>>>(q, k, v, dout, lse, drow, dq, T, H, mb, scale_log2, scale);
  return cudaGetLastError();
}

cudaError_t attention_backward_sm80(const bf16* q, const bf16* k, const bf16* v, const bf16* dout, const float* lse, bf16* dq,
                                    bf16* dk, bf16* dv, const BwdWorkspace& ws, int T, int H, int D, const MaskDesc& mask,
                                    const NormRotary* q_norm, const NormRotary* k_norm, cudaStream_t stream) {
  cudaError_t err = cudaErrorInvalidValue;
  if (D == 64) err = launch_bwd<64>(q, k, v, dout, lse, dq, dk, dv, ws, T, H, mask, stream);
  if (D == 128) err = launch_bwd<128>(q, k, v, dout, lse, dq, dk, dv, ws, T, H, mask, stream);
  if (err == cudaSuccess && q_norm) err = norm_rotary_backward_inplace(dq, q, *q_norm, T, H, D, stream);
  if (err == cudaSuccess && k_norm) err = norm_rotary_backward_inplace(dk, k, *k_norm, T, H, D, stream);
  return err;
}

}  // namespace attn
