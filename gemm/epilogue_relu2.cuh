// The MLP's ReLU^2 in the epilogues of the two products that make or take its 4C-wide activation,
// so that the activation is never written and read again by a separate pass (docs/model.md):
//   forward:   r  = max(u, 0)^2,          u  = h Wfc      h  [M][K], Wfc   [K][N] (N contiguous)
//   backward:  du = 2 sqrt(r) dr,         dr = dx Wproj^T dx [M][K], Wproj [N][K] (K contiguous)
//   r, du: bf16 [M][N]. In the model K = width C, N = hidden F.
// The products' outputs u and dr are rounded to bf16 before the activation, as the unfused path
// (layers/matmul.cuh, then layers/relu2.cuh) rounds them, so the two differ only in the order of
// the fp32 sums. CPU reference: model/reference_layers.h (relu2, relu2_bwd) over an fp64 product
// (tests/layers/mlp_gemm.cu).
//
// Forward: the plain store's two rounds (gemm/epilogue_store.cuh) with r computed on the bf16
// pairs. Backward: r needs the whole tile at once, which beside 4 stages only the ring has room
// for: after a tile's slices the producer loads each warpgroup's 64 rows of r into an entry of
// the ring (its B part, a "slot"), the warpgroup writes du over r there and stores it from there,
// and its storing thread releases the slot once the store has read it (after the next tile's
// first wgmmas are issued). Each warpgroup also waits for the other's slot to land, though it
// never reads it, and releases it for its own warps, at the next tile's first slice
// (gemm/config.cuh, the rules).
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>

#include "common/fast_math.cuh"
#include "gemm/config.cuh"
#include "gemm/epilogue_store.cuh"
#include "gemm/mainloop.cuh"
#include "hopper/barrier.cuh"
#include "hopper/named_barrier.cuh"
#include "hopper/tma.cuh"
#include "hopper/wgmma.cuh"

namespace gemm {

// The epilogues' arithmetic on bf16 pairs (the accumulators rounded to bf16 as the unfused path's
// bf16 tensors are, two to a register): 2 x, exact
__device__ __forceinline__ uint32_t twice_bf16x2(uint32_t u) {
  __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&u);
  x = __hadd2(x, x);
  return *reinterpret_cast<uint32_t*>(&x);
}
// r = max(u, 0)^2 on a pair of bf16 u, in bf16x2 arithmetic: u^2 of a bf16 u is exact in fp32, so
// the one rounding of the bf16 product gives the bits of bf16(fp32 u^2), three instructions a pair
// where the fp32 form took nine
__device__ __forceinline__ uint32_t relu2_bf16x2(uint32_t u) {
  __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&u);
  x = __hmax2(x, __float2bfloat162_rn(0.f));
  x = __hmul2(x, x);
  return *reinterpret_cast<uint32_t*>(&x);
}

struct Relu2Pairs {
  static constexpr bool kActive = true;
  __device__ __forceinline__ static uint32_t pair(uint32_t u) { return relu2_bf16x2(u); }
};

// Forward: B = Wfc [K][N]; out = r through tmO.
struct Relu2Forward {
  static constexpr bool kBKMajor = false, kBatched = false;
  static constexpr int kSlots = 0;  // ring entries a tile takes after its slices
  struct Args {};
  __device__ __forceinline__ Relu2Forward(uint64_t*, const Args&, int) {}
  __device__ __forceinline__ void init_barriers() {}
  __device__ __forceinline__ static int load_after_slices(Ring&, int it, bf16*, const CUtensorMap*, int, int) { return it; }
  __device__ __forceinline__ void at_first_slice(const Consumer& x, bool prev, int it0, int, int, int, int) {
    if (prev) release_held_stage(x, it0);
  }
  __device__ __forceinline__ void after_slices(const Consumer& x, int ti, int, int) { hold_last_stage(x, ti); }
  __device__ __forceinline__ void store(float (&acc)[BN / 8][4], const Consumer& x, int ti, int it0, int nk, int m0, int n0,
                                        const CUtensorMap* tmO) {
    store_tile<Relu2Pairs>(acc, x, it0 + nk - 1, ti, tmO, n0, m0);
  }
};

