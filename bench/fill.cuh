// Random benchmark inputs made on the GPU (the CPU's normal generator took about 15 s for the
// attention benchmark's 600M values): x[i] from a hash of (seed, i), the sum of four uniforms,
// centred and scaled to unit variance (close to normal; a benchmark's speed does not depend on
// the exact distribution, only on the values being neither zero nor constant).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace bench {

__global__ void fill_kernel(__nv_bfloat16* x, size_t n, unsigned seed) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float s = 0.f;
    for (unsigned r = 0; r < 4; r++) {
      unsigned h = (unsigned)i * 2654435761u ^ (unsigned)(i >> 32) * 40503u ^ (seed * 4 + r) * 2246822519u;
      h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
      s += h * (1.f / 4294967296.f);
    }
    x[i] = __float2bfloat16((s - 2.f) * 1.7320508f);  // the sum of 4 U(0, 1) has mean 2, variance 1/3
  }
}

inline cudaError_t fill_random(__nv_bfloat16* x, size_t n, unsigned seed) {
  fill_kernel<<<1024, 256>>>(x, n, seed);
  return cudaGetLastError();
}

}  // namespace bench
