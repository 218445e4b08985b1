// Tiles of a [T, H, D] bf16 tensor loaded by the tensor memory accelerator (TMA, sm90): one
// thread issues a whole tile, where cp.async (mma.cuh load_tile, the sm80 kernels) has every
// thread of the block issue D / 8 16-byte copies a row and compute their addresses.
//
//   tensor map (host, make_tile_map): the tensor as 3 dimensions (D, H, T), innermost first, byte
//     strides D * 2 and H * D * 2; a box of 64 x 1 x ROWS (one 128-byte column panel of ROWS rows
//     of one head) with the 128-byte swizzle, so a box lands exactly as a panel of an SW128 tile
//     (wgmma.cuh: chunk c of row r at chunk c ^ (r % 8), panels ROWS x 64 apart). Rows past T are
//     filled with zeros, as load_tile does.
//   tma_load_tile<D, ROWS>: the D / 64 panels of rows [row0, row0 + ROWS) of head h into an SW128
//     tile (1024-byte aligned); their bytes (the whole box, rows past T included) complete on an
//     mbarrier whose transaction count the issuing thread raised first (mbar_expect_tx or
//     mbar_arrive_expect_tx); tma_store_tile writes such a tile back.
//   make_matrix_map / tma_load_panel: the same for a row-major [rows][cols] matrix (the MLP's
//     products, layers/mlp_gemm.cuh): a box of 64 columns x box_rows rows, one SW128 panel;
//     tma_store_panel writes such a panel back.
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

// The driver's tensor-map encoder, reached through the runtime (no link against libcuda); null
// with the error in *err when the driver has none.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder(cudaError_t* err) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  *err = cudaSuccess;
  if (!encode) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
    if (e != cudaSuccess) return *err = e, nullptr;
    if (found != cudaDriverEntryPointSuccess || !fn) return *err = cudaErrorNotSupported, nullptr;
    encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }
  return encode;
}

// Host: a bf16 tensor map of `rank` dimensions (innermost first, byte strides of dimensions
// 1.., boxes of box[] elements) with the 128-byte swizzle; coordinates past the end read zeros.
inline cudaError_t make_swizzled_map(CUtensorMap* map, const __nv_bfloat16* base, int rank, const cuuint64_t* dims,
                                     const cuuint64_t* strides, const cuuint32_t* box) {
  cudaError_t err;
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder(&err);
  if (!encode) return err;
  const cuuint32_t unit[3] = {1, 1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<__nv_bfloat16*>(base), dims, strides, box, unit,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// Host: a tensor map for tiles of `rows` rows of one head of the [T, H, D] tensor at base.
inline cudaError_t make_tile_map(CUtensorMap* map, const __nv_bfloat16* base, int T, int H, int D, int rows) {
  const cuuint64_t dims[3] = {(cuuint64_t)D, (cuuint64_t)H, (cuuint64_t)T};
  const cuuint64_t strides[2] = {(cuuint64_t)D * sizeof(__nv_bfloat16), (cuuint64_t)H * D * sizeof(__nv_bfloat16)};  // bytes, dims 1, 2
  const cuuint32_t box[3] = {64, 1, (cuuint32_t)rows};
  return make_swizzled_map(map, base, 3, dims, strides, box);
}

// Host: a tensor map for panels of a row-major [rows][cols] bf16 matrix (cols a multiple of 8,
// base 16-byte aligned): boxes of box_rows rows by 64 columns, each landing as one SW128 panel.
inline cudaError_t make_matrix_map(CUtensorMap* map, const __nv_bfloat16* base, long long rows, long long cols, int box_rows) {
  const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
  const cuuint64_t strides[1] = {(cuuint64_t)cols * sizeof(__nv_bfloat16)};
  const cuuint32_t box[2] = {64, (cuuint32_t)box_rows};
  return make_swizzled_map(map, base, 2, dims, strides, box);
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

// One SW128 panel of shared memory (written by ordinary stores, each writer's fenced with
// fence_proxy_async before a barrier) to the box of a 3-d map at coordinates {c0, c1, c2}
// (innermost first); the parts past the tensor's edges are not written. Joins the issuing
// thread's bulk group (store_commit below), whose reads of shared memory must be waited for
// before the block exits (store_wait_read).
__device__ __forceinline__ void tma_store_box_3d(const bf16* smem, const CUtensorMap* map, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(smem))
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

// The 64-column panel of rows [row0, row0 + box_rows) starting at column col0 of a
// make_matrix_map matrix, into smem (1024-byte aligned), completing on bar as tma_load_tile's.
__device__ __forceinline__ void tma_load_panel(bf16* smem, const CUtensorMap* map, uint64_t* bar, int col0, int row0) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          smem_addr(smem)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col0), "r"(row0), "r"(smem_addr(bar))
      : "memory");
}

// tma_load_panel into the same offset of every block of the cluster in cta_mask, each copy
// completing on the barrier at bar's offset in its own block (multicast: L2 reads it once).
__device__ __forceinline__ void tma_load_panel_multicast(bf16* smem, const CUtensorMap* map, uint64_t* bar, int col0, int row0,
                                                         uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], "
      "[%4], %5;\n" ::"r"(smem_addr(smem)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col0), "r"(row0), "r"(smem_addr(bar)), "h"(cta_mask)
      : "memory");
}
// Clusters: this block's rank in its cluster; a barrier of every thread of the cluster (release
// and acquire of memory at the cluster's scope); n arrivals on the barrier at bar's offset in
// block cta of the cluster, with the default release at the block's scope (a release at the
// cluster's scope costs a memory barrier on every arrival: it made the MLP products 1.6x slower,
// docs/runs/2026-11-24_mlp_gemm_energy_at_power_cap_h200.txt).
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

// The 64-column SW128 panel in smem (written as tma_load_panel lands one) to rows [row0, row0 +
// box_rows) from column col0 of a make_matrix_map matrix; the parts past the matrix's edges are
// not written. Shared memory written by ordinary stores must be fenced (fence_proxy_async) by
// each writing thread before it is read here. The store joins the issuing thread's bulk group.
__device__ __forceinline__ void tma_store_panel(const bf16* smem, const CUtensorMap* map, int col0, int row0) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(col0), "r"(row0), "r"(smem_addr(smem))
               : "memory");
}
// The issuing thread's bulk stores so far form one group; wait until they have read shared
// memory (store_wait_read), or until they are complete (store_wait).
__device__ __forceinline__ void store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void store_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// wgmma.cuh's TilePipe (wait_empty, wait_full and release as there) with one producer: full[b] expects
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

}  // namespace sm90
}  // namespace attn
