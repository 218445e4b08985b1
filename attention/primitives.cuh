// What the attention kernel families share beyond common/tensor_core.cuh (whose primitives
// they use unqualified): the store of accumulator rows into a [T, H, D] tensor.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "common/tensor_core.cuh"

namespace attn {

using namespace tc;

// Writes this thread's two rows (row0 and row0 + 8, g = lane / 4 of a 16-row block) of a
// C-layout accumulator with D columns as bf16 into head h of a [T, H, D] tensor, row r scaled
// by scale[r]; rows at or past T are skipped.
template <int D>
__device__ __forceinline__ void store_rows(bf16* out, const float (&acc)[D / 8][4], int row0, int T, int H, int h, int lane,
                                           const float (&scale)[2]) {
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int row = row0 + 8 * r;
    if (row >= T) continue;
    bf16* p = out + (size_t)row * H * D + (size_t)h * D + 2 * (lane & 3);
#pragma unroll
    for (int nb = 0; nb < D / 8; nb++)
      *reinterpret_cast<__nv_bfloat162*>(p + nb * 8) = __floats2bfloat162_rn(acc[nb][2 * r] * scale[r], acc[nb][2 * r + 1] * scale[r]);
  }
}

}  // namespace attn
