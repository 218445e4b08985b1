// The public entry points of attention.h: argument checks, then the one place where a kernel
// family is chosen, from the device's compute capability and the KernelChoice (attention.h).
//   forward:  sm90 (wgmma) on Hopper when the binary holds its code, else sm80 (mma.sync)
//   backward: the pre-pass (bwd_preprocess.cu), then the same family; on sm90 the fused kernel
//             for D = 128 and two kernels for D = 64 (bench/RESULTS.md, Attention's backward at
//             head dim 64)
// A new architecture's kernels are one more family here and in kernels.h.
#include <cstdint>

#include "attention/attention.h"

#include "attention/kernels.h"
#include "attention/tile_scheduler.cuh"

namespace attn {

static KernelChoice g_choice;

void set_kernel_choice(const KernelChoice& choice) { g_choice = choice; }
KernelChoice kernel_choice() { return g_choice; }

size_t backward_workspace_bytes(int T, int H, int D) { return BwdWorkspace::bytes(T, H, D); }

// Whether the current device can run the sm90 kernels (checked once per device).
static bool sm90_capable() {
  static int cached[64];  // per device: 0 unknown, 1 yes, 2 no
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  if (cached[dev] == 0) {
    int major = 0;
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major == 9 &&
                    sm90_code_present();
    cached[dev] = ok ? 1 : 2;
  }
  return cached[dev] == 1;
}

enum class Family { kSm80, kSm90, kUnsupported };
static Family family() {
  switch (g_choice.family) {
    case KernelChoice::Family::kSm80: return Family::kSm80;
    case KernelChoice::Family::kSm90: return sm90_capable() ? Family::kSm90 : Family::kUnsupported;
    default: return sm90_capable() ? Family::kSm90 : Family::kSm80;
  }
}
static bool sm90_fused(int D) {
  if (g_choice.sm90_backward == KernelChoice::Sm90Backward::kFused) return true;
  if (g_choice.sm90_backward == KernelChoice::Sm90Backward::kTwoKernels) return false;
  return D == 128;  // D = 64: two kernels, the faster there (bench/RESULTS.md, Attention's backward at head dim 64)
}

static bool sm90_small_backward(int D, const MaskDesc& mask) {
  if (g_choice.sm90_two_kernel_own == 64) return D == 64;
  if (g_choice.sm90_two_kernel_own == 128) return false;
  return bwd_small_tiles(D, mask);
}

const char* kernels_in_use(int D) {
  switch (family()) {
    case Family::kSm80: return "sm80 (mma.sync)";
    case Family::kUnsupported: return "none (sm90 asked for on a device that cannot run it)";
    default: return sm90_fused(D) ? "sm90 (wgmma), fused backward" : "sm90 (wgmma), two-kernel backward";
  }
}

cudaError_t attention_forward(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, int T, int H, int D,
                              const MaskDesc& mask, cudaStream_t stream) {
  if (T < 1 || H < 1 || mask.window < 0 || (D != 64 && D != 128)) return cudaErrorInvalidValue;
  switch (family()) {
    case Family::kSm90: return attention_forward_sm90(q, k, v, o, lse, T, H, D, mask, stream);
    case Family::kSm80: return attention_forward_sm80(q, k, v, o, lse, T, H, D, mask, g_choice.sm80_forward_block_n, stream);
    default: return cudaErrorNotSupported;
  }
}

cudaError_t attention_backward(const bf16* q, const bf16* k, const bf16* v, const bf16* o, const bf16* dout, const float* lse,
                               bf16* dq, bf16* dk, bf16* dv, void* workspace, int T, int H, int D, const MaskDesc& mask,
                               cudaStream_t stream, const NormRotary* q_norm, const NormRotary* k_norm) {
  if (T < 1 || H < 1 || mask.window < 0 || !workspace || (D != 64 && D != 128)) return cudaErrorInvalidValue;
  for (const NormRotary* n : {q_norm, k_norm})
    if (n && (!n->rstd || !n->table || (uintptr_t)n->table % 16 != 0))  // its loads: two (cos, sin) at once
      return cudaErrorInvalidValue;
  const Family f = family();
  if (f == Family::kUnsupported) return cudaErrorNotSupported;
  const BwdWorkspace ws = BwdWorkspace::carve(workspace, T, H, D);
  const bool fused = f == Family::kSm90 && sm90_fused(D);
  const MaskBounds mb = make_bounds(mask, T);  // the fused backward's dQ order, set up by the pre-pass
  cudaError_t err = attention_bwd_preprocess(o, dout, lse, ws, T, H, D, fused ? &mb : nullptr, stream);
  if (err != cudaSuccess) return err;
  if (f == Family::kSm90) return attention_backward_sm90(q, k, v, dout, dq, dk, dv, ws, T, H, D, mask, fused,
                                                         sm90_small_backward(D, mask), q_norm, k_norm, stream);
  return attention_backward_sm80(q, k, v, dout, lse, dq, dk, dv, ws, T, H, D, mask, q_norm, k_norm, stream);
}

}  // namespace attn
