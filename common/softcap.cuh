// The softcapped cross-entropy's per-element terms (docs/model.md), shared by its kernels: the
// plain two passes (layers/softcap_ce.cuh, whose top comment derives them) and the lm head's
// product with the first pass in its epilogue (gemm/epilogue_softcap_ce.cuh, gemm/head_ce.cuh).
//   logits = 30 tanh(z / 30); with e = exp(2z/30) and r = 1 / (1 + e): tanh(z/30) = 1 - 2r,
//   logit - 30 = -60 r, 1 - tanh^2 = 4 r (1 - r), where 1 - r is taken as e r when e < 1.
// A target of kIgnoreTarget (-1) is a prediction left out of the loss.
#pragma once
#include "common/fast_math.cuh"

namespace elementwise {

constexpr float kSoftcap = 30.f;
constexpr int kIgnoreTarget = -1;

// e = exp(2z/30) and r = 1 / (1 + e) of one head output z
struct SoftcapTerms {
  static constexpr float kLogit = -2.f * kSoftcap * 1.4426950408889634f;  // exp(logit - 30) = 2^(r kLogit)
  float e, r;
  __device__ __forceinline__ explicit SoftcapTerms(float z) {
    e = ex2_approx(z * (2.f / kSoftcap * 1.4426950408889634f));
    r = rcp_approx(1.f + e);  // e = inf gives r = 0, the right limit
  }
  // q = exp(logit - 30) in [e^-60, 1]
  __device__ __forceinline__ float q() const { return ex2_approx(r * kLogit); }
  // (1 - tanh^2(z / 30)) / 4 = r (1 - r), with 1 - r = e r when e < 1 (no cancellation near
  // r = 1; e = inf, where e r is NaN, takes the other branch)
  __device__ __forceinline__ float dtanh_4() const { return r * (e < 1.f ? e * r : 1.f - r); }
};

}  // namespace elementwise
