// Forward of fused masked attention (sm80 mma.sync; runs on Ampere and Hopper).
//
//   S = scale * Q K^T (+ mask: -inf where not kept),  O = softmax(S) V,  lse = logsumexp(S)
//   Q, K, V, O: bf16 [T, H, D];  lse: fp32 [H, T];  D in {64, 128}.
//
// One block of 4 warps takes 64 queries of one head (16 rows a warp, Q fragments held in
// registers) and walks the key tiles of 64 that the mask lets them see (mask.h: key_range
// bounds the walk, classify_tile skips empty tiles and spares full ones the per-element test).
// K and V tiles are double-buffered with cp.async. Softmax is online in the log2 domain.
// Query tiles run longest first (the last tiles see the most keys under a causal mask).
#include <cmath>

#include "attention/attention.h"
#include "attention/mma.cuh"
#include "attention/softmax.cuh"

namespace attn {
using namespace sm80;

constexpr int kFwdBlockM = 64, kFwdBlockN = 64, kFwdThreads = 128;

template <int D>
__global__ void __launch_bounds__(kFwdThreads) attention_fwd_kernel(const bf16* __restrict__ Q, const bf16* __restrict__ K,
                                                                    const bf16* __restrict__ V, bf16* __restrict__ O,
                                                                    float* __restrict__ LSE, int T, int H, MaskBounds mb,
                                                                    float scale_log2) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sK = sQ + kFwdBlockM * D;      // 2 buffers
  bf16* sV = sK + 2 * kFwdBlockN * D;  // 2 buffers
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_qt = (T + kFwdBlockM - 1) / kFwdBlockM;
  const int q0 = (n_qt - 1 - blockIdx.x) * kFwdBlockM, h = blockIdx.y;

  int k_lo, k_hi;
  key_range(mb, q0, q0 + kFwdBlockM, k_lo, k_hi);
  const int kt_end = k_hi >= k_lo ? k_hi / kFwdBlockN + 1 : 0;
  auto next_tile = [&](int kt) {
    while (kt < kt_end && classify_tile(mb, q0, q0 + kFwdBlockM, kt * kFwdBlockN, (kt + 1) * kFwdBlockN) == kSkip) kt++;
    return kt;
  };
  int kt = next_tile(k_lo / kFwdBlockN);

  load_tile<D, kFwdBlockM, kFwdThreads>(sQ, Q, q0, T, H, h);
  cp_async_commit();
  if (kt < kt_end) {
    load_tile<D, kFwdBlockN, kFwdThreads>(sK, K, kt * kFwdBlockN, T, H, h);
    load_tile<D, kFwdBlockN, kFwdThreads>(sV, V, kt * kFwdBlockN, T, H, h);
  }
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) ldsm_x4(qf[kk], addr_a<D>(sQ, warp * 16, kk, lane));

  float acc[D / 8][4] = {};
  OnlineSoftmax sm;
  const int row0 = q0 + warp * 16 + (lane >> 2);  // this thread's rows: row0 and row0 + 8
  int buf = 0;
  while (kt < kt_end) {
    const int kt_next = next_tile(kt + 1);
    if (kt_next < kt_end) {
      load_tile<D, kFwdBlockN, kFwdThreads>(sK + (buf ^ 1) * kFwdBlockN * D, K, kt_next * kFwdBlockN, T, H, h);
      load_tile<D, kFwdBlockN, kFwdThreads>(sV + (buf ^ 1) * kFwdBlockN * D, V, kt_next * kFwdBlockN, T, H, h);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    float s[kFwdBlockN / 8][4] = {};
    mma_a_reg_bt<D, kFwdBlockN / 8, D / 16>(s, qf, sK + buf * kFwdBlockN * D, lane);
    const int k0 = kt * kFwdBlockN;
    const bool partial = classify_tile(mb, q0, q0 + kFwdBlockM, k0, k0 + kFwdBlockN) != kFull;
    scale_and_mask(s, scale_log2, partial, mb, row0, k0 + 2 * (lane & 3));
    sm.update(s, acc);
    mma_c_reg_b<D, kFwdBlockN / 16>(acc, s, sV + buf * kFwdBlockN * D, lane);
    __syncthreads();  // the next iteration's loads overwrite the buffer just read
    buf ^= 1;
    kt = kt_next;
  }
  cp_async_wait<0>();

  // epilogue: O = acc / l, lse = (m + log2 l) * ln 2
  float inv[2], lse[2];
  sm.finish(inv, lse);
  const size_t ld = (size_t)H * D;
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int row = row0 + 8 * r;
    if (row >= T) continue;
    bf16* orow = O + (size_t)row * ld + (size_t)h * D + 2 * (lane & 3);
#pragma unroll
    for (int nb = 0; nb < D / 8; nb++)
      *reinterpret_cast<__nv_bfloat162*>(orow + nb * 8) = __floats2bfloat162_rn(acc[nb][2 * r] * inv[r], acc[nb][2 * r + 1] * inv[r]);
    if ((lane & 3) == 0) LSE[(size_t)h * T + row] = lse[r];
  }
}

template <int D>
static cudaError_t launch_fwd(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, int T, int H,
                              const MaskDesc& mask, cudaStream_t stream) {
  const size_t smem = (size_t)(kFwdBlockM + 4 * kFwdBlockN) * D * sizeof(bf16);
  cudaError_t err = cudaFuncSetAttribute(attention_fwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (err != cudaSuccess) return err;
  dim3 grid((T + kFwdBlockM - 1) / kFwdBlockM, H);
  const float scale_log2 = (float)(M_LOG2E / std::sqrt((double)D));
  attention_fwd_kernel<D><<<grid, kFwdThreads, smem, stream>>>(q, k, v, o, lse, T, H, make_bounds(mask, T), scale_log2);
  return cudaGetLastError();
}

cudaError_t attention_forward(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, int T, int H, int D,
                              const MaskDesc& mask, cudaStream_t stream) {
  if (T < 1 || H < 1 || mask.window < 0) return cudaErrorInvalidValue;
  if (D == 64) return launch_fwd<64>(q, k, v, o, lse, T, H, mask, stream);
  if (D == 128) return launch_fwd<128>(q, k, v, o, lse, T, H, mask, stream);
  return cudaErrorInvalidValue;
}

}  // namespace attn
