// The FP8 reference (common/fp8.h): its conversions against CUDA's own host conversions
// (<cuda_fp8.h>: __nv_cvt_float_to_fp8 with __NV_SATFINITE, __nv_cvt_fp8_to_halfraw, the
// __nv_fp8_e4m3 / __nv_fp8_e5m2 classes) bit for bit, its scales against hand-computed sequences,
// and its product against an fp64 product of the dequantised operands.
//
//   build/tests/test_fp8
#include <cuda_fp8.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/fp8.h"
#include "tests/check.h"

static uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
static float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
static const char* name(Fp8Format f) { return f == Fp8Format::E4M3 ? "e4m3" : "e5m2"; }
static __nv_fp8_interpretation_t cuda_fmt(Fp8Format f) { return f == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2; }
static uint8_t cuda_from_float(float x, Fp8Format f) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, cuda_fmt(f)));
}
// CUDA's fp8 -> half (every fp8 value is exact in half), then half -> float
static float cuda_to_float(uint8_t b, Fp8Format f) {
  __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), cuda_fmt(f));
  return __half2float(__half(h));
}
static float cuda_class_to_float(uint8_t b, Fp8Format f) {
  if (f == Fp8Format::E4M3) {
    __nv_fp8_e4m3 v;
    v.__x = b;
    return static_cast<float>(v);
  }
  __nv_fp8_e5m2 v;
  v.__x = b;
  return static_cast<float>(v);
}
// same value, NaN matching NaN of the same sign (the payload of a NaN widened to half and float
// is not a property of the fp8 value)
static bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) && std::signbit(a) == std::signbit(b);
  return bits_of(a) == bits_of(b);
}

static const Fp8Format kFormats[] = {Fp8Format::E4M3, Fp8Format::E5M2};

// --------------------------------------------------------------------- every fp8 bit pattern
static void test_every_pattern() {
  for (Fp8Format f : kFormats) {
    int bad_to = 0, bad_class = 0, bad_back = 0, bad_round_trip = 0, nans = 0;
    for (int b = 0; b < 256; b++) {
      const uint8_t code = static_cast<uint8_t>(b);
      const float mine = fp8_to_float(code, f);
      if (!same_float(mine, cuda_to_float(code, f)) && bad_to++ < 5)
        std::printf("  %s 0x%02x -> %a, CUDA (halfraw) %a\n", name(f), b, mine, cuda_to_float(code, f));
      if (!same_float(mine, cuda_class_to_float(code, f)) && bad_class++ < 5)
        std::printf("  %s 0x%02x -> %a, CUDA (class) %a\n", name(f), b, mine, cuda_class_to_float(code, f));
      // and back: the same bits as CUDA's conversion of that float
      if (float_to_fp8(mine, f) != cuda_from_float(mine, f) && bad_back++ < 5)
        std::printf("  %s 0x%02x -> %a -> 0x%02x, CUDA 0x%02x\n", name(f), b, mine, float_to_fp8(mine, f),
                    cuda_from_float(mine, f));
      if (std::isnan(mine)) {
        nans++;
      } else if (std::isfinite(mine) && float_to_fp8(mine, f) != code && bad_round_trip++ < 5) {
        std::printf("  %s 0x%02x does not round-trip (0x%02x)\n", name(f), b, float_to_fp8(mine, f));
      }
    }
    CHECK(bad_to == 0, "%s: %d of 256 patterns decode unlike __nv_cvt_fp8_to_halfraw", name(f), bad_to);
    CHECK(bad_class == 0, "%s: %d of 256 patterns decode unlike CUDA's fp8 class", name(f), bad_class);
    CHECK(bad_back == 0, "%s: %d of 256 decoded patterns encode unlike __nv_cvt_float_to_fp8", name(f), bad_back);
    CHECK(bad_round_trip == 0, "%s: %d finite patterns do not round-trip", name(f), bad_round_trip);
    // e4m3: 0x7f, 0xff; e5m2: 0x7d..0x7f, 0xfd..0xff
    CHECK(nans == (f == Fp8Format::E4M3 ? 2 : 6), "%s: %d NaN patterns", name(f), nans);
  }
}

