// What every tensor-core kernel shares (the sm80 mma.sync loops, the sm90 wgmma ones, and the
// layers that stage rows through shared memory): shared-memory addresses, cp.async copies,
// packing fp32 pairs into bf16 pairs, and the repacking of two m16n8 accumulator tiles into one A
// fragment.
//
// Accumulator layout (mma.m16n8k16's C, which wgmma's accumulators share per 16 x 8 block;
// g = lane / 4, t = lane % 4): c0, c1 at (row g, cols 2t, 2t+1), c2, c3 at (row g+8, same cols).
// Two C tiles side by side (cols 0..15) repack into one A fragment of mma.m16n8k16
// (a0 row g cols 2t.., a1 row g+8, a2 row g cols 2t+8.., a3 row g+8): this is how P (and dS)
// go from the score MMA into the next MMA without touching shared memory.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace tc {

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// A fragment for k16 block j from C tiles 2j and 2j+1 (see the layout note above).
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}

}  // namespace tc
