// Score handling shared by the forward and dQ kernels, on one warp's 16 x 64 C-layout tile
// (this thread: rows g and g+8, columns 2t, 2t+1 of each n8 block).
//   apply_mask_interval: masked elements -> -inf from the rows' kept intervals (only called on
//   partial tiles).
//   OnlineSoftmax: running max m (of scale * log2(e) * s) and sum l per row; rescales the output
//   accumulator when the max grows and turns s into p = 2^(scale_log2 * s - m) in place (the
//   scale rides in the exponent's FMA). A row that has kept nothing so far has
//   m = -inf; it is computed against 0 so that no inf - inf appears, and ends with l = 0,
//   output 0 and lse = -inf.
#pragma once
#include <cmath>

#include "attention/mask.h"
// ex2_approx: exp2f without its subnormal handling, 3 of the ~17 instructions a score costs in
// the forward, which is bound by instruction issue
#include "common/fast_math.cuh"

namespace attn {

// lse in log2 units; a row that kept nothing (lse = -inf) gets +inf so that every p is 0.
__device__ __forceinline__ float lse_log2(float lse) { return lse == -INFINITY ? INFINITY : lse * (float)M_LOG2E; }

// Masked elements of a partial tile from the kept intervals of this thread's two rows
// (mask.h row_keys / col_queries): column c is kept by row r when lo[r] <= c <= hi[r].
template <int NB>
__device__ __forceinline__ void apply_mask_interval(float (&s)[NB][4], const int (&lo)[2], const int (&hi)[2], int col0) {
#pragma unroll
  for (int nb = 0; nb < NB; nb++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int c = col0 + nb * 8 + (e & 1), r = e >> 1;
      if (c < lo[r] || c > hi[r]) s[nb][e] = -INFINITY;
    }
}

struct OnlineSoftmax {
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.f, 0.f};

  // Folds a tile of scores into the running max and sum; s becomes p in place; alpha (per row)
  // is the factor by which the output accumulated so far must be rescaled.
  template <int NB>
  __device__ __forceinline__ void step(float (&s)[NB][4], float scale_log2, float (&alpha)[2]) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
      float mx = -INFINITY;
#pragma unroll
      for (int nb = 0; nb < NB; nb++) mx = fmaxf(mx, fmaxf(s[nb][2 * r], s[nb][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
      mx = fmaxf(m[r], mx * scale_log2);  // -inf * scale stays -inf
      const float base = mx == -INFINITY ? 0.f : mx;
      alpha[r] = ex2_approx(m[r] - base);
      m[r] = mx;
      l[r] *= alpha[r];
#pragma unroll
      for (int nb = 0; nb < NB; nb++) {
        s[nb][2 * r] = ex2_approx(fmaf(s[nb][2 * r], scale_log2, -base));
        s[nb][2 * r + 1] = ex2_approx(fmaf(s[nb][2 * r + 1], scale_log2, -base));
        l[r] += s[nb][2 * r] + s[nb][2 * r + 1];
      }
    }
  }

  template <int NO>
  __device__ __forceinline__ static void rescale(float (&acc)[NO][4], const float (&alpha)[2]) {
#pragma unroll
    for (int nb = 0; nb < NO; nb++) {
      acc[nb][0] *= alpha[0];
      acc[nb][1] *= alpha[0];
      acc[nb][2] *= alpha[1];
      acc[nb][3] *= alpha[1];
    }
  }

  template <int NB, int NO>
  __device__ __forceinline__ void update(float (&s)[NB][4], float (&acc)[NO][4], float scale_log2) {
    float alpha[2];
    step(s, scale_log2, alpha);
    rescale(acc, alpha);
  }

  // 1/l (0 for an empty row) and lse in natural-log units.
  __device__ __forceinline__ void finish(float (&inv)[2], float (&lse)[2]) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
      float sum = l[r];
      sum += __shfl_xor_sync(0xffffffff, sum, 1);
      sum += __shfl_xor_sync(0xffffffff, sum, 2);
      inv[r] = sum > 0.f ? 1.f / sum : 0.f;
      lse[r] = sum > 0.f ? (m[r] + log2f(sum)) * (float)M_LN2 : -INFINITY;
    }
  }
};

}  // namespace attn
