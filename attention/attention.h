// Fused masked attention on the GPU: public interface.
//
// forward : O = softmax(scale * Q K^T + mask) V per head, lse = log-sum-exp of each masked,
//           scaled score row (natural log; -inf for a row that keeps nothing, whose O is 0).
// backward: dQ, dK, dV from Q, K, V, O, dO and lse (probabilities recomputed from lse).
// Layouts: Q, K, V, O, dO, dQ, dK, dV are bf16 [T, H, D] (batch folded into T, documents
// separated by the document mask), lse is fp32 [H, T]. scale = 1/sqrt(D). D is 64 or 128.
// mask.doc_ids, when set, is a device pointer to T nondecreasing int32 ids; mask.doc_spans, when
// also set, holds each position's document span from doc_spans() below (the same results, faster
// block starts).
// The backward is deterministic: the same inputs give the same bits. The sm80 kernels compute
// dQ in a pass of its own; the sm90 kernel adds each key block's share of a query tile's dQ in a
// fixed order (attention_bwd_sm90.cu).
//
// Which kernels run is chosen in one place, dispatch.cu, from the device's compute capability
// and a KernelChoice that tools and tests may set (the library reads no environment):
//   compute capability 9.x and sm90a code in the binary: the wgmma kernels (attention_*_sm90.cu);
//   otherwise the mma.sync kernels (attention_fwd.cu, attention_bwd.cu), sm80 and newer.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "attention/mask.h"

namespace attn {

struct KernelChoice {
  enum class Family { kAuto, kSm80, kSm90 };
  enum class Sm90Backward { kAuto, kFused, kTwoKernels };
  Family family = Family::kAuto;                   // kAuto: sm90 on Hopper when the binary holds its code
  Sm90Backward sm90_backward = Sm90Backward::kAuto;  // kAuto: fused for D = 128, two kernels for D = 64
  int sm80_forward_block_n = 64;                   // the sm80 forward's key tile: 64 or 32
  // The sm90 two-kernel backward's blocks at head dim 64: 0 picks (tile_scheduler.cuh
  // bwd_small_tiles), 64 (one warpgroup, tiles of 64) or 128 (two warpgroups, tiles of 128) keys
  // (dK/dV) or queries (dQ) a block. Head dim 128 takes 128 over tiles of 64.
  int sm90_two_kernel_own = 0;
};
// For every call that follows (process-wide). kSm90 on a device that cannot run it makes the
// calls fail with cudaErrorNotSupported.
void set_kernel_choice(const KernelChoice& choice);
KernelChoice kernel_choice();
// Which kernels a call with head dim D runs on the current device, in words ("sm90 (wgmma),
// fused backward"), for tests and benchmarks to say what they measured.
const char* kernels_in_use(int D);

// spans[p] = (first, last position of p's document) for p < T, from T nondecreasing document
// ids (device pointers; doc_spans.cu). Give it to MaskDesc::doc_spans with the same doc_ids:
// every kernel's block then reads its documents' ends instead of searching for them (on the
// speedrun's mask a fifth of the forward's time). Compute once per sequence, reuse per layer.
cudaError_t doc_spans(const int32_t* doc_ids, DocSpan* spans, int T, cudaStream_t stream = 0);

// Bytes of device workspace attention_backward needs (per row rowsum(dO * O) and lse in log2
// units; the fp32 dQ sums, about 4 T H D bytes; a count per query tile of 64).
size_t backward_workspace_bytes(int T, int H, int D);

cudaError_t attention_forward(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                              __nv_bfloat16* o, float* lse, int T, int H, int D, const MaskDesc& mask,
                              cudaStream_t stream = 0);

// Q or K as a per-head RMS norm + rotary embedding of x made it (the model's q and k:
// norm_rotary_bwd.cuh writes out the math). Given to attention_backward, dq (dk) receives the
// gradient of x instead of Q's (K's), computed inside the backward where it can be, from Q (K)
// itself, its rows' rstd and the angles: dx = rstd R^T (dQ - Q (dQ . Q) / D), the gradient
// written with the norm's output instead of x, so x is never read (nor need it be kept):
// - q, on the sm90 fused path: in the last pass over dQ, from the fp32 sums before any bf16 dQ
//   exists (one write of dQ and one read of it fewer than a pass of its own);
// - k, on the sm90 paths: as each key block stores its dK, from the block's own tile of K;
// - elsewhere in place, after dq or dk is written.
struct NormRotary {
  const float* rstd;    // [T H]: 1 / sqrt(mean(x^2) + eps) of each row of the pre-norm x
  const float2* table;  // [T][D / 2]: (cos, sin) of the rotary angle t f_j (layers/rotary.cuh)
};

// q_norm, k_norm: null (dq, dk are Q's and K's gradients) or as above (x's).
cudaError_t attention_backward(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                               const __nv_bfloat16* o, const __nv_bfloat16* dout, const float* lse,
                               __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, void* workspace,
                               int T, int H, int D, const MaskDesc& mask, cudaStream_t stream = 0,
                               const NormRotary* q_norm = nullptr, const NormRotary* k_norm = nullptr);

}  // namespace attn
