// setmaxnreg: a warpgroup raises (inc) or lowers (dec) the registers each of its threads holds,
// so that a warp-specialised kernel's producer gives registers to its consumers. N is a multiple
// of 8 in [24, 256]; every warp of the warpgroup runs it together (.sync.aligned).
#pragma once

namespace hopper {

template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

}  // namespace hopper
