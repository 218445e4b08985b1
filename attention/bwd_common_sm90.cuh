// What the sm90 backward kernels share (attention_bwd_sm90.cu describes the algorithm): the block
// and pipeline sizes, the load of a query tile for the kernels that own keys, P^T and dS^T from
// S^T and dP^T, and the start of a key-owning block (its keys' intervals, its walk, the first loads).
#pragma once
#include "attention/kernels.h"
#include "attention/own_intervals.cuh"
#include "attention/softmax.cuh"
#include "attention/tile_scheduler.cuh"
#include "attention/wgmma.cuh"

namespace attn {

constexpr int kB90Threads = 256, kB90Stages = 4;  // kB90Threads: a block owning kB90Own rows (two warpgroups)
[[maybe_unused]] constexpr int kB90Ahead = kB90Stages - 2;  // tiles loaded ahead of the one computed

__device__ __forceinline__ unsigned char* align1024(unsigned char* p) {
  return p + ((1024 - (smem_addr(p) & 1023)) & 1023);
}

// This thread's copies of query tile qt for the kernels that own keys (blocks of THREADS): Q and
// dO rows into buffer st of sQ / sdO (SW128 tiles of kB90Walk rows), their lse2 and Drow into
// sLse / sDr.
template <int D, int THREADS>
__device__ __forceinline__ void load_query_tile(bf16* sQ, bf16* sdO, float* sLse, float* sDr, const bf16* Q,
                                                const bf16* dO, const float* LSE2, const float* drow, int qt, int st,
                                                int T, int H, int h) {
  constexpr int BQ = kB90Walk;
  const int qs = qt * BQ;
  sm90::load_tile<D, BQ, THREADS>(sQ + st * BQ * D, Q, qs, T, H, h);
  sm90::load_tile<D, BQ, THREADS>(sdO + st * BQ * D, dO, qs, T, H, h);
  for (int r = threadIdx.x; r < 2 * BQ; r += THREADS) {
    const int j = r % BQ, row = qs + j;
    const float* src = (r < BQ ? LSE2 : drow) + (size_t)h * T + (row < T ? row : 0);
    cp_async4(smem_addr((r < BQ ? sLse : sDr) + st * BQ + j), src, row < T);
  }
}

// P^T = 2^(scale_log2 S^T - lse2) and dS^T = P^T (dP^T - Drow), in place, on a key-owning warp's
// 16 x BQ tile (keys as rows; this thread's columns, queries of the tile, are 2t and 2t + 1 of
// each n8 block); lse_t, dr_t: the tile's lse2 and Drow in shared memory.
template <int NB>
__device__ __forceinline__ void probs_and_dscores_t(float (&s)[NB][4], float (&dp)[NB][4], const float* lse_t,
                                                    const float* dr_t, float scale_log2, int lane) {
#pragma unroll
  for (int nb = 0; nb < NB; nb++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int j = nb * 8 + 2 * (lane & 3) + (e & 1);  // query within the tile
      const float p = ex2_approx(fmaf(s[nb][e], scale_log2, -lse_t[j]));
      s[nb][e] = p;
      dp[nb][e] = p * (dp[nb][e] - dr_t[j]);
    }
}

// The start both key-owning kernels share, for a block owning BK keys (BK / 64 warpgroups): the
// queries each of this thread's keys (key0, key0 + 8) is kept by, the block's walk over the
// query tiles that see its keys, the tile pipe, and the first loads (K and V, which ride on the
// first query tile's arrival, and the first AHEAD query tiles through load_q_side). Returns the
// walk.
template <int D, int BK, int AHEAD, typename Pipe, typename LoadQuerySide>
__device__ __forceinline__ TileWalk begin_key_block(const MaskBounds& mb, int k0, int key0, int T, int H, int h, int32_t* s_ids,
                                                    int (&q_lo2)[2], int (&q_hi2)[2], Pipe& pipe, WalkAhead<AHEAD>& ahead,
                                                    const bf16* K, const bf16* V, bf16* sK, bf16* sV,
                                                    LoadQuerySide& load_q_side) {
  constexpr int BQ = kB90Walk, THREADS = 2 * BK;
  const TileWalk walk = own_and_walk<BK, BQ>(mb, k0, false, key0, T, s_ids, q_lo2, q_hi2);
  if (threadIdx.x == 0) pipe.init(THREADS);
  __syncthreads();
  ahead.start(walk);
  sm90::load_tile<D, BK, THREADS>(sK, K, k0, T, H, h);
  sm90::load_tile<D, BK, THREADS>(sV, V, k0, T, H, h);
#pragma unroll
  for (int a = 0; a < AHEAD; a++)
    if (ahead.tile[a] < walk.end) load_q_side(ahead.tile[a], a);
  return walk;
}

}  // namespace attn
