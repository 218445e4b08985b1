// The layer test of value_embed_backward (tests/layers/gpu_test.h: helpers and tolerances): the bits of the
// two kernels it replaces (embedding_backward_scaled, then mix_backward_gather) for the table's gradient and dv,
// and the scalars' gradients against fp64 sums.
// Tolerances: the sums are fp32: 1e-5 relative to |dv||v_lin| and |dv||ve|; the table's gradient 1e-5 (fp32
// sums of bf16 terms, against fp64 sums of the same bf16-rounded terms).
#include "tests/layers/gpu_test.h"
#include "layers/embedding.cuh"
#include "layers/mix_backward.cuh"
#include "layers/token_index.h"
#include "layers/value_embed_backward.cuh"

static void test_value_embed_backward() {
  // C = 768: the model's width (blocks of 96 threads, 8 columns a thread); C = 200: threads 25-95
  // idle; C = 2560: four column groups a thread, the last partial
  for (const int C : {768, 200, 2560}) {
    const int V = 1000, T = 4099;
    const size_t n = (size_t)T * C;
    std::vector<int> tok(T);
    for (int t = 0; t < T; t++) tok[t] = (int)((rng() % 97) * (rng() % 11)) % V;  // heavy repeats: chunks with partial sums
    std::vector<double> dv = random_bf16(n), vlin = random_bf16(n), table = random_bf16((size_t)V * C);
    std::vector<float> dtab0((size_t)V * C);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& x : dtab0) x = nd(rng);
    const float c[2] = {0.7f, -1.3f}, gc0[2] = {0.5f, -0.25f};
    layers::TokenIndex ix(tok.data(), T, V);
    const std::vector<int> packed = ix.packed();
    CHECK(ix.chunk_token.size() <= layers::TokenIndex::max_chunks(T) && ix.slots() > 0, "C=%d: %zu chunks, %d slots", C,
          ix.chunk_token.size(), ix.slots());
    int *dtok, *dix;
    float *dslots, *dc, *dgc, *dpart, *dvpart;
    CUDA_CHECK(cudaMalloc(&dtok, T * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&dix, packed.size() * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&dslots, (size_t)ix.slots() * C * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dc, sizeof(c)));
    CUDA_CHECK(cudaMalloc(&dgc, 4 * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dpart, 2 * layers::kDotBlocks * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dvpart, 2 * layers::TokenIndex::max_chunks(T) * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(dtok, tok.data(), T * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dix, packed.data(), packed.size() * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dc, c, sizeof(c), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dgc, gc0, sizeof(gc0), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dgc + 2, gc0, sizeof(gc0), cudaMemcpyHostToDevice));
    const layers::TokenIndexView ixv(ix, dix, dslots);
    bf16 *dv1 = to_device(dv), *dv2 = to_device(dv), *dvl = to_device(vlin), *dtab = to_device(table);
    float *dg1, *dg2;
    for (float** g : {&dg1, &dg2}) {
      CUDA_CHECK(cudaMalloc(g, dtab0.size() * sizeof(float)));
      CUDA_CHECK(cudaMemcpy(*g, dtab0.data(), dtab0.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
    // fused
    CUDA_CHECK(layers::value_embed_backward(dv1, dvl, dtab, ixv, dg1, C, dc, dgc, dvpart));
    // the two kernels it replaces: the table's gradient from bf16(c1 dv), then the mix's backward
    CUDA_CHECK(layers::embedding_backward_scaled(dv2, dc + 1, ixv, dg2, C));
    CUDA_CHECK(layers::mix_backward_gather(dv2, dvl, dtab, dtok, T, C, nullptr, false, dc, dgc + 2, dpart));
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> g1(dtab0.size()), g2(dtab0.size());
    float got[4];
    CUDA_CHECK(cudaMemcpy(g1.data(), dg1, g1.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(g2.data(), dg2, g2.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(got, dgc, sizeof(got), cudaMemcpyDeviceToHost));
    const std::vector<double> hv1 = from_device(dv1, n);
    CHECK(g1 == g2 && g1 != dtab0, "C=%d: the table's gradient differs from embedding_backward_scaled's", C);
    CHECK(hv1 == from_device(dv2, n), "C=%d: dv differs from mix_backward_gather's", C);
    // fp64: the sums, the table's gradient (of the bf16-rounded terms the kernels add) and dv
    double r0 = 0, r1 = 0, gg = 0, aa = 0, bb = 0;
    std::vector<double> want(dtab0.begin(), dtab0.end()), wdv(n);
    for (int t = 0; t < T; t++)
      for (int k = 0; k < C; k++) {
        const size_t i = (size_t)t * C + k, w = (size_t)tok[t] * C + k;
        r0 += dv[i] * vlin[i], r1 += dv[i] * table[w];
        gg += dv[i] * dv[i], aa += vlin[i] * vlin[i], bb += table[w] * table[w];
        want[w] += (double)__bfloat162float(__float2bfloat16(c[1] * (float)dv[i]));
        wdv[i] = c[0] * dv[i];
      }
    const double e0 = std::fabs(got[0] - gc0[0] - r0) / std::sqrt(gg * aa), e1 = std::fabs(got[1] - gc0[1] - r1) / std::sqrt(gg * bb);
    const double eg = rel_err(std::vector<double>(g1.begin(), g1.end()), want), ev = rel_err(hv1, wdv);
    const double u0 = std::fabs(got[0] - got[2]) / std::sqrt(gg * aa), u1 = std::fabs(got[1] - got[3]) / std::sqrt(gg * bb);
    CHECK(e0 < 1e-5 && e1 < 1e-5, "C=%d: the scalars' gradients %.2e %.2e from fp64 (fp32 sums: 1e-5)", C, e0, e1);
    CHECK(u0 < 1e-5 && u1 < 1e-5, "C=%d: the scalars' gradients %.2e %.2e from mix_backward_gather's", C, u0, u1);
    CHECK(eg < 1e-5 && ev < 4e-3, "C=%d: table gradient %.2e (fp32: 1e-5), dv %.2e (bf16: 4e-3)", C, eg, ev);
    // deterministic: the same inputs again give the same bits
    bf16* dv3 = to_device(dv);
    float* dg3;
    CUDA_CHECK(cudaMalloc(&dg3, dtab0.size() * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(dg3, dtab0.data(), dtab0.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dgc + 2, gc0, sizeof(gc0), cudaMemcpyHostToDevice));
    CUDA_CHECK(layers::value_embed_backward(dv3, dvl, dtab, ixv, dg3, C, dc, dgc + 2, dvpart));
    std::vector<float> g3(dtab0.size());
    float again[2];
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(g3.data(), dg3, g3.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(again, dgc + 2, sizeof(again), cudaMemcpyDeviceToHost));
    CHECK(g3 == g1 && again[0] == got[0] && again[1] == got[1] && from_device(dv3, n) == hv1, "C=%d: not deterministic", C);
    std::printf("value_embed_backward C=%d: sums %.1e %.1e (%.1e %.1e from the unfused order), table %.2e, dv %.2e; "
                "the unfused kernels' bits for the table and dv, %zu chunks\n",
                C, e0, e1, u0, u1, eg, ev, ix.chunk_token.size());
    CHECK(layers::value_embed_backward(dv1 + 1, dvl, dtab, ixv, dg1, C, dc, dgc, dvpart) == cudaErrorInvalidValue,
          "a misaligned dv accepted");
    for (void* q : {(void*)dtok, (void*)dix, (void*)dslots, (void*)dc, (void*)dgc, (void*)dpart, (void*)dvpart, (void*)dv1, (void*)dv2,
                    (void*)dv3, (void*)dvl, (void*)dtab, (void*)dg1, (void*)dg2, (void*)dg3})
      CUDA_CHECK(cudaFree(q));
  }
}

LAYER_TEST_MAIN("value_embed_backward", test_value_embed_backward)
