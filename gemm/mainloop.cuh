// The Hopper GEMM's main loop: it loads K-slices and multiplies, nothing else (the epilogues,
// gemm/epilogue_*.cuh, write the results).
//
// Producer (one thread a block): for each tile, each K-slice of BK = 64 into the next entry of a
// ring of Shape::kStages stages (hopper/barrier.cuh TmaPipe): this block's 128 rows of A, and its
// half of B, which the TMA writes into both blocks of the cluster (multicast), so L2 delivers
// 32 KB a stage a block instead of 48. A stage is refilled once both blocks' consumers have
// released it (every release arrives in both blocks). Three slices are in flight while one is
// consumed, so that the loads' latency hides behind the tensor cores' work (results/matmul/README.md,
// The MLP products at the power limit).
//   B [K][N] (N contiguous: MN-major for wgmma): this block's two of the tile's four 64-column
//     panels (load_mn_slice);
//   B [N][K] (K contiguous: K-major): this block's 128 of the tile's 256 rows (load_k_slice).
// Consumers (two warpgroups a block, rows 64 wg.. of the tile): each slice's four m64n256k16
// wgmmas (mma_slice), then the previous slice's stage released once its wgmmas are done.
#pragma once
#include <cuda.h>

#include "gemm/config.cuh"
#include "hopper/barrier.cuh"
#include "hopper/tma.cuh"
#include "hopper/wgmma.cuh"

namespace gemm {

using Ring = hopper::TmaPipe<Shape::kStages>;

// The producer's loads of K-slice kb of a tile with B = [K][N] (MN-major) into ring entry it:
// this block's 128 rows of A from m0, and its half of B's 256 columns from n0 (two panels of 64),
// which the TMA writes into both blocks of the cluster. c: this block's rank; b_row0: the row of
// B where its K rows start (a batched B holds several [K][N] matrices one below the other).
__device__ __forceinline__ void load_mn_slice(Ring& ring, int it, bf16* sA, bf16* sB, const CUtensorMap* tmA, const CUtensorMap* tmB,
                                              int kb, int m0, int n0, uint32_t c, int b_row0 = 0) {
  using namespace hopper;
  const int s = it % Shape::kStages;
  ring.wait_empty(it);  // (released in both blocks: the multicast below writes into both)
  mbar_arrive_expect_tx(ring.full_of(it), (uint32_t)Shape::kStageBytes);  // A, and both halves of B
  tma_load_panel(sA + s * BM * BK, tmA, ring.full_of(it), kb * BK, m0);
  bf16* b = sB + s * BN * BK;
#pragma unroll
  for (int p = 2 * c; p < 2 * c + 2; p++)
    tma_load_panel_multicast(b + p * BK * 64, tmB, ring.full_of(it), n0 + 64 * p, b_row0 + kb * BK, 0x3);
}

// The same for B = [N][K] (K-major): B's rows n0.., columns (k) kb * BK..: one K-major panel of
// 256 rows, this block's 128 of them.
__device__ __forceinline__ void load_k_slice(Ring& ring, int it, bf16* sA, bf16* sB, const CUtensorMap* tmA, const CUtensorMap* tmB,
                                             int kb, int m0, int n0, uint32_t c) {
  using namespace hopper;
  const int s = it % Shape::kStages;
  ring.wait_empty(it);  // (released in both blocks: the multicast below writes into both)
  mbar_arrive_expect_tx(ring.full_of(it), (uint32_t)Shape::kStageBytes);  // A, and both halves of B
  tma_load_panel(sA + s * BM * BK, tmA, ring.full_of(it), kb * BK, m0);
  tma_load_panel_multicast(sB + s * BN * BK + c * 128 * BK, tmB, ring.full_of(it), kb * BK, n0 + 128 * c, 0x3);
}

// A consumer warpgroup's wgmmas of K-slice kb (ring entry it) into its accumulator (rows WM wg..
// of the tile; B K-major or MN-major as it was loaded), committed as one group.
template <bool B_KMAJOR>
__device__ __forceinline__ void mma_slice(float (&acc)[BN / 8][4], Ring& ring, int it, const bf16* sA, const bf16* sB, int wg, int kb) {
  using namespace hopper;
  const int s = it % Shape::kStages;
  ring.wait_full(it);
  wgmma_fence();
  const bf16 *a = sA + s * BM * BK, *b = sB + s * BN * BK;
#pragma unroll
  for (int kk = 0; kk < BK / 16; kk++)
    wgmma_ss<BN, 0, B_KMAJOR ? 0 : 1>(acc, desc_k<BM>(a, WM * wg, kk), B_KMAJOR ? desc_k<BN>(b, 0, kk) : desc_mn<BK>(b, kk),
                                      kb > 0 || kk > 0);
  wgmma_commit();
}

// A consumer thread's view of its block: the ring and the buffers, and where it sits (warpgroup
// wg takes rows 64 wg.. of every tile; this thread's rows of them rr and rr + 8, its columns
// 8 j + c0 and + 1; srow: the row whose address it gives stmatrix; storer: issues the
// warpgroup's TMA stores).
struct Consumer {
  Ring& ring;
  bf16 *sA, *sB, *sC;
  uint32_t peer;  // the other block of the cluster
  int wg, lane, rr, c0, srow;
  bool storer;
  // A ring entry's release, in this block and in the other, whose producer also writes into it.
  __device__ __forceinline__ void release(int i) const {
    if (lane == 0) {
      hopper::mbar_arrive(&ring.empty[i % Shape::kStages]);
      hopper::mbar_arrive_remote(&ring.empty[i % Shape::kStages], peer);
    }
  }
  // A release that this thread makes for n warps (whose use of entry i it has waited for), here
  // and in the other block.
  __device__ __forceinline__ void release_for(int i, uint32_t n) const {
    hopper::mbar_arrive_count(&ring.empty[i % Shape::kStages], n);
    hopper::mbar_arrive_remote(&ring.empty[i % Shape::kStages], peer, n);
  }
};

}  // namespace gemm
