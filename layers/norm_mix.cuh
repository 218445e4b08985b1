// The block's lambda mix fused with the RMS norm that follows it (docs/model.md), rows of C:
//   forward:  x_mix = l[0] x_in + l[1] x0 (bf16);  h = x_mix * rstd,  rstd = 1 / sqrt(mean(x_mix^2) + eps)
//   backward: g = dx + rstd dh - rstd^3 x_mix (dh . x_mix) / C     (the norm's backward, added to
//             the gradient dx that reaches x_mix by the residual path; rounded to bf16)
//             gl[0] += sum g x_in,  gl[1] += sum g x0,  dx0 += l[1] g,  dx = l[0] g
//             (+ add, rounded after l[0] g, when add is given: a U-net skip source's gradient
//             joining the stream, with the bits of skip_add(dx, add, 1))
// With the U-net skip that makes x_in (SkipAdd, SkipGrad: x_in = x + s[j] src, layers/mix.cuh
// skip_add and skip_backward), its forward and backward run in the same passes: the forward
// reads x and src and writes x_in as well; the backward takes dx = d x_in on to
// gs[j] += sum dx src and dsrc = 0 + s[j] dx (or dx += 0 + s[j] dx where src is x itself, dsrc
// null), with the bits of skip_add and skip_backward and gs summed in this kernel's order.
// That saves reading x_in back in the forward and dx in the backward.
// x_in, x0, x_mix, h, dh, dx, dx0: bf16 [T][C], C a multiple of 8, 16-byte aligned; rstd fp32 [T].
// The backward recomputes x_mix from x_in and x0, which it reads for the sums anyway (mix8: the
// forward's arithmetic, so the same bits), rather than reading the forward's x_mix back.
// Each gives the bits of the unfused kernels it replaces (lambda_mix then rmsnorm_forward;
// rmsnorm_backward then mix_backward) except the two scalar sums, which are added in another
// fixed order (per row, then per block, then the blocks in order): deterministic as well.
// dx0 gathers l[1] g over the layers (Dx0): the first layer's backward writes it (0 + l[1] g,
// the bits of adding to a zeroed tensor, without reading one), the last adds it to its dx
// instead of writing it (dx + 1 * dx0, the bits of skip_add(dx, dx0, 1) after it), so neither
// a zeroing pass nor that addition's pass is needed.
// One warp per row, rows strided over a fixed grid of kDotBlocks blocks of 8 warps. The saving
// is one pass over a T x C tensor in the forward (x_mix is not read back) and three in the
// backward (g is not written and read back, x_mix not read).
#pragma once
#include <initializer_list>

#include "layers/common.cuh"
#include "layers/reduce.cuh"