// --------------------------------------------------------------------- floats -> fp8
// Compares float_to_fp8 with CUDA's conversion on `xs`; returns the number that differ.
static long compare_floats(const std::vector<float>& xs, Fp8Format f, const char* what) {
  long bad = 0;
  for (float x : xs) {
    const uint8_t mine = float_to_fp8(x, f), cuda = cuda_from_float(x, f);
    if (mine != cuda && bad++ < 5)
      std::printf("  %s %s: %a (0x%08x) -> 0x%02x, CUDA 0x%02x\n", name(f), what, x, bits_of(x), mine, cuda);
  }
  return bad;
}

static void test_float_sweep() {
  for (Fp8Format f : kFormats) {
    // around every representable value: each value, each midpoint to the next one up (a tie, exact
    // in fp32), and 1..3 fp32 ulps either side of both, for both signs
    std::vector<float> near;
    std::vector<float> values;
    for (int b = 0; b < 0x80; b++) {
      const float v = fp8_to_float(static_cast<uint8_t>(b), f);
      if (std::isfinite(v)) values.push_back(v);
    }
    const float ulp_above_max = f == Fp8Format::E4M3 ? 32.0f : 8192.0f;  // the step past the max
    values.push_back(fp8_max(f) + ulp_above_max);
    for (size_t i = 0; i < values.size(); i++) {
      std::vector<float> centres = {values[i]};
      if (i + 1 < values.size()) centres.push_back(0.5f * (values[i] + values[i + 1]));
      for (float c : centres)
        for (int d = -3; d <= 3; d++) {
          float x = c;
          for (int s = 0; s < std::abs(d); s++) x = std::nextafter(x, d < 0 ? -INFINITY : INFINITY);
          near.push_back(x);
          near.push_back(-x);
        }
    }
    CHECK(compare_floats(near, f, "near representable values and ties") == 0, "%s: %zu floats near the grid", name(f),
          near.size());

    // the edges by name
    const uint32_t nan_bits[] = {0x7fc00000u, 0x7f800001u, 0x7fa00000u, 0x7fe00000u, 0x7f9fffffu, 0x7fffffffu,
                                 0xffc00000u, 0xff800001u, 0xffe00000u, 0xffffffffu};
    std::vector<float> edges = {0.0f, -0.0f, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN,
                                float_of(1u), float_of(0x807fffffu), 1e-30f, 1e30f, -1e30f, 1e6f, 65536.0f,
                                65504.0f, 61440.0f, 57344.0f, 480.0f, 464.0f, 448.0f, std::ldexp(1.0f, -10),
                                std::ldexp(1.0f, -17), std::ldexp(3.0f, -10), std::ldexp(3.0f, -17)};
    for (uint32_t u : nan_bits) edges.push_back(float_of(u));
    CHECK(compare_floats(edges, f, "edges") == 0, "%s: zeros, infinities, NaNs, the max and beyond", name(f));

    // every 61st fp32 bit pattern (70 million, all exponents, NaNs included)
    long bad = 0, n = 0;
    for (uint64_t u = 0; u <= 0xffffffffull; u += 61) {
      const float x = float_of(static_cast<uint32_t>(u));
      const uint8_t mine = float_to_fp8(x, f), cuda = cuda_from_float(x, f);
      n++;
      if (mine != cuda && bad++ < 5)
        std::printf("  %s sweep: %a (0x%08x) -> 0x%02x, CUDA 0x%02x\n", name(f), x, static_cast<uint32_t>(u), mine,
                    cuda);
    }
    CHECK(bad == 0, "%s: %ld of %ld swept floats differ from __nv_cvt_float_to_fp8", name(f), bad, n);
  }

  // a few by hand, so that the reference does not lean on CUDA alone
  CHECK(float_to_e4m3(448.0f) == 0x7e && float_to_e4m3(464.0f) == 0x7e && float_to_e4m3(1e9f) == 0x7e,
        "e4m3 saturates at 448 (464, the tie above 448, rounds to 448's even mantissa)");
  CHECK(float_to_e4m3(INFINITY) == 0x7e && float_to_e4m3(-INFINITY) == 0xfe, "e4m3 infinity saturates");
  CHECK(float_to_e5m2(61440.0f) == 0x7b && float_to_e5m2(INFINITY) == 0x7b && float_to_e5m2(-1e30f) == 0xfb,
        "e5m2 saturates at 57344, infinity too");
  CHECK(e5m2_to_float(0x7c) == INFINITY && e5m2_to_float(0xfc) == -INFINITY, "e5m2 0x7c/0xfc decode to +-inf");
  CHECK(float_to_e4m3(std::ldexp(1.0f, -10)) == 0x00 && float_to_e4m3(std::ldexp(3.0f, -10)) == 0x02,
        "e4m3 subnormal ties go to even: 2^-10 -> 0, 3 * 2^-10 -> 2 * 2^-9");
  CHECK(float_to_e4m3(-0.0f) == 0x80 && float_to_e5m2(-0.0f) == 0x80, "negative zero keeps its sign");
  CHECK(float_to_e4m3(1.0625f) == 0x38 && float_to_e4m3(1.1875f) == 0x3a, "e4m3 ties at 1 + 1/16 and 1 + 3/16");
  CHECK(std::isnan(e4m3_to_float(float_to_e4m3(NAN))), "NaN stays NaN");
  CHECK(float_to_e4m3(-NAN) == 0x7f && float_to_e5m2(-NAN) == 0x7f, "any NaN becomes the canonical 0x7f");
}

