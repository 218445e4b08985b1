// Softcapped cross-entropy on a chunk of the lm head's output (docs/model.md), fused so that no
// logits tensor outlives its chunk:
//   logits = 30 tanh(z / 30);  loss[r] = logsumexp(logits[r]) - logits[r][target[r]]
//   dz[r] = grad_scale * (softmax(logits[r]) - onehot(target[r])) * (1 - tanh^2(z / 30))
//   z: bf16 [rows][V] (the head matmul's bf16 output, as the PyTorch record's lm head gives it);
//   dz: bf16 [rows][V], written over z (in place) or nowhere (dz == nullptr: loss only);
//   loss: fp32 [rows]; grad_scale = 1 / (tokens in the batch). All arithmetic in fp32.
// The logits are bounded by 30, so the log-sum-exp needs no max pass. With e = exp(2z/30) and
// r = 1 / (1 + e): tanh(z/30) = 1 - 2r, logit - 30 = -60 r, 1 - tanh^2 = 4 r (1 - r), where 1 - r
// is taken as e r when e < 1 (no cancellation for either sign of z). q = exp(logit - 30) =
// exp(-60 r) lies in [e^-60, 1], so its sum S over a row is a normal fp32 number for any V < 2^100;
// then lse = 30 + log S, loss = log S + 60 r_t and softmax = q / S.
// Two passes over the row, the special functions all in the first: it reads z, sums q and keeps
// g = q (1 - tanh^2) / 4 as bf16; the second reads g back and writes dz = g 4 grad_scale / S (the
// target's element from z_t, with its one-hot term). So dz is rounded twice (g, then dz). One
// block of 1024 threads a row, two blocks an SM. Where the row fits (2V bytes, two an SM: V up to
// about 56000 on Hopper) each thread first copies its 16-byte chunks of z into shared memory with
// cp.async, all of them in flight at once without holding registers, and g stays there; HBM
// sees one read of z and one write of dz, at its bandwidth. Otherwise g goes where dz goes and
// pass 2 reads it back from L2 (the 2 x 132 rows in flight, 26 MB, stay there), with one load of
// 16 bytes in flight a thread (32 registers, 2048 threads an SM). (Before both, the kernel
// recomputed e, r and q in its second pass from a second read of z, which missed L2 with four
// rows of 512 threads an SM, bound by HBM and the special-function unit at once; the three
// measured: results/cross_entropy/README.md.) 16-byte accesses when V % 8 == 0.
// A target of kIgnoreTarget (-1) is a prediction left out of the loss (prefix-LM: a target the
// position can see): its loss is 0 and its dz row 0. Other targets outside [0, V) are reported
// through bad_target (set to 1), not read; their row's loss is NaN and its dz is left as it was.
// The per-element terms (SoftcapTerms) are common/softcap.cuh's, which the lm head's fused
// product shares.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "common/softcap.cuh"
#include "common/tensor_core.cuh"

