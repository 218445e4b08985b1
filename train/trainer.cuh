// train::Trainer, one training run: everything a step needs, made by its constructor, and one
// method a job of the loop in train_gpt.cu (run_training): a step's window, validation, a
// training step, what follows a step (its log, the replica check, a checkpoint) and the end.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/median.h"
#include "data/hand_out.h"
#include "model/gpt.cuh"
#include "train/checkpoint.h"
#include "train/data_parallel.cuh"
#include "train/dist.h"
#include "train/exchange_windows.h"
#include "train/loss_mean.h"
#include "train/optimizer.cuh"
#include "train/options.h"
#include "train/ready_point.h"
#include "train/replica_check.cuh"
#include "train/run_checkpoint.cuh"
#include "train/run_config.h"
#include "train/run_data.h"
#include "train/run_gpu.cuh"
#include "train/run_log.h"
#include "train/run_report.cuh"
#include "train/start_gate.h"

// The source's commit, stamped by the Makefile at build time (build/version.cpp), with "-dirty"
// when tracked files differed from it (a run of modified code must not pass for the commit's),
// or "unknown" outside a git checkout; beside it the SHA-256 of the source tree as built (the
// Makefile's SOURCE_DIGEST), which names the code even where the commit cannot ("-dirty").
extern const char* const kGitCommit;
extern const char* const kSourceDigest;

