// Token and value embeddings (docs/model.md):
//   forward:  out[t][:] = table[tokens[t]][:]                 table: bf16 [V][C]; out: bf16 [T][C]
//   backward: dtable[v][:] += sum over t with tokens[t] = v of dout[t][:]    dtable: fp32 [V][C]
//             (embedding_backward_scaled: of bf16(a dout[t][:]), a scalar on the device: the
//             value embedding's gradient, a1 dv of the value mix, rounded as a tensor of it
//             would be, so that the mix's backward need not write it)
// C a multiple of 8 (16-byte rows of 8 bf16), at most 8192.
// The backward is deterministic and balanced: the host groups the positions of each distinct
// token and cuts them into chunks (layers/token_index.h, built once a micro-step with the
// batch, model/batch.h). One block sums one chunk's rows in position
// order (fp32); a token with one chunk adds that sum to its gradient row directly, a token with
// several (a frequent one: a space, "the") writes each chunk's sum to a slot, and a second
// kernel adds its slots in chunk order. No atomics, and no block walks thousands of rows alone.
#pragma once
#include <cuda_bf16.h>

#include <vector>

#include "layers/common.cuh"
#include "layers/token_index.h"

namespace layers {

// Device view of a packed TokenIndex, and the fp32 scratch for partial sums (slots() x C).
struct TokenIndexView {
  const int *unique = nullptr, *positions = nullptr, *chunk_start = nullptr, *chunk_token = nullptr, *chunk_slot = nullptr,
            *multi_token = nullptr, *multi_slot = nullptr;
  int n_chunks = 0, n_multi = 0;
  float* partial = nullptr;
  TokenIndexView() = default;
  TokenIndexView(const TokenIndex& ix, const int* packed_dev, float* partial_dev) : partial(partial_dev) {
    const int* p = packed_dev;
    unique = p, p += ix.unique.size();
    positions = p, p += ix.positions.size();
    chunk_start = p, p += ix.chunk_start.size();
    chunk_token = p, p += ix.chunk_token.size();
    chunk_slot = p, p += ix.chunk_slot.size();
    multi_token = p, p += ix.multi_token.size();
    multi_slot = p;
    n_chunks = (int)ix.chunk_token.size();
    n_multi = (int)ix.multi_token.size();
  }
};

// one block a token, one thread 8 columns
__global__ void embedding_forward_kernel(const bf16* __restrict__ table, const int* __restrict__ tokens, bf16* __restrict__ out,
                                         int C) {
  const int t = blockIdx.x;
  const bf16* src = table + (size_t)tokens[t] * C;
  for (int c = threadIdx.x * 8; c < C; c += blockDim.x * 8) store8(out + (size_t)t * C + c, load8(src + c));
}

// lo, hi += a chunk's 8 column sums (a gradient row's 8 floats, read by the caller)
__device__ __forceinline__ void add_chunk_sums(float4& lo, float4& hi, const float (&s)[8]) {
  lo.x += s[0], lo.y += s[1], lo.z += s[2], lo.w += s[3], hi.x += s[4], hi.y += s[5], hi.z += s[6], hi.w += s[7];
}

// A chunk's 8 column sums into its token's gradient row (added) or its partial-sum slot
// (written, for embedding_combine_kernel); dst 16-byte aligned.
__device__ __forceinline__ void put_chunk_sums(float* dst, const float (&s)[8], bool add) {
  float4* d4 = reinterpret_cast<float4*>(dst);
  float4 lo = d4[0], hi = d4[1];
  if (add) {
    add_chunk_sums(lo, hi, s);
  } else {
    lo = make_float4(s[0], s[1], s[2], s[3]), hi = make_float4(s[4], s[5], s[6], s[7]);
  }
  d4[0] = lo, d4[1] = hi;
}

// scale: null, or the scalar a of embedding_backward_scaled
__global__ void embedding_chunk_kernel(const bf16* __restrict__ dout, TokenIndexView ix, float* __restrict__ dtable, int C,
                                       const float* __restrict__ scale) {
  const int j = blockIdx.x, b = ix.chunk_start[j], e = ix.chunk_start[j + 1], slot = ix.chunk_slot[j];
  float* dst = slot < 0 ? dtable + (size_t)ix.unique[ix.chunk_token[j]] * C : ix.partial + (size_t)slot * C;
  const float a = scale != nullptr ? *scale : 1.f;
  auto term = [&](float x) { return scale != nullptr ? __bfloat162float(__float2bfloat16(a * x)) : x; };
  for (int c = threadIdx.x * 8; c < C; c += blockDim.x * 8) {
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int p = b; p < e; p++) {
      const Pack8 v = load8(dout + (size_t)ix.positions[p] * C + c);
#pragma unroll
      for (int k = 0; k < 8; k++) s[k] += term(v.get(k));
    }
    put_chunk_sums(dst + c, s, slot < 0);
  }
}

// The slots of multi-chunk token m summed in order into its gradient row (the block's threads
// striding over the C columns).
__device__ __forceinline__ void combine_token(const TokenIndexView& ix, float* __restrict__ dtable, int C, int m) {
  const int b = ix.multi_slot[m], e = ix.multi_slot[m + 1];
  float* dst = dtable + (size_t)ix.unique[ix.multi_token[m]] * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0.f;
    for (int k = b; k < e; k++) s += ix.partial[(size_t)k * C + c];
    dst[c] += s;
  }
}

__global__ void embedding_combine_kernel(TokenIndexView ix, float* __restrict__ dtable, int C) { combine_token(ix, dtable, C, blockIdx.x); }

inline cudaError_t embedding_forward(const bf16* table, const int* tokens, bf16* out, int T, int C, cudaStream_t stream = 0) {
  if (C % 8 || C > 8192) return cudaErrorInvalidValue;
  if (T == 0) return cudaSuccess;
  embedding_forward_kernel<<<T, std::min(C / 8, 256), 0, stream>>>(table, tokens, out, C);
  return cudaGetLastError();
}

// The rows summed are bf16(a dout[t]), a = *scale (device memory); scale null: dout[t] as it is.
inline cudaError_t embedding_backward_scaled(const bf16* dout, const float* scale, const TokenIndexView& ix, float* dtable, int C,
                                             cudaStream_t stream = 0) {
  if (C % 8 || C > 8192) return cudaErrorInvalidValue;
  if (ix.n_chunks == 0) return cudaSuccess;
  embedding_chunk_kernel<<<ix.n_chunks, std::min(C / 8, 256), 0, stream>>>(dout, ix, dtable, C, scale);
  if (ix.n_multi) embedding_combine_kernel<<<ix.n_multi, 256, 0, stream>>>(ix, dtable, C);
  return cudaGetLastError();
}
inline cudaError_t embedding_backward(const bf16* dout, const TokenIndexView& ix, float* dtable, int C, cudaStream_t stream = 0) {
  return embedding_backward_scaled(dout, nullptr, ix, dtable, C, stream);
}

}  // namespace layers
