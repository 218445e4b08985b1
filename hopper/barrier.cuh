// sm90 (Hopper) barriers and the pipelines built on them: mbarriers (shared-memory arrival
// counters with a phase bit, which also count the bytes a TMA copy delivers), clusters of blocks
// (a block's rank, a barrier of the whole cluster, arrivals on another block's mbarrier), and the
// ring of buffers a block streams tiles through (TilePipe; TmaPipe when one thread's TMA copies
// fill it). The attention kernels and the GEMM (gemm/) use them.
#pragma once
#include <cstdint>

#include "common/tensor_core.cuh"

namespace hopper {

using namespace tc;

// mbarriers: shared-memory arrival counters with a phase bit.
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smem_addr(bar)) : "memory");
}
// Arrives n times at once (for n threads or warps whose work this thread has waited for).
__device__ __forceinline__ void mbar_arrive_count(uint64_t* bar, uint32_t n) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(smem_addr(bar)), "r"(n) : "memory");
}
// Arrives once every cp.async this thread has issued so far has landed (the barrier's count
// must include this thread: .noinc).
__device__ __forceinline__ void mbar_arrive_cp_async(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Waits until the phase of the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
// The buffers a block streams tiles through: tile i lives in buffer i % STAGES. full[b] completes
// a phase when the tile in b has landed (the TMA's bytes, counted as tma.cuh TmaPipe or
// bwd_common_sm90.cuh QueryTilePipe initializes it); empty[b] when every warp has released it
// (its wgmmas reading b have completed). The warpgroups thus wait only for the data they need,
// never for each other at a block barrier.
template <int STAGES>
struct TilePipe {
  uint64_t* full;   // STAGES barriers
  uint64_t* empty;  // STAGES barriers

  // Before writing tile i: its buffer's previous tile (i - STAGES) must be released.
  __device__ __forceinline__ void wait_empty(int i) {
    if (i >= STAGES) mbar_wait(&empty[i % STAGES], (i / STAGES - 1) & 1);
  }
  // Before reading tile i (the TMA wrote it through the async proxy that wgmma reads by: no fence).
  __device__ __forceinline__ void wait_full(int i) { mbar_wait(&full[i % STAGES], (i / STAGES) & 1); }
  // After this warp's last read of tile i (its wgmmas waited).
  __device__ __forceinline__ void release(int i) {
    if ((threadIdx.x & 31) == 0) mbar_arrive(&empty[i % STAGES]);
  }
};

__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// Raises the current phase's expected transaction bytes (no arrival).
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// Arrives and raises the expected transaction bytes.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// Clusters: this block's rank in its cluster; a barrier of every thread of the cluster (release
// and acquire of memory at the cluster's scope); n arrivals on the barrier at bar's offset in
// block cta of the cluster, with the default release at the block's scope (a release at the
// cluster's scope costs a memory barrier on every arrival, which slows the GEMM's ring down:
// results/matmul/README.md, The MLP products at the power limit).
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_remote(uint64_t* bar, uint32_t cta, uint32_t n = 1) {
  asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\nmbarrier.arrive.shared::cluster.b64 _, [ra], %2;\n}\n" ::"r"(
                   smem_addr(bar)),
               "r"(cta), "r"(n)
               : "memory");
}

// TilePipe (wait_empty, wait_full and release as there) with one producer thread: full[b] expects
// its single arrival and the tile's bytes.
template <int STAGES>
struct TmaPipe : TilePipe<STAGES> {
  using TilePipe<STAGES>::full;
  using TilePipe<STAGES>::empty;
  // By the producer thread, before a __syncthreads.
  __device__ __forceinline__ void init(int warps) {
    for (int i = 0; i < STAGES; i++) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], warps);
    }
    fence_mbarrier_init();
  }
  __device__ __forceinline__ uint64_t* full_of(int i) { return &full[i % STAGES]; }
};

}  // namespace hopper
