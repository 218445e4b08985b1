// The optimiser over the model's parameter layout (docs/model.md, optimisation): Adam for the
// embeddings, the head and the scalars, Muon for the block matrices (the same grouping as
// model/optimizer_reference.cpp), sharded over the ranks of a data-parallel run.
//
// Sharding (train/shard_plan.h): each rank updates a 1/N share of the parameters and keeps only
// that share's state: a slice of each embedding and of the head with its Adam moments, and whole
// Muon matrices (the largest first, each to the least loaded rank) with their momentum and
// Newton-Schulz. The scalars are updated by every rank.
//
// Scheduling: the backward calls ready(point) once the gradients of that point's tensors are
// final (train/ready_point.h: the head after the forward, layer i after its backward, the
// embedding at the end). Which tensors belong to which point is the plan's (train/shard_plan.h
// Sync): with --grad-sync end every tensor belongs to the one point at the end, so all of what
// follows runs after the backward, with the matrices' exchange staged; with --grad-sync
// embeddings the head and the value embeddings have points of their own during the backward and
// the rest is at the end, staged; with --grad-sync overlap each layer is a point of its own. Each
// point's work is enqueued at once:
//   the exchange of its gradients (train/data_parallel.cuh reduce, on the communication stream,
//     after the compute stream's backward so far);
//   its update, on the optimiser's own stream, after those sums: Muon's momentum and
//     normalisation of the point's owned matrices, Adam on its slices, Newton-Schulz batched
//     over its owned matrices of one shape, Muon's update;
//   the exchange of its new bf16 weights (gather, after the update);
// so that a point's work before the end runs beside the backward of the layers below (with one
// GPU too, where there is no exchange). The trainer calls ready(point) at the point, or, with
// --grad-sync embeddings, with the next layer's attention backward (train/exchange_windows.h;
// the point at the end still at the end).
// wait() makes the compute stream wait for the last of it, or (the trainer's default with several
// ranks) for the last update alone, the next forward then waiting for each layer's gathered weights
// (train/data_parallel.cuh, Arrivals).
//
// The arithmetic is the unsharded optimiser's, element by element (optim/multi_tensor.cuh, each
// stage tested against the one-tensor kernels of optim/adam.cuh and optim/muon.cuh). A
// checkpoint holds the whole state, gathered from the ranks (save), so that any rank count
// resumes it (load takes each rank's share).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "layers/matmul.cuh"
#include "optim/multi_tensor.cuh"
#include "optim/muon.cuh"
#include "model/config.h"
#include "model/parameters.h"
#include "train/checkpoint.h"
#include "train/data_parallel.cuh"
#include "train/shard_plan.h"

namespace train {

class Optimizer {
 public:
  Optimizer(const model::Layout& layout, int layers, int rank, int world, Sync sync, const model::OptimizerHyper& hp = {})
      : layout_(layout), plan_(shard_plan(layout, layers, world, rank, sync)), hp_(hp) {
    for (auto [p, elems] : {std::pair<float**, size_t>{&m_, plan_.adam_state}, {&v_, plan_.adam_state}, {&buf_, plan_.muon_state}}) {
      cuda_check(cudaMalloc(p, std::max<size_t>(elems, 1) * sizeof(float)), "optimizer state");
      cuda_check(cudaMemset(*p, 0, std::max<size_t>(elems, 1) * sizeof(float)), "optimizer state");
    }
    // X's slots: this rank's matrices, by point, then by shape (r x c after the transpose of a
    // tall matrix), so that Newton-Schulz runs on a point's matrices of one shape at once
    // (optim::newton_schulz5_batched); 128-byte aligned (cuBLASLt wants 16), one stride apart
    size_t total = 0, most_a = 0, most_x = 0;
    for (auto& [point, pieces] : plan_.points) {
      std::vector<std::pair<int, int>> shapes;  // in order of first appearance
      for (const Piece& p : pieces)
        if (p.kind == Piece::kMatrix && p.count && std::find(shapes.begin(), shapes.end(), shape(p)) == shapes.end())
          shapes.push_back(shape(p));
      for (auto [r, c] : shapes) {
        Group g{r, c, total, 0, 0, ((size_t)r * c + 63) / 64 * 64};
        for (const Piece& p : pieces)
          if (p.kind == Piece::kMatrix && p.count && shape(p) == std::pair<int, int>{r, c}) {
            x_slot_[p.tensor] = total;
            total += g.stride;
            g.count++;
          }
        g.batch = std::max<size_t>(1, std::min(g.count, kBatchBytes / ((size_t)r * c * sizeof(layers::bf16))));
        groups_[point].push_back(g);
        most_a = std::max(most_a, g.batch * r * r);
        most_x = std::max(most_x, g.batch * r * c);
      }
    }
    cuda_check(cudaMalloc(&X_, std::max<size_t>(total, 1) * sizeof(layers::bf16)), "Muon update buffer");
    for (auto [p, elems] : {std::pair<layers::bf16**, size_t>{&bA_, most_a}, {&bAA_, most_a}, {&bBX_, most_x}})
      cuda_check(cudaMalloc(p, std::max<size_t>(elems, 1) * sizeof(layers::bf16)), "Muon batch scratch");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "optimizer stream");
    cuda_check(cudaEventCreate(&done_), "optimizer event");
    cuda_check(cudaEventCreate(&backward_done_), "optimizer event");
  }
  ~Optimizer() {
    for (float* p : {m_, v_, buf_}) cudaFree(p);
    for (layers::bf16* p : {X_, bA_, bAA_, bBX_}) cudaFree(p);
    for (auto& [point, w] : work_)
      for (cudaEvent_t e : {w.grads, w.start, w.mid, w.resume, w.end}) cudaEventDestroy(e);
    if (stream_) cudaStreamDestroy(stream_);
    cudaEventDestroy(done_);
    cudaEventDestroy(backward_done_);
  }
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  const ShardPlan& plan() const { return plan_; }

