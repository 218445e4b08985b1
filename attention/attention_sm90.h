// Hopper (sm90a) kernels behind attention.h: same arguments, same results (within bf16
// rounding of a different accumulation order), chosen at run time on a device of compute
// capability 9.x. ATTN_KERNELS=sm80 in the environment keeps the sm80 kernels everywhere (to
// compare the two).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "attention/mask.h"

namespace attn {

typedef __nv_bfloat16 bf16;

// True when the current device runs the sm90 kernels (checked once per device).
bool use_sm90_kernels();

cudaError_t attention_forward_sm90(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, int T, int H,
                                   int D, const MaskDesc& mask, cudaStream_t stream);

// lse2: lse in log2 units (+inf for a row that kept nothing) and drow = rowsum(dO * O), both
// [H, T] fp32, from attention_backward's pre-pass.
cudaError_t attention_backward_sm90(const bf16* q, const bf16* k, const bf16* v, const bf16* dout, const float* lse2,
                                    bf16* dq, bf16* dk, bf16* dv, const float* drow, int T, int H, int D,
                                    const MaskDesc& mask, cudaStream_t stream);

}  // namespace attn
