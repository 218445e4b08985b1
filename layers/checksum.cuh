// Order-independent 64-bit checksum of a buffer, to compare replicas across data-parallel ranks:
//   checksum(w) = sum over 32-bit words i of mix64(w[i] | i << 32)   (mod 2^64)
// mix64 is splitmix64's finaliser. Integer addition is associative, so the result does not
// depend on how threads split the sum; any change of one bit changes it (with overwhelming
// probability). Input: any buffer whose size is a multiple of 4 bytes. checksum_cpu is the
// reference the tests compare against.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace layers {

__host__ __device__ inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

__global__ void checksum_kernel(const uint32_t* __restrict__ w, size_t n, unsigned long long* out) {
  uint64_t acc = 0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    acc += mix64((uint64_t)w[i] | ((uint64_t)i << 32));
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, (unsigned long long)acc);
}

// *out (device) = checksum of bytes bytes at p (device); bytes % 4 == 0.
inline cudaError_t checksum(const void* p, size_t bytes, unsigned long long* out, cudaStream_t stream = 0) {
  cudaError_t e = cudaMemsetAsync(out, 0, sizeof(*out), stream);
  if (e != cudaSuccess) return e;
  checksum_kernel<<<264, 256, 0, stream>>>((const uint32_t*)p, bytes / 4, out);
  return cudaGetLastError();
}

inline uint64_t checksum_cpu(const void* p, size_t bytes) {
  const uint32_t* w = (const uint32_t*)p;
  uint64_t acc = 0;
  for (size_t i = 0; i < bytes / 4; i++) acc += mix64((uint64_t)w[i] | ((uint64_t)i << 32));
  return acc;
}

}  // namespace layers
