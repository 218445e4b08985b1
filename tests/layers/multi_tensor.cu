// The layer test of multi_tensor (tests/layers/gpu_test.h: helpers and tolerances): the
// optimiser's stages over many tensors in one launch against the one-tensor kernels they
// replace (optim/adam.cuh, optim/muon.cuh, themselves tested against the fp64 reference in
// adam.cu and muon.cu), on fresh random tensors of sizes that cut the blocks and tiles at every
// edge, tall and wide matrices, owned and not.
// Tolerances: bitwise (the same fp32 arithmetic and the same order of the norm's sums); and
// X = u / ||u|| against fp64 within one bf16 rounding, relative 2^-8 an element (the fp32 sums'
// error, near 1e-6, is far below it).
#include <cstring>

#include "tests/layers/gpu_test.h"
#include "optim/adam.cuh"
#include "optim/multi_tensor.cuh"
#include "optim/muon.cuh"

static std::vector<float> random_f32(size_t n, float scale) {
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<float> x(n);
  for (auto& v : x) v = nd(rng);
  return x;
}
static float* dev_f32(const std::vector<float>& h) {
  float* d;
  CUDA_CHECK(cudaMalloc(&d, std::max<size_t>(h.size(), 1) * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}
template <typename T>
static std::vector<T> host(const T* d, size_t n) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}
template <typename T>
static bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// ---- Adam over 9 tensors (sizes around the 4096-element blocks, one of a single element, two
// without a bf16 copy, three rates), three steps, against adam_step per tensor
static void test_adam_multi() {
  const std::vector<size_t> sizes = {1, 2, 255, 4095, 4096, 4097, 12289, 100003, 8};
  const int n_t = (int)sizes.size();
  struct Side {
    std::vector<float*> p, g, m, v;
    std::vector<bf16*> pb;
  } side[2];
  for (Side& s : side) {
    s.p.resize(n_t), s.g.resize(n_t), s.m.resize(n_t), s.v.resize(n_t), s.pb.resize(n_t);
  }
  std::vector<std::vector<float>> p0(n_t);
  for (int i = 0; i < n_t; i++) p0[i] = random_f32(sizes[i], 0.05f);
  for (Side& s : side)
    for (int i = 0; i < n_t; i++) {
      s.p[i] = dev_f32(p0[i]);
      s.g[i] = dev_f32(std::vector<float>(sizes[i], 0.f));
      s.m[i] = dev_f32(std::vector<float>(sizes[i], 0.f));
      s.v[i] = dev_f32(std::vector<float>(sizes[i], 0.f));
      s.pb[i] = i % 4 == 3 ? nullptr : poisoned(sizes[i]);
    }
  const float rates[3] = {0.6f, 0.008f, 0.04f};
  std::vector<optim::AdamTensor> list;
  for (int i = 0; i < n_t; i++)
    list.push_back({side[1].p[i], side[1].pb[i], side[1].g[i], side[1].m[i], side[1].v[i], sizes[i], rates[i % 3]});
  optim::AdamMulti multi(list);
  const float mults[3] = {1.f, 0.75f, 0.3f};
  for (int t = 1; t <= 3; t++) {
    for (int i = 0; i < n_t; i++) {  // a fresh gradient, the same on both sides
      const std::vector<float> g = random_f32(sizes[i], 1.f);
      for (Side& s : side) CUDA_CHECK(cudaMemcpy(s.g[i], g.data(), g.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
    for (int i = 0; i < n_t; i++)
      CUDA_CHECK(optim::adam_step(side[0].p[i], side[0].pb[i], side[0].g[i], side[0].m[i], side[0].v[i], sizes[i], mults[t - 1] * rates[i % 3], t));
    CUDA_CHECK(multi.step(mults[t - 1], t, 0.8f, 0.95f, 1e-8f));
  }
  bool p_ok = true, mv_ok = true, pb_ok = true, moved = true;
  for (int i = 0; i < n_t; i++) {
    const size_t n = sizes[i];
    p_ok &= same_bits(host(side[0].p[i], n), host(side[1].p[i], n));
    mv_ok &= same_bits(host(side[0].m[i], n), host(side[1].m[i], n)) && same_bits(host(side[0].v[i], n), host(side[1].v[i], n));
    if (side[0].pb[i]) pb_ok &= same_bits(host(side[0].pb[i], n), host(side[1].pb[i], n));
    moved &= host(side[1].p[i], n) != p0[i];
  }
  CHECK(moved, "Adam multi: every tensor moved");
  CHECK(p_ok, "Adam multi: the fp32 weights are adam_step's bits after three steps");
  CHECK(mv_ok, "Adam multi: the moments are adam_step's bits");
  CHECK(pb_ok, "Adam multi: the bf16 copies are adam_step's bits");
  std::printf("adam multi: %d tensors, three steps: weights %s, moments %s, bf16 copies %s\n", n_t, p_ok ? "same bits" : "DIFFER",
              mv_ok ? "same bits" : "DIFFER", pb_ok ? "same bits" : "DIFFER");
  for (Side& s : side)
    for (int i = 0; i < n_t; i++) {
      for (float* q : {s.p[i], s.g[i], s.m[i], s.v[i]}) CUDA_CHECK(cudaFree(q));
      if (s.pb[i]) CUDA_CHECK(cudaFree(s.pb[i]));
    }
  optim::AdamMulti none({});
  CHECK(none.step(1.f, 1, 0.8f, 0.95f, 1e-8f) == cudaSuccess, "Adam multi over no tensors does nothing");
  CHECK(multi.step(1.f, 0, 0.8f, 0.95f, 1e-8f) == cudaErrorInvalidValue, "Adam multi refuses step count 0");
}

// ---- Muon's stages over 7 matrices (tall, wide, square, edges of the 32 x 32 tiles, one not
// owned), two steps, against muon_momentum + muon_normalize + muon_apply per matrix
static void test_muon_multi() {
  struct Shape {
    int rows, cols;
    bool owned;
  };
  const std::vector<Shape> shapes = {{64, 64, true},   {128, 512, true}, {512, 128, true}, {37, 100, true},
                                     {100, 37, false}, {33, 31, true},   {1, 2, true}};
  const int n_m = (int)shapes.size();
  optim::MuonScratch scratch(512 * 128, 1);
  struct Side {
    std::vector<float*> w, g, buf;
    std::vector<bf16*> wb, X;
  } side[2];
  std::vector<std::vector<float>> w0(n_m);
  for (int j = 0; j < n_m; j++) w0[j] = random_f32((size_t)shapes[j].rows * shapes[j].cols, 0.05f);
  for (Side& s : side) {
    for (int j = 0; j < n_m; j++) {
      const size_t n = (size_t)shapes[j].rows * shapes[j].cols;
      s.w.push_back(dev_f32(w0[j]));
      s.g.push_back(dev_f32(std::vector<float>(n, 0.f)));
      s.buf.push_back(dev_f32(std::vector<float>(n, 0.f)));
      s.wb.push_back(j == 2 ? nullptr : poisoned(n));
      s.X.push_back(poisoned(n));
    }
  }
  std::vector<optim::MuonMatrix> list;
  for (int j = 0; j < n_m; j++)
    list.push_back({side[1].w[j], side[1].wb[j], side[1].g[j], side[1].buf[j], side[1].X[j], shapes[j].rows, shapes[j].cols, shapes[j].owned});
  optim::MuonMulti multi(list);
  const float moms[2] = {0.85f, 0.9f}, lr = 0.05f;
  bool buf_ok = true, x_ok = true, w_ok = true, wb_ok = true, unowned_ok = true;
  double norm_err = 0;
  for (int step = 0; step < 2; step++) {
    std::vector<std::vector<float>> gs(n_m);
    for (int j = 0; j < n_m; j++) {
      const size_t n = (size_t)shapes[j].rows * shapes[j].cols;
      gs[j] = random_f32(n, 1.f);
      for (Side& s : side) CUDA_CHECK(cudaMemcpy(s.g[j], gs[j].data(), n * sizeof(float), cudaMemcpyHostToDevice));
    }
    std::vector<std::vector<float>> buf_before(n_m);
    std::vector<std::vector<bf16>> x_before(n_m);
    for (int j = 0; j < n_m; j++) {
      buf_before[j] = host(side[1].buf[j], (size_t)shapes[j].rows * shapes[j].cols);
      x_before[j] = host(side[1].X[j], (size_t)shapes[j].rows * shapes[j].cols);
    }
    for (int j = 0; j < n_m; j++) {  // the one-matrix path
      const size_t n = (size_t)shapes[j].rows * shapes[j].cols;
      CUDA_CHECK(optim::muon_momentum(scratch, side[0].g[j], side[0].buf[j], n, moms[step], shapes[j].owned));
      if (shapes[j].owned) CUDA_CHECK(optim::muon_normalize(scratch, side[0].X[j], shapes[j].rows, shapes[j].cols));
    }
    CUDA_CHECK(multi.normalize(moms[step]));
    for (int j = 0; j < n_m; j++) {
      const size_t n = (size_t)shapes[j].rows * shapes[j].cols;
      buf_ok &= same_bits(host(side[0].buf[j], n), host(side[1].buf[j], n));
      const std::vector<bf16> x0 = host(side[0].X[j], n), x1 = host(side[1].X[j], n);
      if (shapes[j].owned) {
        x_ok &= same_bits(x0, x1);
        // ||u|| in fp64 against the bf16 X: sum of X^2 is 1 within bf16 rounding; and u / ||u|| itself
        double s2 = 0;
        std::vector<double> u(n);
        for (size_t i = 0; i < n; i++) {
          const double b = (double)moms[step] * buf_before[j][i] + (1 - (double)moms[step]) * gs[j][i];
          u[i] = (1 - (double)moms[step]) * gs[j][i] + moms[step] * b;
          s2 += u[i] * u[i];
        }
        const bool tall = shapes[j].rows > shapes[j].cols;
        double e = 0;
        for (int r = 0; r < shapes[j].rows; r++)
          for (int c = 0; c < shapes[j].cols; c++) {
            const size_t src = (size_t)r * shapes[j].cols + c, dst = tall ? (size_t)c * shapes[j].rows + r : src;
            const double ref = u[src] / (std::sqrt(s2) + 1e-7);
            e = std::max(e, std::fabs((double)__bfloat162float(x1[dst]) - ref) / (std::fabs(ref) + 1e-30));
          }
        norm_err = std::max(norm_err, e);
      } else {  // not owned: X untouched
        unowned_ok &= same_bits(x1, x_before[j]);
      }
    }
    // apply every matrix, on both sides from the same X (the not-owned one's from a third source)
    for (int j = 0; j < n_m; j++) {
      const size_t n = (size_t)shapes[j].rows * shapes[j].cols;
      if (!shapes[j].owned) {
        std::vector<bf16> hx(n);
        for (size_t i = 0; i < n; i++) hx[i] = __float2bfloat16(0.01f * (float)((i * 7919) % 201) - 1.f);
        for (Side& s : side) CUDA_CHECK(cudaMemcpy(s.X[j], hx.data(), n * sizeof(bf16), cudaMemcpyHostToDevice));
      }
      CUDA_CHECK(optim::muon_apply(side[0].w[j], side[0].wb[j], side[0].X[j], shapes[j].rows, shapes[j].cols, lr));
    }
    CUDA_CHECK(multi.apply(lr));
    for (int j = 0; j < n_m; j++) {
      const size_t n = (size_t)shapes[j].rows * shapes[j].cols;
      w_ok &= same_bits(host(side[0].w[j], n), host(side[1].w[j], n)) && host(side[1].w[j], n) != w0[j];
      if (side[0].wb[j]) wb_ok &= same_bits(host(side[0].wb[j], n), host(side[1].wb[j], n));
    }
  }
  CHECK(buf_ok, "Muon multi: the momentum buffers are muon_momentum's bits, owned or not");
  CHECK(x_ok, "Muon multi: X of the owned matrices is muon_normalize's bits (tall ones transposed)");
  CHECK(unowned_ok, "Muon multi: X of a matrix not owned is left as it was");
  CHECK(norm_err <= 1.0 / 256, "Muon multi: X = u / ||u|| within a bf16 rounding of fp64 (max rel err %.2e)", norm_err);
  CHECK(w_ok, "Muon multi: the updated fp32 weights are muon_apply's bits");
  CHECK(wb_ok, "Muon multi: the bf16 copies are muon_apply's bits");
  std::printf("muon multi: %d matrices, two steps: buffers %s, X %s, weights %s (X against fp64: max rel err %.2e)\n", n_m,
              buf_ok ? "same bits" : "DIFFER", x_ok ? "same bits" : "DIFFER", w_ok && wb_ok ? "same bits" : "DIFFER", norm_err);
  for (Side& s : side)
    for (int j = 0; j < n_m; j++) {
      for (float* q : {s.w[j], s.g[j], s.buf[j]}) CUDA_CHECK(cudaFree(q));
      for (bf16* q : {s.wb[j], s.X[j]})
        if (q) CUDA_CHECK(cudaFree(q));
    }
  optim::MuonMulti none({});
  CHECK(none.normalize(0.9f) == cudaSuccess && none.apply(0.1f) == cudaSuccess, "Muon multi over no matrices does nothing");
  bool threw = false;
  try {
    optim::MuonMulti bad({{nullptr, nullptr, nullptr, nullptr, nullptr, 0, 4, true}});
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  CHECK(threw, "Muon multi refuses a matrix of no elements");
}

LAYER_TEST_MAIN("multi_tensor", test_adam_multi, test_muon_multi)
