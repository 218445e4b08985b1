// Small helpers shared by the layer kernels: 16-byte packs of 8 bf16 and warp sums (from
// common/bf16_pack.cuh, which the GEMM's kernels share), the 16-byte alignment test.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "common/bf16_pack.cuh"

namespace layers {

using elementwise::bf16;
using elementwise::load8;
using elementwise::Pack8;
using elementwise::store8;
using elementwise::warp_sum;

// whether every pointer is 16-byte aligned (the layers' 16-byte loads and stores need it)
inline bool aligned16(std::initializer_list<const void*> ptrs) {
  uintptr_t a = 0;
  for (const void* p : ptrs) a |= (uintptr_t)p;
  return a % 16 == 0;
}

}  // namespace layers
