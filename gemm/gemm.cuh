// The model's products that run the trainer's own Hopper GEMM (sm90: TMA loads, wgmma), each with
// its fused epilogue, and whether this device runs them:
//   mlp_up_relu2       r  = max(h Wfc, 0)^2                       (gemm/epilogue_relu2.cuh)
//   mlp_down_dx_relu2  du = 2 sqrt(r) (dx Wproj^T)                (gemm/epilogue_relu2.cuh)
//   qkv_norm_rotary    q, k, v = h Wq, h Wk, h Wv, q and k normed
//                      per head and rotated                       (gemm/epilogue_qk_norm_rotary.cuh)
//   head_ce_forward    the lm head's product with the softcapped
//                      cross-entropy's first pass                 (gemm/epilogue_softcap_ce.cuh)
// The kernels: gemm/gemm_sm90.cuh (epilogue after each tile) and gemm/gemm_deferred_sm90.cuh (the
// head's, under the next tile's slices). Elsewhere, and on other devices, the model runs
// cuBLASLt (layers/matmul.cuh) and the layers' own passes.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gemm/config.cuh"
#include "gemm/epilogue_qk_norm_rotary.cuh"
#include "gemm/epilogue_relu2.cuh"
#include "gemm/epilogue_softcap_ce.cuh"
#include "gemm/gemm_deferred_sm90.cuh"
#include "gemm/gemm_sm90.cuh"

namespace gemm {

// Whether this device runs these products (Hopper, and the binary holds their sm90a code).
inline bool available() {
  static int known = -1;
  if (known < 0) {
    int dev = 0, major = 0;
    cudaFuncAttributes a{}, b{};
    known = cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
            major == 9 && cudaFuncGetAttributes(&a, gemm_kernel<Relu2Forward>) == cudaSuccess && a.ptxVersion >= 90 &&
            cudaFuncGetAttributes(&b, gemm_deferred_kernel<SoftcapCE>) == cudaSuccess && b.ptxVersion >= 90;
    cudaGetLastError();  // a failed query leaves no error behind
  }
  return known == 1;
}

// r = max(h Wfc, 0)^2: h [M][K], Wfc [K][N], r [M][N]
inline cudaError_t mlp_up_relu2(const bf16* h, const bf16* Wfc, bf16* r, int M, int K, int N, cudaStream_t stream = 0) {
  return launch<Relu2Forward>(h, Wfc, nullptr, r, M, N, K, stream);
}
// du = 2 sqrt(r) (dx Wproj^T): dx [M][K], Wproj [N][K], r and du [M][N]
inline cudaError_t mlp_down_dx_relu2(const bf16* dx, const bf16* Wproj, const bf16* r, bf16* du, int M, int K, int N,
                                     cudaStream_t stream = 0) {
  if (!r) return cudaErrorInvalidValue;
  return launch<Relu2Backward>(dx, Wproj, r, du, M, N, K, stream);
}

// Whether qkv_norm_rotary takes this shape: the width a multiple of the tiles' 256 columns (a
// tile lies in one of q, k, v and holds whole heads) and of the K-slices' 64 rows (a slice lies
// in one of Wq, Wk, Wv), head dim 64 or 128.
inline bool qkv_norm_rotary_shape(int C, int D) { return C > 0 && C % BN == 0 && C % BK == 0 && (D == 64 || D == 128); }

// q, k, v = h Wq, h Wk, h Wv, with q and k then normed per head and rotated as
// layers::qk_norm_rotary_forward does (the angles as rotary_angles_fp16 lays them out): h [M][C];
// W: Wq, Wk, Wv one after another, each [C][C]; out: qn, kn, v one after another, each [M][C];
// rstd: q's [M][H], then k's. Hopper (available()) and qkv_norm_rotary_shape only.
inline cudaError_t qkv_norm_rotary(const bf16* h, const bf16* W, bf16* out, float* rstd, const uint32_t* angles, int M, int C, int D,
                                   float eps, cudaStream_t stream = 0) {
  if (!qkv_norm_rotary_shape(C, D) || !rstd || !angles || reinterpret_cast<uintptr_t>(angles) % 16) return cudaErrorInvalidValue;
  const QkvArgs qa{angles, rstd, eps, C};
  if (D == 128) return launch<QkNormRotary<128>>(h, W, nullptr, out, M, 3 * C, C, stream, qa);
  return launch<QkNormRotary<64>>(h, W, nullptr, out, M, 3 * C, C, stream, qa);
}

// The lm head's product and the softcapped cross-entropy's first pass (epilogue_softcap_ce.cuh):
// h [M][K], W [K][N], targets [M]; g [M][N] (may be where z would go); scratch: part
// [M][tiles_n(N)] then zt [M], fp32 (head_ce_scratch_floats).
inline size_t head_ce_scratch_floats(int M, int N) { return (size_t)M * (tiles_n(N) + 1); }
inline cudaError_t head_ce_forward(const bf16* h, const bf16* W, const int* targets, bf16* g, float* scratch, int M, int K, int N,
                                   cudaStream_t stream = 0) {
  const SoftcapCeArgs a{targets, scratch, scratch + (size_t)M * tiles_n(N)};
  return launch_deferred<SoftcapCE>(h, W, g, M, N, K, stream, a);
}

}  // namespace gemm
