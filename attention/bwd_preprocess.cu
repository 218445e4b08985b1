// The backward's pre-pass, shared by both kernel families:
//   Drow[h, i] = sum_d dO[i, h, d] * O[i, h, d]   (the rowsum in dS = P * (dP - Drow))
//   lse2[h, i] = lse[h, i] * log2(e)               (lse in log2 units, +inf for a row that kept nothing)
// O, dO: bf16 [T, H, D]; lse, Drow, lse2: fp32 [H, T].
// One warp takes kPreRows consecutive positions of one head, their loads issued together, and
// lane r writes position r's results, so the [H, T] reads and writes are runs of kPreRows floats
// instead of one float a warp; a position's arithmetic is the one-warp-a-row kernel's (lane l
// sums dims 2l, 2l + 1, then 2l + 64, 2l + 65; then a shuffle tree), so the bits are too. Two
// positions a warp keep twice a warp's loads in flight and write runs of two floats.
// For the sm90 fused backward (dq_order.cuh) the same launch also writes dq_ranges and zeroes
// dq_count, in blocks placed first in the grid: a launch and a memset fewer a call, and the
// ranges' dependent loads (the documents' searches) run beside the rows instead of alone.
#include "attention/dq_order.cuh"
#include "attention/kernels.h"
#include "attention/softmax.cuh"

namespace attn {

constexpr int kPreRows = 2;

// order_blocks > 0: blocks 0 .. order_blocks - 1 write dq_ranges for the query tiles of the
// fused backward and zero dq_count [H][tiles]; the rest take the rows.
template <int D>
__global__ void attention_bwd_drow_kernel(const bf16* __restrict__ O, const bf16* __restrict__ dO, const float* __restrict__ LSE,
                                          float* __restrict__ drow, float* __restrict__ lse2, int T, int H, MaskBounds mb,
                                          int2* __restrict__ dq_ranges, unsigned* __restrict__ dq_count, int order_blocks) {
  if ((int)blockIdx.x < order_blocks) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x, n_tiles = (T + kB90Walk - 1) / kB90Walk;
    if (j < H * n_tiles) dq_count[j] = 0;
    if (j < n_tiles) dq_ranges[j] = dq_range_of(mb, j);
    return;
  }
  const size_t w = (size_t)(blockIdx.x - order_blocks) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31, h = (int)(w % H);
  const size_t i0 = (w / H) * kPreRows;
  if (i0 >= (size_t)T) return;
  constexpr int N = D / 64;  // bf16 pairs a lane a row
  float2 a[kPreRows][N], b[kPreRows][N];
#pragma unroll
  for (int r = 0; r < kPreRows; r++)
#pragma unroll
    for (int j = 0; j < N; j++)
      if (i0 + r < (size_t)T) {
        const size_t off = ((i0 + r) * H + h) * D + 2 * lane + 64 * j;
        a[r][j] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(O + off));
        b[r][j] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(dO + off));
      }
  float mine = 0.f;
#pragma unroll
  for (int r = 0; r < kPreRows; r++) {
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < N; j++) s += a[r][j].x * b[r][j].x + a[r][j].y * b[r][j].y;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
    if (lane == r) mine = s;
  }
  if (lane < kPreRows && i0 + lane < (size_t)T) {
    const size_t at = (size_t)h * T + i0 + lane;
    drow[at] = mine;
    lse2[at] = lse_log2(LSE[at]);
  }
}

cudaError_t attention_bwd_preprocess(const bf16* o, const bf16* dout, const float* lse, const BwdWorkspace& ws, int T, int H,
                                     int D, const MaskBounds* dq_order, cudaStream_t stream) {
  const int warps = 8, threads = warps * 32;
  const size_t work = ((size_t)T + kPreRows - 1) / kPreRows * H;  // warps in all
  if (D != 64 && D != 128) return cudaErrorInvalidValue;
  if (T <= 0 || H <= 0) return cudaSuccess;
  const size_t counts = (size_t)H * ((T + kB90Walk - 1) / kB90Walk);  // dq_count's entries, as many threads
  const int order_blocks = dq_order ? (int)((counts + threads - 1) / threads) : 0;
  const unsigned blocks = (unsigned)((work + warps - 1) / warps) + order_blocks;
  const MaskBounds mb = dq_order ? *dq_order : MaskBounds{};
  if (D == 64)
    attention_bwd_drow_kernel<64><<<blocks, threads, 0, stream>>>(o, dout, lse, ws.drow, ws.lse2, T, H, mb, ws.dq_ranges, ws.dq_count, order_blocks);
  else
    attention_bwd_drow_kernel<128><<<blocks, threads, 0, stream>>>(o, dout, lse, ws.drow, ws.lse2, T, H, mb, ws.dq_ranges, ws.dq_count, order_blocks);
  return cudaGetLastError();
}

}  // namespace attn
