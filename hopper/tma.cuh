// sm90 (Hopper) tensor memory accelerator (TMA): one thread copies a whole box of a tensor between
// global and shared memory, where cp.async has every thread of the block issue 16-byte copies
// and compute their addresses. The attention kernels and the GEMM (gemm/) use it.
//
//   tensor maps (host): a bf16 tensor of 2 or 3 dimensions with the 128-byte swizzle, so that a
//     box of 64 columns lands exactly as a panel of an SW128 tile (hopper/wgmma.cuh: chunk c of
//     row r at chunk c ^ (r % 8)); coordinates past the end read zeros and are not written.
//     make_matrix_map: a row-major [rows][cols] matrix, boxes of 64 columns x box_rows rows;
//     make_batched_map: count such matrices one after another.
//   loads (tma_load_panel, its multicast to the blocks of a cluster, bulk_load of plain bytes)
//     complete on an mbarrier (hopper/barrier.cuh) whose transaction count the issuing thread
//     raised first (mbar_expect_tx or mbar_arrive_expect_tx).
//   stores (tma_store_panel, tma_store_box_3d) join the issuing thread's bulk group: store_commit,
//     then store_wait_read before the shared memory is reused, store_wait before the block exits.
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/tensor_core.cuh"

namespace hopper {

using namespace tc;
typedef __nv_bfloat16 bf16;

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

// Host: a tensor map for panels of a row-major [rows][cols] bf16 matrix (cols a multiple of 8,
// base 16-byte aligned): boxes of box_rows rows by 64 columns, each landing as one SW128 panel.
inline cudaError_t make_matrix_map(CUtensorMap* map, const __nv_bfloat16* base, long long rows, long long cols, int box_rows) {
  const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
  const cuuint64_t strides[1] = {(cuuint64_t)cols * sizeof(__nv_bfloat16)};
  const cuuint32_t box[2] = {64, (cuuint32_t)box_rows};
  return make_swizzled_map(map, base, 2, dims, strides, box);
}

// Host: a tensor map of `count` row-major [rows][cols] bf16 matrices one after another, boxes of
// box_rows rows by 64 columns of one matrix.
inline cudaError_t make_batched_map(CUtensorMap* map, const bf16* base, int count, long long rows, long long cols, int box_rows) {
  const cuuint64_t dims[3] = {(cuuint64_t)cols, (cuuint64_t)rows, (cuuint64_t)count};
  const cuuint64_t strides[2] = {(cuuint64_t)cols * sizeof(bf16), (cuuint64_t)(rows * cols) * sizeof(bf16)};
  const cuuint32_t box[3] = {64, (cuuint32_t)box_rows, 1};
  return make_swizzled_map(map, base, 3, dims, strides, box);
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

// The 64-column panel of rows [row0, row0 + box_rows) starting at column col0 of a
// make_matrix_map matrix, into smem (1024-byte aligned), completing on bar.
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

// bytes (a multiple of 16) from global src into shared dst (both 16-byte aligned), completing on bar.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
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

}  // namespace hopper