  // Before the step's backward: its schedule (0-based step), the model and the exchange.
  void begin_step(const model::Parameters& params, layers::Matmul& mm, int step, const model::Schedule& sched, DataParallel* dp) {
    if (work_.empty()) bind(params, dp);
    mm_ = &mm, dp_ = dp;
    adam_steps_++;
    mult_ = (float)sched.lr_multiplier(step), mom_ = (float)sched.muon_momentum(step);
  }
  // The gradients of the point's tensors are final (enqueued on the compute stream): their
  // exchange, update and the new weights' exchange, enqueued now. At a point with staged
  // matrices (train/shard_plan.h), the matrices' sums come first, so that Muon runs while the
  // rest is summed, and their weights are gathered while Adam runs.
  void ready(int point) {
    auto it = work_.find(point);
    if (it == work_.end()) return;
    Work& w = it->second;
    cuda_check(cudaEventRecord(w.grads, 0), "optimizer event");
    const bool staged = dp_ && w.staged;
    const cudaEvent_t mats = staged ? dp_->reduce_staged(w.matrices, w.grads) : nullptr;
    const cudaEvent_t sums = dp_ ? dp_->reduce(staged ? w.others : plan_.points.at(point), w.grads) : w.grads;
    cuda_check(cudaStreamWaitEvent(stream_, staged ? mats : sums, 0), "optimizer stream wait");
    cuda_check(cudaEventRecord(w.start, stream_), "optimizer event");
    if (w.muon) cuda_check(w.muon->normalize(mom_, stream_), "Muon's momentum and normalisation");
    if (!staged && w.adam)
      cuda_check(w.adam->step(mult_, adam_steps_, (float)hp_.beta1, (float)hp_.beta2, (float)hp_.adam_eps, stream_), "Adam's step");
    for (const Group& gr : groups_[point])  // the point's owned matrices' Newton-Schulz, batched by shape
      for (size_t i = 0; i < gr.count; i += gr.batch) {
        optim::newton_schulz5_batched(*mm_, X_ + gr.first + i * gr.stride, (int)std::min(gr.batch, gr.count - i), (long long)gr.stride, gr.r,
                                       gr.c, bA_, bAA_, bBX_, stream_);
        cuda_check(cudaGetLastError(), "Muon's Newton-Schulz");
      }
    if (w.muon) cuda_check(w.muon->apply(mult_ * (float)hp_.lr_muon, stream_), "Muon's update");
    if (staged) {
      cuda_check(cudaEventRecord(w.mid, stream_), "optimizer event");
      dp_->gather_staged(w.matrices, w.mid);
      cuda_check(cudaStreamWaitEvent(stream_, sums, 0), "optimizer stream wait");
      cuda_check(cudaEventRecord(w.resume, stream_), "optimizer event");  // (the wait is not the optimiser's time)
      if (w.adam)
        cuda_check(w.adam->step(mult_, adam_steps_, (float)hp_.beta1, (float)hp_.beta2, (float)hp_.adam_eps, stream_), "Adam's step");
    }
    cuda_check(cudaEventRecord(w.end, stream_), "optimizer event");
    last_end_ = w.end;
    if (dp_) dp_->gather(staged ? w.others : plan_.points.at(point), w.end);
  }
  // The compute stream waits for every point's update and exchange (with several ranks the last
  // collective comes after every update); with several ranks and `updates_only`, for the updates
  // alone, the weights' last gathers left to the next forward (train/data_parallel.cuh, Arrivals).
  void wait(bool updates_only = false) {
    if (dp_) return dp_->wait(updates_only ? last_end_ : nullptr);
    cuda_check(cudaEventRecord(backward_done_, 0), "optimizer event");
    cuda_check(cudaEventRecord(done_, stream_), "optimizer event");
    cuda_check(cudaStreamWaitEvent(0, done_, 0), "optimizer stream wait");
  }
  // After the step's host sync, on one GPU: how long the compute stream waited at wait().
  double exposed_ms() const {
    float t = 0;
    return !dp_ && cudaEventElapsedTime(&t, backward_done_, done_) == cudaSuccess ? std::max(0.f, t) : 0.0;
  }
  // After the step's host sync: the time the updates took on the optimiser's stream (staged,
  // without its wait for the embeddings' sums between Muon and Adam).
  double update_ms() const {
    double ms = 0;
    for (auto& [point, w] : work_) {
      float a = 0, b = 0;
      if (dp_ && w.staged) {
        if (cudaEventElapsedTime(&a, w.start, w.mid) == cudaSuccess && cudaEventElapsedTime(&b, w.resume, w.end) == cudaSuccess) ms += a + b;
      } else if (cudaEventElapsedTime(&a, w.start, w.end) == cudaSuccess) {
        ms += a;
      }
    }
    return ms;
  }

