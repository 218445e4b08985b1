// The Hopper GEMM with its epilogue after each tile: the main loop (gemm/mainloop.cuh) over the
// tiles of the scheduler's n-fastest order (gemm/tile_scheduler.cuh), and an epilogue EPI that
// writes each tile (gemm/epilogue_*.cuh):
//   Out[M][N] = EPI(A[M][K] B),  B [K][N] (or [N][K] when EPI::kBKMajor; or, when EPI::kBatched,
//   three [K][N / 3] matrices one below the other, a tile lying in one of them, with Out their
//   three products one after another), every operand bf16 row-major, fp32 accumulation; K and N
//   multiples of 8, pointers 16-byte aligned, any M.
//
// An epilogue is a struct with the flags above, kSlots (ring entries a tile takes after its
// slices for the epilogue's own loads), its Args, and the hooks the kernel calls:
//   init_barriers()                    once, before the ring's barriers are set;
//   load_after_slices(...)             by the producer after a tile's slices (returns the next entry);
//   at_first_slice(...)                by each consumer after the tile's first wgmmas are issued
//                                      (releases what the previous tile's epilogue held; starts
//                                      the epilogue's loads for this tile);
//   after_slices(...)                  once the tile's wgmmas are done;
//   store(acc, ...)                    the tile's output.
// (ti, passed to the last two: the block's tiles before this one.) The ring's rules, which every
// hook keeps, are in gemm/config.cuh.
// A new fused epilogue is a new file with such a struct, and a launch in gemm/gemm.cuh.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>

#include "gemm/config.cuh"
#include "gemm/mainloop.cuh"
#include "gemm/tile_scheduler.cuh"
#include "hopper/barrier.cuh"
#include "hopper/tma.cuh"
#include "hopper/wgmma.cuh"

namespace gemm {

// tmA, tmB: A and B; tmR: an epilogue's operand of the output's shape (the ReLU^2 backward's r);
// tmO: the output (tmR, tmO: boxes of a warpgroup's 64 rows).
// (168 registers at most: the SM allocates a block's registers by whole warpgroups, so 288
// threads take the room of 384; the accumulators take 128.)
template <class EPI>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                const __grid_constant__ CUtensorMap tmR, const __grid_constant__ CUtensorMap tmO, int M, int N, int K,
                typename EPI::Args args) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace hopper;
  constexpr int S = Shape::kStages;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const Smem sm(smem_raw);
  bf16 *sA = sm.sA, *sB = sm.sB, *sC = sm.sC;
  Ring ring{{sm.bars, sm.bars + S}};
  EPI epi(sm.bars + 2 * S, args, M);
  // the cluster's tiles are 256 x 256: this block takes rows 128 c.. of each (c its rank)
  const uint32_t c = cluster_rank(), peer = c ^ 1;
  const int tn = tiles_n(N), tiles = tiles_m(M) * tn, nk = (K + BK - 1) / BK;
  const int cluster = blockIdx.x / 2, clusters = gridDim.x / 2;
  const int per_tile = nk + EPI::kSlots;  // ring entries a tile
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (threadIdx.x == kConsumerThreads) {
    epi.init_barriers();
    ring.init(2 * kConsumerThreads / 32);  // the 8 consumer warps of both blocks
  }
  cluster_sync();  // both blocks' barriers are set before either signals the other's

  if (warp == kConsumerThreads / 32) {  // the producer warp: one thread issues every load
    if (lane == 0) {
      int it = 0;  // ring entries so far
      for (int t = cluster; t < tiles; t += clusters) {
        const TileOrigin o = tile_n_fastest(t, tn, c);
        for (int kb = 0; kb < nk; kb++, it++) {
          if constexpr (EPI::kBatched) {  // the tile's matrix z = n0 / nb of the three: its rows z K.., columns n0 - z nb..
            const int z = o.n0 / args.nb;
            load_mn_slice(ring, it, sA, sB, &tmA, &tmB, kb, o.m0, o.n0 - z * args.nb, c, z * K);
          } else if constexpr (EPI::kBKMajor) {
            load_k_slice(ring, it, sA, sB, &tmA, &tmB, kb, o.m0, o.n0, c);
          } else {
            load_mn_slice(ring, it, sA, sB, &tmA, &tmB, kb, o.m0, o.n0, c);
          }
        }
        it = EPI::load_after_slices(ring, it, sB, &tmR, o.m0, o.n0);
      }
    }
  }
  if (warp == kConsumerThreads / 32) {  // (the consumers wait on every load issued)
    __syncwarp();
    cluster_sync();
    return;
  }

  const int wg = threadIdx.x / 128, w = warp % 4;
  const Consumer x{ring, sA, sB, sC, peer, wg, lane, w * 16 + (lane >> 2), 2 * (lane & 3), w * 16 + (lane & 7) + (lane & 8),
                   threadIdx.x % 128 == 0};
  for (int ti = 0, t = cluster; t < tiles; t += clusters, ti++) {
    const TileOrigin o = tile_n_fastest(t, tn, c);
    float acc[BN / 8][4];
    const int it0 = ti * per_tile;  // this tile's first entry in the ring's order
    for (int kb = 0; kb < nk; kb++) {
      const int it = it0 + kb;
      mma_slice<EPI::kBKMajor>(acc, ring, it, sA, sB, wg, kb);
      if (kb == 0) epi.at_first_slice(x, ti > 0, it0, per_tile, nk, o.m0, o.n0);
      wgmma_wait<1>();  // the previous slice's wgmmas are done: its stage is free
      if (kb > 0) x.release(it - 1);
    }
    wgmma_wait<0>();
    reg_fence(acc);
    epi.after_slices(x, ti, it0, nk);
    epi.store(acc, x, ti, it0, nk, o.m0, o.n0, &tmO);
  }
  if (x.storer) store_wait();  // the stores are complete before the block's shared memory goes
  cluster_sync();               // and the other block signals none of this one's barriers any more
