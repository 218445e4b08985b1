// Tiles of a [T, H, D] bf16 tensor loaded by the TMA (hopper/tma.cuh) for the sm90 attention
// kernels: one thread issues a whole tile, where cp.async (mma.cuh load_tile, the sm80 kernels)
// has every thread of the block issue D / 8 16-byte copies a row and compute their addresses.
//
//   tensor map (host, make_tile_map): the tensor as 3 dimensions (D, H, T), innermost first, byte
//     strides D * 2 and H * D * 2; a box of 64 x 1 x ROWS (one 128-byte column panel of ROWS rows
//     of one head) with the 128-byte swizzle, so a box lands exactly as a panel of an SW128 tile
//     (hopper/wgmma.cuh: chunk c of row r at chunk c ^ (r % 8), panels ROWS x 64 apart). Rows past
//     T are filled with zeros, as load_tile does.
//   tma_load_tile<D, ROWS>: the D / 64 panels of rows [row0, row0 + ROWS) of head h into an SW128
//     tile (1024-byte aligned); their bytes (the whole box, rows past T included) complete on an
//     mbarrier whose transaction count the issuing thread raised first (mbar_expect_tx or
//     mbar_arrive_expect_tx); tma_store_tile writes such a tile back.
//
// The attention kernels' sm90 namespace sees every Hopper primitive (hopper/) unqualified.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/primitives.cuh"
#include "hopper/barrier.cuh"
#include "hopper/tma.cuh"
#include "hopper/wgmma.cuh"

namespace attn {

// Host: a tensor map for tiles of `rows` rows of one head of the [T, H, D] tensor at base.
inline cudaError_t make_tile_map(CUtensorMap* map, const __nv_bfloat16* base, int T, int H, int D, int rows) {
  const cuuint64_t dims[3] = {(cuuint64_t)D, (cuuint64_t)H, (cuuint64_t)T};
  const cuuint64_t strides[2] = {(cuuint64_t)D * sizeof(__nv_bfloat16), (cuuint64_t)H * D * sizeof(__nv_bfloat16)};  // bytes, dims 1, 2
  const cuuint32_t box[3] = {64, 1, (cuuint32_t)rows};
  return hopper::make_swizzled_map(map, base, 3, dims, strides, box);
}

namespace sm90 {

using namespace ::hopper;

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

// The other way from tma_load_tile: the D / 64 panels of ROWS rows (PANEL_ROWS x 64 apart: ROWS
// of a taller tile from a row that is a multiple of 8) of an SW128 tile to rows [row0, row0 +
// ROWS) of head h through a make_tile_map map of ROWS rows; rows past T are not written.
template <int D, int ROWS, int PANEL_ROWS = ROWS>
__device__ __forceinline__ void tma_store_tile(const bf16* tile, const CUtensorMap* map, int row0, int h) {
#pragma unroll
  for (int p = 0; p < D / 64; p++) tma_store_box_3d(tile + p * PANEL_ROWS * 64, map, p * 64, h, row0);
}

}  // namespace sm90
}  // namespace attn
