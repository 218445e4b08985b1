// Softcapped cross-entropy on a chunk of the lm head's output (SPEC section 3), fused so that no
// fp32 logits tensor outlives its chunk:
//   logits = 30 tanh(z / 30);  loss[r] = logsumexp(logits[r]) - logits[r][target[r]]
//   dz[r] = grad_scale * (softmax(logits[r]) - onehot(target[r])) * (1 - tanh^2(z / 30))
//   z: fp32 [rows][V] (the head matmul's output for this chunk); dz: bf16 [rows][V], ready for
//   the head's backward matmuls; loss: fp32 [rows]; grad_scale = 1 / (tokens in the batch).
// One block per row; three passes over the row (max, sum, write), all in fp32.
// Targets outside [0, V) are reported through bad_target (set to 1), not read.
#pragma once
#include <cuda_bf16.h>

namespace layers {

constexpr float kSoftcap = 30.f;

template <int THREADS>
__device__ __forceinline__ float block_reduce(float v, bool is_max, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffff, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < THREADS / 32 ? scratch[threadIdx.x] : (is_max ? -INFINITY : 0.f);
    for (int o = 16; o > 0; o >>= 1) {
      const float w = __shfl_xor_sync(0xffffffff, v, o);
      v = is_max ? fmaxf(v, w) : v + w;
    }
    if (threadIdx.x == 0) scratch[0] = v;
  }
  __syncthreads();
  v = scratch[0];
  __syncthreads();
  return v;
}

template <int THREADS>
__global__ void __launch_bounds__(THREADS) softcap_ce_kernel(const float* __restrict__ z, const int* __restrict__ targets,
                                                             __nv_bfloat16* __restrict__ dz, float* __restrict__ loss, int V,
                                                             float grad_scale, int* bad_target) {
  __shared__ float scratch[32];
  const int row = blockIdx.x;
  const float* zr = z + (size_t)row * V;
  const int target = targets[row];
  if (target < 0 || target >= V) {
    if (threadIdx.x == 0) {
      atomicExch(bad_target, 1);
      loss[row] = NAN;
    }
    return;
  }
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < V; i += THREADS) mx = fmaxf(mx, kSoftcap * tanhf(zr[i] / kSoftcap));
  mx = block_reduce<THREADS>(mx, true, scratch);
  float sum = 0.f;
  for (int i = threadIdx.x; i < V; i += THREADS) sum += expf(kSoftcap * tanhf(zr[i] / kSoftcap) - mx);
  sum = block_reduce<THREADS>(sum, false, scratch);
  const float lse = mx + logf(sum);
  for (int i = threadIdx.x; i < V; i += THREADS) {
    const float th = tanhf(zr[i] / kSoftcap);
    const float p = expf(kSoftcap * th - lse);
    dz[(size_t)row * V + i] = __float2bfloat16(grad_scale * (p - (i == target ? 1.f : 0.f)) * (1.f - th * th));
  }
  if (threadIdx.x == 0) loss[row] = lse - kSoftcap * tanhf(zr[target] / kSoftcap);
}

inline cudaError_t softcap_ce(const float* z, const int* targets, __nv_bfloat16* dz, float* loss, int rows, int V,
                              float grad_scale, int* bad_target, cudaStream_t stream = 0) {
  if (rows < 0 || V < 1) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  softcap_ce_kernel<512><<<rows, 512, 0, stream>>>(z, targets, dz, loss, V, grad_scale, bad_target);
  return cudaGetLastError();
}

}  // namespace layers
