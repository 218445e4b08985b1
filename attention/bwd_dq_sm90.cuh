// The sm90 backward's query-owner main loop: dQ of a block of BQ queries (128: two warpgroups,
// one block an SM; 64: one warpgroup, three blocks an SM) over the key tiles of BK (64, or 128
// with BQ = 128: S and dP then 64 registers each) they see, S and dP recomputed
// (attention_bwd_sm90.cu describes the algorithm).
#pragma once
#include "attention/bwd_common_sm90.cuh"

namespace attn {

// ---------------------------------------------------------------------------------- dQ
template <int D, int BQ, int BK>
constexpr size_t dq_sm90_smem() {
  return (size_t)(2 * BQ + 2 * bwd_stages<BQ>() * BK) * D * sizeof(bf16) + BQ * sizeof(int32_t) +
         2 * bwd_stages<BQ>() * sizeof(uint64_t) + 1024;
}

template <int D, int BQ, int BK>
__global__ void __launch_bounds__(2 * BQ, BQ == 64 ? 3 : 1)
    attention_bwd_dq_sm90_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                                 const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO,
                                 const float* __restrict__ LSE2, const float* __restrict__ drow,
                                 bf16* __restrict__ dQ, int T, int H, MaskBounds mb, float scale_log2, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  static_assert(BQ == 64 || BQ == 128, "a block owns one or two warpgroups' queries");
  static_assert(BK == 64 || (BK == 128 && BQ == 128), "key tiles of 128 need a block's 255 registers a thread");
  constexpr int S = bwd_stages<BQ>(), AHEAD = S - 2, THREADS = 2 * BQ;
  extern __shared__ unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(align1024(smem_raw));
  bf16* sdO = sQ + BQ * D;
  bf16* sK = sdO + BQ * D;       // S buffers
  bf16* sV = sK + S * BK * D;    // S buffers
  int32_t* s_ids = reinterpret_cast<int32_t*>(sV + S * BK * D);  // BQ document ids
  TmaPipe<S> pipe;  // the key tiles' (one TMA producer: thread 0)
  pipe.full = reinterpret_cast<uint64_t*>(s_ids + BQ);
  pipe.empty = pipe.full + S;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x & 31;
  const int n_qt = (T + BQ - 1) / BQ;
  const int q0 = query_tile_longest_first(n_qt) * BQ, h = blockIdx.y;

  const int row0 = q0 + wg * 64 + warp * 16 + (lane >> 2);  // this thread's rows: row0, row0 + 8
  int key_lo[2], key_hi[2];                                   // the keys each of them keeps
  const TileWalk walk = own_and_walk<BQ, BK>(mb, q0, true, row0, T, s_ids, key_lo, key_hi);
  const bool leader = threadIdx.x == 0;
  auto load_kv = [&](int kt, int i) {  // by the leader: key tile kt, the i-th of the walk
    pipe.wait_empty(i);
    mbar_arrive_expect_tx(pipe.full_of(i), 2 * BK * D * (uint32_t)sizeof(bf16));
    tma_load_tile<D, BK>(sK + (i % S) * BK * D, &tmK, pipe.full_of(i), kt * BK, h);
    tma_load_tile<D, BK>(sV + (i % S) * BK * D, &tmV, pipe.full_of(i), kt * BK, h);
  };
  if (leader) pipe.init(THREADS / 32);
  __syncthreads();

  float lse2[2], dr[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int row = row0 + 8 * r;
    lse2[r] = row < T ? LSE2[(size_t)h * T + row] : INFINITY;
    dr[r] = row < T ? drow[(size_t)h * T + row] : 0.f;
  }

  WalkAhead<AHEAD> ahead;  // tile[0] computed now, the others loaded or loading
  ahead.start(walk);
  if (leader && ahead.tile[0] < walk.end) {  // Q and dO ride on the first tile's arrival (read only if it comes)
    mbar_expect_tx(pipe.full_of(0), 2 * BQ * D * (uint32_t)sizeof(bf16));
    tma_load_tile<D, BQ>(sQ, &tmQ, pipe.full_of(0), q0, h);
    tma_load_tile<D, BQ>(sdO, &tmdO, pipe.full_of(0), q0, h);
#pragma unroll
    for (int a = 0; a < AHEAD; a++)
      if (ahead.tile[a] < walk.end) load_kv(ahead.tile[a], a);
  }

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
    if (leader && ahead.tile[AHEAD] < walk.end) load_kv(ahead.tile[AHEAD], it + AHEAD);
    TileKind kind_after;
    const int after = walk.next(ahead.tile[AHEAD] + 1, kind_after);

    wgmma_wait<1>();  // S_j, dP_j
    reg_fence(s);
    reg_fence(dp);
    if (ahead.kind[0] != kFull) apply_mask_interval(s, key_lo, key_hi, ahead.tile[0] * BK + 2 * (lane & 3));
#pragma unroll
    for (int nb = 0; nb < BK / 8; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const float p = ex2_approx(fmaf(s[nb][e], scale_log2, -lse2[e >> 1]));
        dp[nb][e] = p * (dp[nb][e] - dr[e >> 1]);  // dS
      }
    wgmma_wait<0>();  // the update of tile j - 1 (it reads dsa)
    reg_fence(acc);
    if (it > 0) pipe.release(it - 1);
#pragma unroll
    for (int j = 0; j < BK / 16; j++) c_to_a(dsa[j], dp[2 * j], dp[2 * j + 1]);
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
  const float dq_scale[2] = {scale, scale};
  store_rows<D>(dQ, acc, row0, T, H, h, lane, dq_scale);
#else
  __trap();  // built for another architecture: the launcher only picks this kernel on sm90
#endif
}

}  // namespace attn
