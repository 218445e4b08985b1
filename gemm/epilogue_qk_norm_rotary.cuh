// The per-head RMS norm of q and k followed by the rotary embedding, in the epilogue of the
// product that makes q, k and v (docs/model.md), so that q and k are never written before their
// norm:
//   [q, k, v] = h [Wq Wk Wv]     h [M][C]; B: Wq, Wk, Wv one below the other, each [C][C];
//                                out: qn, kn, v one after another, each [M][C] (a batched map)
//   qn = rotary(q * rstd_q), kn = rotary(k * rstd_k) per head of D columns, as
//   layers/qk_norm_rotary.cuh computes them (the same arithmetic, rounded to bf16 first);
//   rstd: fp32 [2][M][H] (q's, then k's). v is stored plain (gemm/epilogue_store.cuh).
// A tile (256 columns) lies in one of q, k, v and holds whole heads; the angles come from
// rotary_angles_fp16's table, 64 rows of it loaded by the TMA into the warpgroup's epilogue
// buffer under the tile's slices (released by the previous tile's last store first).
// CPU reference: model/reference_layers.h, rmsnorm then rotary (tests/layers/mlp_gemm.cu).
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/rotary_table.h"
#include "gemm/config.cuh"
#include "gemm/epilogue_store.cuh"
#include "gemm/mainloop.cuh"
#include "hopper/barrier.cuh"
#include "hopper/tma.cuh"

namespace gemm {

// The angles as the epilogue reads them (norm_rotary_acc): for each position t the D/2
// (cos, sin) pairs rounded to fp16 pairs (half2, 4 bytes; 2^-11 relative, a sixth of the bf16
// output's rounding: the epilogue has 16 KB of shared memory a warpgroup for its 64 rows, which
// fp32 pairs would fill twice), in the order the accumulator's threads read them: the thread at
// quad position q of a row holds angles j = 8 jb + 2 q + e (jb < D/16, e < 2) as its words
// u = (D/8) q + 2 jb + e, and word u of position t is stored at (u + 4 (t mod 8)) mod D/2, so
// that a warp's 16-byte reads of its 8 rows fall on distinct banks. [T][D/2] words.
inline std::vector<uint32_t> rotary_angles_fp16(int T, int D) {
  const std::vector<float2> tab = elementwise::rotary_table(T, D);
  const int W = D / 2;
  std::vector<uint32_t> out((size_t)T * W);
  for (int t = 0; t < T; t++)
    for (int q = 0; q < 4; q++)
      for (int jb = 0; jb < D / 16; jb++)
        for (int e = 0; e < 2; e++) {
          const float2 cs = tab[(size_t)t * W + 8 * jb + 2 * q + e];
          const __half2 h = __floats2half2_rn(cs.x, cs.y);
          uint32_t bits;
          std::memcpy(&bits, &h, sizeof bits);
          const int u = (D / 8) * q + 2 * jb + e;
          out[(size_t)t * W + (u + 4 * (t % 8)) % W] = bits;
        }
  return out;
}

// The norm + rotary on a product's output tile in the registers of an m64n256 wgmma
// accumulator (acc[nb][2 r + e]: row rr + 8 r, column 8 nb + 2 q + e of the warpgroup's 64 x
// 256, q = lane % 4), whose 256 columns are 256 / D whole heads: each head row's D values are the
// 4 threads of a quad, and column c < D/2 of a head pairs with c + D/2, block nb + D/16 of the
// same thread. The values are rounded to bf16 first (as the pass reads a bf16 q), then
// normalised and rotated in place; put_rstd(r, hh, rstd) receives head hh's 1 / rms of row r.
// ang: the warpgroup's 64 rows of rotary_angles_fp16 (from a position that is a multiple of 8).
template <int D, typename PutRstd>
__device__ __forceinline__ void norm_rotary_acc(float (&acc)[32][4], const uint32_t* ang, int rr, int q, float eps,
                                                PutRstd&& put_rstd) {
  constexpr int W = D / 2, NB = D / 8, HALF = D / 16, HEADS = 256 / D;
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int row = rr + 8 * r;
    float rs[HEADS];
#pragma unroll
    for (int hh = 0; hh < HEADS; hh++) {
      float ss = 0.f;
#pragma unroll
      for (int j = hh * NB; j < (hh + 1) * NB; j++) {  // (rounded as a pair: one conversion for two)
        const float2 x = __bfloat1622float2(__floats2bfloat162_rn(acc[j][2 * r], acc[j][2 * r + 1]));
        acc[j][2 * r] = x.x, acc[j][2 * r + 1] = x.y;
        ss += x.x * x.x;
        ss += x.y * x.y;
      }
      ss += __shfl_xor_sync(0xffffffff, ss, 1);  // the row's 4 threads
      ss += __shfl_xor_sync(0xffffffff, ss, 2);
      rs[hh] = rsqrtf(ss / D + eps);
      put_rstd(r, hh, rs[hh]);
    }
    // this thread's angles of the row, 16 bytes at a time: words 4 i.. are angles 8 jb + 2 q + e
    // of jb = 2 i, 2 i + 1
#pragma unroll
    for (int i = 0; i < NB / 4; i++) {
      const uint4 v = *reinterpret_cast<const uint4*>(ang + row * W + (NB * q + 4 * i + 4 * (row & 7)) % W);
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const int jb = 2 * i + k / 2, e = k % 2;
        const float2 cs = __half22float2(*reinterpret_cast<const __half2*>(&w[k]));
#pragma unroll
        for (int hh = 0; hh < HEADS; hh++) {
          float& a = acc[hh * NB + jb][2 * r + e];
          float& b = acc[hh * NB + jb + HALF][2 * r + e];
          const float n1 = a * rs[hh], n2 = b * rs[hh];
          a = n1 * cs.x + n2 * cs.y;
          b = -n1 * cs.y + n2 * cs.x;
        }
      }
    }
  }
}

