// FP8 formats, per-tensor scales and a CPU reference FP8 product: the plain C++ reference that the
// FP8 GEMM paths (the head, the MLP's up- and down-projections) are to be checked against. No
// kernel uses it yet; docs/model.md ("FP8 products") says how the trainer is to use each part.
//
// Formats (OCP FP8, as CUDA's __nv_fp8_e4m3 / __nv_fp8_e5m2 and PyTorch's float8_e4m3fn /
// float8_e5m2):
//   e4m3 ("fn", finite only): bias 7, 3 mantissa bits, max 448, smallest subnormal 2^-9;
//        0x7f / 0xff are NaN, no infinity.
//   e5m2: bias 15, 2 mantissa bits, max 57344, smallest subnormal 2^-16; 0x7c / 0xfc are
//        +-infinity, 0x7d..0x7f / 0xfd..0xff NaN.
// Conversion float -> fp8 here is what a GEMM epilogue does when it emits FP8: round to nearest,
// ties to even, and saturate to the finite maximum (CUDA's __NV_SATFINITE, PTX
// cvt.rn.satfinite): anything at or beyond the max, infinity included, becomes +-max; NaN stays
// NaN. The bits follow CUDA's host conversions exactly (__nv_cvt_float_to_fp8,
// __nv_cvt_fp8_to_halfraw; tests/test_fp8.cpp checks every fp8 pattern and a dense sweep of
// floats): any NaN, of either sign, becomes the canonical 0x7f in both formats, and an fp8 NaN
// reads back as a positive NaN. A kernel test still compares NaN outputs as NaN, not bit for bit.
// (PyTorch's eager cast to float8_e4m3fn does not saturate: from 480 up it writes NaN.)
//
// Scales: a tensor x is stored as q = fp8(x * quant) and read back as x ~ q * dequant, with
// dequant = 1 / quant; a product of two such tensors is (qa qb^T) * (dequant_a * dequant_b).
// Static scales are fixed per tensor (the head); delayed scales come from the amax the producing
// pass saw before (the down-projection's activations and weights); see the structs below.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__CUDACC__)
#define FP8_HD __host__ __device__
#else
#define FP8_HD
#endif

enum class Fp8Format { E4M3, E5M2 };

// The largest finite value of each format.
constexpr float kFp8E4M3Max = 448.0f;
constexpr float kFp8E5M2Max = 57344.0f;

FP8_HD inline float fp8_max(Fp8Format f) { return f == Fp8Format::E4M3 ? kFp8E4M3Max : kFp8E5M2Max; }

namespace fp8_detail {
FP8_HD inline uint32_t float_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
FP8_HD inline float bits_float(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

// float -> fp8 code with `mbits` mantissa bits, exponent bias `bias` and largest finite code
// `max_code` (the code of the largest finite value, sign bit clear).
FP8_HD inline uint8_t from_float(float x, int mbits, int bias, uint32_t max_code) {
  const uint32_t u = float_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fu;  // NaN, either sign: the canonical NaN 0x7f
  if (a == 0x7f800000u) return static_cast<uint8_t>(sign | max_code);  // +-inf saturates
  const int fexp = static_cast<int>(a >> 23);
  // fp32 subnormals are below 2^-126, far under half the smallest fp8 subnormal: they round to 0
  if (fexp == 0) return sign;
  const int e = fexp - 127;        // x = 1.m * 2^e
  const int emin = 1 - bias;       // exponent of the smallest fp8 normal
  // bits of the 24-bit significand below the fp8 quantum at this exponent (more in the
  // subnormal range, where the quantum stays 2^(emin - mbits))
  const int shift = 23 - mbits + (e < emin ? emin - e : 0);
  if (shift >= 25) return sign;    // below half the smallest subnormal (and not equal to it)
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) q++;  // to nearest, ties to even
  // q quanta of 2^(max(e, emin) - mbits): with the implicit bit counted in q, the code is the
  // exponent offset above the subnormal range times 2^mbits plus q (a carry out of the mantissa
  // moves into the exponent field by itself)
  const uint32_t code = (static_cast<uint32_t>(e > emin ? e - emin : 0) << mbits) + q;
  return static_cast<uint8_t>(sign | (code > max_code ? max_code : code));
}

FP8_HD inline float to_float(uint8_t b, int mbits, int bias, bool e5m2) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b & 0x7fu) >> mbits;
  const uint32_t man = b & ((1u << mbits) - 1u);
  const uint32_t all_exp = (1u << (7 - mbits)) - 1u;
  if (e5m2 && exp == all_exp) return bits_float(man ? 0x7fc00000u : sign | 0x7f800000u);  // NaN: positive
  if (!e5m2 && (b & 0x7fu) == 0x7fu) return bits_float(0x7fc00000u);
  if (exp == 0) {  // subnormal: man * 2^(1 - bias - mbits), exact in fp32
    const float v = static_cast<float>(man) * bits_float(static_cast<uint32_t>(127 + 1 - bias - mbits) << 23);
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp - bias + 127) << 23) | (man << (23 - mbits)));
}
}  // namespace fp8_detail

