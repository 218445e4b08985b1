// The optimiser over the model's parameter layout (docs/model.md, optimisation): Adam for the
// embeddings, the head and the scalars, Muon for the block matrices (the same grouping as
// model/optimizer_reference.cpp).
//
// Every rank runs Adam and Muon's momentum on the averaged gradients; matrix j's Newton-Schulz
// runs only on rank j % world, which broadcasts the result (X, bf16) to the others; then every
// rank applies every X. The element-wise stages (Adam; Muon's momentum, normalisation and
// update) run over all tensors in one launch each (layers/multi_tensor.cuh), and a rank's
// Newton-Schulz batched over its matrices of one shape (one product call for all of them,
// layers::newton_schulz5_batched): otherwise each matrix is muon_step, stage by stage
// (tests/layers/muon.cu, tests/layers/multi_tensor.cu). The optimiser saves and loads its own
// state in checkpoints.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "layers/matmul.cuh"
#include "layers/multi_tensor.cuh"
#include "layers/muon.cuh"
#include "model/config.h"
#include "model/gpt.cuh"
#include "train/checkpoint.h"
#include "train/data_parallel.cuh"

namespace train {
struct Optimizer {
  float *m = nullptr, *v = nullptr, *buf = nullptr;
  layers::bf16* X = nullptr;     // orthogonalised updates, one slot per matrix
  std::vector<size_t> x_offset;  // by matrix index
  int adam_steps = 0;
  model::OptimizerHyper hp;
  int rank, world;
  // This rank's matrices of one shape (r x c after the transpose of tall ones, r <= c): their X
  // slots are consecutive, so that Newton-Schulz runs on all of them at once
  // (layers::newton_schulz5_batched), in batches of at most `batch`.
  struct Group {
    int r, c;
    size_t first, count, batch, stride;  // first: the first slot's offset in X; stride: a slot's size
  };
  std::vector<Group> groups;
  layers::bf16 *bA = nullptr, *bAA = nullptr, *bBX = nullptr;  // batched Newton-Schulz scratch
  static constexpr size_t kBatchBytes = 64 << 20;               // of BX, at most (the rest is smaller)
  // The element-wise stages over all tensors at once (layers/multi_tensor.cuh), bound to the
  // model's buffers at the first step; X's slots in the broadcast.
  std::unique_ptr<layers::AdamMulti> adam;
  std::unique_ptr<layers::MuonMulti> muon;
  std::vector<train::DataParallel::Broadcast> shares;
  Optimizer(const model::Layout& layout, int rank, int world) : rank(rank), world(world) {
    const size_t n = layout.size();
    for (float** p : {&m, &v, &buf}) {
      gpt::cuda_check(cudaMalloc(p, n * sizeof(float)), "optimizer state");
      gpt::cuda_check(cudaMemset(*p, 0, n * sizeof(float)), "optimizer state");
    }
    // X's slots grouped by owner (matrix j is rank j % world's), then by shape, 128-byte aligned
    // (cuBLASLt wants 16); a group's slots one stride apart
    std::vector<const model::Tensor*> mats;
    for (const model::Tensor& t : layout.tensors)
      if (model::group_of(t) == model::ParamGroup::kMatrix) mats.push_back(&t);
    auto shape = [&](size_t j) {  // r x c after the transpose of a tall matrix
      return std::pair<int, int>{(int)std::min(mats[j]->rows, mats[j]->cols), (int)std::max(mats[j]->rows, mats[j]->cols)};
    };
    x_offset.assign(mats.size(), 0);
    size_t total = 0, most_a = 0, most_x = 0;
    for (int owner = 0; owner < world; owner++) {
      std::vector<std::pair<int, int>> shapes;  // in order of first appearance
      for (size_t j = owner; j < mats.size(); j += world)
        if (std::find(shapes.begin(), shapes.end(), shape(j)) == shapes.end()) shapes.push_back(shape(j));
      for (auto [r, c] : shapes) {
        Group g{r, c, total, 0, 0, ((size_t)r * c + 63) / 64 * 64};
        for (size_t j = owner; j < mats.size(); j += world)
          if (shape(j) == std::pair<int, int>{r, c}) {
            x_offset[j] = total;
            total += g.stride;
            g.count++;
          }
        g.batch = std::max<size_t>(1, std::min(g.count, kBatchBytes / ((size_t)r * c * sizeof(layers::bf16))));
        if (owner == rank) {
          groups.push_back(g);
          most_a = std::max(most_a, g.batch * r * r);
          most_x = std::max(most_x, g.batch * r * c);
        }
      }
    }
    gpt::cuda_check(cudaMalloc(&X, std::max<size_t>(total, 1) * sizeof(layers::bf16)), "Muon update buffer");
    for (auto [p, elems] : {std::pair<layers::bf16**, size_t>{&bA, most_a}, {&bAA, most_a}, {&bBX, most_x}})
      gpt::cuda_check(cudaMalloc(p, std::max<size_t>(elems, 1) * sizeof(layers::bf16)), "Muon batch scratch");
  }
  ~Optimizer() {
    for (float* p : {m, v, buf}) cudaFree(p);
    for (layers::bf16* p : {X, bA, bAA, bBX}) cudaFree(p);
  }
  // Its state in a checkpoint: Adam's moments and step count, Muon's momentum (blobs of n floats).
  void save(train::Checkpoint& ck, size_t n) const {
    ck.adam_steps = adam_steps;
    ck.blobs["adam_m"] = download(m, n);
    ck.blobs["adam_v"] = download(v, n);
    ck.blobs["muon_buf"] = download(buf, n);
  }
  void load(const train::Checkpoint& ck, size_t n, const std::string& path) {
    for (auto [name, dst] : {std::pair<const char*, float*>{"adam_m", m}, {"adam_v", v}, {"muon_buf", buf}}) {
      auto it = ck.blobs.find(name);
      if (it == ck.blobs.end() || it->second.size() != n)
        throw train::CheckpointError(path + ": blob " + name + " is missing or of another size");
      upload(dst, it->second);
    }
    adam_steps = (int)ck.adam_steps;
  }
  std::vector<float> download(const float* d, size_t n) const {
    std::vector<float> h(n);
    gpt::cuda_check(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), "optimizer state");
    return h;
  }
  void upload(float* d, const std::vector<float>& h) {
    gpt::cuda_check(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice), "optimizer state");
  }
  void bind(gpt::Model& model) {
    std::vector<layers::AdamTensor> adam_list;
    std::vector<layers::MuonMatrix> muon_list;
    for (const model::Tensor& t : model.layout().tensors) {
      float* w = model.master() + t.offset;
      const float* g = model.grads() + t.offset;
      const model::ParamGroup grp = model::group_of(t);
      if (grp == model::ParamGroup::kMatrix) {
        const int j = (int)muon_list.size(), owner = j % world;
        muon_list.push_back({w, model.weights() + t.offset, g, buf + t.offset, X + x_offset[j], (int)t.rows, (int)t.cols, owner == rank});
        shares.push_back({X + x_offset[j], t.size(), owner});
      } else {
        const double lr = grp == model::ParamGroup::kEmbed ? hp.lr_embed : grp == model::ParamGroup::kHead ? hp.lr_head : hp.lr_scalar;
        adam_list.push_back({w, model.weights() + t.offset, g, m + t.offset, v + t.offset, t.size(), (float)lr});
      }
    }
    adam = std::make_unique<layers::AdamMulti>(adam_list);
    muon = std::make_unique<layers::MuonMulti>(muon_list);
  }
  void step(gpt::Model& model, layers::Matmul& mm, int step, const model::Schedule& sched, train::DataParallel* dp) {
    if (!adam) bind(model);
    adam_steps++;
    const float mult = (float)sched.lr_multiplier(step), mom = (float)sched.muon_momentum(step);
    gpt::cuda_check(muon->normalize(mom), "Muon's momentum and normalisation");
    gpt::cuda_check(adam->step(mult, adam_steps, (float)hp.beta1, (float)hp.beta2, (float)hp.adam_eps), "Adam's step");
    for (const Group& gr : groups)  // this rank's matrices' Newton-Schulz, batched by shape
      for (size_t i = 0; i < gr.count; i += gr.batch) {
        layers::newton_schulz5_batched(mm, X + gr.first + i * gr.stride, (int)std::min(gr.batch, gr.count - i), (long long)gr.stride, gr.r, gr.c,
                                       bA, bAA, bBX);
        gpt::cuda_check(cudaGetLastError(), "Muon's Newton-Schulz");
      }
    if (dp) dp->broadcast(shares);
    gpt::cuda_check(muon->apply(mult * (float)hp.lr_muon), "Muon's update");
  }
};

}  // namespace train
