// The rotary position embedding (docs/model.md): its table, for j < D/2 and position t the angle
// t * f_j with f_j = 10000^(-j/(D/2)) as (cos, sin), [T][D/2] float2, is common/rotary_table.h's
// (built once on the host in fp64; the GEMM's q, k, v epilogue reads it too). The rotation itself
//   y1 = x1 cos + x2 sin,   y2 = -x1 sin + x2 cos   (x1 = x[.., j], x2 = x[.., D/2 + j])
// runs fused with the per-head norm of q and k (qk_norm_rotary.cuh); the plain kernel it is
// tested against is in tests/oracle_kernels.cuh. CPU reference: model/reference_layers.h (rotary).
#pragma once
#include "common/rotary_table.h"
#include "layers/common.cuh"

namespace layers {

using elementwise::rotary_table;

}  // namespace layers