FP8_HD inline uint8_t float_to_e4m3(float x) { return fp8_detail::from_float(x, 3, 7, 0x7eu); }
FP8_HD inline uint8_t float_to_e5m2(float x) { return fp8_detail::from_float(x, 2, 15, 0x7bu); }
FP8_HD inline float e4m3_to_float(uint8_t b) { return fp8_detail::to_float(b, 3, 7, false); }
FP8_HD inline float e5m2_to_float(uint8_t b) { return fp8_detail::to_float(b, 2, 15, true); }
FP8_HD inline uint8_t float_to_fp8(float x, Fp8Format f) {
  return f == Fp8Format::E4M3 ? float_to_e4m3(x) : float_to_e5m2(x);
}
FP8_HD inline float fp8_to_float(uint8_t b, Fp8Format f) { return f == Fp8Format::E4M3 ? e4m3_to_float(b) : e5m2_to_float(b); }

// Per-tensor quantisation: q[i] = fp8(x[i] * quant), the product rounded to fp32 first (as an
// epilogue multiplies its fp32 value by the scale, then converts).
inline void fp8_quantize(const float* x, size_t n, float quant, Fp8Format f, uint8_t* q) {
  for (size_t i = 0; i < n; i++) q[i] = float_to_fp8(x[i] * quant, f);
}
inline void fp8_dequantize(const uint8_t* q, size_t n, float dequant, Fp8Format f, float* x) {
  for (size_t i = 0; i < n; i++) x[i] = fp8_to_float(q[i], f) * dequant;
}

// max |x[i]| (0 for an empty array). A NaN anywhere makes it NaN, so that a scale derived from it
// is NaN and the failure shows instead of being skipped (PTX max.NaN.f32 does the same; plain
// max.f32 and fmaxf would drop the NaN).
inline float fp8_amax(const float* x, size_t n) {
  float m = 0.0f;
  for (size_t i = 0; i < n; i++) {
    const float a = std::fabs(x[i]);
    if (std::isnan(a)) return a;
    if (a > m) m = a;
  }
  return m;
}

// ---------------------------------------------------------------------------------- scales
// A static scale: given per tensor. The FP8 head record of modded-nanogpt
// (records/track_1_short/*_Fp8LmHead/, the train log that carries its code: lm_head_fp8 and
// mm_op) multiplies x by x_s = 2 and the weight by w_s = 32 before casting each to e4m3, and the
// logits' gradient by grad_s = 2^29 before casting it to e5m2; torch._scaled_mm then multiplies
// the fp32 sum by 1/x_s * 1/w_s (forward, use_fast_accum=True) or 1/grad_s * 1/w_s and
// 1/x_s * 1/grad_s (the two backward products, use_fast_accum=False). The three are powers of two,
// so the scaling itself rounds nothing. (Later records divide by non-power-of-two scales instead:
// x by 100/448, w by 1.6/448, the gradient by 0.75/448 times the loss's 1/grad_accum_steps.)
struct Fp8StaticScale {
  float quant;    // q = fp8(x * quant)
  float dequant;  // x ~ q * dequant, dequant = 1 / quant
};
FP8_HD inline Fp8StaticScale fp8_static_scale(float quant) { return {quant, 1.0f / quant}; }
// the head record's three scales: activations and weight e4m3, the logits' gradient e5m2
constexpr Fp8StaticScale kFp8HeadScaleX{2.0f, 0.5f};
constexpr Fp8StaticScale kFp8HeadScaleW{32.0f, 1.0f / 32.0f};
constexpr Fp8StaticScale kFp8HeadScaleGrad{536870912.0f, 1.0f / 536870912.0f};  // 2^29