// --------------------------------------------------------------------- arrays: quantise, amax
static void test_arrays() {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(4096);
  for (float& v : x) v = normal(rng);
  x[10] = 1e6f;  // saturates at any of the scales below
  x[11] = -0.0f;
  for (Fp8Format f : kFormats)
    for (float quant : {1.0f, 32.0f, 448.0f / 7.5f, 1.0f / 3.0f}) {
      std::vector<uint8_t> q(x.size());
      fp8_quantize(x.data(), x.size(), quant, f, q.data());
      int bad = 0;
      for (size_t i = 0; i < x.size(); i++) bad += q[i] != cuda_from_float(x[i] * quant, f);
      CHECK(bad == 0, "%s quant %g: %d of %zu elements differ from CUDA's conversion of x * quant", name(f), quant, bad,
            x.size());
      std::vector<float> back(x.size());
      const float dequant = 1.0f / quant;
      fp8_dequantize(q.data(), q.size(), dequant, f, back.data());
      bad = 0;
      for (size_t i = 0; i < x.size(); i++) bad += bits_of(back[i]) != bits_of(fp8_to_float(q[i], f) * dequant);
      CHECK(bad == 0, "%s: dequantise is fp8_to_float times dequant", name(f));
    }
  std::vector<float> a = {1.0f, -7.5f, 3.0f, -0.0f};
  CHECK(fp8_amax(a.data(), a.size()) == 7.5f, "amax of {1, -7.5, 3, -0} is 7.5");
  CHECK(fp8_amax(a.data(), 0) == 0.0f, "amax of nothing is 0");
  std::vector<float> z = {-0.0f, -0.0f};
  CHECK(bits_of(fp8_amax(z.data(), z.size())) == 0u, "amax of negative zeros is +0");
  a.push_back(NAN);
  a.push_back(100.0f);
  CHECK(std::isnan(fp8_amax(a.data(), a.size())), "a NaN makes amax NaN");
  a[4] = -INFINITY;
  CHECK(fp8_amax(a.data(), a.size()) == INFINITY, "amax with -inf is inf");
}