// Backward: B = Wproj [N][K]; r read through tmR into the tile's two slots; out = du through tmO.
struct Relu2Backward {
  static constexpr bool kBKMajor = true, kBatched = false;
  static constexpr int kSlots = 2;  // a warpgroup's 64 x 256 of r each
  struct Args {};
  __device__ __forceinline__ Relu2Backward(uint64_t*, const Args&, int) {}
  __device__ __forceinline__ void init_barriers() {}
  // The producer, after a tile's slices: r into two slots, entries of the ring whose B part holds
  // a warpgroup's 64 x 256 (du then overwrites it there). Returns the next entry.
  __device__ __forceinline__ static int load_after_slices(Ring& ring, int it, bf16* sB, const CUtensorMap* tmR, int m0, int n0) {
    using namespace hopper;
    constexpr uint32_t kRTx = (uint32_t)(WM * BN * sizeof(bf16));
    for (int w = 0; w < 2; w++, it++) {
      ring.wait_empty(it);
      mbar_arrive_expect_tx(ring.full_of(it), kRTx);
      bf16* o = sB + (it % Shape::kStages) * BN * BK;
#pragma unroll
      for (int p = 0; p < BN / 64; p++) tma_load_panel(o + p * WM * 64, tmR, ring.full_of(it), n0 + 64 * p, m0 + w * WM);
    }
    return it;
  }
  // After the next tile's first wgmmas are issued, the previous tile's two slots: its own, once
  // its store has read it (the storer arrives for its warpgroup's four warps, all of which waited
  // for the slot's load); the other's, waited for and released by each of this warpgroup's warps,
  // which never read it. No warp skips a phase (gemm/config.cuh, the rules): the other's slot is
  // waited for before the entry four on (the same barrier), which comes no sooner than the next
  // tile's third entry, and its stage cannot be refilled before this release. (A wait right
  // after the store keeps the rules too; results/matmul/README.md compares the two.)
  __device__ __forceinline__ void at_first_slice(const Consumer& x, bool prev, int it0, int per_tile, int nk, int, int) {
    if (!prev) return;
    const int slots = it0 - per_tile + nk;
    if (x.storer) {
      hopper::store_wait_read();
      x.release_for(slots + x.wg, kConsumerThreads / 64);
    }
    x.ring.wait_full(slots + 1 - x.wg);
    x.release(slots + 1 - x.wg);
  }
  __device__ __forceinline__ void after_slices(const Consumer& x, int, int it0, int nk) { x.release(it0 + nk - 1); }
  // du = 2 sqrt(r) dr over r in the warpgroup's slot, stored from there (the other warpgroup's
  // slot is waited for at the next tile's first slice; after a block's last tile no wait follows,
  // and each slot's own warpgroup has waited for its load, so none is in flight at the exit)
  __device__ __forceinline__ void store(float (&acc)[BN / 8][4], const Consumer& x, int, int it0, int nk, int m0, int n0,
                                        const CUtensorMap* tmO) {
    using namespace hopper;
    const int os = it0 + nk + x.wg;
    x.ring.wait_full(os);
    bf16* o = x.sB + (os % Shape::kStages) * BN * BK;
#pragma unroll
    for (int j = 0; j < BN / 8; j += 2) {  // two n8 blocks, then their stmatrix
#pragma unroll
      for (int jj = j; jj < j + 2; jj++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const float2 rf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(o + sw128<WM>(x.rr + 8 * h, jj) + x.c0));
          // as relu2.cuh, bf16(2 sqrt(r) bf16(dr)), as 2 bf16(sqrt(r) bf16(dr)): the 2 scales
          // exactly, and is applied to the packed pairs below (dr rounded to bf16 as a pair)
          const float2 dr = __bfloat1622float2(__floats2bfloat162_rn(acc[jj][2 * h], acc[jj][2 * h + 1]));
          acc[jj][2 * h] = sqrt_approx(rf.x) * dr.x;
          acc[jj][2 * h + 1] = sqrt_approx(rf.y) * dr.y;
        }
      // The stmatrix writes blocks j, j + 1 of this warp's rows, whose r every lane has read
      // before it (a warp's shared-memory accesses complete in order).
      uint32_t f[4];
      tc::c_to_a(f, acc[j], acc[j + 1]);
#pragma unroll
      for (int i = 0; i < 4; i++) f[i] = twice_bf16x2(f[i]);
      stmatrix_x4(tc::smem_addr(o + sw128<WM>(x.srow, j + (x.lane >> 4))), f);
    }
    fence_proxy_async();
    named_sync(kWarpgroupBar + x.wg, 128);
    if (x.storer) {
#pragma unroll
      for (int p = 0; p < BN / 64; p++) tma_store_panel(o + p * WM * 64, tmO, n0 + 64 * p, m0 + x.wg * WM);
      store_commit();
    }
  }
};

}  // namespace gemm