// The scale for a tensor whose amax is `amax`: dequant = max(amax, 1e-12) * (headroom / fmt_max),
// headroom / fmt_max rounded to fp32 once (so amax quantises to fmt_max / headroom). This is
// quant = fmt_max / (headroom * amax) in the form 'fp8_max / max(history)'. The
// records compute it this way for their delayed scales; their current scales (headroom 1) divide
// amax by 448 instead, which can differ in the last bit. A NaN or infinite amax gives NaN: a
// tensor that held one has no usable scale, and an infinite dequant would silently quantise
// everything to zero.
FP8_HD inline float fp8_dequant_from_amax(float amax, float fmt_max, float headroom) {
  if (!(amax <= 3.4028235e38f)) return fp8_detail::bits_float(0x7fc00000u);  // NaN or inf
  const float r = static_cast<float>(static_cast<double>(headroom) / static_cast<double>(fmt_max));
  return (amax > 1e-12f ? amax : 1e-12f) * r;
}

// A delayed scale: the scale a pass quantises with comes from the amax of earlier passes.
// The FP8 down-projection record of modded-nanogpt (records/track_1_short/*_FP8DownProjection/
// this_pr/, the train logs that carry its code) keeps two, with a history of one amax:
//  - the MLP's hidden activations r = relu(u)^2, one scale per layer, headroom 1.80, initial
//    dequant 1.0: in each forward the up-projection's epilogue quantises r with the layer's current
//    scale (q = fp8(min(r * (1 / dequant), 448)), r rounded to bf16 first), the down-projection
//    multiplies by that same dequant, and the epilogue records max r of the tensor it quantised;
//    after the forward's last layer, dequant = max(amax, 1e-12) * 1.80 / 448 for the next forward
//    (reduce_mlp_activation_scales). So: quantise with the scale, then record, then update.
//  - the down-projection's weights, one scale per layer, headroom 1.12: after each optimiser step
//    the weights are quantised (values / dequant, clamped to +-448) with the scale the previous
//    step's weights gave, that scale is the one the forward multiplies by, and the amax of the
//    weights just quantised gives the next: dequant = max(amax, 1e-12) * 1.12 / 448
//    (quantize_mlp_fp8, quantize_transpose_mlp_down_weights). At start and for the first 16 steps
//    it bootstraps first: dequant = max(amax of the weights about to be quantised, 1e-12) / 448
//    (no headroom), then quantises, then updates as above.
// A history of H > 1 (as Transformer Engine keeps) takes the max over the last H recorded amaxes;
// H = 1 is the record's.
struct Fp8DelayedScale {
  static constexpr int kMaxHistory = 16;
  Fp8Format format;
  int history_len;  // H
  float headroom;
  float dequant;    // what the next quantisation uses: q = fp8(x * quant()), x ~ q * dequant
  float history[kMaxHistory];
  int recorded;     // amaxes recorded so far (the history holds min(recorded, H) of them)

  FP8_HD float quant() const { return 1.0f / dequant; }
  // The scale from the tensor about to be quantised (no headroom): the weights' bootstrap.
  FP8_HD void bootstrap(float amax_now) { dequant = fp8_dequant_from_amax(amax_now, fp8_max(format), 1.0f); }
  // The producing pass quantised a tensor with `dequant` and saw `amax` (of the unscaled values):
  // push it into the history and set the scale of the next pass from the history's max.
  FP8_HD void record(float amax) {
    history[recorded % history_len] = amax;
    recorded++;
    const int n = recorded < history_len ? recorded : history_len;
    float m = history[0];
    for (int i = 1; i < n; i++) m = (history[i] > m || history[i] != history[i]) ? history[i] : m;
    dequant = fp8_dequant_from_amax(m, fp8_max(format), headroom);
  }
};

