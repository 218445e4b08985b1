// Element-wise helpers that the layer kernels and the GEMM's kernels share: 16-byte packs of 8
// bf16, warp sums.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace elementwise {

typedef __nv_bfloat16 bf16;

struct Pack8 {  // 8 bf16 in one 16-byte register group
  uint4 raw;
  __device__ __forceinline__ float get(int i) const {
    const bf16* e = reinterpret_cast<const bf16*>(&raw);
    return __bfloat162float(e[i]);
  }
  __device__ __forceinline__ void set(int i, float v) {
    bf16* e = reinterpret_cast<bf16*>(&raw);
    e[i] = __float2bfloat16(v);
  }
};
__device__ __forceinline__ Pack8 load8(const bf16* p) { return Pack8{*reinterpret_cast<const uint4*>(p)}; }
__device__ __forceinline__ void store8(bf16* p, const Pack8& v) { *reinterpret_cast<uint4*>(p) = v.raw; }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

}  // namespace elementwise
