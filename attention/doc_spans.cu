// The document span of every position, for the kernels' block starts (own_intervals.cuh):
//
//   spans[p] = {first, last}: the first and last position of p's document, p in [0, T)
//   doc_ids: int32 [T], nondecreasing (mask.h's document term); spans: DocSpan [T]
//
// Without it, each block of every attention kernel finds the documents at its two ends by a
// search over doc_ids: dependent loads, microseconds at the start of every block, which on masks
// with short walks (the speedrun's) is a fifth of the forward. With it, a block reads its rows'
// spans directly: one round of independent loads. A model computes the spans once per sequence
// and every layer's forward and backward reuse them (MaskDesc::doc_spans).
// One thread a position: two binary searches in doc_ids (mask.h doc_first / doc_last, the code
// the CPU side uses too), 2 log2(T) loads from L2. CPU reference: tests/test_attention_gpu.cu
// (a linear scan).
#include "attention/attention.h"
#include "attention/mask.h"

namespace attn {

__global__ void doc_spans_kernel(const int32_t* __restrict__ doc, DocSpan* __restrict__ spans, int T) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= T) return;
  const int id = doc[p];
  spans[p] = DocSpan{doc_first(doc, T, id), doc_last(doc, T, id)};
}

cudaError_t doc_spans(const int32_t* doc_ids, DocSpan* spans, int T, cudaStream_t stream) {
  if (T < 1 || !doc_ids || !spans) return cudaErrorInvalidValue;
  doc_spans_kernel<<<(T + 255) / 256, 256, 0, stream>>>(doc_ids, spans, T);
  return cudaGetLastError();
}

}  // namespace attn