namespace train {

// The points of the backward with an exchange and update of their own (train/exchange_windows.h).
inline std::set<int> points_of(const train::ShardPlan& plan) {
  std::set<int> points;
  for (const auto& [point, pieces] : plan.points) points.insert(point);
  return points;
}

// One training run, piece by piece: the constructor makes everything a step needs (checking
// what can be checked before the GPU is touched), and each method does one job of the loop in
// run_training (train_gpt.cu).
class Trainer {
 public:
  Trainer(const Options& o, const dist::Context& ctx, train::StartGate& gate)
      : o_(o), ctx_(ctx), resume_from_(before_the_gpu(o, ctx)), data_(o, ctx), prop_(ready_for_gpu(o, ctx, resume_from_, data_, gate)), cfg_(model_config(o)),
        sched_(train::schedule(o)), model_(cfg_, o.seq_len, 16384, exchange_allocator(o, ctx)),
        opt_(model_.layout(), o.layers, ctx.rank, ctx.world, grad_sync(o), train::optimizer_hyper(o)),
        windows_(grad_sync(o) == train::Sync::kEmbeddings, points_of(opt_.plan())),
        reader_(o.seq_len, cfg_.mask), batch_(o.seq_len), next_(o.seq_len), hand_out_(data_.schedule, o.seq_len, o.balance_ranks), flops_(o, model_.layout()) {
    model_.load(model::init_values(model_.layout(), o.seed));
    if (ctx.world > 1)
      dp_ = std::make_unique<train::DataParallel>(ctx, model_.grads(), model_.weights(), model_.layout().size(), o.grad_exchange == "bf16",
                                                  opt_.plan().staged ? opt_.plan().stage_rank : 0, o.timeout,
                                                  o.gather_engine == "copy-engines" && model_.weights_from_exchange());
    if (dp_) {
      // the tuned matmuls' host waits (a shape's first call) get the deadline too: Muon's
      // products run on the optimiser's stream after the exchange of their gradients
      const layers::Matmul::HostWait wait = [this](cudaStream_t s, const std::string& what) { dp_->sync("matmul tuning, " + what, s); };
      model_.matmul().set_host_wait(wait);
      mm_.set_host_wait(wait);
      model_.set_host_wait([this](cudaEvent_t e, const char* what) { dp_->wait_event(e, what); });
      if (o.gather_wait == "layer") {  // the next forward waits for each stage's weights as it reaches it
        dp_->set_gated(true);
        for (size_t t = 0; t < model_.layout().tensors.size(); t++)
          stage_tensors_[train::first_read_stage(model_.layout().tensors[t].name, o.layers)].push_back((int)t);
        model_.set_before_stage([this](int stage) { wait_for_weights(stage); });
      }
    }
    start_step_ = o.resume.empty() ? 0 : load_checkpoint(o, resume_from_, model_, opt_);
    last_checkpoint_ = o.resume.empty() ? "none" : o.resume;
    const std::string run_id = train::RunLog::new_run_id();
    // once the run can start: a failure before leaves neither a log nor a checkpoint folder
    const std::vector<std::string> made = !o.checkpoint_dir.empty() && ctx.rank == 0 ? train::make_checkpoint_dir(o.checkpoint_dir)
                                                                                     : std::vector<std::string>{};
    try {
      log_.emplace(o.log_file, ctx.rank == 0, run_id, kGitCommit, kSourceDigest);
    } catch (...) {
      train::remove_made_dirs(made);
      throw;
    }
    std::vector<std::pair<std::string, std::string>> data_facts = {{"train_data_sha256", data_.train.digest()},
                                                                   {"val_data_sha256", data_.val.digest()}};
    // (recorded only when there are such shards, so that other runs' settings compare as before)
    if (!data_.shared.empty()) data_facts.push_back({"val_shards_trained_on", std::to_string(data_.shared.size())});
    const model::TargetLeak leak = target_leak(o);  // (a leaking mask got here only with --allow-target-leak)
    data_facts.push_back({"leaks_targets", leak.leaks ? "yes" : "no"});
    log_->config(train::config_json(o, run_id, ctx.world, prop_.name, kGitCommit, data_facts));
    log_->note("train_gpt: data by content (SHA-256 of the shards' SHA-256s in order): train " + data_.train.digest() + " (" +
               std::to_string(data_.train.shard_digests().size()) + " shards), val " + data_.val.digest() + " (" +
               std::to_string(data_.val.shard_digests().size()) + " shards)");
    for (const std::string& s : data_.shared) log_->note("train_gpt: --allow-train-on-val: " + s);
    log_->note("train_gpt: " + std::string(prop_.name) + " x " + std::to_string(ctx.world) + ", " + std::to_string(model_.layout().size()) +
              " parameters, " + std::to_string(o.steps) + " steps of " + std::to_string((long long)o.seq_len * o.seqs_per_step) +
              " tokens (" + std::to_string(micro()) + " micro-step(s) of one sequence per GPU)");
    log_->note("train_gpt: attention mask: causal " + std::to_string(o.causal) + ", window " + o.window_mask + " " + o.window_granularity +
               (o.window_blocks ? " " + std::to_string(o.window_blocks) + " block(s)" : " (the record's schedule)") + ", documents " +
               std::to_string(o.doc_mask) + ", prefix " + std::to_string(o.prefix_tokens) +
               (o.prefix_tokens && !o.prefix_attention ? " (loss rule only)" : "") + "; leaks targets: " + (leak.leaks ? "yes" : "no"));
    if (start_step_) log_->note("train_gpt: resumed from " + o.resume + " at step " + std::to_string(start_step_));
    if (o.check_replicas) gpt::cuda_check(cudaMalloc(&d_sum_, sizeof(unsigned long long)), "checksum");
  }
  ~Trainer() {
    if (d_sum_) cudaFree(d_sum_);
  }
  int start_step() const { return start_step_; }

  // the attention window of step (0-based), set on the model
  int window(int step) {
    const int w = window_at(o_, sched_, step);
    model_.set_window(w);
    return w;
  }

  // validation: the mean loss over every rank's share of the validation sequences that keep a
  // target (train/loss_mean.h; all of them without a prefix)
  void validate(int step, int window) {
    train::LossMean vl;
    std::vector<int> kept;
    for (uint64_t k : data_.val_seqs) {
      reader_.load(data_.val, k, window, batch_);
      kept.push_back(batch_.kept_targets);
      model_.enqueue_forward(batch_);  // the host reads the next sequence while the GPU runs this one
    }
    vl.add(model_.take_losses(), kept);  // in the sequences' order
    dist::sum(ctx_, vl.parts, 2);
    if (vl.empty())  // refused at start-up (Data); here only if the shards changed since
      throw std::runtime_error("validation at step " + std::to_string(step) + ": no validation sequence keeps a target (--prefix-tokens " +
                               std::to_string(o_.prefix_tokens) + ", --val-data " + o_.val_data + ")");
    log_->step(step, o_.steps, timing_.train_ms, vl.mean());
    fail_if_not_finite("validation", vl.mean(), step);
  }