// --------------------------------------------------------------------- scales
static void test_scales() {
  // the head record's static scales: powers of two, so quant * dequant is exactly 1
  for (Fp8StaticScale s : {kFp8HeadScaleX, kFp8HeadScaleW, kFp8HeadScaleGrad})
    CHECK(s.quant * s.dequant == 1.0f, "static scale %g: dequant %g is not 1/quant", s.quant, s.dequant);
  CHECK(kFp8HeadScaleGrad.quant == 536870912.0f, "the head's gradient scale is 2^29");
  CHECK(fp8_static_scale(32.0f).dequant == 1.0f / 32.0f, "fp8_static_scale(32)");

  // headroom 1.75 makes headroom / max a power of two (1/256 for e4m3, 2^-15 for e5m2): exact values
  CHECK(fp8_dequant_from_amax(3.0f, 448.0f, 1.75f) == 3.0f / 256.0f, "3 * 1.75 / 448 = 3/256");
  CHECK(fp8_dequant_from_amax(0.0f, 448.0f, 1.75f) == 1e-12f * (1.0f / 256.0f), "amax 0 floors at 1e-12");
  CHECK(std::isnan(fp8_dequant_from_amax(NAN, 448.0f, 1.0f)), "NaN amax gives a NaN scale");
  CHECK(std::isnan(fp8_dequant_from_amax(INFINITY, 448.0f, 1.0f)), "an infinite amax gives a NaN scale, not inf");

  // H = 1, e4m3, headroom 1.75, starting at 1.0: each pass uses the scale the previous pass's amax gave
  Fp8DelayedScale s = make_fp8_delayed_scale(Fp8Format::E4M3, 1, 1.75f);
  CHECK(s.dequant == 1.0f && s.quant() == 1.0f, "initial scale 1");
  const float amax1[] = {3.0f, 0.5f, 64.0f, 0.25f};
  const float want1[] = {3.0f / 256, 0.5f / 256, 64.0f / 256, 0.25f / 256};
  for (int i = 0; i < 4; i++) {
    s.record(amax1[i]);
    CHECK(s.dequant == want1[i], "H=1 step %d: dequant %a, want %a", i, s.dequant, want1[i]);
  }
  CHECK(s.quant() == 1024.0f, "quant is 1/dequant: 256 / 0.25");

  // H = 3, e5m2, headroom 1.75: the max over the last three amaxes, times 2^-15
  Fp8DelayedScale h = make_fp8_delayed_scale(Fp8Format::E5M2, 3, 1.75f, 0.5f);
  CHECK(h.dequant == 0.5f, "initial dequant as given");
  const float amax3[] = {2.0f, 8.0f, 1.0f, 0.5f, 0.25f, 4.0f, 0.125f};
  const float max3[] = {2.0f, 8.0f, 8.0f, 8.0f, 1.0f, 4.0f, 4.0f};
  for (int i = 0; i < 7; i++) {
    h.record(amax3[i]);
    CHECK(h.dequant == std::ldexp(max3[i], -15), "H=3 step %d: dequant %a, want %a", i, h.dequant,
          std::ldexp(max3[i], -15));
  }

  // a NaN amax poisons the scale for H records, then leaves the window
  Fp8DelayedScale p = make_fp8_delayed_scale(Fp8Format::E4M3, 2, 1.75f);
  p.record(1.0f);
  p.record(NAN);
  CHECK(std::isnan(p.dequant), "NaN recorded: scale NaN");
  p.record(2.0f);
  CHECK(std::isnan(p.dequant), "NaN still in the window of two: scale NaN");
  p.record(4.0f);
  CHECK(p.dequant == 4.0f / 256, "NaN out of the window: scale %a", p.dequant);

  // The down-projection record's activation scale (H 1, headroom 1.80, starts at 1.0): by hand,
  // 10 * 1.80 / 448 = 0.04017857..., 0.3 * 1.80 / 448 = 0.00120535...; two fp32 roundings
  // (1.80 / 448, then the product) leave at most 2^-23 relative error.
  Fp8DelayedScale act = make_fp8_delayed_scale(Fp8Format::E4M3, 1, 1.80f);
  act.record(10.0f);
  CHECK(std::fabs(act.dequant - 0.040178571428571) <= 0.040178571428571 * 0x1p-23, "activation scale after amax 10: %.12g",
        act.dequant);
  act.record(0.3f);
  CHECK(std::fabs(act.dequant - 0.0012053571428571) <= 0.0012053571428571 * 0x1p-23,
        "activation scale after amax 0.3: %.12g", act.dequant);

  // The record's weight scale (headroom 1.12): bootstrap (just-in-time, no headroom) at start and
  // after each of the first 16 steps, then the previous step's amax times 1.12 / 448. The weights'
  // amax at step t is 0.5 + t / 64 here; `used` is the scale step t's weights are quantised with.
  Fp8DelayedScale w = make_fp8_delayed_scale(Fp8Format::E4M3, 1, 1.12f);
  for (int t = -1; t < 24; t++) {  // t = -1: the quantisation before the first step
    const float amax = 0.5f + static_cast<float>(t + 1) / 64.0f;
    if (t < 16) w.bootstrap(amax);
    const float used = w.dequant;
    w.record(amax);
    const double want = t < 16 ? amax / 448.0 : (0.5 + t / 64.0) * 1.12 / 448.0;
    CHECK(std::fabs(used - want) <= want * 0x1p-23, "weight scale at step %d: %.10g, want %.10g", t, used, want);
  }

  // bad parameters are refused with the field named
  auto refused = [](int hl, float headroom, float init, const char* field) {
    try {
      make_fp8_delayed_scale(Fp8Format::E4M3, hl, headroom, init);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what()).find(field) != std::string::npos;
    }
    return false;
  };
  CHECK(refused(0, 1.0f, 1.0f, "history_len"), "history 0 refused");
  CHECK(refused(Fp8DelayedScale::kMaxHistory + 1, 1.0f, 1.0f, "history_len"), "history past the max refused");
  CHECK(refused(1, 0.0f, 1.0f, "headroom") && refused(1, NAN, 1.0f, "headroom"), "headroom 0 or NaN refused");
  CHECK(refused(1, 1.0f, INFINITY, "initial_dequant"), "infinite initial scale refused");
}

