// Which output tiles a block of the Hopper GEMM takes, and in which order.
//
// The grid is persistent (gemm/config.cuh resident_clusters): cluster i of C takes tiles i, i + C,
// i + 2C, ... of 256 x 256 outputs, and block c of the cluster (its rank, 0 or 1) the rows
// 128 c.. of each, so the two blocks share the tile's B (which the TMA multicasts to both).
// Two orders:
//   n-fastest (the MLP's and q, k, v's products): the clusters at work share the rows of A and
//     all of B, which stay in L2;
//   m-fastest (the lm head): the clusters at work share a few 256-column slabs of B and walk A's
//     rows, so a B larger than L2 (the head's 77 MB) is read from HBM once a call, where
//     n-fastest order reads it again for every 256 rows of A (results/matmul/README.md, The lm head's product with the cross-entropy).
#pragma once
#include <cstdint>

#include "gemm/config.cuh"

namespace gemm {

__host__ __device__ inline int tiles_n(int N) { return (N + BN - 1) / BN; }
__host__ __device__ inline int tiles_m(int M) { return (M + 2 * BM - 1) / (2 * BM); }  // of 256 rows: a cluster's

// A block's part of tile t: its first row and column.
struct TileOrigin {
  int m0, n0;
};
__device__ __forceinline__ TileOrigin tile_n_fastest(int t, int tn, uint32_t c) { return {(int)((t / tn) * 2 * BM + c * BM), (t % tn) * BN}; }
__device__ __forceinline__ TileOrigin tile_m_fastest(int t, int tm, uint32_t c) { return {(int)((t % tm) * 2 * BM + c * BM), (t / tm) * BN}; }

}  // namespace gemm
