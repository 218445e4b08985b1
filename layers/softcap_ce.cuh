// Softcapped cross-entropy on a chunk of the lm head's output (docs/model.md), fused so that no
// logits tensor outlives its chunk:
//   logits = 30 tanh(z / 30);  loss[r] = logsumexp(logits[r]) - logits[r][target[r]]
//   dz[r] = grad_scale * (softmax(logits[r]) - onehot(target[r])) * (1 - tanh^2(z / 30))
//   z: bf16 [rows][V] (the head matmul's bf16 output, as the PyTorch record's lm head gives it);
//   dz: bf16 [rows][V], written over z (in place) or nowhere (dz == nullptr: loss only);
//   loss: fp32 [rows]; grad_scale = 1 / (tokens in the batch). All arithmetic in fp32.
// The logits are bounded by 30, so the log-sum-exp needs no max pass. With e = exp(2z/30) and
// r = 1 / (1 + e): tanh(z/30) = 1 - 2r, logit - 30 = -60 r, 1 - tanh^2 = 4 r (1 - r), where 1 - r
// is taken as e r when e < 1 (no cancellation for either sign of z). exp(logit - 30) = exp(-60 r)
// lies in [e^-60, 1], so its sum S over a row is a normal fp32 number for any V < 2^100; then
// lse = 30 + log S, loss = log S + 60 r_t and softmax = exp(-60 r) / S. Two passes over the row:
// the sum, then dz (the row, 2V bytes, is still in L2 for the second). One block per row;
// 16-byte accesses when V % 8 == 0.
// A target of kIgnoreTarget (-1) is a prediction left out of the loss (prefix-LM: a target the
// position can see): its loss is 0 and its dz row 0. Other targets outside [0, V) are reported
// through bad_target (set to 1), not read; their row's loss is NaN and its dz is left as it was.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "common/fast_math.cuh"

