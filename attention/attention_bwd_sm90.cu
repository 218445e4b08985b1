// Backward of fused masked attention on Hopper (sm90a: wgmma), same math as attention_bwd.cu:
//
//   P = exp(S - lse)  (S = scale Q K^T + mask, recomputed),  Drow = rowsum(dO * O) and lse in
//   log2 units from attention_bwd.cu's pre-pass
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - Drow),  dQ = scale dS K,  dK = scale dS^T Q
//   Q, K, V, dO, dQ, dK, dV: bf16 [T, H, D];  lse, Drow: fp32 [H, T];  D in {64, 128}.
//
// Two ways, both deterministic (dispatch.cu picks one: KernelChoice in attention.h):
// - fused (D = 128 by default): one block of two warpgroups owns 128 keys (64 a warpgroup) and
//   walks the query tiles of 64 that see them. Per tile, each warpgroup computes
//     S^T = K Q^T, dP^T = V dO^T          wgmma, operands in shared memory
//     P^T, dS^T                            registers, then shared memory
//     dV += P^T dO, dK += dS^T Q           wgmma, left running under the next tile's P^T, dS^T
//     dQ_share = dS K                      wgmma over the block's 128 keys (half of D each)
//   and each query tile's dQ shares are added into fp32 sums by the tensor-memory engine in a
//   fixed order (by key block: dq_order.cuh, tile_scheduler.cuh), then converted to bf16.
// - two kernels: dK/dV as above without dQ (P^T, dS^T stay in registers as the next wgmma's A),
//   and dQ from its own kernel, one block per 128 queries walking key tiles of 64 (S = Q K^T,
//   dP = dO V^T again; dQ += dS K), on a second stream beside dK/dV. At head dim 64 with a
//   window or documents both kernels' blocks own 64 keys or queries (one warpgroup), three
//   blocks an SM (tile_scheduler.cuh bwd_small_tiles); without, 128 (two warpgroups) walking
//   tiles of 128 (kB90WideWalk). At head dim 64 the dK/dV kernel waits for each tile's updates
//   in its own step (registers: bwd_key_owner_sm90.cuh).
// With k_norm (attention.h NormRotary) the key-owning kernels store the gradient of the pre-norm
// k instead of dK, from their K tile (norm_rotary_bwd.cuh KeyNormRotary); with q_norm the fused
// backward's dQ conversion does the same for q.
// Tiles stream through shared buffers, loaded by the TMA (tma_tiles.cuh: one thread issues a tile; the
// fp32 lse2 and Drow rows by cp.async) and signalled by mbarriers (a buffer is rewritten once every
// warp has released it). The fused kernel's dK and dV leave the same way: staged in shared memory,
// stored by the TMA.
// The main loops: bwd_key_owner_sm90.cuh (dK, dV, and with dq_order.cuh the fused dQ shares) and
// bwd_dq_sm90.cuh (the dQ kernel), on bwd_common_sm90.cuh; this file launches them.
#include <cmath>
#include <tuple>

#include "attention/bwd_dq_sm90.cuh"
#include "attention/bwd_key_owner_sm90.cuh"
#include "attention/kernels.h"
#include "attention/norm_rotary_bwd.cuh"
#include "attention/tma_tiles.cuh"

namespace attn {

// The dQ kernel runs on a second stream beside the dK/dV kernel (they share only inputs), so
// that each fills the SMs the other's last blocks leave idle; the caller's stream waits for both.
// One side stream and two events per device, made on first use.
struct SideStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
};
static cudaError_t side_stream(SideStream*& out) {
  static SideStream side[64];
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev < 0 || dev >= 64) return cudaErrorInvalidDevice;
  SideStream& s = side[dev];
  if (!s.stream) {
    if ((err = cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking)) != cudaSuccess) return err;
    if ((err = cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming)) != cudaSuccess) return err;
    if ((err = cudaEventCreateWithFlags(&s.join, cudaEventDisableTiming)) != cudaSuccess) return err;
  }
  out = &s;
  return cudaSuccess;
}