  // Its state in a checkpoint: Adam's moments and step count, Muon's momentum, as blobs of the
  // layout's n floats (zero where a group does not apply), gathered from every rank, and the
  // masters (gather_masters first). Collective: every rank calls it; rank 0 writes the file.
  void save(Checkpoint& ck, const model::Parameters& params, DataParallel* dp) {
    ck.adam_steps = adam_steps_;
    gather_masters(params, dp);
    ck.blobs["master"] = params.download_master();
    ck.blobs["adam_m"] = gather_state(m_, false, dp);
    ck.blobs["adam_v"] = gather_state(v_, false, dp);
    ck.blobs["muon_buf"] = gather_state(buf_, true, dp);
  }
  // Every rank's fp32 masters gathered in place (each rank updates only its share of them); the
  // host then waits for them under the exchange's deadline (--timeout), so that a peer that
  // stops cannot hang this rank in a plain copy.
  void gather_masters(const model::Parameters& params, DataParallel* dp) {
    if (!dp) return;
    for (auto& [point, pieces] : plan_.points) dp->gather_fp32(params.master, pieces, true, true);
    dp->sync("gathering the masters from their ranks");
  }
  // Each rank takes its share of a checkpoint's state (of any rank count).
  void load(const Checkpoint& ck, size_t n, const std::string& path) {
    for (const char* name : {"adam_m", "adam_v", "muon_buf"}) {
      auto it = ck.blobs.find(name);
      if (it == ck.blobs.end() || it->second.size() != n) throw CheckpointError(path + ": blob " + name + " is missing or of another size");
    }
    for (auto& [point, pieces] : plan_.points)
      for (const Piece& p : pieces) {
        if (!p.count) continue;
        auto put = [&](float* state, const char* blob) {
          cuda_check(cudaMemcpy(state + p.state, ck.blobs.at(blob).data() + p.offset, p.count * sizeof(float), cudaMemcpyHostToDevice),
                          "optimizer state");
        };
        if (p.kind == Piece::kMatrix) put(buf_, "muon_buf");
        else put(m_, "adam_m"), put(v_, "adam_v");
      }
    adam_steps_ = (int)ck.adam_steps;
  }

 private:
  // This rank's matrices of one shape at one point (r x c after the transpose of tall ones,
  // r <= c): their X slots are consecutive, so that Newton-Schulz runs on them at once, in
  // batches of at most `batch`.
  struct Group {
    int r, c;
    size_t first, count, batch, stride;  // first: the first slot's offset in X; stride: a slot's size
  };
  // A point's element-wise stages over its tensors at once (optim/multi_tensor.cuh), and the
  // events of its update.
  struct Work {
    std::unique_ptr<optim::AdamMulti> adam;
    std::unique_ptr<optim::MuonMulti> muon;
    std::vector<Piece> matrices, others;  // the point's pieces apart (the staged exchange)
    bool staged = false;                  // the plan stages the exchange and the point has matrices
    cudaEvent_t grads, start, mid, resume, end;
  };
  static constexpr size_t kBatchBytes = 64 << 20;  // of BX, at most (the rest is smaller)

