// The special-function unit's 2^x, 1/x and sqrt(x) as single instructions (ex2.approx.ftz about
// 2 ulp, rcp.approx.ftz and sqrt.approx.ftz about 1 ulp; a result below 2^-126 flushes to 0,
// 2^-inf is 0 and 1/inf is 0). sqrtf is correctly rounded through a branch and a refinement.
// exp2f and __fdividef wrap the same instructions in range tests and multiplies that keep
// subnormal results, which none of the callers needs (softmax probabilities, the softcapped
// cross-entropy's terms): in kernels bound by instruction issue or by this unit, those extra
// instructions cost time.
#pragma once

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float sqrt_approx(float x) {
  float y;
  asm("sqrt.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
