// The backward of the model's value input v = c0 v_lin + c1 ve, ve[t] = table[tok[t]] (the value
// embedding, gathered, never stored), in one pass over dv grouped by token:
//   dtable[u] += sum_{t: tok[t] = u} bf16(c1 dv[t])     (the table's fp32 gradient, rows of C)
//   gc[0] += sum_t dv[t] . v_lin[t],  gc[1] += sum_t dv[t] . table[tok[t]]     (fp32)
//   dv[t] = bf16(c0 dv[t])                                 (in place: v_lin's gradient)
// dv, v_lin: bf16 [T][C]; table: bf16 [rows][C]; c: 2 floats (device); ix: the token index of tok
// (layers/token_index.h, as embedding.cuh's backward takes it); partial: 2 * TokenIndex::max_chunks
// floats of scratch. C a multiple of 8 up to 8192, pointers 16-byte aligned.
// It replaces embedding_backward_scaled(dv, c + 1) followed by mix_backward_gather(dv, v_lin,
// table, tok, ..., c, gc): one block a chunk of the index (up to TokenIndex::kChunk positions of
// one token) reads each dv row once instead of twice and the table row once for the chunk
// instead of once a position. The table's gradient and dv get the bits of those two kernels
// (the same per-chunk sums, the same products); gc's sums run in another fixed order (per chunk,
// then the chunks in index order), so they are deterministic but differ from mix_backward's in
// the last bits. CPU reference: the test's fp64 sums (tests/layers/value_embed_backward.cu).
#pragma once
#include "layers/common.cuh"
#include "layers/embedding.cuh"
#include "layers/reduce.cuh"

namespace layers {

constexpr int kVebThreads = 96;  // a block: 8 columns a thread, C = 768 in one pass

// One block a chunk: the chunk's table-gradient rows as embedding_chunk_kernel sums them, dv
// scaled in place, and the chunk's two dot products into partial[j], partial[n_chunks + j].
// The chain a block waits through is its index entries, then the table row, the gradient row
// and the first position's dv and v_lin, which are all loaded at once (the gradient row is read
// before the positions' loop, not after it), then the store. The launch bounds cap registers
// so that 12 blocks fit an SM, keeping more of those chains in flight; the positions' loop is
// not unrolled, so that the cap needs no spills.
__global__ void __launch_bounds__(kVebThreads, 12)
    value_embed_backward_chunk_kernel(bf16* __restrict__ dv, const bf16* __restrict__ v_lin, const bf16* __restrict__ table,
                                      TokenIndexView ix, float* __restrict__ dtable, int C, const float* __restrict__ c,
                                      float* __restrict__ partial) {
  __shared__ float red[2][kVebThreads / 32];
  const int j = blockIdx.x, b = ix.chunk_start[j], e = ix.chunk_start[j + 1], slot = ix.chunk_slot[j], u = ix.unique[ix.chunk_token[j]];
  float* dst = slot < 0 ? dtable + (size_t)u * C : ix.partial + (size_t)slot * C;  // added to / written
  const float c0 = c[0], c1 = c[1];
  float d0 = 0.f, d1 = 0.f;
  for (int col = threadIdx.x * 8; col < C; col += kVebThreads * 8) {
    const Pack8 w = load8(table + (size_t)u * C + col);
    float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
    if (slot < 0) lo = reinterpret_cast<const float4*>(dst + col)[0], hi = reinterpret_cast<const float4*>(dst + col)[1];
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll 1
    for (int p = b; p < e; p++) {
      const size_t row = (size_t)ix.positions[p] * C + col;
      const Pack8 x = load8(dv + row), y = load8(v_lin + row);
      Pack8 o;
#pragma unroll
      for (int k = 0; k < 8; k++) {
        s[k] += __bfloat162float(__float2bfloat16(c1 * x.get(k)));
        d0 += x.get(k) * y.get(k);
        d1 += x.get(k) * w.get(k);
        o.set(k, c0 * x.get(k));
      }
      store8(dv + row, o);
    }
    // put_chunk_sums' arithmetic: the row plus the sums, or (a slot) 0 + the sums, which is the
    // sums' bits (s is never -0: it starts at +0)
    add_chunk_sums(lo, hi, s);
    reinterpret_cast<float4*>(dst + col)[0] = lo, reinterpret_cast<float4*>(dst + col)[1] = hi;
  }
  // the block's dot products: each warp's by a fixed shuffle tree, then the warps in order
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    d0 += __shfl_xor_sync(0xffffffffu, d0, o);
    d1 += __shfl_xor_sync(0xffffffffu, d1, o);
  }
  if ((threadIdx.x & 31) == 0) red[0][threadIdx.x / 32] = d0, red[1][threadIdx.x / 32] = d1;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t0 = 0.f, t1 = 0.f;
    for (int w = 0; w < kVebThreads / 32; w++) t0 += red[0][w], t1 += red[1][w];
    partial[j] = t0;
    partial[gridDim.x + j] = t1;
  }
}

// The tail, one launch: blocks 0 and 1 add gc[i] += the sum of partial[i * n .. (i + 1) * n) in
// a fixed order; block 2 + m sums the slots of multi-chunk token m into its gradient row
// (combine_token, as embedding_combine_kernel).
__global__ void value_embed_backward_tail_kernel(const float* __restrict__ partial, int n, float* __restrict__ gc, TokenIndexView ix,
                                                 float* __restrict__ dtable, int C) {
  __shared__ float s[1024];
  if (blockIdx.x >= 2) {
    combine_token(ix, dtable, C, blockIdx.x - 2);
    return;
  }
  const float* p = partial + (size_t)blockIdx.x * n;
  float acc = 0.f;
  for (int i = threadIdx.x; i < n; i += 1024) acc += p[i];
  block_tree_sum<1024>(acc, s);
  if (threadIdx.x == 0) gc[blockIdx.x] += s[0];
}

inline cudaError_t value_embed_backward(bf16* dv, const bf16* v_lin, const bf16* table, const TokenIndexView& ix, float* dtable, int C,
                                        const float* c, float* gc, float* partial, cudaStream_t stream = 0) {
  if (C % 8 || C > 8192 || ((uintptr_t)dv | (uintptr_t)v_lin | (uintptr_t)table) % 16) return cudaErrorInvalidValue;
  if (ix.n_chunks == 0) return cudaSuccess;
  value_embed_backward_chunk_kernel<<<ix.n_chunks, kVebThreads, 0, stream>>>(dv, v_lin, table, ix, dtable, C, c, partial);
  value_embed_backward_tail_kernel<<<2 + ix.n_multi, 1024, 0, stream>>>(partial, ix.n_chunks, gc, ix, dtable, C);
  return cudaGetLastError();
}

}  // namespace layers