// Tensor maps of Q, K, V and dO for the kernels' TMA loads: boxes of q_rows query rows (Q, dO)
// and of k_rows key rows (K, V).
struct BwdMaps {
  CUtensorMap q, k, v, dout;
};
template <int D>
static cudaError_t bwd_maps(BwdMaps* m, const bf16* q, const bf16* k, const bf16* v, const bf16* dout, int T, int H, int q_rows,
                            int k_rows) {
  cudaError_t err;
  for (auto [map, x, rows] : {std::tuple{&m->q, q, q_rows}, std::tuple{&m->k, k, k_rows}, std::tuple{&m->v, v, k_rows},
                              std::tuple{&m->dout, dout, q_rows}})
    if ((err = make_tile_map(map, x, T, H, D, rows)) != cudaSuccess) return err;
  return cudaSuccess;
}

// The two-kernel backward, blocks owning OWN keys (dK/dV) and OWN_Q queries (dQ).
// KT: the dQ kernel's key tiles; QT: the dK/dV kernel's query tiles.
template <int D, int OWN, int OWN_Q, int KT = kB90Walk, int QT = kB90Walk>
static cudaError_t launch_two_kernels(const bf16* q, const bf16* k, const bf16* v, const bf16* dout, bf16* dq, bf16* dk,
                                      bf16* dv, const BwdWorkspace& ws, int T, int H, const MaskBounds& mb,
                                      float scale_log2, float scale, const NormRotary& kn, bool heads_fastest, cudaStream_t stream) {
  constexpr size_t smem_dkdv = dkdv_sm90_smem<D, OWN, QT>(), smem_dq = dq_sm90_smem<D, OWN_Q, KT>();
  auto dkdv_kernel = attention_bwd_dkdv_sm90_kernel<D, OWN, QT>;
  auto dq_kernel = attention_bwd_dq_sm90_kernel<D, OWN_Q, KT>;
  cudaError_t err = cudaFuncSetAttribute(dkdv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dkdv);
  if (err != cudaSuccess) return err;
  if ((err = cudaFuncSetAttribute(dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dq)) != cudaSuccess)
    return err;
  SideStream* side = nullptr;
  if ((err = side_stream(side)) != cudaSuccess) return err;
  BwdMaps key_owner, query_owner;  // dK/dV walks query tiles of QT, dQ key tiles of KT
  if ((err = bwd_maps<D>(&key_owner, q, k, v, dout, T, H, QT, OWN)) != cudaSuccess) return err;
  if ((err = bwd_maps<D>(&query_owner, q, k, v, dout, T, H, OWN_Q, KT)) != cudaSuccess) return err;

  const dim3 grid_dq((T + OWN_Q - 1) / OWN_Q, H), grid_dkdv((T + OWN - 1) / OWN * H);  // dK/dV: tile_scheduler.cuh key_block_of
  if ((err = cudaEventRecord(side->fork, stream)) != cudaSuccess) return err;
  if ((err = cudaStreamWaitEvent(side->stream, side->fork, 0)) != cudaSuccess) return err;
  dkdv_kernel<<<grid_dkdv, 2 * OWN, smem_dkdv, stream>>>(key_owner.q, key_owner.k, key_owner.v, key_owner.dout, ws.lse2,
                                                         ws.drow, dk, dv, T, H, mb, scale_log2, scale, kn, heads_fastest);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  dq_kernel<<<grid_dq, 2 * OWN_Q, smem_dq, side->stream>>>(query_owner.q, query_owner.k, query_owner.v, query_owner.dout, ws.lse2,
                                                      ws.drow, dq, T, H, mb, scale_log2, scale);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  if ((err = cudaEventRecord(side->join, side->stream)) != cudaSuccess) return err;
  return cudaStreamWaitEvent(stream, side->join, 0);
}

