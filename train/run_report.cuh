// A run's figures: its FLOPs and step times as it goes, its start-up time, and the report at its
// end (speed, MFU, memory, the exchange, the ranks' spread, the profile).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/median.h"
#include "model/batch.h"
#include "model/gpt.cuh"
#include "train/data_parallel.cuh"
#include "train/dist.h"
#include "train/optimizer.cuh"
#include "train/options.h"
#include "train/run_log.h"
#include "train/shard_plan.h"

namespace train {

// Dense bf16 tensor-core peak of the GPU (no sparsity), for MFU; 0 when unknown.
inline double peak_flops(const std::string& gpu) {
  if (gpu.find("H200") != std::string::npos) return 989.4e12;
  if (gpu.find("H100") != std::string::npos) return gpu.find("PCIe") != std::string::npos ? 756.0e12 : gpu.find("NVL") != std::string::npos ? 835.0e12 : 989.4e12;
  if (gpu.find("A100") != std::string::npos) return 312.0e12;
  return 0;
}

// Model FLOPs of one sequence (MFU): 6 per matmul weight per token, and 12 C per kept attention
// pair per layer (forward 4 C: QK^T and PV; backward twice that).
struct FlopCounter {
  double matmul_weights = 0;
  FlopCounter(const Options& o, const model::Layout& layout) : matmul_weights((double)o.model_vocab * o.width) {  // the head
    for (auto& t : layout.tensors)
      if (model::group_of(t) == model::ParamGroup::kMatrix) matmul_weights += (double)t.size();
  }
  double sequence(const Options& o, const model::Batch& b) const {
    return 6.0 * matmul_weights * o.seq_len + 12.0 * o.width * o.layers * (double)b.kept_pairs;
  }
};

// Times of the timed steps (from step 11 on, validation excluded, as in the record).
struct Timing {
  double train_ms = 0, flops = 0, targets = 0, reduce_ms = 0, gather_ms = 0, exposed_ms = 0, update_ms = 0, peak_mem = 0;
  double arrival_wait_ms = 0;  // several ranks: the forwards' waits for the weights' arrival (in exposed_ms too)
  int gated_steps = 0;         // timed steps that ended before their gathers (--gather-wait layer)
  std::vector<double> step_ms;
  std::vector<double> compute_ms;  // several ranks: this rank's forward and backward, a step
};

// Start-up: launch to the end of the first training step (reading the data, the GPU's context,
// the model's buffers, the step-0 validation and the first step), the figure the record's 72 s of
// compilation is compared with.
inline const auto kLaunched = std::chrono::steady_clock::now();
inline void log_startup(train::RunLog& log) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - kLaunched).count();
  char b[160];
  std::snprintf(b, sizeof(b), "train_gpt: start-up %.1f s (launch to the end of the first training step, the step-0 validation included)", s);
  log.note(b);
  log.event("startup", {{"startup_s", s}});
}

// Each rank's time a step (several ranks: its forward and backward), gathered: rank 0's mean, the
// least and most of the ranks' means, and the mean over the steps of the most less the least.
// Collective: every rank calls it with as many steps.
struct RankSpread {
  double rank0 = 0, least = 0, most = 0, apart = 0;
};
inline RankSpread rank_spread(const dist::Context& ctx, const std::vector<double>& mine) {
  const size_t n = mine.size(), R = (size_t)ctx.world;
  std::vector<double> all(R * n, 0.0);  // rank r's steps at r n..: the sum over the ranks gathers them
  std::copy(mine.begin(), mine.end(), all.begin() + (size_t)ctx.rank * n);
  dist::sum(ctx, all.data(), (int)all.size());
  RankSpread s;
  if (n == 0) return s;
  std::vector<double> mean(R, 0.0);
  for (size_t r = 0; r < R; r++) {
    for (size_t i = 0; i < n; i++) mean[r] += all[r * n + i] / n;
  }
  s.rank0 = mean[0], s.least = *std::min_element(mean.begin(), mean.end()), s.most = *std::max_element(mean.begin(), mean.end());
  for (size_t i = 0; i < n; i++) {
    double lo = all[i], hi = all[i];
    for (size_t r = 1; r < R; r++) lo = std::min(lo, all[r * n + i]), hi = std::max(hi, all[r * n + i]);
    s.apart += (hi - lo) / n;
  }
  return s;
}

