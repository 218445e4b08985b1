// Named barriers: bar.sync and bar.arrive on a block's hardware barriers 1-15 (0 is
// __syncthreads), each counting `threads` arrivals (a multiple of 32, whole warps) before the
// warps that sync on it go on. A warp that arrives does not wait. Each kernel family lists the ids
// it uses in one enumeration beside its kernels (gemm/config.cuh GemmBarrier), so that no two of
// its rendezvous share an id by accident.
// An id is reused only once its previous rendezvous has completed: a warp that arrives twice on
// an id before the warps that sync on it have come counts twice, completes the barrier without
// them, and they then wait for arrivals that never come.
#pragma once

namespace hopper {

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace hopper
