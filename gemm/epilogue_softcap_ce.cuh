// The softcapped cross-entropy's first pass in the epilogue of the lm head's product, so that the
// logits are never written and read again by a separate pass (docs/model.md). For rows r of a
// chunk, h [M][K] (the final norm's output), W [K][N] (the head, N = vocabulary, contiguous),
// targets t[M]:
//   z = bf16(h W)                          (rounded as the unfused head's bf16 output)
//   q = exp(30 tanh(z / 30) - 30),  g = bf16(q (1 - tanh^2(z / 30)) / 4)       [M][N], written
//   part[r][j] = sum of q over the columns of tile j (256 wide, columns < N)   [M][ceil(N/256)]
//   zt[r] = z[r][t_r]                                                           [M] (t_r in [0, N))
// The second pass (gemm/head_ce.cuh head_ce_finalize) turns these into the loss and the
// gradient. Special functions as layers/softcap_ce.cuh's (SoftcapTerms, common/softcap.cuh); all
// arithmetic fp32.
// CPU reference: model/reference_layers.h softcap_ce (tests/layers/head_ce.cu).
//
// It runs under the next tile's slices (gemm/gemm_deferred_sm90.cuh): after a tile's last slice
// each consumer thread packs its 128 outputs as bf16 pairs (take: 64 registers beside the 128
// accumulators), and while the tensor cores run the next tile's first kSubs slices the consumers
// compute q and g on those pairs in kSubs steps, one a slice (step): the epilogue's three special
// functions an element, 6144 cycles of the SM's special-function unit a tile, would otherwise
// stall the tensor cores for half of the tile's 12288. g is stored by the TMA in two rounds of 128
// columns through the warpgroup's 16 KB buffer (gemm/epilogue_store.cuh store_round).
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>

#include "common/softcap.cuh"
#include "gemm/config.cuh"
#include "gemm/epilogue_store.cuh"
#include "gemm/mainloop.cuh"
#include "gemm/tile_scheduler.cuh"
#include "hopper/named_barrier.cuh"
#include "hopper/tma.cuh"
#include "hopper/wgmma.cuh"

namespace gemm {

// The epilogue's arguments: the targets of the chunk's rows (those past M are not read), and
// where part and zt go.
struct SoftcapCeArgs {
  const int* __restrict__ targets;
  float* __restrict__ part;
  float* __restrict__ zt;
};

// the halves of a bf16 pair as fp32 (shifts keep the pair in a register)
__device__ __forceinline__ float bf16_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

struct SoftcapCE {
  using Args = SoftcapCeArgs;
  static constexpr int kSubs = 12;        // epilogue steps, one under each of the next tile's first slices (K = 768: all 12)
  static constexpr int kBlocks = BN / 8;  // n8 blocks of a thread's accumulator: 32
  // The n8 blocks epilogue step s takes: [sub_begin(s), sub_begin(s + 1))
  __host__ __device__ static constexpr int sub_begin(int s) { return s * kBlocks / kSubs; }

  // The previous tile's state: its outputs as bf16 pairs (z, then g in place; block j, row rr +
  // 8 h), its origin, the columns left in it (N - pn0), its rows' targets relative to this
  // thread's first column, and this thread's sums of q over its columns, a row each.
  uint32_t pk[kBlocks][2];
  int pm0 = 0, pn0 = 0, pcols = 0, dt[2] = {-1, -1};
  float qsum[2] = {0.f, 0.f};
  int tgt[2];  // the current tile's rows' targets, loaded at its start: its epilogue needs them after its slices

  // At a tile's start (have: the tile exists).
  __device__ __forceinline__ void begin_tile(const Consumer& x, const Args& a, bool have, int m0, int M) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int row = m0 + x.wg * WM + x.rr + 8 * h;
      tgt[h] = have && row < M ? a.targets[row] : -1;
    }
  }
  // After a tile's slices: its z as bf16 pairs, for its epilogue under the next tile's slices.
  __device__ __forceinline__ void take(const float (&acc)[kBlocks][4], const Consumer& x, int m0, int n0, int N) {
#pragma unroll
    for (int j = 0; j < kBlocks; j++)
#pragma unroll
      for (int h = 0; h < 2; h++) pk[j][h] = tc::pack_bf16(acc[j][2 * h], acc[j][2 * h + 1]);
    pm0 = m0, pn0 = n0, pcols = N - n0;
#pragma unroll
    for (int h = 0; h < 2; h++) dt[h] = tgt[h] - n0 - x.c0;  // a target < 0 never meets a column
  }
  // Epilogue step sub of the previous tile: q and g on the pairs of blocks [sub_begin(sub),
  // sub_begin(sub + 1)); a round of 128 columns complete goes out through the warpgroup's buffer;
  // the last step writes the row sums.
  __device__ __forceinline__ void step(int sub, const Consumer& x, const Args& a, const CUtensorMap* tmO, int M, int tn) {
    using namespace hopper;
    bf16* my_c = x.sC + x.wg * WM * OC;
#pragma unroll
    for (int j = sub_begin(sub); j < sub_begin(sub + 1); j++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const float za = bf16_lo(pk[j][h]), zb = bf16_hi(pk[j][h]);
        const elementwise::SoftcapTerms ta(za), tb(zb);
        const float qa = ta.q(), qb = tb.q();
        if (8 * j < pcols) qsum[h] += qa + qb;  // both columns are inside N, or neither (N % 8 == 0)
        if (dt[h] == 8 * j) a.zt[pm0 + x.wg * WM + x.rr + 8 * h] = za;
        if (dt[h] == 8 * j + 1) a.zt[pm0 + x.wg * WM + x.rr + 8 * h] = zb;
        pk[j][h] = tc::pack_bf16(qa * ta.dtanh_4(), qb * tb.dtanh_4());
      }
    // a round of 128 columns complete: through the warpgroup's buffer, stored by TMA
    if (sub_begin(sub + 1) % (OC / 8) == 0 && sub_begin(sub + 1) > sub_begin(sub)) {
      const int round = sub_begin(sub + 1) / (OC / 8) - 1;
      if (x.storer) store_wait_read();  // the previous round has left the buffer
      named_sync(kWarpgroupBar + x.wg, 128);
#pragma unroll
      for (int j = 0; j < OC / 8; j += 2) {
        const int jb = round * OC / 8 + j;
        const uint32_t f[4] = {pk[jb][0], pk[jb][1], pk[jb + 1][0], pk[jb + 1][1]};
        stmatrix_x4(tc::smem_addr(my_c + sw128<WM>(x.srow, j + (x.lane >> 4))), f);
      }
      store_round(my_c, tmO, pn0 + round * OC, pm0 + x.wg * WM, x.wg, x.storer);
    }
    if (sub == kSubs - 1) {  // the row sums of the previous tile: the four threads of a row, then one writes
#pragma unroll
      for (int h = 0; h < 2; h++) {
        float v = qsum[h];
        v += __shfl_xor_sync(0xffffffff, v, 1);
        v += __shfl_xor_sync(0xffffffff, v, 2);
        const int row = pm0 + x.wg * WM + x.rr + 8 * h;
        if ((x.lane & 3) == 0 && row < M) a.part[(size_t)row * tn + pn0 / BN] = v;
        qsum[h] = 0.f;
      }
    }
  }
};

}  // namespace gemm