// The epilogue's arguments: the angles (rotary_angles_fp16, [M][D/2] words), the rows' rstd
// ([2][M][H]: q's, then k's), the norm's eps, and the columns of each of q, k and v (nb = H D, a
// multiple of BN: a tile lies in one of them).
struct QkvArgs {
  const uint32_t* angles;
  float* rstd;
  float eps;
  int nb;
};

// HD: the head dim. B = [Wq; Wk; Wv] ([3 K][nb], MN-major), out = [qn, kn, v] through tmO.
template <int HD>
struct QkNormRotary {
  static constexpr bool kBKMajor = false, kBatched = true;
  static constexpr int kSlots = 0;
  using Args = QkvArgs;
  uint64_t* angles_full;  // two barriers: warpgroup wg's angles have landed
  const Args& qa;
  const int& M;
  int angle_loads = 0;  // loads of this warpgroup's angles so far
  __device__ __forceinline__ QkNormRotary(uint64_t* bars, const Args& a, const int& m) : angles_full(bars), qa(a), M(m) {}
  __device__ __forceinline__ void init_barriers() { hopper::mbar_init(&angles_full[0], 1), hopper::mbar_init(&angles_full[1], 1); }
  __device__ __forceinline__ static int load_after_slices(Ring&, int it, bf16*, const CUtensorMap*, int, int) { return it; }
  // q and k tiles (matrix n0 / nb < 2), rows inside M
  __device__ __forceinline__ bool normed(const Consumer& x, int m0, int n0) const { return n0 < 2 * qa.nb && m0 + x.wg * WM < M; }
  __device__ __forceinline__ uint32_t* my_angles(const Consumer& x) const { return reinterpret_cast<uint32_t*>(x.sC + x.wg * WM * OC); }
  // After the tile's first wgmmas are issued: the previous tile's held stage released, then q and
  // k tiles load the warpgroup's rows' angles into its epilogue buffer, which the previous tile's
  // last store has read (the loads complete under the tile's slices).
  __device__ __forceinline__ void at_first_slice(const Consumer& x, bool prev, int it0, int, int, int m0, int n0) {
    if (prev) release_held_stage(x, it0);
    if (x.storer && normed(x, m0, n0)) {
      const int rows = M - (m0 + x.wg * WM) < WM ? M - (m0 + x.wg * WM) : WM;
      const uint32_t bytes = (uint32_t)rows * (HD / 2) * sizeof(uint32_t);
      hopper::mbar_arrive_expect_tx(&angles_full[x.wg], bytes);  // (the buffer's stores have read it: above)
      hopper::bulk_load(my_angles(x), qa.angles + (size_t)(m0 + x.wg * WM) * (HD / 2), bytes, &angles_full[x.wg]);
    }
  }
  __device__ __forceinline__ void after_slices(const Consumer& x, int ti, int, int) { hold_last_stage(x, ti); }
  // q, k: the norm + rotary in place, reading the angles (the rounds' first barrier orders those
  // reads before the buffer is written); then the plain store of the tile's matrix z = n0 / nb
  __device__ __forceinline__ void store(float (&acc)[BN / 8][4], const Consumer& x, int ti, int it0, int nk, int m0, int n0,
                                        const CUtensorMap* tmO) {
    if (normed(x, m0, n0)) {
      hopper::mbar_wait(&angles_full[x.wg], angle_loads++ & 1);
      // rstd [2][M][H]: this thread's rows' first entry for the tile's heads (z M + row) H + n0' / HD
      const int H = qa.nb / HD, row0 = m0 + x.wg * WM + x.rr;
      float* const rstd = qa.rstd + ((size_t)(n0 / qa.nb) * M + row0) * H + (n0 % qa.nb) / HD;
      const int lane = x.lane;
      norm_rotary_acc<HD>(acc, my_angles(x), x.rr, lane & 3, qa.eps, [&](int h, int hh, float v) {
        if ((lane & 3) == 0 && row0 + 8 * h < M) rstd[(size_t)8 * h * H + hh] = v;
      });
    }
    store_tile<NoOp>(acc, x, it0 + nk - 1, ti, tmO, n0 % qa.nb, m0, n0 / qa.nb);
  }
};

}  // namespace gemm