  // one optimisation step (0-based step): forward and backward of each micro-step's sequence (the
  // gradients of the last one averaged over the ranks while its backward runs), then the
  // optimiser; returns the step's loss, the mean of its sequences' mean losses over their kept
  // targets (all T without a prefix), as the record's cross-entropy per micro-step, averaged over
  // the micro-steps and ranks whose sequence keeps a target (train/loss_mean.h: one that keeps
  // none neither adds nor counts; a step where none does has no loss).
  // The host never waits for the GPU inside a step: each forward is enqueued with its losses read
  // back asynchronously (gpt::Model::enqueue_forward), each next sequence is read while the GPU
  // runs the one before, and the next step's first sequence while the GPU runs the optimiser.
  train::LossMean train_step(int step, int window) {
    sync("step " + std::to_string(step + 1));
    const bool timed = step >= 10;  // steps 11, 12, ... (1-based) are timed, as in the record
    gpt::Profiler& prof = model_.profiler();
    prof.on = o_.profile > 0 && timed && step < 10 + o_.profile;
    const auto t0 = std::chrono::steady_clock::now();
    if (dp_) dp_->step_start();
    model_.zero_grad();
    opt_.begin_step(model_.parameters(), mm_, step, sched_, dp_.get());
    train::LossMean tl;
    std::vector<int> kept;
    for (int m = 0; m < micro(); m++) {
      const bool last = m == micro() - 1;
      const uint64_t k = hand_out_.sequence(data_.train, step, m, window_tokens(step));
      if (m == 0 && next_step_ == step && next_.sequence == k && next_.window == window) std::swap(batch_, next_);
      else if (const uint16_t* t = hand_out_.tokens_of(k)) reader_.build(t, k, window, batch_);
      else reader_.load(data_.train, k, window, batch_);
      kept.push_back(batch_.kept_targets);
      if (timed) timing_.flops += flops_.sequence(o_, batch_), timing_.targets += batch_.kept_targets;
      model_.enqueue_forward(batch_, 1.f / ((float)std::max(batch_.kept_targets, 1) * o_.seqs_per_step));
      if (last) start_exchange(windows_.ready(o_.layers));  // the head's gradient is final
      if (last)
        model_.backward([&](int point) { start_exchange(windows_.ready(point)); }, [&](int) { start_exchange(windows_.at_attention()); });
      else model_.backward();
    }
    prof.mark(gpt::Profiler::kOptimizer);  // what of the optimiser and the exchange the backward did not hide
    // --gather-wait layer: the weights' last gathers are left to the next step's forward, unless
    // what follows this step reads every weight (validation, a checkpoint, the replica check, the
    // end), which then waits for them inside the step's time
    const int done = step + 1;
    const bool settle = validates_after(done) || o_.check_replicas || checkpoints_after(done);
    weights_pending_ = !stage_tensors_.empty() && !settle;
    opt_.wait(weights_pending_);
    prof.mark(gpt::Profiler::kHost);
    next_step_ = -1;
    if (step + 1 < o_.steps) {  // the next step's first sequence, read while the GPU works
      const uint64_t k = hand_out_.sequence(data_.train, step + 1, 0, window_tokens(step + 1));
      if (const uint16_t* t = hand_out_.tokens_of(k)) reader_.build(t, k, window_at(o_, sched_, step + 1), next_);
      else reader_.load(data_.train, k, window_at(o_, sched_, step + 1), next_);
      next_step_ = step + 1;
    }
    sync("optimizer step " + std::to_string(step + 1));
    tl.add(model_.take_losses(), kept);  // in the micro-steps' order
    prof.collect();
    prof.on = false;  // validation is not profiled
    record_time(timed, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    dist::sum(ctx_, tl.parts, 2);
    return tl;
  }

  // after step done (1-based): its loss in the logs, the start-up time after the first, the
  // replica check, a checkpoint when due
  void after_step(int done, const train::LossMean& loss) {
    if (loss.empty())  // no loss to check or log: the step's line has none
      log_->note("train_gpt: step " + std::to_string(done) + ": none of its sequences keeps a target (every document fits inside --prefix-tokens " +
                 std::to_string(o_.prefix_tokens) + "); no training loss");
    log_->step(done, o_.steps, timing_.train_ms, std::nullopt,
               loss.empty() ? std::nullopt : std::optional<double>(loss.mean()));  // a diverged loss is logged, then stops the run
    if (!loss.empty()) fail_if_not_finite("training", loss.mean(), done);
    if (done == start_step_ + 1) log_startup(*log_);
    if (o_.check_replicas) last_sum_ = check_replicas(ctx_, model_, opt_, dp_.get(), d_sum_, done);
    if (o_.check_replicas && hand_out_.on) {  // (the all-reduce keeps the replicas equal even if the hand-outs differed)
      const auto digests = dist::gather_all(ctx_, hand_out_.digest);
      for (int r = 1; r < ctx_.world; r++)
        if (digests[r] != digests[0])
          throw std::runtime_error("after step " + std::to_string(done) + ": rank " + std::to_string(r) +
                                   " handed the step's sequences out otherwise than rank 0 (--balance-ranks, --check-replicas)");
    }
    if (checkpoints_after(done)) save_checkpoint(o_, ctx_, data_.digests(), model_, opt_, dp_.get(), done, &last_checkpoint_);
  }

  // whether validation follows `done` steps (0: before the first), and a checkpoint
  bool validates_after(int done) const { return done % o_.val_every == 0 || done == o_.steps; }
  bool checkpoints_after(int done) const {
    return !o_.checkpoint_dir.empty() && ((o_.checkpoint_every && done % o_.checkpoint_every == 0) || done == o_.steps);
  }

  // the end of the run: speed, MFU, memory, the all-reduce, the profile, the replicas
  void finish() {
    report(o_, ctx_, prop_, timing_, model_, opt_, dp_.get(), *log_);
    char b[256];
    if (o_.check_replicas) {
      std::snprintf(b, sizeof(b), "train_gpt: replicas identical on all %d rank(s) after every step (last checksum %016llx)", ctx_.world,
                    (unsigned long long)last_sum_);
      log_->note(b);
    }
    if (hand_out_.on && !hand_out_.excess.empty()) {
      std::snprintf(b, sizeof(b),
                    "train_gpt: --balance-ranks: %d of %zu steps handed out otherwise than in order; the slowest rank's attention work "
                    "%.2f%% over the mean (median over the steps), %.2f%% in order",
                    hand_out_.changed, hand_out_.excess.size(), 100 * median(hand_out_.excess), 100 * median(hand_out_.default_excess));
      log_->note(b);
    }
    std::snprintf(b, sizeof(b), "train_gpt: done; peak GPU memory %.0f MiB%s", timing_.peak_mem / (1 << 20),
                  ctx_.world > 1 ? " (the largest rank's)" : "");
    log_->note(b);
  }

 private:
  // What is checked before the GPU is touched: --resume's file, read and checked against the
  // flags and its step (returned); then the shards, by Data; then (ready_for_gpu) that the
  // checkpoint was made on the same data, by content, and the size of its weights; then every
  // rank passes the start gate (a refusal before it on any rank ends every rank there:
  // run_training), where the ranks compare the digests of the data and the checkpoint they read. The checkpoint folder is made at the end of the constructor, once the run
  // can start.
  static train::Checkpoint before_the_gpu(const Options& o, const dist::Context&) {
    train::Checkpoint ck;
    if (!o.resume.empty()) {
      ck = train::read_checkpoint(o.resume);
      train::check_same_config(ck, train::fingerprint(o), o.resume);
      if (ck.step < 0 || ck.step > o.steps) throw train::CheckpointError(o.resume + ": step " + std::to_string(ck.step) + " outside the run");
    }
    return ck;
  }
  static cudaDeviceProp ready_for_gpu(const Options& o, const dist::Context& ctx, const train::Checkpoint& ck, const Data& data,
                                      train::StartGate& gate) {
    if (!o.resume.empty()) {
      train::check_same_data(ck, data.digests(), o.resume);
      auto master = ck.blobs.find("master");
      if (master == ck.blobs.end() || master->second.size() != model::Layout(model_config(o)).size())
        throw train::CheckpointError(o.resume + ": blob master is missing or of another size");
    }
    // every rank read the same data and checkpoint, by content (a path may name other files on another host)
    const train::Agreed read = {{"train_data_sha256", data.train.digest()},
                                {"val_data_sha256", data.val.digest()},
                                {"--resume checkpoint's checksum", o.resume.empty() ? "none" : std::to_string(ck.checksum)}};
    if (const int rc = gate.pass(-1, "", read); rc >= 0) throw train::Refused(rc);
    return open_gpu(ctx);
  }
  int micro() const { return data_.schedule.micro_steps(); }
  // the attention window of step (0-based) in tokens, whatever its granularity
  int window_tokens(int step) const { return 128 * (o_.window_blocks ? o_.window_blocks : sched_.window_blocks(step)); }
  // Before a forward's stage (gpt::Model::set_before_stage), in the first forward after a step
  // that left its gathers running: the compute stream waits for the arrival of the weights that
  // the stage is the first to read (train/ready_point.h), of those a gather brought (the rest are
  // updated on this rank, before the step ended). Later forwards run after these waits.
  void wait_for_weights(int stage) {
    if (!weights_pending_) return;
    if (stage == o_.layers) weights_pending_ = false;  // (the head: the forward's last stage)
    auto it = stage_tensors_.find(stage);
    if (it == stage_tensors_.end()) return;
    std::vector<cudaEvent_t> events;
    for (int t : it->second)
      if (cudaEvent_t e = dp_->arrival(t); e && std::find(events.begin(), events.end(), e) == events.end()) events.push_back(e);
    if (events.empty()) return;
    model_.profiler().mark(gpt::Profiler::kOptimizer, "weights' all-gather, waited");
    dp_->wait_for(events);
  }
  // the exchange and update of these points, enqueued now (train/exchange_windows.h: when)
  void start_exchange(const std::vector<int>& points) {
    for (int p : points) opt_.ready(p);
  }
  void sync(const std::string& what) {
    if (dp_) dp_->sync(what);
    else gpt::cuda_check(cudaDeviceSynchronize(), what.c_str());
  }
  void fail_if_not_finite(const char* what, double loss, int step) const {
    if (!std::isfinite(loss))
      throw std::runtime_error(std::string(what) + " loss is " + std::to_string(loss) + " at step " + std::to_string(step) +
                               "; last checkpoint: " + last_checkpoint_);
  }
  void record_time(bool timed, double ms) {  // the step's time, the all-reduce's, the memory in use
    if (timed) {
      timing_.train_ms += ms;
      timing_.step_ms.push_back(ms);
    }
    if (timed) timing_.update_ms += opt_.update_ms(), timing_.exposed_ms += opt_.exposed_ms();
    if (dp_) {  // read every step: reading resets the exchange's per-step records
      const auto t = dp_->times();
      if (timed) timing_.reduce_ms += t.reduce_ms, timing_.gather_ms += t.gather_ms, timing_.exposed_ms += t.exposed_ms + t.arrival_wait_ms;
      if (timed) timing_.arrival_wait_ms += t.arrival_wait_ms, timing_.gated_steps += weights_pending_;
      if (timed) timing_.compute_ms.push_back(t.compute_ms);
    }
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) timing_.peak_mem = std::max(timing_.peak_mem, (double)(total_b - free_b));
  }

  const Options& o_;
  const dist::Context& ctx_;
  train::Checkpoint resume_from_;  // members in the order they are made
  Data data_;
  cudaDeviceProp prop_;
  model::Config cfg_;
  model::Schedule sched_;
  gpt::Model model_;
  Optimizer opt_;
  train::ExchangeWindows windows_;
  SequenceReader reader_;
  model::Batch batch_, next_;  // next_: the first sequence of step next_step_, read ahead
  int next_step_ = -1;
  data::StepHandOut hand_out_;
  FlopCounter flops_;
  std::optional<train::RunLog> log_;
  layers::Matmul mm_;
  std::unique_ptr<train::DataParallel> dp_;
  std::map<int, std::vector<int>> stage_tensors_;  // --gather-wait layer: forward stage -> the tensors it reads first
  bool weights_pending_ = false;                   // the last step ended before its gathers: the next forward waits for them
  Timing timing_;
  int start_step_ = 0;
  std::string last_checkpoint_;
  unsigned long long* d_sum_ = nullptr;
  uint64_t last_sum_ = 0;
};

}  // namespace train