#else
  __trap();  // built for another architecture: gemm::available() is false there
#endif
}

// The kernel's launch with EPI over the tensor maps made of the operands: A [M][K]; B as above;
// R [M][N] (or nullptr); out [M][N] (or, batched, three [M][N / 3]).
template <class EPI>
inline cudaError_t launch(const bf16* A, const bf16* B, const bf16* R, bf16* out, int M, int N, int K, cudaStream_t stream,
                          typename EPI::Args args = {}) {
  if (!operands_ok(M, N, K, {A, B, R, out})) return cudaErrorInvalidValue;
  if (M == 0) return cudaSuccess;
  auto kernel = gemm_kernel<EPI>;
  static int clusters = 0;
  cudaError_t err = resident_clusters(kernel, kThreads, &clusters);
  if (err != cudaSuccess) return err;
  CUtensorMap ta, tb, tr, to;
  err = hopper::make_matrix_map(&ta, A, M, K, BM);
  if (err == cudaSuccess)
    err = EPI::kBKMajor ? hopper::make_matrix_map(&tb, B, N, K, BN / 2)
                        : hopper::make_matrix_map(&tb, B, EPI::kBatched ? 3LL * K : K, N / (EPI::kBatched ? 3 : 1), BK);
  if (err == cudaSuccess) err = R ? hopper::make_matrix_map(&tr, R, M, N, WM) : hopper::make_matrix_map(&tr, A, M, K, WM);  // (unused)
  if (err == cudaSuccess) err = EPI::kBatched ? hopper::make_batched_map(&to, out, 3, M, N / 3, WM) : hopper::make_matrix_map(&to, out, M, N, WM);
  if (err != cudaSuccess) return err;
  const long long tiles = (long long)tiles_m(M) * tiles_n(N);  // a cluster's, 256 x 256
  cudaLaunchAttribute pair;
  const cudaLaunchConfig_t cfg = pair_config((unsigned)std::min<long long>(tiles, clusters), stream, &pair);
  err = cudaLaunchKernelEx(&cfg, kernel, ta, tb, tr, to, M, N, K, args);
  return err == cudaSuccess ? cudaGetLastError() : err;
}

}  // namespace gemm
