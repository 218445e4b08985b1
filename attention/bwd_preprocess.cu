// The backward's pre-pass, shared by both kernel families:
//   Drow[h, i] = sum_d dO[i, h, d] * O[i, h, d]   (the rowsum in dS = P * (dP - Drow))
//   lse2[h, i] = lse[h, i] * log2(e)               (lse in log2 units, +inf for a row that kept nothing)
// O, dO: bf16 [T, H, D]; lse, Drow, lse2: fp32 [H, T]. One warp per (i, h).
#include "attention/kernels.h"
#include "attention/softmax.cuh"

namespace attn {

// Drow[h, i] = sum_d dO[i, h, d] * O[i, h, d], lse2[h, i] = lse_log2(lse[h, i]); one warp per (i, h).
template <int D>
__global__ void attention_bwd_drow_kernel(const bf16* __restrict__ O, const bf16* __restrict__ dO, const float* __restrict__ LSE,
                                          float* __restrict__ drow, float* __restrict__ lse2, int T, int H) {
  const int w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (w >= T * H) return;
  const int i = w / H, h = w % H;
  const size_t off = (size_t)i * H * D + (size_t)h * D;
  float s = 0.f;
  for (int d = 2 * lane; d < D; d += 64) {
    float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(O + off + d));
    float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(dO + off + d));
    s += a.x * b.x + a.y * b.y;
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
  if (lane == 0) {
    drow[(size_t)h * T + i] = s;
    lse2[(size_t)h * T + i] = lse_log2(LSE[(size_t)h * T + i]);
  }
}

cudaError_t attention_bwd_preprocess(const bf16* o, const bf16* dout, const float* lse, const BwdWorkspace& ws, int T, int H,
                                     int D, cudaStream_t stream) {
  const int warps = 8, blocks = (int)(((size_t)T * H + warps - 1) / warps);
  if (D == 64) attention_bwd_drow_kernel<64><<<blocks, warps * 32, 0, stream>>>(o, dout, lse, ws.drow, ws.lse2, T, H);
  else if (D == 128) attention_bwd_drow_kernel<128><<<blocks, warps * 32, 0, stream>>>(o, dout, lse, ws.drow, ws.lse2, T, H);
  else return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace attn
