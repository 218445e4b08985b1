// The owner's half of a reduce-scatter run as an all-to-all (train/data_parallel.cuh: the copy
// engines carry each rank's slice r to rank r, this kernel adds what arrived):
//   y[i] = (...((x[0][i] + x[1][i]) + x[2][i]) ...) + x[N-1][i]     for i < q, fp32
// x: N slices of q floats one after another (slice r from rank r); y: q floats, not overlapping x.
// The ranks' values are added in rank order, one fp32 addition at a time: the same inputs give
// the same bits on every run and every rank. Read 4 floats at a time when q and both pointers
// allow it. CPU reference: tests/layers/sum_slices.cu.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace layers {

__global__ void sum_slices_kernel(const float* __restrict__ x, float* __restrict__ y, size_t q, int n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < q; i += (size_t)gridDim.x * blockDim.x) {
    float s = x[i];
    for (int r = 1; r < n; r++) s += x[(size_t)r * q + i];
    y[i] = s;
  }
}
__global__ void sum_slices4_kernel(const float4* __restrict__ x, float4* __restrict__ y, size_t q4, int n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < q4; i += (size_t)gridDim.x * blockDim.x) {
    float4 s = x[i];
    for (int r = 1; r < n; r++) {
      const float4 v = x[(size_t)r * q4 + i];
      s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
    }
    y[i] = s;
  }
}

inline cudaError_t sum_slices(const float* x, int n, size_t q, float* y, cudaStream_t stream = 0) {
  if (n < 1) return cudaErrorInvalidValue;
  if (q == 0) return cudaSuccess;
  const bool vec = q % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0;
  const size_t work = vec ? q / 4 : q;
  const unsigned blocks = (unsigned)std::min<size_t>((work + 255) / 256, 2048);
  if (vec) sum_slices4_kernel<<<blocks, 256, 0, stream>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), q / 4, n);
  else sum_slices_kernel<<<blocks, 256, 0, stream>>>(x, y, q, n);
  return cudaGetLastError();
}

}  // namespace layers
