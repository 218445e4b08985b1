// The sm90 backward's key-owner main loop without dQ: dK and dV of a block of 128 keys over the
// query tiles that see them (attention_bwd_sm90.cu describes the algorithm).
#pragma once
#include "attention/bwd_common_sm90.cuh"

namespace attn {

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
  int q_lo2[2], q_hi2[2];                                     // the queries each of them is kept by
  auto load_q_side = [&](int qt, int i) {  // this thread's copies of query tile qt, the i-th of the walk
    load_query_tile<D>(sQ, sdO, sLse, sDr, Q, dO, LSE2, drow, qt, i % S, T, H, h);
    pipe.arrive_full(i);
  };
  WalkAhead<kB90Ahead> ahead;  // tile[0] computed now, the others loaded or loading
  const TileWalk walk = begin_key_block<D>(mb, k0, key0, T, H, h, s_ids, q_lo2, q_hi2, pipe, ahead, K, V, sK, sV, load_q_side);

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
    const int after = walk.next(ahead.tile[kB90Ahead] + 1, kind_after);

    wgmma_wait<1>();  // S^T_j, dP^T_j
    reg_fence(s);
    reg_fence(dp);
    const float* lse_t = sLse + st * BQ;
    const float* dr_t = sDr + st * BQ;
    if (ahead.kind[0] != kFull) apply_mask_interval(s, q_lo2, q_hi2, ahead.tile[0] * BQ + 2 * (lane & 3));
    probs_and_dscores_t(s, dp, lse_t, dr_t, scale_log2, lane);
    wgmma_wait<0>();  // the updates of tile j - 1 (they read pa, dsa)
    reg_fence(dk);
    reg_fence(dv);
    if (it > 0) pipe.release(it - 1);
#pragma unroll
    for (int j = 0; j < BQ / 16; j++) {
      c_to_a(pa[j], s[2 * j], s[2 * j + 1]);
      c_to_a(dsa[j], dp[2 * j], dp[2 * j + 1]);
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
  cp_async_wait<0>();
  const float dk_scale[2] = {scale, scale}, dv_scale[2] = {1.f, 1.f};
  store_rows<D>(dK, dk, key0, T, H, h, lane, dk_scale);
  store_rows<D>(dV, dv, key0, T, H, h, lane, dv_scale);
#else
  __trap();  // built for another architecture: the launcher only picks this kernel on sm90
#endif
}

}  // namespace attn
