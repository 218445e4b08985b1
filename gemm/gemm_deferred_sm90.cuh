// The Hopper GEMM with a tile's epilogue deferred under the next tile's slices, for an epilogue
// whose arithmetic would otherwise stall the tensor cores (the lm head's softcapped cross-entropy,
// gemm/epilogue_softcap_ce.cuh, the one that uses it):
//   Out[M][N] = EPI(A[M][K] B),  A [M][K], B [K][N] (N contiguous), bf16 row-major, fp32
//   accumulation; K and N multiples of 8, pointers 16-byte aligned, any M.
//
// The main loop is gemm/mainloop.cuh's, over the tiles in m-fastest order (gemm/tile_scheduler.cuh).
// After a tile's last slice each consumer hands its accumulators to the epilogue (EPI::take), and
// while the tensor cores run the next tile's first EPI::kSubs slices the consumers run the
// epilogue's steps on them (EPI::step), one a slice, each after the slice's wgmmas are queued and
// the previous slice's stage released. The last tile's epilogue runs alone. The producer's
// warpgroup gives registers to the consumers (setmaxnreg: 40 and 232 a thread), who keep the
// epilogue's 64 registers of bf16 pairs beside the 128 accumulators.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>

#include "gemm/config.cuh"
#include "gemm/mainloop.cuh"
#include "gemm/tile_scheduler.cuh"
#include "hopper/barrier.cuh"
#include "hopper/setmaxnreg.cuh"
#include "hopper/tma.cuh"
#include "hopper/wgmma.cuh"

namespace gemm {

constexpr int kDeferredThreads = kConsumerThreads + 128;  // two consumer warpgroups, the producer's warpgroup

// tmA, tmB: A and B; tmO: the epilogue's output (boxes of a warpgroup's 64 rows).
template <class EPI>
__global__ void __launch_bounds__(kDeferredThreads, 1)
    gemm_deferred_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                         const __grid_constant__ CUtensorMap tmO, typename EPI::Args args, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace hopper;
  constexpr int S = Shape::kStages;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const Smem sm(smem_raw);  // B: BK x BN, 4 MN-major panels
  bf16 *sA = sm.sA, *sB = sm.sB, *sC = sm.sC;
  Ring ring{{sm.bars, sm.bars + S}};
  const uint32_t c = cluster_rank(), peer = c ^ 1;  // this block takes rows 128 c.. of the cluster's 256 x 256 tiles
  const int tn = tiles_n(N), tm = tiles_m(M), tiles = tm * tn, nk = (K + BK - 1) / BK;
  const int cluster = blockIdx.x / 2, clusters = gridDim.x / 2;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (threadIdx.x == kConsumerThreads) ring.init(2 * kConsumerThreads / 32);  // the 8 consumer warps of both blocks
  cluster_sync();  // both blocks' barriers are set before either signals the other's

  if (threadIdx.x >= kConsumerThreads) {  // the producer's warpgroup: one thread issues every load
    hopper::setmaxnreg_dec<40>();
    if (threadIdx.x == kConsumerThreads) {
      int it = 0;
      for (int t = cluster; t < tiles; t += clusters) {
        const TileOrigin o = tile_m_fastest(t, tm, c);
        for (int kb = 0; kb < nk; kb++, it++) load_mn_slice(ring, it, sA, sB, &tmA, &tmB, kb, o.m0, o.n0, c);
      }
    }
    __syncwarp();
    cluster_sync();
    return;
  }
  hopper::setmaxnreg_inc<232>();

  const int wg = threadIdx.x / 128, w = warp % 4;
  const Consumer x{ring, sA, sB, sC, peer, wg, lane, w * 16 + (lane >> 2), 2 * (lane & 3), w * 16 + (lane & 7) + (lane & 8),
                   threadIdx.x % 128 == 0};
  EPI epi;
  for (int ti = 0, t = cluster;; t += clusters, ti++) {
    const bool have = t < tiles, prev = ti > 0;
    if (!have && !prev) break;
    const TileOrigin o = tile_m_fastest(t, tm, c);
    const int it0 = ti * nk;  // this tile's first entry in the ring's order
    epi.begin_tile(x, args, have, o.m0, M);
    float acc[BN / 8][4];
#pragma unroll
    for (int sub = 0; sub < EPI::kSubs; sub++) {
      const bool slice = have && sub < nk;
      if (slice) {  // the slice's wgmmas queued behind the previous one's, which is then waited for and its stage released
        mma_slice<false>(acc, ring, it0 + sub, sA, sB, wg, sub);
        wgmma_wait<1>();
        if (sub > 0) x.release(it0 + sub - 1);
      }
      if (prev) epi.step(sub, x, args, &tmO, M, tn);
    }
    if (!have) break;
    for (int kb = EPI::kSubs; kb < nk; kb++) {
      mma_slice<false>(acc, ring, it0 + kb, sA, sB, wg, kb);
      wgmma_wait<1>();
      x.release(it0 + kb - 1);
    }
    wgmma_wait<0>();
    reg_fence(acc);
    x.release(it0 + nk - 1);
    epi.take(acc, x, o.m0, o.n0, N);
  }
  if (x.storer) store_wait();  // the stores are complete before the block's shared memory goes
  cluster_sync();               // and the other block signals none of this one's barriers any more
#else
  __trap();  // built for another architecture: gemm::available() is false there
#endif
}

// The kernel's launch with EPI: A [M][K], B [K][N], out [M][N].
template <class EPI>
inline cudaError_t launch_deferred(const bf16* A, const bf16* B, bf16* out, int M, int N, int K, cudaStream_t stream,
                                   const typename EPI::Args& args) {
  if (!operands_ok(M, N, K, {A, B, out})) return cudaErrorInvalidValue;
  if (M == 0) return cudaSuccess;
  auto kernel = gemm_deferred_kernel<EPI>;
  static int clusters = 0;
  cudaError_t err = resident_clusters(kernel, kDeferredThreads, &clusters);
  if (err != cudaSuccess) return err;
  CUtensorMap ta, tb, to;
  err = hopper::make_matrix_map(&ta, A, M, K, BM);
  if (err == cudaSuccess) err = hopper::make_matrix_map(&tb, B, K, N, BK);
  if (err == cudaSuccess) err = hopper::make_matrix_map(&to, out, M, N, WM);
  if (err != cudaSuccess) return err;
  const long long tiles = (long long)tiles_m(M) * tiles_n(N);  // a cluster's, 256 x 256
  cudaLaunchAttribute pair;
  const cudaLaunchConfig_t cfg = pair_config((unsigned)std::min<long long>(tiles, clusters), stream, &pair, kDeferredThreads);
  err = cudaLaunchKernelEx(&cfg, kernel, ta, tb, to, args, M, N, K);
  return err == cudaSuccess ? cudaGetLastError() : err;
}

}  // namespace gemm
