// sm80 building blocks for the attention tile loops: tile loads into XOR-swizzled shared memory,
// ldmatrix fragment loads, and the m16n8k16 bf16 tensor-core MMA (the primitives shared with the
// sm90 kernels are in common/tensor_core.cuh).
//
// Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4):
//   A 16x16: a0 (row g, cols 2t..2t+1), a1 (row g+8, same), a2 (row g, cols 2t+8..), a3 (row g+8, ..)
//   B 16x8 : b0 (k rows 2t..2t+1, col g), b1 (k rows 2t+8.., col g)
//   C 16x8 : c0,c1 (row g, cols 2t, 2t+1), c2,c3 (row g+8, same cols)
// Two C tiles side by side (cols 0..15) repack into one A fragment: this is how P (and dS)
// go from the score MMA into the next MMA without touching shared memory.
//
// Shared tiles hold ROWS x D bf16, row-major, with the 16-byte chunk c of row r stored at chunk
// c ^ (r % 8): the 8 rows one ldmatrix reads then fall in 8 different bank groups.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "attention/primitives.cuh"

namespace attn {
namespace sm80 {

typedef __nv_bfloat16 bf16;


// Element offset of (row, chunk of 8 elements) in a swizzled tile with D columns.
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

// Loads rows [row0, row0 + ROWS) of head h of a [T, H, D] tensor into a swizzled tile;
// rows past T are zero-filled.
template <int D, int ROWS, int THREADS>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* x, int row0, int T, int H, int h) {
  constexpr int kChunks = D / 8;
  const size_t ld = (size_t)H * D;
#pragma unroll
  for (int idx = threadIdx.x; idx < ROWS * kChunks; idx += THREADS) {
    int r = idx / kChunks, c = idx % kChunks;
    int row = row0 + r;
    bool valid = row < T;
    const bf16* src = x + (valid ? (size_t)row * ld : 0) + (size_t)h * D + c * 8;
    cp_async16(smem_addr(tile + swz<D>(r, c)), src, valid);
  }
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// A fragment (rows r0..r0+15, k chunks 2kk, 2kk+1) of a row-major [row][k] tile. The same
// addresses with .trans give the B fragments of a [k][n] tile: two n8 blocks (n chunks 2kk,
// 2kk+1) of k rows r0..r0+15, as {b0, b1} of the first block then {b0, b1} of the second.
template <int D>
__device__ __forceinline__ uint32_t addr_a(const bf16* tile, int r0, int kk, int lane) {
  return smem_addr(tile + swz<D>(r0 + (lane & 15), 2 * kk + (lane >> 4)));
}
// B fragments of a [n][k] tile (n rows n0..n0+15, k chunks 2kk, 2kk+1) for two n8 blocks:
// {b0, b1} of rows n0..n0+7, then {b0, b1} of rows n0+8..n0+15.
template <int D>
__device__ __forceinline__ uint32_t addr_b(const bf16* tile, int n0, int kk, int lane) {
  return smem_addr(tile + swz<D>(n0 + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1)));
}

__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Acc[16 x 8*NB] += A[16 x 16*KK] (fragments in registers) * B^T where B is a [n][k] smem tile.
template <int D, int NB, int KK>
__device__ __forceinline__ void mma_a_reg_bt(float (&acc)[NB][4], const uint32_t (&a)[KK][4], const bf16* b, int lane) {
#pragma unroll
  for (int kk = 0; kk < KK; kk++)
#pragma unroll
    for (int p = 0; p < NB / 2; p++) {
      uint32_t r[4];
      ldsm_x4(r, addr_b<D>(b, p * 16, kk, lane));
      mma(acc[2 * p], a[kk], r[0], r[1]);
      mma(acc[2 * p + 1], a[kk], r[2], r[3]);
    }
}

// Acc[16 x D] += P[16 x 16*KB] (C-layout scores in registers) * B where B is a [k][n] smem tile
// of KB*16 rows and D columns.
template <int D, int KB>
__device__ __forceinline__ void mma_c_reg_b(float (&acc)[D / 8][4], const float (&pc)[2 * KB][4], const bf16* b, int lane) {
#pragma unroll
  for (int j = 0; j < KB; j++) {
    uint32_t a[4];
    c_to_a(a, pc[2 * j], pc[2 * j + 1]);
#pragma unroll
    for (int p = 0; p < D / 16; p++) {
      uint32_t r[4];
      ldsm_x4_trans(r, addr_a<D>(b, j * 16, p, lane));
      mma(acc[2 * p], a, r[0], r[1]);
      mma(acc[2 * p + 1], a, r[2], r[3]);
    }
  }
}

}  // namespace sm80
}  // namespace attn
