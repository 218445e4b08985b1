// The Hopper GEMM's plain epilogue: a tile's fp32 accumulators rounded to bf16 and stored by the
// TMA, Out[M][N] = bf16(A B) (the v part of the q, k, v product stores this way; the ReLU^2 and
// q/k norm + rotary epilogues store through it after their arithmetic).
//
// Each consumer warpgroup writes its 64 x 256 in two rounds of OC = 128 columns (stmatrix, two
// SW128 panels a round), each stored by the TMA by one of its threads, whole 128-byte lines:
//   round 0 through the warpgroup's own buffer (sC, WM x OC);
//   round 1 through its 16 KB of the tile's last ring stage (A's part for warpgroup 0, the first
//     half of B's for 1), which the consumers keep until that store has read it (released by
//     release_held_stage after the next tile's first wgmmas are issued), so round 1 does not wait
//     for round 0's store. Both warpgroups' wgmmas read that stage, so a warpgroup writes there
//     once the other's are done (kHeldStageBar: hold_last_stage, then round 1; two ids a
//     warpgroup, alternating by the tile's parity, gemm/config.cuh).
// The tensor cores wait for the epilogue; the producer has the next tile's slices in flight.
#pragma once
#include <cuda.h>

#include "gemm/config.cuh"
#include "gemm/mainloop.cuh"
#include "hopper/named_barrier.cuh"
#include "hopper/tma.cuh"
#include "hopper/wgmma.cuh"

namespace gemm {

// After a warpgroup's stmatrix writes of an epilogue round (WM x OC in its buffer buf): the
// buffer handed to the TMA (the async proxy) and stored by one thread of the warpgroup (storer)
// at columns col0.., rows row0.. of the output (of its matrix z with z >= 0: a batched map).
__device__ __forceinline__ void store_round(const bf16* buf, const CUtensorMap* tmO, int col0, int row0, int wg, bool storer,
                                            int z = -1) {
  using namespace hopper;
  fence_proxy_async();
  named_sync(kWarpgroupBar + wg, 128);
  if (storer) {
#pragma unroll
    for (int p = 0; p < OC / 64; p++) {
      if (z < 0) tma_store_panel(buf + p * WM * 64, tmO, col0 + 64 * p, row0);
      else tma_store_box_3d(buf + p * WM * 64, tmO, col0 + 64 * p, row0, z);  // matrix z of a make_batched_map tensor
    }
    store_commit();
  }
}

// The element-wise step of a store: none (the plain store), or an epilogue's on the rounded
// accumulators as bf16 pairs (gemm/epilogue_relu2.cuh).
struct NoOp {
  static constexpr bool kActive = false;
  __device__ __forceinline__ static uint32_t pair(uint32_t u) { return u; }
};

// The held-stage handoff's id where warpgroup wg syncs for its ti-th tile (the other arrives
// there): alternating by the tile's parity, so that a warpgroup a tile ahead arrives on the other
// id (gemm/config.cuh, the rules).
__device__ __forceinline__ int held_stage_bar(int wg, int ti) { return kHeldStageBar + wg + 2 * (ti & 1); }
// The stage a tile's last slice used, kept for its second round: after the tile's wgmmas are
// done, this warpgroup tells the other (waited on by the other's round 1) that it no longer reads
// it. ti: the block's tiles before this one.
__device__ __forceinline__ void hold_last_stage(const Consumer& x, int ti) { hopper::named_arrive(held_stage_bar(1 - x.wg, ti), 256); }
// The previous tile's last stage, once its round 1 store has read it (the storer arrives for its
// warpgroup's 4 warps): called after the next tile's first wgmmas are issued. it0: the next
// tile's first ring entry.
__device__ __forceinline__ void release_held_stage(const Consumer& x, int it0) {
  if (x.storer) {
    hopper::store_wait_read();
    x.release_for(it0 - 1, kConsumerThreads / 64);
  }
}

// The warpgroup's 64 x 256 of the tile (acc), the pairs through OP, in two rounds to columns
// col0.., rows m0 + WM wg.. of the output (of matrix z >= 0 of a batched map); last_entry: the
// ring entry of the tile's last slice; ti: the block's tiles before this one.
template <class OP>
__device__ __forceinline__ void store_tile(float (&acc)[BN / 8][4], const Consumer& x, int last_entry, int ti, const CUtensorMap* tmO,
                                           int col0, int m0, int z = -1) {
  using namespace hopper;
  static_assert(BN / OC == 2 && BM * BK >= WM * OC && BN * BK / 2 >= WM * OC, "two rounds, the second in a stage");
#pragma unroll
  for (int round = 0; round < BN / OC; round++) {
    const int last = last_entry % Shape::kStages;
    bf16* const my_c = round == 0 ? x.sC + x.wg * WM * OC : x.wg ? x.sB + last * BN * BK : x.sA + last * BM * BK;
    // round 0: the previous tile's rounds have left the buffer (its storer waited at kb == 0)
    if (round == 0) hopper::named_sync(kWarpgroupBar + x.wg, 128);
    else hopper::named_sync(held_stage_bar(x.wg, ti), 256);  // the other's wgmmas are done
#pragma unroll
    for (int j = 0; j < OC / 8; j += 2) {  // two n8 blocks, then their stmatrix
      const int jb = round * OC / 8 + j;   // the first's block in the tile
      uint32_t f[4];
      tc::c_to_a(f, acc[jb], acc[jb + 1]);  // rounded to bf16, in pairs
#pragma unroll
      for (int i = 0; i < 4 && OP::kActive; i++) f[i] = OP::pair(f[i]);
      stmatrix_x4(tc::smem_addr(my_c + sw128<WM>(x.srow, j + (x.lane >> 4))), f);
    }
    store_round(my_c, tmO, col0 + round * OC, m0 + x.wg * WM, x.wg, x.storer, z);
  }
}

}  // namespace gemm