  std::pair<int, int> shape(const Piece& p) const {
    const model::Tensor& t = layout_.tensors[p.tensor];
    return {(int)std::min(t.rows, t.cols), (int)std::max(t.rows, t.cols)};
  }
  // The point's lists, bound to the model's buffers at the first step (a staged matrix reads
  // its gradient's sums and writes its bf16 weights in the exchange's staging buffers).
  void bind(const model::Parameters& params, DataParallel* dp) {
    const bool staged = dp && plan_.staged;
    for (auto& [point, pieces] : plan_.points) {
      Work& w = work_[point];
      w.staged = staged && std::any_of(pieces.begin(), pieces.end(), [](const Piece& p) { return p.kind == Piece::kMatrix; });
      std::vector<optim::AdamTensor> adam;
      std::vector<optim::MuonMatrix> muon;
      for (const Piece& p : pieces) {
        (p.kind == Piece::kMatrix ? w.matrices : w.others).push_back(p);
        if (!p.count) continue;
        const model::Tensor& t = layout_.tensors[p.tensor];
        float* m = params.master + p.offset;
        if (p.kind == Piece::kMatrix) {
          const float* g = staged ? dp->grad_stage() + p.stage : params.grads + p.offset;
          layers::bf16* w16 = staged ? dp->weight_stage() + p.stage : params.weights + p.offset;
          muon.push_back({m, w16, g, buf_ + p.state, X_ + x_slot_.at(p.tensor), (int)t.rows, (int)t.cols, true});
          continue;
        }
        const model::ParamGroup grp = model::group_of(t);
        const double lr = grp == model::ParamGroup::kEmbed ? hp_.lr_embed : grp == model::ParamGroup::kHead ? hp_.lr_head : hp_.lr_scalar;
        adam.push_back({m, params.weights + p.offset, params.grads + p.offset, m_ + p.state, v_ + p.state, p.count, (float)lr});
      }
      if (!adam.empty()) w.adam = std::make_unique<optim::AdamMulti>(adam);
      if (!muon.empty()) w.muon = std::make_unique<optim::MuonMulti>(muon);
      for (cudaEvent_t* e : {&w.grads, &w.start, &w.mid, &w.resume, &w.end}) cuda_check(cudaEventCreate(e), "optimizer event");
    }
  }
  // The layout-sized blob of a state array: each rank's pieces in place (Adam's, or Muon's when
  // muon), then spread from their owners.
  std::vector<float> gather_state(const float* state, bool muon, DataParallel* dp) {
    const size_t n = layout_.size();
    float* full = nullptr;
    cuda_check(cudaMalloc(&full, n * sizeof(float)), "checkpoint: optimizer state");
    std::vector<float> h(n);
    try {
      cuda_check(cudaMemset(full, 0, n * sizeof(float)), "checkpoint: optimizer state");
      for (auto& [point, pieces] : plan_.points)
        for (const Piece& p : pieces)
          if (p.count && (p.kind == Piece::kMatrix) == muon)
            cuda_check(cudaMemcpy(full + p.offset, state + p.state, p.count * sizeof(float), cudaMemcpyDeviceToDevice),
                            "checkpoint: optimizer state");
      if (dp) {
        for (auto& [point, pieces] : plan_.points) dp->gather_fp32(full, pieces, !muon, muon);
        dp->sync("gathering the optimiser's state from its ranks");
      }
      cuda_check(cudaMemcpy(h.data(), full, n * sizeof(float), cudaMemcpyDeviceToHost), "checkpoint: optimizer state");
    } catch (...) {
      cudaFree(full);
      throw;
    }
    cudaFree(full);
    return h;
  }

  const model::Layout& layout_;
  ShardPlan plan_;
  model::OptimizerHyper hp_;
  float *m_ = nullptr, *v_ = nullptr, *buf_ = nullptr;  // this rank's compact state
  layers::bf16* X_ = nullptr;                           // orthogonalised updates, one slot per owned matrix
  std::map<int, size_t> x_slot_;                        // tensor index -> its X slot
  std::map<int, std::vector<Group>> groups_;            // point -> its owned matrices by shape
  layers::bf16 *bA_ = nullptr, *bAA_ = nullptr, *bBX_ = nullptr;  // batched Newton-Schulz scratch
  std::map<int, Work> work_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr, backward_done_ = nullptr;
  cudaEvent_t last_end_ = nullptr;  // the last point's update done, on the optimiser's stream
  layers::Matmul* mm_ = nullptr;
  DataParallel* dp_ = nullptr;
  int adam_steps_ = 0;
  float mult_ = 1.f, mom_ = 0.f;
};

}  // namespace train
