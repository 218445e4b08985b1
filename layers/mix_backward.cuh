// The backward of a two-input mix out = c[0] a + c[1] b (the block's lambda mix with
// (a, b) = (x_in, x0), the value mix with (v_lin, ve)), in one pass over the tensors:
//   gc[0] += sum_i g[i] a[i],  gc[1] += sum_i g[i] b[i]        (the scalars' gradients, fp32)
//   gb = c[1] g (written), or gb += c[1] g (accumulate)        (b's gradient; gb null: not written)
//   g = c[0] g (in place)                                      (a's gradient)
// mix_backward_gather takes b as rows of an embedding table gathered by token (the value
// embedding, never stored: b[t][:] = table[tok[t]][:], rows of C, C a multiple of 8).
// g, a, b, gb: bf16 [n], n a multiple of 8 and 16-byte aligned (the model's tensors); partial:
// 2 * kDotBlocks floats of scratch. Deterministic: the sums use dot()'s fixed per-block slices
// and ordered tree (layers/reduce.cuh), so they equal two separate dot() calls to the bit, and
// the element-wise outputs equal scale() and skip_add(): only the passes over memory are fewer
// (one read of g, a, b and a write of g and gb, against three reads of g and two of each output).
// skip_backward is the U-net skip's backward (x_in = x_prev + s[j] src, dx its gradient):
//   gs[j] += sum_i dx[i] src[i]
//   dsrc = 0 + s[j] dx (written)             when the source's gradient is gathered apart, or
//   dx = dx + (0 + s[j] dx), both rounded    when the source is x_prev itself (its gradient
//                                            joins the stream's in place)
// with dot()'s sum and the bits of skip_add into a zeroed dsrc (and of skip_add(dx, dsrc, 1)).
// The model runs it inside the lambda mix + norm backward (norm_mix.cuh SkipGrad); this pass is
// the unfused form that one is tested against.
// CPU reference: the test composes dot, scale and skip_add's references.
#pragma once
#include "layers/common.cuh"
#include "layers/reduce.cuh"

namespace layers {

template <bool GATHER>
__global__ void mix_backward_kernel(bf16* g, const bf16* __restrict__ a, const bf16* __restrict__ b, const int* __restrict__ tok, int C8,
                                    bf16* gb, bool accumulate, const float* __restrict__ c, size_t n8, float* __restrict__ partial) {
  __shared__ float s[256];
  const float c0 = c[0], c1 = c[1];
  float acc_a = 0.f, acc_b = 0.f;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
    const Pack8 x = load8(g + 8 * i), y = load8(a + 8 * i);
    const Pack8 z = load8(b + 8 * (GATHER ? (size_t)tok[i / C8] * C8 + i % C8 : i));
    const Pack8 prev = accumulate && gb ? load8(gb + 8 * i) : Pack8{};
    Pack8 og, ob;
#pragma unroll
    for (int k = 0; k < 8; k++) {
      acc_a += x.get(k) * y.get(k);
      acc_b += x.get(k) * z.get(k);
      ob.set(k, accumulate ? prev.get(k) + c1 * x.get(k) : c1 * x.get(k));
      og.set(k, c0 * x.get(k));
    }
    if (gb) store8(gb + 8 * i, ob);
    store8(g + 8 * i, og);
  }
  block_tree_sum<256>(acc_a, s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
  __syncthreads();
  block_tree_sum<256>(acc_b, s);
  if (threadIdx.x == 0) partial[kDotBlocks + blockIdx.x] = s[0];
}

__global__ void skip_backward_kernel(bf16* dx, const bf16* __restrict__ src, const float* __restrict__ s, int j, bf16* __restrict__ dsrc,
                                     size_t n8, float* __restrict__ partial) {
  __shared__ float sh[256];
  const float c = s[j];
  float acc = 0.f;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
    const Pack8 x = load8(dx + 8 * i), y = load8(src + 8 * i);
    Pack8 o;
#pragma unroll
    for (int k = 0; k < 8; k++) {
      acc += x.get(k) * y.get(k);
      o.set(k, 0.f + c * x.get(k));
    }
    if (dsrc) {
      store8(dsrc + 8 * i, o);
    } else {
      Pack8 sum;
#pragma unroll
      for (int k = 0; k < 8; k++) sum.set(k, x.get(k) + o.get(k));
      store8(dx + 8 * i, sum);
    }
  }
  block_tree_sum<256>(acc, sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

// dsrc == nullptr: the source is x_prev (see the top comment); gs: the skip weights' gradients
inline cudaError_t skip_backward(bf16* dx, const bf16* src, const float* s, int j, float* gs, bf16* dsrc, size_t n, float* partial,
                                 cudaStream_t st = 0) {
  if (n % 8 || ((uintptr_t)dx | (uintptr_t)src | (uintptr_t)dsrc) % 16) return cudaErrorInvalidValue;
  skip_backward_kernel<<<kDotBlocks, 256, 0, st>>>(dx, src, s, j, dsrc, n / 8, partial);
  dot_final_kernel<<<1, kDotBlocks, 0, st>>>(partial, gs + j, true);
  return cudaGetLastError();
}

inline cudaError_t mix_backward(bf16* g, const bf16* a, const bf16* b, bf16* gb, bool accumulate, const float* c, float* gc,
                                size_t n, float* partial, cudaStream_t st = 0) {
  if (n % 8 || ((uintptr_t)g | (uintptr_t)a | (uintptr_t)b | (uintptr_t)gb) % 16) return cudaErrorInvalidValue;
  mix_backward_kernel<false><<<kDotBlocks, 256, 0, st>>>(g, a, b, nullptr, 1, gb, accumulate, c, n / 8, partial);
  dot_final_kernel<<<1, kDotBlocks, 0, st>>>(partial, gc, true);
  dot_final_kernel<<<1, kDotBlocks, 0, st>>>(partial + kDotBlocks, gc + 1, true);
  return cudaGetLastError();
}
// tokens must lie in [0, rows of table) (the model checks them on the host)
inline cudaError_t mix_backward_gather(bf16* g, const bf16* a, const bf16* table, const int* tok, int T, int C, bf16* gb, bool accumulate,
                                       const float* c, float* gc, float* partial, cudaStream_t st = 0) {
  if (C % 8 || T < 0 || ((uintptr_t)g | (uintptr_t)a | (uintptr_t)table | (uintptr_t)gb) % 16) return cudaErrorInvalidValue;
  mix_backward_kernel<true><<<kDotBlocks, 256, 0, st>>>(g, a, table, tok, C / 8, gb, accumulate, c, (size_t)T * C / 8, partial);
  dot_final_kernel<<<1, kDotBlocks, 0, st>>>(partial, gc, true);
  dot_final_kernel<<<1, kDotBlocks, 0, st>>>(partial + kDotBlocks, gc + 1, true);
  return cudaGetLastError();
}

}  // namespace layers
