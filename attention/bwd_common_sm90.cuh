// What the sm90 backward kernels share (attention_bwd_sm90.cu describes the algorithm): the block
// and pipeline sizes, the query-tile pipe of the kernels that own keys, P^T and dS^T from S^T and
// dP^T, and the start of a key-owning block (its keys' intervals, its walk, the first loads).
#pragma once
#include "attention/kernels.h"
#include "attention/own_intervals.cuh"
#include "attention/softmax.cuh"
#include "attention/tile_scheduler.cuh"
#include "attention/tma_tiles.cuh"

namespace attn {

constexpr int kB90Threads = 256, kB90Stages = 4;  // kB90Threads: a block owning kB90Own rows (two warpgroups)
// The two-kernel backward's tile buffers for blocks owning OWN keys or queries: blocks of 64 (one
// warpgroup) take three, so that three blocks fit an SM's shared memory.
template <int OWN>
constexpr int bwd_stages() { return OWN == 64 ? 3 : kB90Stages; }

__device__ __forceinline__ unsigned char* align1024(unsigned char* p) {
  return p + ((1024 - (smem_addr(p) & 1023)) & 1023);
}

// The key-owning kernels' query-tile pipe (hopper/barrier.cuh's TilePipe for wait_empty, wait_full and
// release): a tile's Q and dO come by the TMA, issued by one thread with their byte count; its
// lse2 and Drow (fp32 rows of [H, T], which need not be 16-byte aligned) by cp.async from the
// first 2 BQ threads (BQ: the tile's rows). full[b] takes every thread's cp.async arrival and the
// issuing thread's, so it completes once all of them have landed. The Q, dO bytes are written by the
// async proxy that wgmma reads by, and lse2, Drow are read by ordinary loads, so waiting for
// full[b] needs no proxy fence.
template <int STAGES>
struct QueryTilePipe : sm90::TilePipe<STAGES> {
  using sm90::TilePipe<STAGES>::full;
  using sm90::TilePipe<STAGES>::empty;
  // By one thread, before a __syncthreads.
  __device__ __forceinline__ void init(int threads) {
    for (int i = 0; i < STAGES; i++) {
      sm90::mbar_init(&full[i], threads + 1);
      sm90::mbar_init(&empty[i], threads / 32);
    }
    sm90::fence_mbarrier_init();
  }

  // Query tile qt into buffer st of sQ / sdO (SW128 tiles of BQ rows; rows past T read as
  // zeros) and its lse2 and Drow into sLse / sDr, as the i-th tile of the walk; every thread calls
  // it, once tile i - STAGES is released (wait_empty).
  template <int D, int THREADS, int BQ>
  __device__ __forceinline__ void load(bf16* sQ, bf16* sdO, float* sLse, float* sDr, const CUtensorMap* tmQ,
                                       const CUtensorMap* tmdO, const float* LSE2, const float* drow, int qt, int i, int T,
                                       int h) {
    const int qs = qt * BQ, st = i % STAGES;
    if (threadIdx.x == 0) {
      sm90::mbar_arrive_expect_tx(&full[st], 2 * BQ * D * (uint32_t)sizeof(bf16));
      sm90::tma_load_tile<D, BQ>(sQ + st * BQ * D, tmQ, &full[st], qs, h);
      sm90::tma_load_tile<D, BQ>(sdO + st * BQ * D, tmdO, &full[st], qs, h);
    }
    static_assert(THREADS >= 2 * BQ, "one lse2 or Drow copy a thread");
    if (threadIdx.x < 2 * BQ) {
      const int r = threadIdx.x, j = r % BQ, row = qs + j;
      const float* src = (r < BQ ? LSE2 : drow) + (size_t)h * T + (row < T ? row : 0);
      cp_async4(smem_addr((r < BQ ? sLse : sDr) + st * BQ + j), src, row < T);
    }
    cp_async_commit();
    sm90::mbar_arrive_cp_async(&full[st]);
  }
};

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
// query tiles that see its keys, the tile pipe, and the first loads (the first AHEAD query tiles
// through load_q_side, and K and V by the TMA on kv_bar, which every thread has waited for on
// return). Returns the walk, which goes down from the last query tile when `down` is set (ahead
// holds walk positions: walk.tile() gives the query tile).
template <int D, int BK, int BQ, int AHEAD, typename Pipe, typename LoadQuerySide>
__device__ __forceinline__ TileWalk begin_key_block(const MaskBounds& mb, int k0, int key0, int T, int h, int32_t* s_ids,
                                                    int (&q_lo2)[2], int (&q_hi2)[2], Pipe& pipe, uint64_t* kv_bar,
                                                    WalkAhead<AHEAD>& ahead, const CUtensorMap* tmK, const CUtensorMap* tmV,
                                                    bf16* sK, bf16* sV, LoadQuerySide& load_q_side, bool down) {
  constexpr int THREADS = 2 * BK;
  if (threadIdx.x == 0) {  // K and V first: they need no walk, and land while it is worked out
    sm90::mbar_init(kv_bar, 1);
    pipe.init(THREADS);  // fences the barriers' initialization for the TMA
    sm90::mbar_arrive_expect_tx(kv_bar, 2 * BK * D * (uint32_t)sizeof(bf16));
    sm90::tma_load_tile<D, BK>(sK, tmK, kv_bar, k0, h);
    sm90::tma_load_tile<D, BK>(sV, tmV, kv_bar, k0, h);
  }
  TileWalk walk = own_and_walk<BK, BQ>(mb, k0, false, key0, T, s_ids, q_lo2, q_hi2);
  walk.down = down;
  __syncthreads();  // the barriers' initialization, before any other thread uses them
  ahead.start(walk);
#pragma unroll
  for (int a = 0; a < AHEAD; a++)
    if (ahead.tile[a] < walk.end) load_q_side(walk.tile(ahead.tile[a]), a);
  sm90::mbar_wait(kv_bar, 0);  // K, V (also read at the end by dK's norm backward, so waited even for an empty walk)
  return walk;
}

}  // namespace attn
