// Unfused kernels that the model's fused ones are tested against, to the bit (tests/layers/).
// The model does not use them; they are the plain form of what a fused kernel must reproduce:
//   lambda_mix:     out = l[0] x + l[1] x0 (bf16 [n], fp32 math): norm_mix.cuh and value_embed_mix
//   relu2_backward: du = 2 max(u, 0) dr from u: relu2_backward_from_r (from r = max(u, 0)^2)
//   rotary:         the rotary embedding alone, in place (sign -1: the transpose): qk_norm_rotary.cuh
#pragma once
#include "layers/common.cuh"
#include "layers/rotary.cuh"

namespace oracle {

using layers::bf16;
using layers::Pack8;
using layers::load8;
using layers::store8;

__global__ void lambda_mix_kernel(const bf16* x, const bf16* __restrict__ x0, bf16* out, const float* __restrict__ l, size_t n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(l[0] * __bfloat162float(x[i]) + l[1] * __bfloat162float(x0[i]));
}
__global__ void lambda_mix8_kernel(const bf16* x, const bf16* __restrict__ x0, bf16* out, const float* __restrict__ l, size_t n8) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  const float a = l[0], b = l[1];
  const Pack8 u = load8(x + 8 * i), v = load8(x0 + 8 * i);
  Pack8 o;
#pragma unroll
  for (int k = 0; k < 8; k++) o.set(k, a * u.get(k) + b * v.get(k));
  store8(out + 8 * i, o);
}
inline bool vec8(size_t n, const void* a, const void* b, const void* c) {
  return n % 8 == 0 && ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
}
inline cudaError_t lambda_mix(const bf16* x, const bf16* x0, bf16* out, const float* l, size_t n, cudaStream_t st = 0) {
  if (n && vec8(n, x, x0, out)) lambda_mix8_kernel<<<(unsigned)((n / 8 + 255) / 256), 256, 0, st>>>(x, x0, out, l, n / 8);
  else if (n) lambda_mix_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(x, x0, out, l, n);
  return cudaGetLastError();
}

__global__ void relu2_backward_kernel(const bf16* __restrict__ u, const bf16* __restrict__ dr, bf16* __restrict__ du, size_t n8) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  Pack8 a = load8(u + 8 * i), g = load8(dr + 8 * i), o;
#pragma unroll
  for (int k = 0; k < 8; k++) o.set(k, 2.f * fmaxf(a.get(k), 0.f) * g.get(k));
  store8(du + 8 * i, o);
}

inline cudaError_t relu2_backward(const bf16* u, const bf16* dr, bf16* du, size_t n, cudaStream_t stream = 0) {
  if (n % 8) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  relu2_backward_kernel<<<(unsigned)((n / 8 + 255) / 256), 256, 0, stream>>>(u, dr, du, n / 8);
  return cudaGetLastError();
}


__global__ void rotary_kernel(bf16* __restrict__ x, const float2* __restrict__ table, int T, int H, int D, float sign) {
  const int half = D / 2;
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (size_t)T * H * half) return;
  const int j = (int)(idx % half);
  const size_t th = idx / half;  // t * H + h
  const int t = (int)(th / H);
  const float2 cs = table[(size_t)t * half + j];
  const float s = sign * cs.y;
  bf16* row = x + th * D;
  const float x1 = __bfloat162float(row[j]), x2 = __bfloat162float(row[half + j]);
  row[j] = __float2bfloat16(x1 * cs.x + x2 * s);
  row[half + j] = __float2bfloat16(-x1 * s + x2 * cs.x);
}

__global__ void rotary4_kernel(bf16* __restrict__ x, const float2* __restrict__ table, int T, int H, int D, float sign) {
  const int half = D / 2, q = half / 4;
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (size_t)T * H * q) return;
  const int j = (int)(idx % q) * 4;
  const size_t th = idx / q;  // t * H + h
  const int t = (int)(th / H);
  const float4* cs4 = reinterpret_cast<const float4*>(table + (size_t)t * half + j);
  const float4 c01 = cs4[0], c23 = cs4[1];
  const float c[4] = {c01.x, c01.z, c23.x, c23.z}, sn[4] = {sign * c01.y, sign * c01.w, sign * c23.y, sign * c23.w};
  bf16* row = x + th * D;
  uint2 a = *reinterpret_cast<const uint2*>(row + j), b = *reinterpret_cast<const uint2*>(row + half + j);
  bf16* ea = reinterpret_cast<bf16*>(&a);
  bf16* eb = reinterpret_cast<bf16*>(&b);
#pragma unroll
  for (int k = 0; k < 4; k++) {
    const float x1 = __bfloat162float(ea[k]), x2 = __bfloat162float(eb[k]);
    ea[k] = __float2bfloat16(x1 * c[k] + x2 * sn[k]);
    eb[k] = __float2bfloat16(-x1 * sn[k] + x2 * c[k]);
  }
  *reinterpret_cast<uint2*>(row + j) = a;
  *reinterpret_cast<uint2*>(row + half + j) = b;
}

inline cudaError_t rotary(bf16* x, const float2* table, int T, int H, int D, float sign, cudaStream_t stream = 0) {
  if (D % 2 || T < 0 || H < 0) return cudaErrorInvalidValue;
  const size_t n = (size_t)T * H * (D / 2);
  if (n == 0) return cudaSuccess;
  if ((D / 2) % 4 == 0 && (uintptr_t)x % 8 == 0 && (uintptr_t)table % 16 == 0)
    rotary4_kernel<<<(unsigned)((n / 4 + 255) / 256), 256, 0, stream>>>(x, table, T, H, D, sign);
  else
    rotary_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, table, T, H, D, sign);
  return cudaGetLastError();
}

}  // namespace oracle