namespace layers {

// x_mix's 8 values from x_in's and x0's (fp32 math, rounded to bf16 as stored)
__device__ __forceinline__ Pack8 mix8(const Pack8& u, const Pack8& v, float a, float b) {
  Pack8 o;
#pragma unroll
  for (int k = 0; k < 8; k++) o.set(k, a * u.get(k) + b * v.get(k));
  return o;
}

// How the backward treats dx0: kAdd: dx0 += l[1] g; kFirst: dx0 = 0 + l[1] g (dx0 not read);
// kFold: dx = dx + 1 * (dx0 + l[1] g) (dx0 read, not written).
enum class Dx0 { kAdd, kFirst, kFold };

// The U-net skip fused into the norm-mix passes (null src: none).
struct SkipAdd {  // forward: out = x + s[j] src is the x_in the mix reads
  const bf16* src = nullptr;
  const float* s = nullptr;
  int j = 0;
  bf16* out = nullptr;
};
struct SkipGrad {  // backward: gs[j] += sum dx src; dsrc = 0 + s[j] dx, or dx += that when dsrc is null
  const bf16* src = nullptr;
  const float* s = nullptr;
  int j = 0;
  float* gs = nullptr;
  bf16* dsrc = nullptr;
};

// x_in (or with skip.src, x_in = x_in + s[j] src, written to skip.out)
__global__ void mix_rmsnorm_forward_kernel(const bf16* __restrict__ x_in, const bf16* __restrict__ x0, const float* __restrict__ l,
                                           bf16* __restrict__ x_mix, bf16* __restrict__ h, float* __restrict__ rstd, int T, int C,
                                           float eps, SkipAdd skip) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (row >= T) return;
  const size_t base = (size_t)row * C;
  const float a = l[0], b = l[1], cs = skip.src ? skip.s[skip.j] : 0.f;
  float ss = 0.f;
  for (int i = lane * 8; i < C; i += 256) {  // rmsnorm_forward's order of additions
    Pack8 xi = load8(x_in + base + i);
    if (skip.src) {  // skip_add's arithmetic
      const Pack8 v = load8(skip.src + base + i);
#pragma unroll
      for (int k = 0; k < 8; k++) xi.set(k, xi.get(k) + cs * v.get(k));
      store8(skip.out + base + i, xi);
    }
    const Pack8 o = mix8(xi, load8(x0 + base + i), a, b);
#pragma unroll
    for (int k = 0; k < 8; k++) ss += o.get(k) * o.get(k);
    store8(x_mix + base + i, o);
  }
  const float r = rsqrtf(warp_sum(ss) / C + eps);
  for (int i = lane * 8; i < C; i += 256) {  // the lane's own x_mix, just written (L1)
    const Pack8 v = load8(x_mix + base + i);
    Pack8 o;
#pragma unroll
    for (int k = 0; k < 8; k++) o.set(k, v.get(k) * r);
    store8(h + base + i, o);
  }
  if (lane == 0) rstd[row] = r;
}

