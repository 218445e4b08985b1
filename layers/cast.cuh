// fp32 <-> bf16 copies of a flat buffer (the bf16 gradient exchange of train/data_parallel.cuh):
//   to_bf16: y[i] = bf16(x[i]) (round to nearest even);  to_fp32: y[i] = float(x[i]) (exact).
// x, y: n elements; may not overlap. CPU reference: tests/layers/cast.cu.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

namespace layers {

__global__ void cast_to_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) y[i] = __float2bfloat16(x[i]);
}
__global__ void cast_to_fp32_kernel(const __nv_bfloat16* __restrict__ x, float* __restrict__ y, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) y[i] = __bfloat162float(x[i]);
}

inline unsigned cast_blocks(size_t n) { return (unsigned)std::min<size_t>((n + 255) / 256, 65536); }

inline cudaError_t cast_to_bf16(const float* x, __nv_bfloat16* y, size_t n, cudaStream_t stream = 0) {
  if (n == 0) return cudaSuccess;
  cast_to_bf16_kernel<<<cast_blocks(n), 256, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}
inline cudaError_t cast_to_fp32(const __nv_bfloat16* x, float* y, size_t n, cudaStream_t stream = 0) {
  if (n == 0) return cudaSuccess;
  cast_to_fp32_kernel<<<cast_blocks(n), 256, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

}  // namespace layers
