// Deterministic sums over a tensor: out = sum_i a[i] b[i] in fp32, or out += that. Fixed
// per-block slices (kDotBlocks blocks; bf16 inputs of a length divisible by 8 are read 8 at a
// time), then one block adds the partial sums in order: the same inputs give the same bits
// every run. Used for the gradients of the model's scalars (dot of two bf16 tensors)
// and for Muon's Frobenius norm (dot of an fp32 tensor with itself).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "layers/common.cuh"

namespace layers {

constexpr int kDotBlocks = 1024;  // partial: kDotBlocks floats of scratch (enough loads in flight to reach HBM speed)

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// s[0] = the sum of v over the block's N threads (N a power of two), by a fixed pairwise tree:
// the same order every run.
template <int N>
__device__ __forceinline__ void block_tree_sum(float v, float* s) {
  s[threadIdx.x] = v;
  __syncthreads();
  for (int o = N / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o];
    __syncthreads();
  }
}

template <typename T>
__global__ void dot_partial_kernel(const T* __restrict__ a, const T* __restrict__ b, size_t n, float* __restrict__ partial) {
  __shared__ float s[256];
  float acc = 0.f;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    acc += to_float(a[i]) * to_float(b[i]);
  block_tree_sum<256>(acc, s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

// bf16 with n8 = n / 8 groups of 8, 16-byte loads
__global__ void dot_partial8_kernel(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, size_t n8,
                                    float* __restrict__ partial) {
  __shared__ float s[256];
  float acc = 0.f;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
    const Pack8 x = load8(a + 8 * i), y = load8(b + 8 * i);
#pragma unroll
    for (int k = 0; k < 8; k++) acc += x.get(k) * y.get(k);
  }
  block_tree_sum<256>(acc, s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

__global__ void dot_final_kernel(const float* __restrict__ partial, float* __restrict__ out, bool accumulate) {
  __shared__ float s[kDotBlocks];
  block_tree_sum<kDotBlocks>(partial[threadIdx.x], s);
  if (threadIdx.x == 0) out[0] = (accumulate ? out[0] : 0.f) + s[0];
}

// Up to three sums finished in one launch (one block each, gridDim.x of them): block i adds the
// kDotBlocks partial sums at partial + i kDotBlocks into *out[i], as dot_final_kernel does with
// accumulate (the same bits). It spares a kernel boundary a sum after the first.
struct DotOuts {
  float* p[3];
};
__global__ void dot_final_many_kernel(const float* __restrict__ partial, DotOuts out) {
  __shared__ float s[kDotBlocks];
  block_tree_sum<kDotBlocks>(partial[(size_t)blockIdx.x * kDotBlocks + threadIdx.x], s);
  if (threadIdx.x == 0) out.p[blockIdx.x][0] += s[0];
}

template <typename T>
inline cudaError_t dot(const T* a, const T* b, size_t n, float* out, float* partial, bool accumulate, cudaStream_t st = 0) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    if (n % 8 == 0 && ((uintptr_t)a | (uintptr_t)b) % 16 == 0) {
      dot_partial8_kernel<<<kDotBlocks, 256, 0, st>>>(a, b, n / 8, partial);
      dot_final_kernel<<<1, kDotBlocks, 0, st>>>(partial, out, accumulate);
      return cudaGetLastError();
    }
  }
  dot_partial_kernel<T><<<kDotBlocks, 256, 0, st>>>(a, b, n, partial);
  dot_final_kernel<<<1, kDotBlocks, 0, st>>>(partial, out, accumulate);
  return cudaGetLastError();
}

}  // namespace layers