template <int D>
static cudaError_t launch_bwd_sm90(const bf16* q, const bf16* k, const bf16* v, const bf16* dout, bf16* dq, bf16* dk,
                                   bf16* dv, const BwdWorkspace& ws, int T, int H, const MaskDesc& mask, bool fused,
                                   bool small, const NormRotary* q_norm, const NormRotary* k_norm, cudaStream_t stream) {
  const MaskBounds mb = make_bounds(mask, T);
  const NormRotary kn = k_norm ? *k_norm : NormRotary{};  // rstd null: dK plain
  const bool hf = bwd_heads_fastest(mask);
  const float scale = (float)(1.0 / std::sqrt((double)D)), scale_log2 = (float)(M_LOG2E / std::sqrt((double)D));
  cudaError_t err;

  if (fused) {
    // dq_ranges and the zeroed dq_count come from the pre-pass (dispatch.cu asks it for them)
    const dim3 grid((T + kB90Own - 1) / kB90Own * H);  // tile_scheduler.cuh key_block_of
    constexpr size_t smem = fused_sm90_smem<D>();
    static_assert(fused_sm90_smem_used<D>() <= kSmemOptin, "fused backward: shared memory");
    auto fused_kernel = hf ? attention_bwd_fused_sm90_kernel<D, true> : attention_bwd_fused_sm90_kernel<D, false>;
    err = cudaFuncSetAttribute(fused_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (err != cudaSuccess) return err;
    BwdMaps m;
    CUtensorMap tm_dk, tm_dv;  // the kernel stores dK and dV by the TMA, a key block at a time
    if ((err = bwd_maps<D>(&m, q, k, v, dout, T, H, kB90Walk, kB90Own)) != cudaSuccess) return err;
    if ((err = make_tile_map(&tm_dk, dk, T, H, D, kB90Own)) != cudaSuccess) return err;
    if ((err = make_tile_map(&tm_dv, dv, T, H, D, kB90Own)) != cudaSuccess) return err;
    fused_kernel<<<grid, kB90Threads, smem, stream>>>(m.q, m.k, m.v, m.dout, ws.lse2, ws.drow, ws.dq_ranges, ws.dq_count,
                                                      ws.dq_acc, tm_dk, tm_dv, T, H, mb, scale_log2, scale, kn);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    const int warps = 8;
    const unsigned blocks = (unsigned)(((size_t)T * H + warps - 1) / warps);
    if (q_norm)
      attention_bwd_dq_convert_kernel<D, true><<<blocks, warps * 32, 0, stream>>>(ws.dq_acc, ws.dq_ranges, dq, T, H, scale, q, *q_norm);
    else
      attention_bwd_dq_convert_kernel<D, false><<<blocks, warps * 32, 0, stream>>>(ws.dq_acc, ws.dq_ranges, dq, T, H, scale, q, {});
    return cudaGetLastError();
  }

  if constexpr (D == 64)
    err = small ? launch_two_kernels<D, kB90SmallOwn, kB90SmallOwn>(q, k, v, dout, dq, dk, dv, ws, T, H, mb, scale_log2, scale, kn,
                                                                    hf, stream)
                : launch_two_kernels<D, kB90Own, kB90Own, kB90WideWalk, kB90WideWalk>(q, k, v, dout, dq, dk, dv, ws, T, H, mb,
                                                                                   scale_log2, scale, kn, hf, stream);
  else
    err = launch_two_kernels<D, kB90Own, kB90Own>(q, k, v, dout, dq, dk, dv, ws, T, H, mb, scale_log2, scale, kn, hf, stream);
  if (err != cudaSuccess || q_norm == nullptr) return err;
  return norm_rotary_backward_inplace(dq, q, *q_norm, T, H, D, stream);  // after the join: dq is complete
}

cudaError_t attention_backward_sm90(const bf16* q, const bf16* k, const bf16* v, const bf16* dout, bf16* dq, bf16* dk,
                                    bf16* dv, const BwdWorkspace& ws, int T, int H, int D, const MaskDesc& mask, bool fused,
                                    bool small, const NormRotary* q_norm, const NormRotary* k_norm, cudaStream_t stream) {
  if (D == 64) return launch_bwd_sm90<64>(q, k, v, dout, dq, dk, dv, ws, T, H, mask, fused, small, q_norm, k_norm, stream);
  if (D == 128) return launch_bwd_sm90<128>(q, k, v, dout, dq, dk, dv, ws, T, H, mask, fused, small, q_norm, k_norm, stream);
  return cudaErrorInvalidValue;
}

}  // namespace attn
