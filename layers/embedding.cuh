// Token and value embeddings (SPEC section 3):
//   forward:  out[t][:] = table[tokens[t]][:]                 table: bf16 [V][C]; out: bf16 [T][C]
//   backward: dtable[v][:] += sum over t with tokens[t] = v of dout[t][:]    dtable: fp32 [V][C]
// The backward is deterministic: the host groups the positions of each distinct token
// (TokenIndex, a counting sort of the batch, which the host holds anyway) and one block sums
// one token's rows in position order, then adds once to the fp32 gradient. No atomics.
#pragma once
#include <cuda_bf16.h>

#include <vector>

namespace layers {

struct TokenIndex {  // CSR: positions[offsets[i] .. offsets[i+1]) hold token unique[i]
  std::vector<int> unique, offsets, positions;
  TokenIndex(const int* tokens, int T, int V) {
    std::vector<int> count(V + 1, 0);
    for (int t = 0; t < T; t++) count[tokens[t] + 1]++;
    for (int v = 0; v < V; v++) count[v + 1] += count[v];
    positions.resize(T);
    std::vector<int> fill(count.begin(), count.end() - 1);
    for (int t = 0; t < T; t++) positions[fill[tokens[t]]++] = t;
    for (int v = 0; v < V; v++)
      if (count[v + 1] > count[v]) {
        unique.push_back(v);
        offsets.push_back(count[v]);
      }
    offsets.push_back(T);
  }
};

__global__ void embedding_forward_kernel(const __nv_bfloat16* __restrict__ table, const int* __restrict__ tokens,
                                         __nv_bfloat16* __restrict__ out, int T, int C) {
  const int t = blockIdx.x;
  const __nv_bfloat16* src = table + (size_t)tokens[t] * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) out[(size_t)t * C + c] = src[c];
}

__global__ void embedding_backward_kernel(const __nv_bfloat16* __restrict__ dout, const int* __restrict__ unique,
                                          const int* __restrict__ offsets, const int* __restrict__ positions,
                                          float* __restrict__ dtable, int C) {
  const int i = blockIdx.x, begin = offsets[i], end = offsets[i + 1];
  float* dst = dtable + (size_t)unique[i] * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0.f;
    for (int p = begin; p < end; p++) s += __bfloat162float(dout[(size_t)positions[p] * C + c]);
    dst[c] += s;
  }
}

inline cudaError_t embedding_forward(const __nv_bfloat16* table, const int* tokens, __nv_bfloat16* out, int T, int C,
                                     cudaStream_t stream = 0) {
  if (T == 0) return cudaSuccess;
  embedding_forward_kernel<<<T, 256, 0, stream>>>(table, tokens, out, T, C);
  return cudaGetLastError();
}

// unique, offsets, positions: device copies of a TokenIndex's arrays; n_unique = unique.size().
inline cudaError_t embedding_backward(const __nv_bfloat16* dout, const int* unique, const int* offsets, const int* positions,
                                      int n_unique, float* dtable, int C, cudaStream_t stream = 0) {
  if (n_unique == 0) return cudaSuccess;
  embedding_backward_kernel<<<n_unique, 256, 0, stream>>>(dout, unique, offsets, positions, dtable, C);
  return cudaGetLastError();
}

}  // namespace layers