namespace layers {

constexpr float kSoftcap = 30.f;
constexpr int kIgnoreTarget = -1;

template <int THREADS>
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < THREADS / 32 ? scratch[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    if (threadIdx.x == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

// 2^(a b) for a b in [-126, 0] on the FMA pipe, where the special-function unit is the
// bottleneck: a b = j + f with j = round(a b) (1.5 * 2^23 added puts j in the low mantissa bits)
// and f in [-1/2, 1/2]; 2^f by a degree-5 polynomial (relative error 2.3e-7 in fp32, fitted
// here for minimax relative error), then j added to its exponent.
__device__ __forceinline__ float exp2_fma(float a, float b) {
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23
  const float t = fmaf(a, b, kRound);
  const float f = fmaf(a, b, -(t - kRound));
  float p = 0.001327647129073739f;
  p = fmaf(p, f, 0.009675540961325169f);
  p = fmaf(p, f, 0.05550713092088699f);
  p = fmaf(p, f, 0.24022120237350464f);
  p = fmaf(p, f, 0.6931469440460205f);
  p = fmaf(p, f, 1.0000001192092896f);
  // the low 9 bits of t hold j mod 512: shifted into the exponent field, they add j to it
  return __uint_as_float(__float_as_uint(p) + (__float_as_uint(t) << 23));
}

// e = exp(2z/30) and r = 1 / (1 + e) of one head output z (see the top comment)
struct SoftcapTerms {
  static constexpr float kLogit = -2.f * kSoftcap * 1.4426950408889634f;  // exp(logit - 30) = 2^(r kLogit)
  float e, r;
  __device__ __forceinline__ explicit SoftcapTerms(float z) {
    e = ex2_approx(z * (2.f / kSoftcap * 1.4426950408889634f));
    r = rcp_approx(1.f + e);  // e = inf gives r = 0, the right limit
  }
  // exp(logit - 30) in [e^-60, 1], on the special-function unit (q) or the FMA pipe (q_fma): the
  // first pass, with fewer other instructions, takes q_fma so that both units share the work.
  __device__ __forceinline__ float q() const { return ex2_approx(r * kLogit); }
  __device__ __forceinline__ float q_fma() const { return exp2_fma(r, kLogit); }
  // (1 - tanh^2(z / 30)) / 4 = r (1 - r), with 1 - r = e r when e < 1 (no cancellation near
  // r = 1; e = inf, where e r is NaN, takes the other branch)
  __device__ __forceinline__ float dtanh_4() const { return r * (e < 1.f ? e * r : 1.f - r); }
};

template <int THREADS, bool VEC>
__global__ void __launch_bounds__(THREADS) softcap_ce_kernel(__nv_bfloat16* z, const int* __restrict__ targets,
                                                             __nv_bfloat16* dz, float* __restrict__ loss, int V,
                                                             float grad_scale, int* bad_target) {
  __shared__ float scratch[32];
  const int row = blockIdx.x;
  __nv_bfloat16* zr = z + (size_t)row * V;
  const int target = targets[row];
  if (target == kIgnoreTarget) {
    if (threadIdx.x == 0) loss[row] = 0.f;
    if (dz != nullptr)
      for (int i = threadIdx.x; i < V; i += THREADS) dz[(size_t)row * V + i] = __float2bfloat16(0.f);
    return;
  }
  if (target < 0 || target >= V) {
    if (threadIdx.x == 0) {
      atomicExch(bad_target, 1);
      loss[row] = NAN;
    }
    return;
  }
  const float zt = __bfloat162float(zr[target]);  // read before any thread overwrites the row
  float sum = 0.f;
  if (VEC) {
    const uint4* zv = reinterpret_cast<const uint4*>(zr);
    for (int j = threadIdx.x; j < V / 8; j += THREADS) {
      const uint4 u = zv[j];
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const float2 f = __bfloat1622float2(h[k]);
        sum += SoftcapTerms(f.x).q_fma() + SoftcapTerms(f.y).q_fma();
      }
    }
  } else {
    for (int i = threadIdx.x; i < V; i += THREADS) sum += SoftcapTerms(__bfloat162float(zr[i])).q_fma();
  }
  sum = block_sum<THREADS>(sum, scratch);  // its barriers also order every read of zt and pass 1 before pass 2's writes
  if (threadIdx.x == 0) loss[row] = logf(sum) + 2.f * kSoftcap * SoftcapTerms(zt).r;
  if (dz == nullptr) return;
  __nv_bfloat16* dr = dz + (size_t)row * V;
  // dz = (q inv4 - onehot tgt4) (1 - tanh^2) / 4: the scale and the 4 folded into the constants.
  // The loop leaves the target's onehot out; the thread that wrote the target's element writes
  // it again after the loop, with it (from zt: in place, the row is dz by then).
  const float inv4 = 4.f * grad_scale / sum, tgt4 = 4.f * grad_scale;
  auto grad = [&](float zf, float onehot4) {
    const SoftcapTerms s(zf);
    return (s.q() * inv4 - onehot4) * s.dtanh_4();
  };
  if (VEC) {
    const uint4* zv = reinterpret_cast<const uint4*>(zr);
    uint4* dv = reinterpret_cast<uint4*>(dr);
    for (int j = threadIdx.x; j < V / 8; j += THREADS) {
      const uint4 u = zv[j];
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
      uint4 o;
      __nv_bfloat162* oh = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const float2 f = __bfloat1622float2(h[k]);
        oh[k] = __floats2bfloat162_rn(grad(f.x, 0.f), grad(f.y, 0.f));
      }
      dv[j] = o;
    }
  } else {
    for (int i = threadIdx.x; i < V; i += THREADS) dr[i] = __float2bfloat16(grad(__bfloat162float(zr[i]), 0.f));
  }
  if (threadIdx.x == (VEC ? target / 8 : target) % THREADS) dr[target] = __float2bfloat16(grad(zt, tgt4));
}

// dz may equal z (in place) or be nullptr (loss only).
inline cudaError_t softcap_ce(__nv_bfloat16* z, const int* targets, __nv_bfloat16* dz, float* loss, int rows, int V,
                              float grad_scale, int* bad_target, cudaStream_t stream = 0) {
  if (rows < 0 || V < 1) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  constexpr int kThreads = 512;
  const bool vec = V % 8 == 0 && (uintptr_t)z % 16 == 0 && (dz == nullptr || (uintptr_t)dz % 16 == 0);
  if (vec)
    softcap_ce_kernel<kThreads, true><<<rows, kThreads, 0, stream>>>(z, targets, dz, loss, V, grad_scale, bad_target);
  else
    softcap_ce_kernel<kThreads, false><<<rows, kThreads, 0, stream>>>(z, targets, dz, loss, V, grad_scale, bad_target);
  return cudaGetLastError();
}

}  // namespace layers