// The end of the run: speed, MFU, memory, the all-reduce, the profile.
inline void report(const Options& o, const dist::Context& ctx, const cudaDeviceProp& prop, Timing& t, gpt::Model& model,
                   const Optimizer& opt, const train::DataParallel* dp, train::RunLog& log) {
  t.peak_mem = dist::max(ctx, t.peak_mem);
  double sums[2] = {t.flops, t.targets};  // every rank's FLOPs and predicted targets
  dist::sum(ctx, sums, 2);
  const int timed_steps = (int)t.step_ms.size();
  // Each rank times its gradients' collectives from the end of its own backward, and none of
  // them ends before the last rank has ended its backward: over the ranks, the least time is the
  // collectives' own (the last rank's) and the spread is how far apart the ranks end the backward.
  const double reduce_rank = timed_steps > 0 ? t.reduce_ms / timed_steps : 0.0;
  const double reduce_most = dist::max(ctx, reduce_rank), reduce_least = -dist::max(ctx, -reduce_rank);
  char b[512];
  RankSpread spread;
  if (timed_steps > 0) {
    const double tok_s = sums[1] / (t.train_ms / 1e3);  // predicted targets: all tokens without a prefix
    const double peak = peak_flops(prop.name) * ctx.world, mfu = peak > 0 ? sums[0] / (t.train_ms / 1e3) / peak : NAN;
    std::snprintf(b, sizeof(b), "train_gpt: %d timed steps: median %.1f ms a step, %.0f tokens/s, %.1f TFLOP/s a GPU, MFU %.1f%% (bf16 dense peak %.0f TFLOP/s a GPU)",
                  timed_steps, median(t.step_ms), tok_s, sums[0] / (t.train_ms / 1e3) / ctx.world / 1e12, 100 * mfu, peak_flops(prop.name) / 1e12);
    log.note(b);
    char tail[96] = "";
    if (!dp) std::snprintf(tail, sizeof(tail), ", %.1f ms of it after the backward", t.exposed_ms / timed_steps);
    std::snprintf(b, sizeof(b), "train_gpt: optimiser %.1f ms a step on its own stream (%s)%s", t.update_ms / timed_steps,
                  o.grad_sync == "overlap"      ? "each layer's share as soon as its gradients are final"
                  : o.grad_sync == "embeddings" ? "the head's and value embeddings' during the backward, the rest after it"
                                                : "after the backward",
                  tail);
    log.note(b);
    if (dp) {
      const train::WireBytes wire = train::wire_bytes(opt.plan(), o.grad_exchange == "bf16" ? 2 : 4);
      const train::WireBytes before = train::unsharded_wire_bytes(model.layout(), ctx.world);
      const double ex = (t.reduce_ms + t.gather_ms) / timed_steps, exposed = t.exposed_ms / timed_steps;
      char hid[160];
      const double arrival = t.arrival_wait_ms / timed_steps;
      if (o.grad_sync != "end")  // (the exposed time holds the optimiser's update after the backward too)
        std::snprintf(hid, sizeof(hid), "%.0f%% hidden, the optimiser's tail included", ex > 0 ? 100 * (1 - exposed / ex) : 0.0);
      else std::snprintf(hid, sizeof(hid), "after the backward, with the optimiser's update");
      if (o.gather_wait == "layer")
        std::snprintf(hid + std::strlen(hid), sizeof(hid) - std::strlen(hid), "; %.1f ms of it the next forward's waits for the weights", arrival);
      std::snprintf(b, sizeof(b),
                    "train_gpt: exchange %.1f ms a step (gradients %.1f, %.1f to %.1f over the ranks; weights %.1f; --grad-sync %s; %s), "
                    "%.1f ms exposed (%s); %.0f MB a rank a step (%s gradients; an fp32 all-reduce with Muon's broadcast: %.0f MB)",
                    ex, t.reduce_ms / timed_steps, reduce_least, reduce_most, t.gather_ms / timed_steps, o.grad_sync.c_str(),
                    dp->copy_engines() ? "all-gathers on the copy engines" : "all-gathers as kernels", exposed, hid,
                    wire.total() / 1e6, o.grad_exchange.c_str(), before.total() / 1e6);
      log.note(b);
      const RankSpread f = rank_spread(ctx, t.compute_ms);
      std::snprintf(b, sizeof(b),
                    "train_gpt: forward and backward %.1f ms a step on rank 0 (%.1f to %.1f over the ranks' means); the ranks end "
                    "them %.1f ms apart a step (the mean over the steps of the last rank's time less the first's)",
                    f.rank0, f.least, f.most, f.apart);
      log.note(b);
      spread = f;
    }
    log.event("summary", {{"timed_steps", timed_steps}, {"median_step_ms", median(t.step_ms)}, {"tokens_per_s", tok_s},
                          {"mfu", std::isfinite(mfu) ? mfu : 0.0}, {"peak_memory_mib", t.peak_mem / (1 << 20)},
                          {"reduce_ms", t.reduce_ms / timed_steps}, {"reduce_ms_least_rank", reduce_least},
                          {"reduce_ms_most_rank", reduce_most}, {"gather_ms", t.gather_ms / timed_steps},
                          {"exposed_ms", t.exposed_ms / timed_steps}, {"arrival_wait_ms", t.arrival_wait_ms / timed_steps},
                          {"gated_steps", (double)t.gated_steps},
                          {"optimizer_ms", t.update_ms / timed_steps},
                          {"compute_ms", spread.rank0}, {"compute_ms_least_rank", spread.least}, {"compute_ms_most_rank", spread.most},
                          {"compute_ms_apart", spread.apart}, {"copy_engines", dp != nullptr && dp->copy_engines()}});
  }
  if (o.profile > 0) log.note(model.profiler().table());
}

}  // namespace train
