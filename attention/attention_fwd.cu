// Forward of fused masked attention (sm80 mma.sync; runs on Ampere and Hopper).
//
//   S = scale * Q K^T (+ mask: -inf where not kept),  O = softmax(S) V,  lse = logsumexp(S)
//   Q, K, V, O: bf16 [T, H, D];  lse: fp32 [H, T];  D in {64, 128}.
//
// One block of 4 warps takes 128 queries of one head, 32 rows a warp as two 16-row MMA blocks,
// so that every K and V fragment read from shared memory feeds two MMAs (the Q fragments are
// re-read from shared memory each tile instead of held in registers). The block walks the key
// tiles of 64 that the mask lets its queries see (own_intervals.cuh gives each row its kept keys
// and the walk its ends; mask.h's TileWalk spares full tiles the per-element test, as in the
// sm90 kernels). K and V tiles are
// double-buffered with cp.async. Softmax is online in the log2 domain. Query tiles run longest
// first (the last tiles see the most keys under a causal mask).
#include <cmath>

#include "attention/attention.h"
#include "attention/kernels.h"
#include "attention/tile_scheduler.cuh"
#include "attention/mma.cuh"
#include "attention/own_intervals.cuh"
#include "attention/softmax.cuh"

namespace attn {
using namespace sm80;

constexpr int kFwdRowBlocks = 2;  // 16-row MMA blocks per warp
constexpr int kFwdWarps = 4, kFwdThreads = 32 * kFwdWarps;
constexpr int kFwdBlockM = 16 * kFwdRowBlocks * kFwdWarps;

template <int D, int kFwdBlockN>
__global__ void __launch_bounds__(kFwdThreads, 2) attention_fwd_kernel(const bf16* __restrict__ Q, const bf16* __restrict__ K,
                                                                       const bf16* __restrict__ V, bf16* __restrict__ O,
                                                                       float* __restrict__ LSE, int T, int H, MaskBounds mb,
                                                                       float scale_log2) {
  constexpr int RB = kFwdRowBlocks, NB = kFwdBlockN / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sK = sQ + kFwdBlockM * D;      // 2 buffers
  bf16* sV = sK + 2 * kFwdBlockN * D;  // 2 buffers
  int32_t* s_ids = reinterpret_cast<int32_t*>(sV + 2 * kFwdBlockN * D);  // kFwdBlockM document ids
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_qt = (T + kFwdBlockM - 1) / kFwdBlockM;
  const int q0 = query_tile_longest_first(n_qt) * kFwdBlockM, h = blockIdx.y;

  const int wrow = warp * 16 * RB;                      // first row of this warp in the tile
  const int row0 = q0 + wrow + (lane >> 2);             // rows row0 + 16 rb (+ 8)
  int rows[2 * RB], lo[2 * RB], hi[2 * RB];             // this thread's rows and the keys each keeps
#pragma unroll
  for (int i = 0; i < 2 * RB; i++) rows[i] = row0 + 16 * (i / 2) + 8 * (i % 2);
  RangeEnds ends;
  own_intervals<kFwdBlockM, 2 * RB>(mb, q0, true, s_ids, rows, lo, hi, ends);
  int key_lo[RB][2], key_hi[RB][2];
#pragma unroll
  for (int i = 0; i < 2 * RB; i++) {
    key_lo[i / 2][i % 2] = lo[i];
    key_hi[i / 2][i % 2] = hi[i];
  }
  const TileWalk walk(ends, kFwdBlockN, T);
  TileKind kind;
  int kt = walk.next(walk.begin, kind);

  load_tile<D, kFwdBlockM, kFwdThreads>(sQ, Q, q0, T, H, h);
  if (kt < walk.end) {
    load_tile<D, kFwdBlockN, kFwdThreads>(sK, K, kt * kFwdBlockN, T, H, h);
    load_tile<D, kFwdBlockN, kFwdThreads>(sV, V, kt * kFwdBlockN, T, H, h);
  }
  cp_async_commit();

  float acc[RB][D / 8][4] = {};
  OnlineSoftmax sm[RB];
  int buf = 0;
  while (kt < walk.end) {
    TileKind kind_next;
    const int kt_next = walk.next(kt + 1, kind_next);
    if (kt_next < walk.end) {
      load_tile<D, kFwdBlockN, kFwdThreads>(sK + (buf ^ 1) * kFwdBlockN * D, K, kt_next * kFwdBlockN, T, H, h);
      load_tile<D, kFwdBlockN, kFwdThreads>(sV + (buf ^ 1) * kFwdBlockN * D, V, kt_next * kFwdBlockN, T, H, h);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const bf16* k_tile = sK + buf * kFwdBlockN * D;
    const bf16* v_tile = sV + buf * kFwdBlockN * D;

    float s[RB][NB][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
      uint32_t qa[RB][4];
#pragma unroll
      for (int rb = 0; rb < RB; rb++) ldsm_x4(qa[rb], addr_a<D>(sQ, wrow + 16 * rb, kk, lane));
#pragma unroll
      for (int p = 0; p < NB / 2; p++) {
        uint32_t r[4];
        ldsm_x4(r, addr_b<D>(k_tile, p * 16, kk, lane));
#pragma unroll
        for (int rb = 0; rb < RB; rb++) {
          mma(s[rb][2 * p], qa[rb], r[0], r[1]);
          mma(s[rb][2 * p + 1], qa[rb], r[2], r[3]);
        }
      }
    }
    const int k0 = kt * kFwdBlockN;
    if (kind != kFull)
#pragma unroll
      for (int rb = 0; rb < RB; rb++) apply_mask_interval(s[rb], key_lo[rb], key_hi[rb], k0 + 2 * (lane & 3));
#pragma unroll
    for (int rb = 0; rb < RB; rb++) sm[rb].update(s[rb], acc[rb], scale_log2);
#pragma unroll
    for (int j = 0; j < NB / 2; j++) {
      uint32_t pa[RB][4];
#pragma unroll
      for (int rb = 0; rb < RB; rb++) c_to_a(pa[rb], s[rb][2 * j], s[rb][2 * j + 1]);
#pragma unroll
      for (int p = 0; p < D / 16; p++) {
        uint32_t r[4];
        ldsm_x4_trans(r, addr_a<D>(v_tile, j * 16, p, lane));
#pragma unroll
        for (int rb = 0; rb < RB; rb++) {
          mma(acc[rb][2 * p], pa[rb], r[0], r[1]);
          mma(acc[rb][2 * p + 1], pa[rb], r[2], r[3]);
        }
      }
    }
    __syncthreads();  // the next iteration's loads overwrite the buffer just read
    buf ^= 1;
    kt = kt_next;
    kind = kind_next;
  }
  cp_async_wait<0>();

  // epilogue: O = acc / l, lse = (m + log2 l) * ln 2
  const size_t ld = (size_t)H * D;
#pragma unroll
  for (int rb = 0; rb < RB; rb++) {
    float inv[2], lse[2];
    sm[rb].finish(inv, lse);
#pragma unroll
    for (int r = 0; r < 2; r++) {
      const int row = row0 + 16 * rb + 8 * r;
      if (row >= T) continue;
      bf16* orow = O + (size_t)row * ld + (size_t)h * D + 2 * (lane & 3);
#pragma unroll
      for (int nb = 0; nb < D / 8; nb++)
        *reinterpret_cast<__nv_bfloat162*>(orow + nb * 8) =
            __floats2bfloat162_rn(acc[rb][nb][2 * r] * inv[r], acc[rb][nb][2 * r + 1] * inv[r]);
      if ((lane & 3) == 0) LSE[(size_t)h * T + row] = lse[r];
    }
  }
}

template <int D, int kFwdBlockN>
static cudaError_t launch_fwd_n(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, int T, int H,
                              const MaskDesc& mask, cudaStream_t stream) {
  const size_t smem = (size_t)(kFwdBlockM + 4 * kFwdBlockN) * D * sizeof(bf16) + kFwdBlockM * sizeof(int32_t);
  cudaError_t err = cudaFuncSetAttribute(attention_fwd_kernel<D, kFwdBlockN>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (err != cudaSuccess) return err;
  dim3 grid((T + kFwdBlockM - 1) / kFwdBlockM, H);
  const float scale_log2 = (float)(M_LOG2E / std::sqrt((double)D));
  attention_fwd_kernel<D, kFwdBlockN><<<grid, kFwdThreads, smem, stream>>>(q, k, v, o, lse, T, H, make_bounds(mask, T), scale_log2);
  return cudaGetLastError();
}

// Key tile width: 64 by default; 32 (fewer score registers) to compare the two
// (KernelChoice::sm80_fwd_block_n).
cudaError_t attention_forward_sm80(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, int T, int H, int D,
                                   const MaskDesc& mask, int block_n, cudaStream_t stream) {
  if (D == 64) return block_n == 32 ? launch_fwd_n<64, 32>(q, k, v, o, lse, T, H, mask, stream) : launch_fwd_n<64, 64>(q, k, v, o, lse, T, H, mask, stream);
  if (D == 128) return block_n == 32 ? launch_fwd_n<128, 32>(q, k, v, o, lse, T, H, mask, stream) : launch_fwd_n<128, 64>(q, k, v, o, lse, T, H, mask, stream);
  return cudaErrorInvalidValue;
}

}  // namespace attn
