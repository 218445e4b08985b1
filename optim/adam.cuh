// Adam with bias correction (docs/model.md, optimisation) on fp32 master weights, refreshing their bf16 copy:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps);  p_bf16 = bf16(p)
//   p, g, m, v: fp32 [n];  p_bf16: bf16 [n] or null;  t = the number of Adam steps taken, from 1.
// CPU reference: model/optimizer_reference.h (optimizer_step, its Adam groups).
#pragma once
#include <cuda_bf16.h>

#include <cmath>

namespace optim {

__global__ void adam_kernel(float* __restrict__ p, __nv_bfloat16* __restrict__ p_bf16, const float* __restrict__ g,
                            float* __restrict__ m, float* __restrict__ v, size_t n, float lr, float b1, float b2, float bc1,
                            float bc2, float eps) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float gi = g[i];
  const float mi = b1 * m[i] + (1.f - b1) * gi, vi = b2 * v[i] + (1.f - b2) * gi * gi;
  m[i] = mi;
  v[i] = vi;
  const float pi = p[i] - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
  p[i] = pi;
  if (p_bf16) p_bf16[i] = __float2bfloat16(pi);
}

inline cudaError_t adam_step(float* p, __nv_bfloat16* p_bf16, const float* g, float* m, float* v, size_t n, float lr, int t,
                             float b1 = 0.8f, float b2 = 0.95f, float eps = 1e-8f, cudaStream_t stream = 0) {
  if (t < 1) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const float bc1 = (float)(1.0 - std::pow((double)b1, t)), bc2 = (float)(1.0 - std::pow((double)b2, t));
  adam_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(p, p_bf16, g, m, v, n, lr, b1, b2, bc1, bc2, eps);
  return cudaGetLastError();
}

}  // namespace optim
