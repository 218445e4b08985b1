// The layer test of matmul (tests/layers/gpu_test.h: helpers and tolerances), against a plain fp64 triple loop
// (CPU references: model/reference_layers.h unless named otherwise).
// Tolerances: bf16 output 4e-3 (the output rounding dominates fp32 accumulation over k <= 3072);
// fp32 output 1e-5; the tuned choice bit for bit.
#include <chrono>

#include "tests/layers/gpu_test.h"
#include "layers/matmul.cuh"

// ---- matmul: forward, both backward forms, accumulate, fp32 output
static void test_matmul() {
  {
    layers::Matmul mm;
    struct Shape { int m, n, k; bool ta, tb, acc, f32; } shapes[] = {
        {256, 768, 768, false, false, false, false}, {128, 3072, 768, false, true, false, false},
        {768, 512, 256, true, false, true, false},   {64, 1024, 768, false, false, false, true},
        {256, 768, 3072, false, false, true, false}};  // the residual add of the MLP's output projection
    for (auto sh : shapes) {
      std::vector<double> A = random_bf16((size_t)sh.m * sh.k), B = random_bf16((size_t)sh.k * sh.n), C0 = random_bf16((size_t)sh.m * sh.n);
      std::vector<double> want = sh.acc ? C0 : std::vector<double>((size_t)sh.m * sh.n, 0.0);
      auto a = [&](int i, int kk) { return sh.ta ? A[(size_t)kk * sh.m + i] : A[(size_t)i * sh.k + kk]; };
      auto b = [&](int kk, int j) { return sh.tb ? B[(size_t)j * sh.k + kk] : B[(size_t)kk * sh.n + j]; };
      for (int i = 0; i < sh.m; i++)
        for (int kk = 0; kk < sh.k; kk++) {
          const double av = a(i, kk);
          for (int j = 0; j < sh.n; j++) want[(size_t)i * sh.n + j] += av * b(kk, j);
        }
      bf16 *dA = to_device(A), *dB = to_device(B);
      double e;
      if (sh.f32) {
        float* dC;
        CUDA_CHECK(cudaMalloc(&dC, want.size() * sizeof(float)));
        CUDA_CHECK(cudaMemset(dC, 0xFF, want.size() * sizeof(float)));
        mm(dA, dB, dC, sh.m, sh.n, sh.k, sh.ta, sh.tb, false, true);
        std::vector<float> h(want.size());
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(h.data(), dC, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
        e = rel_err(std::vector<double>(h.begin(), h.end()), want);
        CUDA_CHECK(cudaFree(dC));
      } else {
        bf16* dC = sh.acc ? to_device(C0) : poisoned(want.size());
        mm(dA, dB, dC, sh.m, sh.n, sh.k, sh.ta, sh.tb, sh.acc, false);
        const std::vector<double> got = from_device(dC, want.size());
        e = rel_err(got, want);
        CUDA_CHECK(cudaFree(dC));
        if (sh.acc) {  // add(): D = C + AB into another buffer (cuBLASLt's out-of-place epilogue: not
                       // the in-place call's bits on H200), C untouched; same bf16 tolerance
          bf16 *dCin = to_device(C0), *dD = poisoned(want.size());
          mm.add(dA, dB, dCin, dD, sh.m, sh.n, sh.k, sh.ta, sh.tb);
          const double ea = rel_err(from_device(dD, want.size()), want);
          CHECK(ea < 4e-3 && from_device(dCin, want.size()) == C0, "matmul add m=%d n=%d k=%d: rel err %.2e, or C changed", sh.m, sh.n,
                sh.k, ea);
          std::printf("matmul add (D = C + AB, D another buffer) m=%d n=%d k=%d: %.2e\n", sh.m, sh.n, sh.k, ea);
          CUDA_CHECK(cudaFree(dCin));
          CUDA_CHECK(cudaFree(dD));
        }
      }
      CHECK(e < (sh.f32 ? 1e-5 : 4e-3), "matmul m=%d n=%d k=%d ta=%d tb=%d acc=%d fp32=%d: rel err %.2e", sh.m, sh.n, sh.k, sh.ta, sh.tb,
            sh.acc, sh.f32, e);
      std::printf("matmul m=%d n=%d k=%d ta=%d tb=%d acc=%d fp32=%d: %.2e\n", sh.m, sh.n, sh.k, sh.ta, sh.tb, sh.acc, sh.f32, e);
      CUDA_CHECK(cudaFree(dA));
      CUDA_CHECK(cudaFree(dB));
    }
  }
}

// ---- matmul's tuned choice (layers/matmul.cuh): at the model's shapes, where cuBLASLt offers
// several algorithms, the tuned Matmul gives exactly the first choice's bits (bitwise equality,
// no tolerance: that is the rule the tuning keeps), and its first call, which runs the trials,
// adds into an in-place output once (an extra addition would change the bits). A fresh tuned
// Matmul first gets a zero A (as the model's first backward does: its projections start at
// zero), which must leave the output as a zero product does and must not tune (on zeros every
// algorithm agrees, a split-K one too); then two calls on random A, the one that tunes and a
// later one, each with the first choice's bits. Every host wait of the tuning goes through the
// installed wait (set_host_wait: a data-parallel trainer's wait with a deadline), and an error
// that wait throws reaches the caller.
static void test_matmul_tuned() {
  struct Shape { const char* name; int m, n, k; bool ta, tb, acc, f32, add; } shapes[] = {
      {"x W (C x C)", 8192, 768, 768, false, false, false, false, false},
      {"dX = dy W^T, 4C x C", 8192, 3072, 768, false, true, false, false, false},
      {"dX += dy W^T (in place)", 8192, 768, 768, false, true, true, false, false},
      {"x + r Wproj (add, out of place)", 8192, 768, 3072, false, false, false, false, true},
      {"dW += x^T dy (fp32, in place)", 768, 3072, 8192, true, false, true, true, false}};
  for (const Shape& sh : shapes) {
    const size_t nc = (size_t)sh.m * sh.n, esize = sh.f32 ? 4 : 2;
    std::vector<double> A = random_bf16((size_t)sh.m * sh.k), B = random_bf16((size_t)sh.k * sh.n), C0 = random_bf16(nc);
    bf16 *dA = to_device(A), *dB = to_device(B), *dC0 = to_device(C0);
    void *out[2], *start;  // the first choice's output, the tuned one's; the starting output
    std::vector<float> C0f(C0.begin(), C0.end());
    CUDA_CHECK(cudaMalloc(&start, nc * esize));
    if (sh.f32)
      CUDA_CHECK(cudaMemcpy(start, C0f.data(), nc * 4, cudaMemcpyHostToDevice));
    else
      CUDA_CHECK(cudaMemcpy(start, dC0, nc * 2, cudaMemcpyDeviceToDevice));
    bf16* dZero;  // a zero A
    CUDA_CHECK(cudaMalloc(&dZero, A.size() * sizeof(bf16)));
    CUDA_CHECK(cudaMemset(dZero, 0, A.size() * sizeof(bf16)));
    std::vector<std::vector<unsigned char>> got[2];
    std::string algo, algo_after_zero;
    auto call = [&](layers::Matmul& mm, const bf16* a, void* o) {
      CUDA_CHECK(cudaMemcpy(o, start, nc * esize, cudaMemcpyDeviceToDevice));
      if (sh.add)
        mm.add(a, dB, dC0, (bf16*)o, sh.m, sh.n, sh.k, sh.ta, sh.tb);
      else
        mm(a, dB, o, sh.m, sh.n, sh.k, sh.ta, sh.tb, sh.acc, sh.f32);
      CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<unsigned char> h(nc * esize);
      CUDA_CHECK(cudaMemcpy(h.data(), o, h.size(), cudaMemcpyDeviceToHost));
      return h;
    };
    std::vector<unsigned char> zero_product(nc * esize, 0), start_bytes(nc * esize);
    CUDA_CHECK(cudaMemcpy(start_bytes.data(), start, start_bytes.size(), cudaMemcpyDeviceToHost));
    bool zero_ok = false;
    int waits = 0, waits_after_zero = 0;
    for (int which = 0; which < 2; which++) {
      layers::Matmul mm(32u << 20, which == 0 ? 0 : layers::Matmul::kTuned);
      CUDA_CHECK(cudaMalloc(&out[which], nc * esize));
      if (which == 1) {
        mm.set_host_wait([&](cudaStream_t st, const std::string&) {
          waits++;
          CUDA_CHECK(cudaStreamSynchronize(st));
        });
        const std::vector<unsigned char> z = call(mm, dZero, out[which]);
        zero_ok = z == (sh.acc || sh.add ? start_bytes : zero_product);  // add(): C0 = start
        algo_after_zero = mm.algorithm(sh.m, sh.n, sh.k, sh.ta, sh.tb, sh.f32, sh.acc || sh.add);
        waits_after_zero = waits;
      }
      for (int c = 0; c < 2; c++) got[which].push_back(call(mm, dA, out[which]));
      if (which == 1) algo = mm.algorithm(sh.m, sh.n, sh.k, sh.ta, sh.tb, sh.f32, sh.acc || sh.add);
    }
    const bool same = got[1][0] == got[0][0] && got[1][1] == got[0][0] && got[0][1] == got[0][0];
    CHECK(zero_ok && algo_after_zero.find("first's bits") == std::string::npos, "matmul tuned %s: after a zero A: output %s, plan %s",
          sh.name, zero_ok ? "right" : "WRONG", algo_after_zero.c_str());
    CHECK(same && algo.find("first's bits") != std::string::npos, "matmul tuned %s: the first choice's bits %s (%s)", sh.name,
          same ? "kept" : "NOT kept", algo.c_str());
    // the zero call waits once (its output read back); the tuning call once per trial and checksum
    CHECK(waits_after_zero == 1 && waits > 2, "matmul tuned %s: host waits through the installed wait: %d at the zero call, %d in all",
          sh.name, waits_after_zero, waits);
    {
      layers::Matmul mm(32u << 20, layers::Matmul::kTuned);
      mm.set_host_wait([](cudaStream_t, const std::string& what) { throw std::runtime_error("deadline passed in " + what); });
      std::string err;
      try {
        call(mm, dA, out[1]);
      } catch (const std::runtime_error& e) {
        err = e.what();
      }
      CUDA_CHECK(cudaDeviceSynchronize());
      CHECK(err.find("deadline passed in") != std::string::npos, "matmul tuned %s: the installed wait's error reaches the caller: '%s'",
            sh.name, err.c_str());
    }
    std::printf("matmul tuned, %s: a zero product left untuned; bitwise the first choice's; runs %s\n", sh.name, algo.c_str());
    for (void* p : {(void*)dA, (void*)dB, (void*)dC0, (void*)dZero, out[0], out[1], start}) CUDA_CHECK(cudaFree(p));
  }
}

// ---- batched products (the q, k, v projections and their weight gradients): three products
// sharing A in one call. Each item against fp64 (bf16 output 4e-3, fp32 1e-5), the items of
// the tuned call bit for bit those of the first choice's call, and outputs outside the items
// (a gap in the output stride) untouched. A zero stride shares A; B and C have their own.
static void test_matmul_batched() {
  const int count = 3;
  struct Shape { const char* name; int m, n, k; bool ta, acc, f32; long long sb, sc; } shapes[] = {
      {"y_i = x W_i", 2048, 768, 768, false, false, false, 768LL * 768, 2048LL * 768 + 64},
      {"dW_i += x^T dy_i (fp32)", 768, 768, 2048, true, true, true, 2048LL * 768, 768LL * 768}};
  for (const Shape& sh : shapes) {
    const size_t na = (size_t)sh.m * sh.k, span = (size_t)(count - 1) * sh.sc + (size_t)sh.m * sh.n, esize = sh.f32 ? 4 : 2;
    std::vector<double> A = random_bf16(na), B = random_bf16((size_t)(count - 1) * sh.sb + (size_t)sh.k * sh.n), C0 = random_bf16(span);
    bf16 *dA = to_device(A), *dB = to_device(B);
    void* start;  // the starting output: C0 (fp32 or bf16)
    CUDA_CHECK(cudaMalloc(&start, span * esize));
    if (sh.f32) {
      std::vector<float> f(C0.begin(), C0.end());
      CUDA_CHECK(cudaMemcpy(start, f.data(), span * 4, cudaMemcpyHostToDevice));
    } else {
      bf16* t = to_device(C0);
      CUDA_CHECK(cudaMemcpy(start, t, span * 2, cudaMemcpyDeviceToDevice));
      CUDA_CHECK(cudaFree(t));
    }
    auto read = [&](void* o) {
      std::vector<double> h(span);
      if (sh.f32) {
        std::vector<float> f(span);
        CUDA_CHECK(cudaMemcpy(f.data(), o, span * 4, cudaMemcpyDeviceToHost));
        h.assign(f.begin(), f.end());
      } else {
        h = from_device((bf16*)o, span);
      }
      return h;
    };
    std::vector<double> got[2];
    for (int which = 0; which < 2; which++) {  // the first choice, then tuned
      layers::Matmul mm(32u << 20, which == 0 ? 0 : layers::Matmul::kTuned);
      void* o;
      CUDA_CHECK(cudaMalloc(&o, span * esize));
      CUDA_CHECK(cudaMemcpy(o, start, span * esize, cudaMemcpyDeviceToDevice));
      mm.batched(dA, dB, o, sh.m, sh.n, sh.k, sh.ta, false, sh.acc, sh.f32, {count, 0, sh.sb, sh.sc});
      CUDA_CHECK(cudaDeviceSynchronize());
      got[which] = read(o);
      CUDA_CHECK(cudaFree(o));
    }
    double worst = 0;
    bool gaps = true;
    for (int b = 0; b < count; b++) {
      std::vector<double> want((size_t)sh.m * sh.n, 0.0), item(want.size());
      for (int i = 0; i < sh.m; i++)
        for (int kk = 0; kk < sh.k; kk++) {
          const double av = sh.ta ? A[(size_t)kk * sh.m + i] : A[(size_t)i * sh.k + kk];
          const double* brow = &B[(size_t)b * sh.sb + (size_t)kk * sh.n];
          for (int j = 0; j < sh.n; j++) want[(size_t)i * sh.n + j] += av * brow[j];
        }
      for (size_t e = 0; e < want.size(); e++) {
        if (sh.acc) want[e] += C0[(size_t)b * sh.sc + e];
        item[e] = got[1][(size_t)b * sh.sc + e];
      }
      worst = std::max(worst, rel_err(item, want));
      if (b + 1 < count)
        for (size_t e = (size_t)sh.m * sh.n; e < (size_t)sh.sc; e++) gaps &= got[1][(size_t)b * sh.sc + e] == C0[(size_t)b * sh.sc + e];
    }
    CHECK(worst < (sh.f32 ? 1e-5 : 4e-3) && gaps && got[1] == got[0], "matmul batched %s: rel err %.2e, gaps %s, tuned %s the first's bits",
          sh.name, worst, gaps ? "untouched" : "WRITTEN", got[1] == got[0] ? "with" : "WITHOUT");
    std::printf("matmul batched (%d items) %s: %.2e; the first choice's bits when tuned\n", count, sh.name, worst);
    for (void* p : {(void*)dA, (void*)dB, start}) CUDA_CHECK(cudaFree(p));
  }
}

// ---- a tuned shape's first call on a stream that cannot finish (as the compute stream, once it
// waits for an all-reduce with a peer that hangs): the host must reach the installed wait at
// once, not block in a copy (a read-back into pageable memory blocks until the stream is done),
// so that the wait's deadline ends the run. A kernel holds the stream until the host releases
// it (or 5 s pass: a failing test must not hang); the installed wait throws at its first call.
__global__ void hold_stream(const volatile int* release, unsigned long long limit_ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  while (*release == 0 && t - t0 < limit_ns);
}

static void test_matmul_wait_on_held_stream() {
  const int m = 8192, n = 768, k = 768;
  bf16 *dA = to_device(random_bf16((size_t)m * k)), *dB = to_device(random_bf16((size_t)k * n)), *dC;
  CUDA_CHECK(cudaMalloc(&dC, (size_t)m * n * sizeof(bf16)));
  int* release;
  CUDA_CHECK(cudaHostAlloc(&release, sizeof(int), cudaHostAllocMapped));
  *release = 0;
  int* d_release;
  CUDA_CHECK(cudaHostGetDevicePointer(&d_release, release, 0));
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  layers::Matmul mm(32u << 20, layers::Matmul::kTuned);
  mm.set_host_wait([](cudaStream_t, const std::string& what) { throw std::runtime_error("deadline in " + what); });
  hold_stream<<<1, 1, 0, st>>>(d_release, 5000000000ull);
  CUDA_CHECK(cudaGetLastError());
  const auto t0 = std::chrono::steady_clock::now();
  std::string err;
  try {
    mm(dA, dB, dC, m, n, k, false, false, false, false, st);
  } catch (const std::runtime_error& e) {
    err = e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool still_held = cudaStreamQuery(st) == cudaErrorNotReady;
  *release = 1;
  CUDA_CHECK(cudaStreamSynchronize(st));
  CHECK(err.find("deadline in") != std::string::npos && s < 1.0 && still_held,
        "matmul tuned on a held stream: the installed wait reached after %.3f s (stream still held: %s), error '%s'", s,
        still_held ? "yes" : "no", err.c_str());
  std::printf("matmul tuned on a held stream: the installed wait reached after %.3f s, the stream still held\n", s);
  CUDA_CHECK(cudaStreamDestroy(st));
  CUDA_CHECK(cudaFreeHost(release));
  for (void* p : {(void*)dA, (void*)dB, (void*)dC}) CUDA_CHECK(cudaFree(p));
}

LAYER_TEST_MAIN("matmul", test_matmul, test_matmul_tuned, test_matmul_batched, test_matmul_wait_on_held_stream)
