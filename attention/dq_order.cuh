// The fused backward's dQ, added in a fixed order (attention_bwd_sm90.cu, fused kernel), so that
// the backward stays deterministic without a separate dQ pass.
//
// The fused kernel adds each key block's share of a query tile's dQ (fp32) into dq_acc with
// the tensor-memory engine (a bulk reduce from shared memory). To stay deterministic the shares
// of one tile are added in a fixed order of key blocks: decreasing, or increasing in the heads
// where tile_scheduler.cuh's key_block_at sets `rising` (dq_rank). Which key blocks have a share
// in query tile m is exact and cheap to know: every query keeps an interval of keys that contains
// itself (mask.h row_keys), so the keys some query of the tile keeps are the interval
// key_range(tile) and every key block that meets it has kept pairs with the tile (and walks it).
// dq_ranges[m] = that range of key blocks (empty: first > last); the block of rank r adds after
// dq_count[h][m] reached r (and the first writes instead of adding, so dq_acc needs no
// clearing). The contract with the tile scheduler (tile_scheduler.cuh, key_block_at): a block
// only ever waits for the shares of blocks of smaller index, started before it; the wait traps
// after 20 s instead of hanging should that ever fail. (tests/test_attention_cpu.cpp checks the
// claim about key_range and the contract on random masks.)
#pragma once
#include <cstdint>

#include "attention/kernels.h"
#include "attention/mask.h"
#include "attention/primitives.cuh"
#include "attention/norm_rotary_bwd.cuh"
#include "attention/tile_scheduler.cuh"

namespace attn {

// dq_ranges[m]: the key blocks with a share in query tile m (written by the backward's pre-pass,
// bwd_preprocess.cu, which also zeroes dq_count).
__device__ __forceinline__ int2 dq_range_of(const MaskBounds& mb, int m) {
  int k_lo, k_hi;
  key_range(mb, m * kB90Walk, m * kB90Walk + kB90Walk, k_lo, k_hi);
  return k_lo > k_hi ? make_int2(1, 0) : make_int2(k_lo / kB90Own, k_hi / kB90Own);
}

// Where (row, col) of a 64 x D dQ tile sits in dq_acc's tile and in the staging buffer: row-major
// with column groups of 8 permuted by the row (col ^ 8 (row % 8)), so that a warp's stores of
// its accumulator rows hit 32 different banks.
template <int D>
__host__ __device__ __forceinline__ int dq_tile_index(int row, int col) {
  return row * D + (col ^ ((row & 7) << 3));
}

// dQ[i, h, :] = bf16(scale * dq_acc row), zeros where no block added (a tile that keeps nothing);
// with QNORM the gradient of the pre-norm q instead (norm_rotary_bwd.cuh), from the fp32 row and
// Q's.
// dq_acc: [H][tiles of 64 rows][64 x D, dq_tile_index] fp32. One warp a row, lane l holding dims
// 64 k + 2 l + {0, 1}.
template <int D, bool QNORM>
__global__ void attention_bwd_dq_convert_kernel(const float* __restrict__ dq_acc, const int2* __restrict__ ranges,
                                                bf16* __restrict__ dQ, int T, int H, float scale, const bf16* __restrict__ Q,
                                                NormRotary qn) {
  const int w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (w >= T * H) return;  // uniform in the warp (the norm's shuffles need all of it)
  const int i = w / H, h = w % H, m = i / kB90Walk, n_tiles = (T + kB90Walk - 1) / kB90Walk;
  const int2 r = ranges[m];
  const float* src = dq_acc + ((size_t)h * n_tiles + m) * kB90Walk * D;
  float g[D / 32];
#pragma unroll
  for (int k = 0; k < D / 64; k++) {
    const float2 x = r.x <= r.y ? *reinterpret_cast<const float2*>(src + dq_tile_index<D>(i % kB90Walk, 64 * k + 2 * lane))
                                : make_float2(0.f, 0.f);
    g[2 * k] = x.x * scale, g[2 * k + 1] = x.y * scale;
  }
  if constexpr (QNORM) norm_rotary_backward_row<D>(g, Q, qn, i, h, H, lane);
#pragma unroll
  for (int k = 0; k < D / 64; k++)
    *reinterpret_cast<__nv_bfloat162*>(dQ + (size_t)w * D + 64 * k + 2 * lane) = __floats2bfloat162_rn(g[2 * k], g[2 * k + 1]);
}

__device__ __forceinline__ unsigned ld_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
// Waits until *count == want (relaxed reads: the issuing thread orders itself with an acquire
// fence before its bulk operation). A wait of more than 20 s means a block this one depends on
// never ran (blocks launched out of order): trap rather than hang.
__device__ __forceinline__ void wait_count(const unsigned* count, unsigned want) {
  const uint64_t t0 = global_ns();
  while (ld_relaxed(count) != want) {
    __nanosleep(64);
    if (global_ns() - t0 > 20000000000ull) __trap();
  }
}
// Only the thread with `issue` set does the work of the two functions below (a predicate inside
// the asm, not a branch: every thread of the block runs this code, so the compiler sees no
// divergent path around the wgmmas).
//
// Counts the previous share as added (if `count_prev`: once the issuing thread's last bulk
// operation is complete), then dst (global) = or += src (shared), bytes a multiple of 16, by the
// tensor-memory engine. One fence does both orderings: with the relaxed count increment after
// it, it releases the previous share's addition; after the relaxed reads that saw this share's
// turn come, it acquires the shares added before. (A release on its own, then an acquire, cost
// two fences a step, each stalling the block at its next barrier.)
__device__ __forceinline__ void count_prev_then_add(unsigned* prev, bool count_prev, float* dst, const float* src,
                                                    int bytes, bool add, bool issue) {
  asm volatile(
      "{\n.reg .pred p, a, pa, ps, pc;\nsetp.ne.b32 p, %4, 0;\nsetp.ne.b32 a, %5, 0;\n"
      "and.pred pa, p, a;\nand.pred ps, p, !a;\nsetp.ne.and.b32 pc, %6, 0, p;\n"
      "@p cp.async.bulk.wait_group 0;\n"
      "@p fence.proxy.async.global;\n"
      "@p fence.acq_rel.gpu;\n"
      "@pc red.relaxed.gpu.global.add.u32 [%0], 1;\n"
      "@p fence.proxy.async.global;\n"
      "@pa cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%1], [%2], %3;\n"
      "@ps cp.async.bulk.global.shared::cta.bulk_group [%1], [%2], %3;\n"
      "@p cp.async.bulk.commit_group;\n}\n" ::"l"(prev),
      "l"(dst), "r"(smem_addr(src)), "r"(bytes), "r"((int)issue), "r"((int)add), "r"((int)count_prev)
      : "memory");
}
// Waits until the bulk operations of the issuing thread have read their shared memory.
__device__ __forceinline__ void bulk_wait_read(bool issue) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p cp.async.bulk.wait_group.read 0;\n}\n" ::"r"((int)issue)
               : "memory");
}
// Waits until the bulk operations of the issuing thread are complete, then (that thread) counts
// one more share of the tile.
__device__ __forceinline__ void bulk_done_signal(unsigned* count, bool issue) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %1, 0;\n"
      "cp.async.bulk.wait_group 0;\n"
      "@p fence.proxy.async.global;\n"
      "@p red.release.gpu.global.add.u32 [%0], 1;\n}\n" ::"l"(count),
      "r"((int)issue)
      : "memory");
}

}  // namespace attn