__global__ void rmsnorm_mix_backward_kernel(const float* __restrict__ rstd, const bf16* __restrict__ dh,
                                            bf16* __restrict__ dx, const bf16* __restrict__ x_in, const bf16* __restrict__ x0,
                                            bf16* __restrict__ dx0, const float* __restrict__ l, const bf16* __restrict__ add, int T, int C,
                                            float* __restrict__ partial, SkipGrad skip, Dx0 mode) {
  __shared__ float s[256];
  const int warps = blockDim.x / 32, lane = threadIdx.x & 31;
  const float l0 = l[0], l1 = l[1], cs = skip.src ? skip.s[skip.j] : 0.f;
  float acc_a = 0.f, acc_b = 0.f, acc_s = 0.f;
  for (int row = blockIdx.x * warps + threadIdx.x / 32; row < T; row += gridDim.x * warps) {
    const size_t base = (size_t)row * C;
    float dot = 0.f;
    for (int i = lane * 8; i < C; i += 256) {  // rmsnorm_backward's order
      const Pack8 a = mix8(load8(x_in + base + i), load8(x0 + base + i), l0, l1), g = load8(dh + base + i);
#pragma unroll
      for (int k = 0; k < 8; k++) dot += a.get(k) * g.get(k);
    }
    dot = warp_sum(dot);
    const float r = rstd[row], c = r * r * r * dot / C;
    for (int i = lane * 8; i < C; i += 256) {
      const Pack8 xi = load8(x_in + base + i), xz = load8(x0 + base + i), a = mix8(xi, xz, l0, l1);
      const Pack8 g = load8(dh + base + i), prev = load8(dx + base + i), p0 = mode == Dx0::kFirst ? Pack8{} : load8(dx0 + base + i);
      Pack8 gr, o, o0;
#pragma unroll
      for (int k = 0; k < 8; k++) gr.set(k, prev.get(k) + r * g.get(k) - c * a.get(k));  // g, rounded to bf16
#pragma unroll
      for (int k = 0; k < 8; k++) {
        const float gk = gr.get(k);
        acc_a += gk * xi.get(k);
        acc_b += gk * xz.get(k);
        o0.set(k, p0.get(k) + l1 * gk);
        o.set(k, l0 * gk);
      }
      if (add) {
        const Pack8 ad = load8(add + base + i);
#pragma unroll
        for (int k = 0; k < 8; k++) o.set(k, o.get(k) + ad.get(k));
      }
      if (skip.src) {  // skip_backward's arithmetic on dx = o
        const Pack8 sv = load8(skip.src + base + i);
        Pack8 t;
#pragma unroll
        for (int k = 0; k < 8; k++) {
          acc_s += o.get(k) * sv.get(k);
          t.set(k, 0.f + cs * o.get(k));
        }
        if (skip.dsrc) {
          store8(skip.dsrc + base + i, t);
        } else {
#pragma unroll
          for (int k = 0; k < 8; k++) o.set(k, o.get(k) + t.get(k));
        }
      }
      if (mode == Dx0::kFold) {  // skip_add(dx, dx0, 1)'s arithmetic
#pragma unroll
        for (int k = 0; k < 8; k++) o.set(k, o.get(k) + 1.f * o0.get(k));
      } else {
        store8(dx0 + base + i, o0);
      }
      store8(dx + base + i, o);
    }
  }
  block_tree_sum<256>(acc_a, s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
  __syncthreads();
  block_tree_sum<256>(acc_b, s);
  if (threadIdx.x == 0) partial[kDotBlocks + blockIdx.x] = s[0];
  if (skip.src) {
    __syncthreads();
    block_tree_sum<256>(acc_s, s);
    if (threadIdx.x == 0) partial[2 * kDotBlocks + blockIdx.x] = s[0];
  }
}

inline bool norm_mix_ok(int T, int C, std::initializer_list<const void*> ptrs) { return C % 8 == 0 && T >= 0 && aligned16(ptrs); }
// skip.src: x_in is x_in + s[j] src, written to skip.out (and read by nobody here again)
inline cudaError_t mix_rmsnorm_forward(const bf16* x_in, const bf16* x0, const float* l, bf16* x_mix, bf16* h, float* rstd, int T, int C,
                                       float eps, const SkipAdd& skip = {}, cudaStream_t st = 0) {
  if (!norm_mix_ok(T, C, {x_in, x0, x_mix, h, skip.src, skip.out}) || (skip.src && (!skip.s || !skip.out))) return cudaErrorInvalidValue;
  if (T) mix_rmsnorm_forward_kernel<<<(T + 7) / 8, 256, 0, st>>>(x_in, x0, l, x_mix, h, rstd, T, C, eps, skip);
  return cudaGetLastError();
}
// partial: 3 * kDotBlocks floats of scratch; gl: the two scalar gradients (added to); add: nullptr
// or a bf16 [T][C] added to dx; skip.src: the U-net skip's backward as well (SkipGrad); mode:
// how dx0 is taken (Dx0; kFold with neither add nor skip)
inline cudaError_t rmsnorm_mix_backward(const float* rstd, const bf16* dh, bf16* dx, const bf16* x_in, const bf16* x0, bf16* dx0,
                                        const float* l, float* gl, int T, int C, float* partial, const bf16* add = nullptr,
                                        const SkipGrad& skip = {}, Dx0 mode = Dx0::kAdd, cudaStream_t st = 0) {
  if (!norm_mix_ok(T, C, {dh, dx, x_in, x0, dx0, add, skip.src, skip.dsrc}) || (skip.src && (!skip.s || !skip.gs)) ||
      (mode == Dx0::kFold && (add || skip.src)))
    return cudaErrorInvalidValue;
  rmsnorm_mix_backward_kernel<<<kDotBlocks, 256, 0, st>>>(rstd, dh, dx, x_in, x0, dx0, l, add, T, C, partial, skip, mode);
  dot_final_many_kernel<<<skip.src ? 3 : 2, kDotBlocks, 0, st>>>(partial, DotOuts{{gl, gl + 1, skip.src ? skip.gs + skip.j : nullptr}});
  return cudaGetLastError();
}

}  // namespace layers
