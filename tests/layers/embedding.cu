// The layer test of embedding (tests/layers/gpu_test.h: helpers and tolerances), against a per-token fp64 sum
// (CPU references: model/reference_layers.h unless named otherwise).
// Tolerances: the backward works in fp32: 1e-5.
#include "tests/layers/gpu_test.h"
#include "layers/embedding.cuh"
#include "layers/token_index.h"

// ---- embedding: forward copies rows, backward sums per token deterministically into fp32
static void test_embedding() {
  {
    const int V = 1000, C = 768, T = 4096;
    std::vector<int> tok(T);
    for (int t = 0; t < T; t++) tok[t] = (int)((rng() % 97) * (rng() % 11)) % V;  // heavy repeats
    std::vector<double> table = random_bf16((size_t)V * C), dout = random_bf16((size_t)T * C);
    std::vector<float> dtab0((size_t)V * C);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& v : dtab0) v = nd(rng);
    std::vector<double> want(dtab0.begin(), dtab0.end());
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++) want[(size_t)tok[t] * C + c] += dout[(size_t)t * C + c];
    layers::TokenIndex ix(tok.data(), T, V);
    int *dtok, *dix;
    float* dpart;
    const std::vector<int> packed = ix.packed();
    CHECK(ix.slots() > 0 && ix.slots() <= (int)layers::TokenIndex::max_slots(T) && packed.size() <= layers::TokenIndex::max_packed(T),
          "token index: %d partial-sum slots (frequent tokens cut into chunks of %d), %zu packed ints", ix.slots(),
          layers::TokenIndex::kChunk, packed.size());
    CUDA_CHECK(cudaMalloc(&dtok, T * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&dix, packed.size() * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&dpart, std::max(ix.slots(), 1) * (size_t)C * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(dtok, tok.data(), T * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dix, packed.data(), packed.size() * sizeof(int), cudaMemcpyHostToDevice));
    const layers::TokenIndexView ixv(ix, dix, dpart);
    bf16 *dtable = to_device(table), *dout_d = to_device(dout), *demb = poisoned((size_t)T * C);
    CUDA_CHECK(layers::embedding_forward(dtable, dtok, demb, T, C));
    std::vector<double> emb = from_device(demb, (size_t)T * C);
    bool same = true;
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++) same &= emb[(size_t)t * C + c] == table[(size_t)tok[t] * C + c];
    CHECK(same, "embedding forward is not an exact copy of the rows");
    std::vector<float> got[2];
    for (int rep = 0; rep < 2; rep++) {
      float* dg;
      CUDA_CHECK(cudaMalloc(&dg, dtab0.size() * sizeof(float)));
      CUDA_CHECK(cudaMemcpy(dg, dtab0.data(), dtab0.size() * sizeof(float), cudaMemcpyHostToDevice));
      CUDA_CHECK(layers::embedding_backward(dout_d, ixv, dg, C));
      got[rep].resize(dtab0.size());
      CUDA_CHECK(cudaDeviceSynchronize());
      CUDA_CHECK(cudaMemcpy(got[rep].data(), dg, dtab0.size() * sizeof(float), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaFree(dg));
    }
    const double e = rel_err(std::vector<double>(got[0].begin(), got[0].end()), want);
    CHECK(e < 1e-5, "embedding backward rel err %.2e", e);
    CHECK(got[0] == got[1], "embedding backward is not deterministic");
    std::printf("embedding: %zu distinct tokens of %d (%d chunk sums of frequent tokens), backward %.2e, deterministic\n",
                ix.unique.size(), T, ix.slots(), e);
    // embedding_backward_scaled(dout, a) == embedding_backward(bf16(a dout)), to the bit (the
    // model's value embedding: a1 dv of the mix, never written as a tensor)
    {
      const float a = -0.7310586f;
      std::vector<double> scaled(dout.size());
      for (size_t i = 0; i < dout.size(); i++) scaled[i] = (double)__bfloat162float(__float2bfloat16(a * (float)dout[i]));
      bf16* dscaled = to_device(scaled);
      float *da, *dg1, *dg2;
      CUDA_CHECK(cudaMalloc(&da, sizeof(float)));
      CUDA_CHECK(cudaMemcpy(da, &a, sizeof(float), cudaMemcpyHostToDevice));
      for (float** g : {&dg1, &dg2}) {
        CUDA_CHECK(cudaMalloc(g, dtab0.size() * sizeof(float)));
        CUDA_CHECK(cudaMemcpy(*g, dtab0.data(), dtab0.size() * sizeof(float), cudaMemcpyHostToDevice));
      }
      CUDA_CHECK(layers::embedding_backward(dscaled, ixv, dg1, C));
      CUDA_CHECK(layers::embedding_backward_scaled(dout_d, da, ixv, dg2, C));
      std::vector<float> h1(dtab0.size()), h2(dtab0.size());
      CUDA_CHECK(cudaDeviceSynchronize());
      CUDA_CHECK(cudaMemcpy(h1.data(), dg1, h1.size() * sizeof(float), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(h2.data(), dg2, h2.size() * sizeof(float), cudaMemcpyDeviceToHost));
      CHECK(h1 == h2 && h1 != dtab0, "embedding_backward_scaled differs from embedding_backward on the scaled rows");
      std::printf("embedding backward with the rows scaled on the fly: the bits of the scaled rows' backward\n");
      for (void* p : {(void*)dscaled, (void*)da, (void*)dg1, (void*)dg2}) CUDA_CHECK(cudaFree(p));
    }
    for (void* p : {(void*)dtok, (void*)dix, (void*)dpart, (void*)dtable, (void*)dout_d, (void*)demb}) CUDA_CHECK(cudaFree(p));
  }
}

LAYER_TEST_MAIN("embedding", test_embedding)