// A delayed scale with an empty history; H in [1, kMaxHistory], headroom and the initial dequant
// positive and finite, else std::invalid_argument naming the field.
inline Fp8DelayedScale make_fp8_delayed_scale(Fp8Format format, int history_len, float headroom,
                                              float initial_dequant = 1.0f) {
  if (history_len < 1 || history_len > Fp8DelayedScale::kMaxHistory)
    throw std::invalid_argument("fp8 delayed scale: history_len " + std::to_string(history_len) +
                                " outside [1, " + std::to_string(Fp8DelayedScale::kMaxHistory) + "]");
  if (!(headroom > 0.0f && headroom <= 3.4028235e38f))
    throw std::invalid_argument("fp8 delayed scale: headroom " + std::to_string(headroom) + " is not positive and finite");
  if (!(initial_dequant > 0.0f && initial_dequant <= 3.4028235e38f))
    throw std::invalid_argument("fp8 delayed scale: initial_dequant " + std::to_string(initial_dequant) +
                                " is not positive and finite");
  Fp8DelayedScale s{};
  s.format = format;
  s.history_len = history_len;
  s.headroom = headroom;
  s.dequant = initial_dequant;
  s.recorded = 0;
  return s;
}

// ---------------------------------------------------------------------------------- the product
// C[m][n] = (sum_k A[m][k] B[n][k]) * (dequant_a * dequant_b), A M x K and B N x K, both K-major
// fp8 (each with its format), the sum in fp32: each fp8 x fp8 product is exact in fp32 (at most
// 8 significant bits, magnitudes 2^-32 .. 2^32), the sum runs over k in order, and the scale
// dequant_a * dequant_b, rounded to fp32 once, multiplies it at the end (as the epilogue does,
// and as cuBLAS's scale_a * scale_b alpha does).
//   promote_k = 0: one fp32 running sum over all of K.
//   promote_k > 0: the sum of each block of promote_k consecutive k (from zero, in fp32) is added
//                  to the running fp32 sum after the block: the order of a kernel that promotes
//                  its tensor-core accumulator every promote_k k (CUTLASS's default below: 128).
// Neither emulates the tensor core's own reduced-precision accumulation:
//  - Hopper's FP8 wgmma (k = 32 an instruction) does not add its products and the accumulator in
//    full fp32. NVIDIA does not document the precision; the DeepSeek-V3 technical report
//    (arXiv 2412.19437, section 3.3.2) measured about 14 retained bits on H800. With "fast
//    accumulation" every instruction of the whole K loop adds into that accumulator, so the error
//    grows with K. torch._scaled_mm's use_fast_accum sets cuBLASLt's
//    CUBLASLT_MATMUL_DESC_FAST_ACCUM (cuBLAS documentation, cublasLtMatmulDescAttributes_t:
//    faster, "at the cost of lower accuracy because intermediate results will not periodically be
//    promoted to a higher precision"). The records use it for forward products only.
//  - Promotion, as in CUTLASS (include/cutlass/gemm/collective/fp8_accumulation.hpp,
//    GmmaFP8Accumulation, used by
//    include/cutlass/gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized_fp8.hpp): wgmma
//    accumulates into a temporary accumulator; after every mma_promotion_interval MMAs (default 4,
//    a multiple of the MMAs of one k-tile, so 4 x 32 = 128 k) the temporary is added into the
//    main accumulator with ordinary fp32 adds on the CUDA cores and zeroed, and whatever remains
//    at the end of K is added likewise. The *FP8FastAccum kernel schedules
//    (include/cutlass/gemm/dispatch_policy.hpp) skip it.
// So against this reference a promoted kernel differs by the tensor core's rounding inside one
// block of promote_k, a fast-accumulation kernel by that rounding over all of K.
inline void fp8_gemm_reference(const uint8_t* A, Fp8Format fa, float dequant_a, const uint8_t* B, Fp8Format fb,
                               float dequant_b, float* C, int M, int N, int K, int promote_k = 0) {
  const float scale = dequant_a * dequant_b;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      const uint8_t* a = A + static_cast<size_t>(m) * K;
      const uint8_t* b = B + static_cast<size_t>(n) * K;
      float acc = 0.0f;
      if (promote_k <= 0) {
        for (int k = 0; k < K; k++) acc += fp8_to_float(a[k], fa) * fp8_to_float(b[k], fb);
      } else {
        for (int k0 = 0; k0 < K; k0 += promote_k) {
          float part = 0.0f;
          const int k1 = k0 + promote_k < K ? k0 + promote_k : K;
          for (int k = k0; k < k1; k++) part += fp8_to_float(a[k], fa) * fp8_to_float(b[k], fb);
          acc += part;
        }
      }
      C[static_cast<size_t>(m) * N + n] = acc * scale;
    }
}
