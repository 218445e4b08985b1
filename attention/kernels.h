// The kernel families behind attention.h (internal: dispatch.cu is their only caller). Each
// family takes the same arguments and gives the same results within bf16 rounding of a
// different accumulation order:
//   sm80 (mma.sync, attention_fwd.cu, attention_bwd.cu): any GPU of compute capability 8.0 on;
//   sm90 (wgmma, attention_fwd_sm90.cu, attention_bwd_sm90.cu): Hopper, when the binary holds
//   sm90a code.
// The backward of both runs after the pre-pass (bwd_preprocess.cu) has filled drow and lse2.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "attention/attention.h"
#include "attention/mask.h"

namespace attn {

typedef __nv_bfloat16 bf16;

// True when this binary holds sm90a code for the kernels (not only PTX of an older architecture).
bool sm90_code_present();

cudaError_t attention_forward_sm80(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, int T, int H,
                                   int D, const MaskDesc& mask, int block_n, cudaStream_t stream);
cudaError_t attention_forward_sm90(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, int T, int H,
                                   int D, const MaskDesc& mask, cudaStream_t stream);

// The backward's workspace (attention.h backward_workspace_bytes), carved from one allocation:
// drow = rowsum(dO * O) and lse2 = lse in log2 units (+inf for a row that kept nothing), both
// [H, T] fp32, from attention_backward's pre-pass; and for the sm90 kernel's dQ
// (attention_bwd_sm90.cu): dq_ranges, the key blocks with a share in each query tile of 64
// [tiles]; dq_count, the shares added so far [H][tiles]; dq_acc, the fp32 sums [H][tiles][64][D].
struct BwdWorkspace {
  float* drow;
  float* lse2;
  int2* dq_ranges;
  unsigned* dq_count;
  float* dq_acc;

  static size_t up256(size_t n) { return (n + 255) / 256 * 256; }
  static size_t tiles(int T) { return ((size_t)T + 63) / 64; }
  static size_t bytes(int T, int H, int D) {
    return up256(2 * (size_t)T * H * sizeof(float)) + up256(tiles(T) * sizeof(int2)) +
           up256(tiles(T) * H * sizeof(unsigned)) + tiles(T) * 64 * H * D * sizeof(float);
  }
  static BwdWorkspace carve(void* ws, int T, int H, int D) {
    (void)D;
    char* p = static_cast<char*>(ws);
    BwdWorkspace w;
    w.drow = reinterpret_cast<float*>(p);
    w.lse2 = w.drow + (size_t)T * H;
    p += up256(2 * (size_t)T * H * sizeof(float));
    w.dq_ranges = reinterpret_cast<int2*>(p);
    p += up256(tiles(T) * sizeof(int2));
    w.dq_count = reinterpret_cast<unsigned*>(p);
    p += up256(tiles(T) * H * sizeof(unsigned));
    w.dq_acc = reinterpret_cast<float*>(p);
    return w;
  }
};

// drow = rowsum(dO * O) and lse2 = lse in log2 units, into the workspace (bwd_preprocess.cu);
// with dq_order (the mask's bounds, for the sm90 fused backward) also dq_ranges, and dq_count
// zeroed.
cudaError_t attention_bwd_preprocess(const bf16* o, const bf16* dout, const float* lse, const BwdWorkspace& ws, int T, int H,
                                     int D, const MaskBounds* dq_order, cudaStream_t stream);

// After the pre-pass (for the sm90 fused backward, one given dq_order). sm90: fused (dQ added in
// order by the dK/dV kernel) or two kernels.
// q_norm, k_norm: as attention.h's attention_backward (null: dq, dk are Q's and K's gradients).
cudaError_t attention_backward_sm80(const bf16* q, const bf16* k, const bf16* v, const bf16* dout, const float* lse, bf16* dq,
                                    bf16* dk, bf16* dv, const BwdWorkspace& ws, int T, int H, int D, const MaskDesc& mask,
                                    const NormRotary* q_norm, const NormRotary* k_norm, cudaStream_t stream);
// small: the two-kernel backward's blocks own 64 keys or queries (one warpgroup) instead of 128;
// head dim 64 only (at 128 such a block's tiles leave room for one an SM), ignored at 128.
cudaError_t attention_backward_sm90(const bf16* q, const bf16* k, const bf16* v, const bf16* dout, bf16* dq, bf16* dk,
                                    bf16* dv, const BwdWorkspace& ws, int T, int H, int D, const MaskDesc& mask, bool fused,
                                    bool small, const NormRotary* q_norm, const NormRotary* k_norm, cudaStream_t stream);

}  // namespace attn