namespace layers {

using elementwise::kIgnoreTarget;
using elementwise::kSoftcap;
using elementwise::SoftcapTerms;

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

// SMEM (with VEC): the row goes through dynamic shared memory (2V bytes), see the top comment.
template <int THREADS, bool VEC, bool GRAD, bool SMEM>
__global__ void __launch_bounds__(THREADS, 2) softcap_ce_kernel(__nv_bfloat16* z, const int* __restrict__ targets,
                                                                __nv_bfloat16* dz, float* __restrict__ loss, int V,
                                                                float grad_scale, int* bad_target) {
  static_assert(VEC || !SMEM, "the shared-memory row takes 16-byte chunks");
  extern __shared__ uint4 s_row[];
  __shared__ float scratch[32];
  const int row = blockIdx.x;
  const __nv_bfloat16* zr = z + (size_t)row * V;
  __nv_bfloat16* dr = GRAD ? dz + (size_t)row * V : nullptr;
  const int target = targets[row];
  if (target == kIgnoreTarget) {
    if (threadIdx.x == 0) loss[row] = 0.f;
    if (GRAD)
      for (int i = threadIdx.x; i < V; i += THREADS) dr[i] = __float2bfloat16(0.f);
    return;
  }
  if (target < 0 || target >= V) {
    if (threadIdx.x == 0) {
      atomicExch(bad_target, 1);
      loss[row] = NAN;
    }
    return;
  }
  // The thread whose loop reaches the target's element (its 16-byte chunk when VEC) keeps z_t
  // from its own load, before its own store over it (in place, no other thread writes there),
  // and writes the loss and the target's dz.
  const int t_unit = VEC ? target / 8 : target;
  const bool owner = threadIdx.x == t_unit % THREADS;
  float zt = 0.f, sum = 0.f;
  if (VEC) {
    // src: where pass 1 reads z; gv: where g goes (read back by pass 2). Each thread copies,
    // reads and writes only its own chunks, so it needs no barrier with the others.
    const uint4* src = reinterpret_cast<const uint4*>(zr);
    uint4* gv = reinterpret_cast<uint4*>(dr);
    if (SMEM) {
      for (int j = threadIdx.x; j < V / 8; j += THREADS) tc::cp_async16(tc::smem_addr(s_row + j), src + j, true);
      tc::cp_async_commit();
      tc::cp_async_wait<0>();
      asm volatile("" ::: "memory");  // the reads of s_row below stay after the wait
      src = gv = s_row;
    }
    for (int j = threadIdx.x; j < V / 8; j += THREADS) {
      const uint4 u = src[j];
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
      if (j == t_unit) {  // element target % 8 of the chunk, picked without indexing a register array
        const int w = (target % 8) / 2;
        const uint32_t word = w == 0 ? u.x : w == 1 ? u.y : w == 2 ? u.z : u.w;
        zt = __uint_as_float(target % 2 ? word & 0xffff0000u : word << 16);  // bf16 -> fp32: the high half
      }
      uint4 o;
      __nv_bfloat162* oh = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const float2 f = __bfloat1622float2(h[k]);
        const SoftcapTerms a(f.x), b(f.y);
        const float qa = a.q(), qb = b.q();
        sum += qa + qb;
        if (GRAD) oh[k] = __floats2bfloat162_rn(qa * a.dtanh_4(), qb * b.dtanh_4());
      }
      if (GRAD) gv[j] = o;
    }
  } else {
    for (int i = threadIdx.x; i < V; i += THREADS) {
      const float f = __bfloat162float(zr[i]);
      if (i == target) zt = f;
      const SoftcapTerms s(f);
      const float q = s.q();
      sum += q;
      if (GRAD) dr[i] = __float2bfloat16(q * s.dtanh_4());
    }
  }
  sum = block_sum<THREADS>(sum, scratch);
  if (owner) loss[row] = logf(sum) + 2.f * kSoftcap * SoftcapTerms(zt).r;
  if (!GRAD) return;
  // dz = (q inv4 - onehot tgt4) (1 - tanh^2) / 4: the scale and the 4 folded into the constants.
  // Each thread reads back only the g it wrote itself (the same chunks in the same order).
  const float inv4 = 4.f * grad_scale / sum, tgt4 = 4.f * grad_scale;
  if (VEC) {
    const uint4* gv = SMEM ? s_row : reinterpret_cast<const uint4*>(dr);
    uint4* dv = reinterpret_cast<uint4*>(dr);
    for (int j = threadIdx.x; j < V / 8; j += THREADS) {
      const uint4 u = gv[j];
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
      uint4 o;
      __nv_bfloat162* oh = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const float2 f = __bfloat1622float2(h[k]);
        oh[k] = __floats2bfloat162_rn(f.x * inv4, f.y * inv4);
      }
      dv[j] = o;
    }
  } else {
    for (int i = threadIdx.x; i < V; i += THREADS) dr[i] = __float2bfloat16(__bfloat162float(dr[i]) * inv4);
  }
  if (owner) {  // after its own store of the chunk: the target's element again, with its one-hot term
    const SoftcapTerms s(zt);
    dr[target] = __float2bfloat16((s.q() * inv4 - tgt4) * s.dtanh_4());
  }
}

// The row through shared memory when two blocks of 1024 threads with a row each fit an SM (the
// device's shared memory, asked once per device); 16-byte chunks only.
inline bool softcap_ce_row_fits_smem(int V) {
  static int per_sm[64] = {}, per_block[64] = {};  // 0: not asked yet
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  if (per_sm[dev] == 0) {
    int sm = 0, block = 0;
    if (cudaDeviceGetAttribute(&sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
      return false;
    per_sm[dev] = sm, per_block[dev] = block;
  }
  const size_t row = (size_t)V * 2, per_block_need = row + 1024 + 128;  // + the 1 KB the SM keeps a block, and scratch
  return row <= (size_t)per_block[dev] && 2 * per_block_need <= (size_t)per_sm[dev];
}

// dz may equal z (in place) or be nullptr (loss only). allow_smem = false keeps g in dz between
// the passes even where the row would fit in shared memory (tests: both paths give the same bits).
inline cudaError_t softcap_ce(__nv_bfloat16* z, const int* targets, __nv_bfloat16* dz, float* loss, int rows, int V,
                              float grad_scale, int* bad_target, cudaStream_t stream = 0, bool allow_smem = true) {
  if (rows < 0 || V < 1) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  constexpr int kThreads = 1024;
  const bool vec = V % 8 == 0 && (uintptr_t)z % 16 == 0 && (dz == nullptr || (uintptr_t)dz % 16 == 0);
  const bool grad = dz != nullptr;
  if (vec && allow_smem && softcap_ce_row_fits_smem(V)) {
    auto k = grad ? softcap_ce_kernel<kThreads, true, true, true> : softcap_ce_kernel<kThreads, true, false, true>;
    const int smem = V * 2;
    cudaError_t err = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    k<<<rows, kThreads, smem, stream>>>(z, targets, dz, loss, V, grad_scale, bad_target);
    return cudaGetLastError();
  }
  auto k = vec ? (grad ? softcap_ce_kernel<kThreads, true, true, false> : softcap_ce_kernel<kThreads, true, false, false>)
               : (grad ? softcap_ce_kernel<kThreads, false, true, false> : softcap_ce_kernel<kThreads, false, false, false>);
  k<<<rows, kThreads, 0, stream>>>(z, targets, dz, loss, V, grad_scale, bad_target);
  return cudaGetLastError();
}

}  // namespace layers
