// Tiles of a [T, H, D] bf16 tensor loaded by the tensor memory accelerator (TMA, sm90): one
// thread issues a whole tile, where cp.async (wgmma.cuh load_tile) has every thread of the block
// issue D / 8 16-byte copies a row and compute their addresses.
//
//   tensor map (host, make_tile_map): the tensor as 3 dimensions (D, H, T), innermost first, byte
//     strides D * 2 and H * D * 2; a box of 64 x 1 x ROWS (one 128-byte column panel of ROWS rows
//     of one head) with the 128-byte swizzle, so a box lands exactly as a panel of an SW128 tile
//     (wgmma.cuh: chunk c of row r at chunk c ^ (r % 8), panels ROWS x 64 apart). Rows past T are
//     filled with zeros, as load_tile does.
//   tma_load_tile<D, ROWS>: the D / 64 panels of rows [row0, row0 + ROWS) of head h into an SW128
//     tile (1024-byte aligned); their bytes (the whole box, rows past T included) complete on an
//     mbarrier whose transaction count the issuing thread raised first (mbar_expect_tx or
//     mbar_arrive_expect_tx).
//
// TmaPipe is wgmma.cuh's TilePipe with one producer thread: full[b] completes when the producer
// has arrived (once, with the tile's byte count) and the bytes have landed; empty[b], as there,
// when every warp has released the buffer.
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/wgmma.cuh"

namespace attn {

// Host: a tensor map for tiles of `rows` rows of one head of the [T, H, D] tensor at base (the
// driver's encoder, reached through the runtime: no link against libcuda).
inline cudaError_t make_tile_map(CUtensorMap* map, const __nv_bfloat16* base, int T, int H, int D, int rows) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  if (!encode) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
    if (e != cudaSuccess) return e;
    if (found != cudaDriverEntryPointSuccess || !fn) return cudaErrorNotSupported;
    encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }
  const cuuint64_t dims[3] = {(cuuint64_t)D, (cuuint64_t)H, (cuuint64_t)T};
  const cuuint64_t strides[2] = {(cuuint64_t)D * sizeof(__nv_bfloat16), (cuuint64_t)H * D * sizeof(__nv_bfloat16)};  // bytes, dims 1, 2
  const cuuint32_t box[3] = {64, 1, (cuuint32_t)rows}, unit[3] = {1, 1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<__nv_bfloat16*>(base), dims, strides, box, unit,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

namespace sm90 {

__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// Raises the current phase's expected transaction bytes (no arrival).
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// Arrives and raises the expected transaction bytes.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

template <int D, int ROWS>
__device__ __forceinline__ void tma_load_tile(bf16* tile, const CUtensorMap* map, uint64_t* bar, int row0, int h) {
#pragma unroll
  for (int p = 0; p < D / 64; p++)
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
            smem_addr(tile + p * ROWS * 64)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(p * 64), "r"(h), "r"(row0), "r"(smem_addr(bar))
        : "memory");
}

// wgmma.cuh's TilePipe (wait_empty and release as there) with one producer: full[b] expects
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
  // Before reading tile i (the TMA wrote it through the async proxy that wgmma reads by: no fence).
  __device__ __forceinline__ void wait_full(int i) { mbar_wait(&full[i % STAGES], (i / STAGES) & 1); }
};

}  // namespace sm90
}  // namespace attn
