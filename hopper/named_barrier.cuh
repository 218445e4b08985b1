// Named barriers: bar.sync and bar.arrive on a block's hardware barriers 1-15 (0 is
// __syncthreads), each counting `threads` arrivals (a multiple of 32, whole warps) before the
// warps that sync on it go on. A warp that arrives does not wait. Each kernel family lists the ids
// it uses in one enumeration below (GemmBarrier, AttnFwdBarrier, AttnBwdBarrier), so that no two
// of its rendezvous share an id by accident.
// An id is reused only once its previous rendezvous has completed: a warp that arrives twice on
// an id before the warps that sync on it have come counts twice, completes the barrier without
// them, and they then wait for arrivals that never come.
// An id or count known at compile time goes into the instruction as an immediate (the template
// forms), one known only at run time through a register.
#pragma once

namespace hopper {

// The GEMM (gemm/), by id:
enum GemmBarrier : int {
  kWarpgroupBar = 1,   // + wg: consumer warpgroup wg's 128 threads (its epilogue buffer written, read)
  kHeldStageBar = 3,   // + wg + 2 (tile & 1): 256 threads; warpgroup wg syncs, the other arrives once
                       // its wgmmas of the tile are done (gemm/epilogue_store.cuh hold_last_stage)
  kGemmBarriersEnd = 7
};
static_assert(kGemmBarriersEnd <= 16, "a block has 16 named barriers");

// Attention's sm90 forward (attention/attention_fwd_sm90.cu), by id:
enum AttnFwdBarrier : int {
  kAttnTurnBar = 2,      // + wg: 256 threads; warpgroup wg waits for its turn at the tensor cores, the
                         // other passes it (turn_wait, turn_pass)
  kAttnRowsBar = 4,      // + wg: warpgroup wg's 128 threads; its output rows are staged for the TMA store
  kAttnFwdBarriersEnd = 6
};
static_assert(kAttnFwdBarriersEnd <= 16, "a block has 16 named barriers");

// Attention's sm90 backward over a key block (attention/bwd_key_owner_sm90.cuh), by id:
enum AttnBwdBarrier : int {
  kAttnBothWarpgroupsBar = 1,  // 256 threads: both consumer warpgroups (shared P^T, dS^T and dQ staging)
  kAttnBwdBarriersEnd = 2
};
static_assert(kAttnBwdBarriersEnd <= 16, "a block has 16 named barriers");

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
template <int kThreads>
__device__ __forceinline__ void named_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}
template <int kId, int kThreads>
__device__ __forceinline__ void named_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}
template <int kId, int kThreads>
__device__ __forceinline__ void named_arrive() {
  asm volatile("bar.arrive %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}

}  // namespace hopper