// --------------------------------------------------------------------- the product
static void test_gemm() {
  // Random operands, K not a multiple of the promotion block. The fp64 product of the dequantised
  // operands is exact to within 2^-53 relative. The reference sums K exact fp32 products in fp32
  // (each addition rounds: recursive summation is within gamma_{K-1} * sum |a_k b_k| of the exact
  // sum, gamma_n = n u / (1 - n u), u = 2^-24; the blocked order passes each term through fewer
  // additions, so the same bound holds), then rounds dequant_a * dequant_b and the final product:
  // two more roundings. Tolerance per element: gamma_{K+2} * sum_k |a_k b_k| * dequant_a * dequant_b.
  const int M = 9, N = 7, K = 300;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct Case {
    Fp8Format fa, fb;
    float qa, qb;
  };
  const Case cases[] = {{Fp8Format::E4M3, Fp8Format::E4M3, 100.0f, 50.0f},
                        {Fp8Format::E5M2, Fp8Format::E4M3, 1000.0f, 40.0f},  // a gradient times a weight
                        {Fp8Format::E4M3, Fp8Format::E5M2, 2.0f, 536870912.0f}};
  const double u = 0x1p-24, gamma = (K + 2) * u / (1 - (K + 2) * u);
  for (const Case& c : cases) {
    std::vector<float> xa(static_cast<size_t>(M) * K), xb(static_cast<size_t>(N) * K);
    for (float& v : xa) v = normal(rng);
    for (float& v : xb) v = normal(rng) * 0.02f;
    for (size_t i = 0; i < xa.size(); i += 37) xa[i] *= 20.0f;  // a few large values: some saturate
    std::vector<uint8_t> A(xa.size()), B(xb.size());
    fp8_quantize(xa.data(), xa.size(), c.qa, c.fa, A.data());
    fp8_quantize(xb.data(), xb.size(), c.qb, c.fb, B.data());
    const float da = 1.0f / c.qa, db = 1.0f / c.qb;
    for (int promote : {0, 128, 32}) {
      std::vector<float> C(static_cast<size_t>(M) * N), Cbad(C.size());
      fp8_gemm_reference(A.data(), c.fa, da, B.data(), c.fb, db, C.data(), M, N, K, promote);
      // a product with one operand's scale off by 2^-10 must fail the same check
      fp8_gemm_reference(A.data(), c.fa, da * (1.0f + 0x1p-10f), B.data(), c.fb, db, Cbad.data(), M, N, K, promote);
      double worst = 0.0;
      int bad = 0, caught = 0;
      for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
          double exact = 0.0, mag = 0.0;
          for (int k = 0; k < K; k++) {
            const double a = static_cast<double>(fp8_to_float(A[static_cast<size_t>(m) * K + k], c.fa)) * da;
            const double b = static_cast<double>(fp8_to_float(B[static_cast<size_t>(n) * K + k], c.fb)) * db;
            exact += a * b;
            mag += std::fabs(a * b);
          }
          const double tol = gamma * mag;
          const double err = std::fabs(C[static_cast<size_t>(m) * N + n] - exact);
          bad += !(err <= tol);
          worst = std::max(worst, err / tol);
          caught += !(std::fabs(Cbad[static_cast<size_t>(m) * N + n] - exact) <= tol);
        }
      CHECK(bad == 0, "%s x %s promote %d: %d of %d elements off the fp64 product by more than gamma_{K+2} sum|ab| "
            "(worst %.3g of it)", name(c.fa), name(c.fb), promote, bad, M * N, worst);
      CHECK(caught > M * N / 2, "%s x %s promote %d: a 2^-10 scale error shows in only %d of %d elements", name(c.fa),
            name(c.fb), promote, caught, M * N);
    }
  }

  // Small integers: every partial sum is an integer below 2^24, so the fp32 sum is exact in either
  // order and C equals the exact product bit for bit.
  {
    const int m = 4, n = 3, k = 64;
    std::vector<uint8_t> A(m * k), B(n * k);
    std::uniform_int_distribution<int> small(-16, 16);
    std::vector<double> a(m * k), b(n * k);
    for (int i = 0; i < m * k; i++) A[i] = float_to_e4m3(static_cast<float>(small(rng))), a[i] = e4m3_to_float(A[i]);
    for (int i = 0; i < n * k; i++) B[i] = float_to_e4m3(static_cast<float>(small(rng))), b[i] = e4m3_to_float(B[i]);
    for (int promote : {0, 16}) {
      std::vector<float> C(m * n);
      fp8_gemm_reference(A.data(), Fp8Format::E4M3, 0.5f, B.data(), Fp8Format::E4M3, 0.25f, C.data(), m, n, k, promote);
      int bad = 0;
      for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
          double s = 0.0;
          for (int kk = 0; kk < k; kk++) s += a[i * k + kk] * b[j * k + kk];
          bad += C[i * n + j] != s * 0.125;
        }
      CHECK(bad == 0, "integer operands, promote %d: %d elements not exact", promote, bad);
    }
  }

  // The order, by hand: products {2^24, 0, 1, 1}. One running sum: 2^24 + 0 + 1 rounds back to
  // 2^24 (a tie, to even), and so does the next + 1: 2^24. Blocks of two: 2^24 and 1 + 1 = 2, then
  // 2^24 + 2 (exact).
  {
    const uint8_t row[4] = {float_to_e5m2(4096.0f), float_to_e5m2(0.0f), float_to_e5m2(1.0f), float_to_e5m2(1.0f)};
    float c0 = 0.0f, c2 = 0.0f;
    fp8_gemm_reference(row, Fp8Format::E5M2, 1.0f, row, Fp8Format::E5M2, 1.0f, &c0, 1, 1, 4, 0);
    fp8_gemm_reference(row, Fp8Format::E5M2, 1.0f, row, Fp8Format::E5M2, 1.0f, &c2, 1, 1, 4, 2);
    CHECK(c0 == 16777216.0f, "one running sum: %.1f, want 2^24", c0);
    CHECK(c2 == 16777218.0f, "blocks of two: %.1f, want 2^24 + 2", c2);
  }
}

int main() {
  test_every_pattern();
  test_float_sweep();
  test_arrays();
  test_scales();
  test_gemm();
  return test_summary("fp8");
}
