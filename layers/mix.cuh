// The model's small elementwise mixes (docs/model.md), with their scalars read from device
// memory (they are trained parameters):
//   skip_add:   out = x + s[j] src, or x += s[j] src         (U-net skip; s = 1 at init)
//   value_embed_mix: v[t] = a[0] v_lin[t] + a[1] table[tok[t]]  (the value mix with its value
//               embedding gathered in the same pass; the bits of embedding_forward + the
//               unfused mix of tests/oracle_kernels.cuh;
//               rows of C, C a multiple of 8)
// (The block's lambda mix l[0] x + l[1] x0 is fused with its norm: norm_mix.cuh.)
// All bf16 [n] with fp32 math. When n is a multiple of 8 and the pointers 16-byte aligned (the
// model's case), a thread takes 8 elements with 16-byte loads; otherwise one element a thread.
#pragma once
#include "layers/common.cuh"

namespace layers {

__global__ void skip_add_kernel(bf16* out, const bf16* x, const bf16* src, const float* __restrict__ s, int j, size_t n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(__bfloat162float(x[i]) + s[j] * __bfloat162float(src[i]));
}

__global__ void skip_add8_kernel(bf16* out, const bf16* x, const bf16* src, const float* __restrict__ s, int j, size_t n8) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  const float c = s[j];
  const Pack8 u = load8(x + 8 * i), v = load8(src + 8 * i);
  Pack8 o;
#pragma unroll
  for (int k = 0; k < 8; k++) o.set(k, u.get(k) + c * v.get(k));
  store8(out + 8 * i, o);
}
inline bool vec8(size_t n, const void* a, const void* b, const void* c) {
  return n % 8 == 0 && ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
}
__global__ void value_embed_mix8_kernel(const bf16* __restrict__ v_lin, const bf16* __restrict__ table, const int* __restrict__ tok,
                                        bf16* __restrict__ out, const float* __restrict__ a, int C8, size_t n8) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  const size_t t = i / C8, c = i % C8;
  const float p = a[0], q = a[1];
  const Pack8 u = load8(v_lin + 8 * i), e = load8(table + ((size_t)tok[t] * C8 + c) * 8);
  Pack8 o;
#pragma unroll
  for (int k = 0; k < 8; k++) o.set(k, p * u.get(k) + q * e.get(k));
  store8(out + 8 * i, o);
}
// tokens must lie in [0, rows of table) (the model checks them on the host)
inline cudaError_t value_embed_mix(const bf16* v_lin, const bf16* table, const int* tok, bf16* out, const float* a, int T, int C,
                                   cudaStream_t st = 0) {
  if (C % 8 || T < 0 || ((uintptr_t)v_lin | (uintptr_t)table | (uintptr_t)out) % 16) return cudaErrorInvalidValue;
  const size_t n8 = (size_t)T * C / 8;
  if (n8) value_embed_mix8_kernel<<<(unsigned)((n8 + 255) / 256), 256, 0, st>>>(v_lin, table, tok, out, a, C / 8, n8);
  return cudaGetLastError();
}
// out may be x (in place) or another buffer; src may be x too
inline cudaError_t skip_add(bf16* out, const bf16* x, const bf16* src, const float* s, int j, size_t n, cudaStream_t st = 0) {
  if (n && vec8(n, x, src, out)) skip_add8_kernel<<<(unsigned)((n / 8 + 255) / 256), 256, 0, st>>>(out, x, src, s, j, n / 8);
  else if (n) skip_add_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(out, x, src, s, j, n);
  return cudaGetLastError();
}
inline cudaError_t skip_add(bf16* x, const bf16* src, const float* s, int j, size_t n, cudaStream_t st = 0) {
  return skip_add(x, x, src, s, j, n, st);
}

}  // namespace layers

namespace layers {

// x = s[j] * x (bf16), the backward of the lambda and value mixes
__global__ void scale_kernel(bf16* x, const float* __restrict__ s, int j, size_t n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __float2bfloat16(s[j] * __bfloat162float(x[i]));
}
__global__ void scale8_kernel(bf16* x, const float* __restrict__ s, int j, size_t n8) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  const float c = s[j];
  const Pack8 u = load8(x + 8 * i);
  Pack8 o;
#pragma unroll
  for (int k = 0; k < 8; k++) o.set(k, c * u.get(k));
  store8(x + 8 * i, o);
}
inline cudaError_t scale(bf16* x, const float* s, int j, size_t n, cudaStream_t st = 0) {
  if (n && vec8(n, x, x, x)) scale8_kernel<<<(unsigned)((n / 8 + 255) / 256), 256, 0, st>>>(x, s, j, n / 8);
  else if (n) scale_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(x, s, j, n);
  return cudaGetLastError();
}

}  // namespace layers
