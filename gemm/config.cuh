// The Hopper GEMM's tile shape, shared-memory layout and launch, which its two kernels share
// (gemm/gemm_sm90.cuh: the epilogue after each tile; gemm/gemm_deferred_sm90.cuh: the epilogue
// of a tile under the next tile's slices):
//   Out[M][N] = epilogue(A[M][K] B),  A bf16 row-major, B bf16 [K][N] or [N][K], fp32 accumulation,
//   K and N multiples of 8, pointers 16-byte aligned, any M.
//
// Persistent: one block an SM walking output tiles of BM x BN = 128 x 256, in clusters of two
// blocks that take the two 128-row halves of 256 x 256 tiles (gemm/tile_scheduler.cuh). A block's
// two consumer warpgroups work on the same tile, rows 0-63 and 64-127 (WM rows each), each
// issuing one m64n256k16 wgmma a k16 step against the tile's B. One producer thread a block issues
// the TMA loads of K-slices of BK = 64 (A: 128 x 64, B: 256 x 64, 48 KB a stage) into a ring of 4
// stages (gemm/mainloop.cuh). The epilogues write their output in rounds of OC = 128 columns
// through a buffer of WM x OC a warpgroup (gemm/epilogue_store.cuh).
//
// The rules the ring keeps (hopper/barrier.cuh: a wait names a phase only by its parity, so a
// waiter must never be a whole phase behind or ahead of the barrier):
//   every consumer warp waits for every phase of every full barrier, in ring order, even for an
//     entry it does not read (the ReLU^2 backward's other warpgroup's slot of r). A warp that
//     skipped entry i and then waited for entry i + kStages (the same barrier, the same parity)
//     while i's load was still in flight would pass at once on the stale phase, read the stage
//     before its data landed and release it early, so that the producer refilled a stage still
//     in use and the empty barrier took more arrivals than its count (the cause found for the
//     default job's crash on an H100: K = 256 makes the backward's r loads from HBM outlast the
//     next tile's slices from L2, and only tiles after a block's first can meet it).
//   an entry is released for a warp only once that warp has waited for it: a release made for a
//     warp still to wait lets the producer refill the stage, and the late waiter then finds the
//     barrier two phases on, at its own parity, and waits for ever (a hang).
//   a named barrier that the two consumer warpgroups meet at once a tile (the held stage's
//     handoff, GemmBarrier) alternates between two ids by the tile's parity: with fewer K-slices
//     than stages (K < 256) one warpgroup can finish its next tile's slices before the other
//     has synced on this tile's id, and a second arrival on the same id would complete it early
//     (the forward hung so at K = 64 on an H100).
// tests/test_gemm_ring_model.py checks these rules on a model of the ring under random schedules;
// tests/layers/gemm_stress.cu runs the kernels at every shape the model may give them.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "common/tensor_core.cuh"
#include "hopper/named_barrier.cuh"

namespace gemm {

typedef __nv_bfloat16 bf16;

constexpr int BM = 128, BN = 256, BK = 64, WM = 64, OC = 128;  // WM: a consumer warpgroup's rows; OC: an epilogue round's columns
constexpr int kConsumerThreads = 256, kThreads = kConsumerThreads + 32;  // two consumer warpgroups and the producer warp

// The GEMM's named barriers (hopper/named_barrier.cuh GemmBarrier)
using hopper::kHeldStageBar;
using hopper::kWarpgroupBar;
struct Shape {
  static constexpr int kStages = 4;
  static constexpr size_t kStageBytes = (size_t)(BM + BN) * BK * sizeof(bf16);
  static constexpr size_t kOutBytes = (size_t)BM * OC * sizeof(bf16);  // the epilogue buffer: 64 x 128 a warpgroup
  // the stages, the output buffer, 2 barriers a stage and 2 for an epilogue's own loads, and room
  // to align the tiles to 1024 bytes
  static constexpr size_t kSmem = kStages * kStageBytes + kOutBytes + (2 * kStages + 2) * sizeof(uint64_t) + 1024;
};
static_assert(Shape::kSmem <= 232448, "more shared memory than a block may have");

// The block's dynamic shared memory (Shape::kSmem), aligned to 1024 bytes: S stages of A (BM x BK,
// one SW128 panel) and of B (BN x BK: one K-major panel, or BK x BN: 4 MN-major panels), the
// epilogue buffer (per warpgroup, 2 panels of WM x 64), then 2 barriers a stage and an epilogue's
// two (gemm/epilogue_qk_norm_rotary.cuh: a warpgroup's angles landed in its epilogue buffer).
struct Smem {
  bf16 *sA, *sB, *sC;
  uint64_t* bars;
  __device__ __forceinline__ explicit Smem(unsigned char* raw) {
    const unsigned pad = (1024 - (tc::smem_addr(raw) & 1023)) & 1023;
    sA = reinterpret_cast<bf16*>(raw + pad);
    sB = sA + Shape::kStages * BM * BK;
    sC = sB + Shape::kStages * BN * BK;
    bars = reinterpret_cast<uint64_t*>(sC + BM * OC);
  }
};

// A kernel's launch in clusters of two blocks (the multicast pairs them), `clusters` of them;
// *pair holds the cluster attribute the configuration points to.
inline cudaLaunchConfig_t pair_config(unsigned clusters, cudaStream_t stream, cudaLaunchAttribute* pair, int threads = kThreads) {
  pair->id = cudaLaunchAttributeClusterDimension;
  pair->val.clusterDim.x = 2, pair->val.clusterDim.y = 1, pair->val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(2 * clusters, 1, 1), cfg.blockDim = dim3(threads, 1, 1), cfg.dynamicSmemBytes = Shape::kSmem;
  cfg.stream = stream, cfg.attrs = pair, cfg.numAttrs = 1;
  return cfg;
}

// Whether a product's shape and operands suit the kernels: K and N multiples of 8 (16-byte rows
// for the TMA), any M >= 0, every operand 16-byte aligned (a null one counts as aligned).
inline bool operands_ok(int M, int N, int K, std::initializer_list<const void*> operands) {
  if (M < 0 || N <= 0 || K <= 0 || N % 8 || K % 8) return false;
  for (const void* p : operands)
    if (reinterpret_cast<uintptr_t>(p) % 16) return false;
  return true;
}

// The clusters of a kernel that fit the GPU at once (a GPC's SMs pair up; an odd one is left
// out): the persistent grid. Asked once a kernel (*clusters caches it; 0 until then).
template <typename Kernel>
inline cudaError_t resident_clusters(Kernel kernel, int threads, int* clusters) {
  if (*clusters) return cudaSuccess;
  cudaLaunchAttribute pair;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Shape::kSmem);
  const cudaLaunchConfig_t cfg = pair_config(1, 0, &pair, threads);
  if (err == cudaSuccess) err = cudaOccupancyMaxActiveClusters(clusters, kernel, &cfg);
  if (err == cudaSuccess && *clusters < 1) err = cudaErrorInvalidConfiguration;
  if (err != cudaSuccess) *clusters = 0;
  return err;
}

}  // namespace gemm
