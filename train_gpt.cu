// train_gpt: the GPT speedrun trainer (README.md; docs/model.md, docs/formats.md), on one GPU or many.
//
// Reads top to bottom: data checks, the optimiser over the parameter layout, the pieces of a run
// (data, GPU, model, checkpoints, one step, validation, the report), the training loop, main.
// The options are train/options.h (one table gives the flags, the recipes' keys, the fingerprint
// and the log's configuration; a run's settings are a recipe, recipes/*.toml, then the flags). The model is model/gpt.cuh (forward and backward, checked against the fp64
// reference); the optimiser is train/optimizer.cuh (Adam and Muon). Checkpoints
// (--checkpoint-dir, --resume) are train/checkpoint.h. Several GPUs: one process each under
// mpirun (train/dist.h), the optimiser's work and state shared out among the ranks
// (train/shard_plan.h), the gradients and weights exchanged over NCCL after the backward, or
// layer by layer beside it (train/data_parallel.cuh); the global batch stays --seqs-per-step
// sequences whatever the GPU count, so runs on 1, 2 or 8 GPUs are one experiment.

// ----------------------------------------------------------------------------------- CPU utilities
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>

#include "common/files.h"
#include "common/median.h"
#include "data/dataloader.h"
#include "data/hand_out.h"
#include "data/manifest.h"
#include "data/shard.h"
#include "model/config.h"
#include "model/target_leak.h"
#include "train/checkpoint.h"
#include "train/dist.h"
#include "train/loss_mean.h"
#include "train/options.h"
#include "train/run_log.h"
#include "train/start_gate.h"
// ----------------------------------------------------------------------------------- GPU
#include "layers/checksum.cuh"
#include "model/gpt.cuh"
#include "train/data_parallel.cuh"
#include "train/exchange_windows.h"
#include "train/ready_point.h"
#include "train/optimizer.cuh"

using train::Optimizer;
using train::Options;

// ----------------------------------------------------------------------------------- data checks
// Shards known by their contents: each file beside the SHA-256 of its bytes as read.
struct ShardDigests {
  std::vector<std::string> files, digests;
};

// The training shards whose bytes are a validation shard's (by the SHA-256 the shards were read
// with: the same file under two names, a copy under another name, or both patterns matching one
// file), one line each naming both files. A run that trains on them validates on what it has
// learnt by heart.
static std::vector<std::string> shared_shards(const ShardDigests& train, const ShardDigests& val) {
  std::map<std::string, std::string> val_by_digest;
  for (size_t i = 0; i < val.files.size(); i++) val_by_digest.emplace(val.digests[i], val.files[i]);
  std::vector<std::string> out;
  for (size_t i = 0; i < train.files.size(); i++)
    if (auto v = val_by_digest.find(train.digests[i]); v != val_by_digest.end())
      out.push_back("--train-data shard " + train.files[i] + " holds the same bytes as --val-data shard " + v->second + " (SHA-256 " +
                    v->first + ")");
  return out;
}

// Checks every shard of both patterns: header, size, token ids, its manifest, and that no training
// shard is a validation shard (shared_shards, as a run refuses; noted only with
// --allow-train-on-val). Prints one line per shard and returns the number of problems found (a
// pattern that matches nothing counts as one).
static int check_data(const train::Options& o) {
  int bad = 0;
  ShardDigests read[2];  // the train and val shards read whole, with their digests
  for (auto [what, pattern, digested] : {std::tuple<const char*, std::string, ShardDigests*>{"train", o.train_data, &read[0]},
                                         {"val", o.val_data, &read[1]}}) {
    std::vector<std::string> files;
    try {
      files = shard::expand_pattern(pattern, what);
    } catch (const shard::ShardError& e) {
      std::fprintf(stderr, "check-data: error: %s (flag --%s-data)\n", e.what(), what);
      bad++;
      continue;
    }
    for (auto& f : files) {
      try {
        shard::ShardInfo info;
        std::string digest;
        shard::read_shard(f, o.vocab_size, &info, &digest);
        digested->files.push_back(f), digested->digests.push_back(digest);
        std::printf("check-data: ok %s: %zu tokens, %zu documents\n", f.c_str(), info.tokens, info.documents);
      } catch (const shard::ShardError& e) {
        std::fprintf(stderr, "check-data: error: %s\n", e.what());
        bad++;
      }
    }
    for (const std::string& problem : manifest::check(files, pattern, true)) {  // mixed or changed shards
      std::fprintf(stderr, "check-data: error: %s (flag --%s-data)\n", problem.c_str(), what);
      bad++;
    }
  }
  for (const std::string& s : shared_shards(read[0], read[1])) {
    if (o.allow_train_on_val) {
      std::printf("check-data: allowed by --allow-train-on-val: %s\n", s.c_str());
      continue;
    }
    std::fprintf(stderr, "check-data: error: %s: a run would validate on data it trains on (--allow-train-on-val lets it)\n", s.c_str());
    bad++;
  }
  return bad;
}

// The shards a pattern matches, refused when they disagree with their folder's manifest (a shard
// of another run beside them, one missing, or one of another size); contents are --check-data's.
static std::vector<std::string> shard_files(const std::string& pattern, const char* what) {
  std::vector<std::string> files = shard::expand_pattern(pattern, what);
  const std::vector<std::string> problems = manifest::check(files, pattern, false);
  if (!problems.empty())
    throw shard::ShardError(problems.front() + (problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) + " more)" : "") +
                            " (flag --" + what + "-data; --check-data lists every problem)");
  return files;
}

// Why a run may not write checkpoints into dir, or "" when it may: a folder holding checkpoints
// is another run's, unless this run resumes from one of them (continuing that run).
static std::string used_checkpoint_dir(const std::string& dir, const std::string& resume) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return "";
  if (!fs::is_directory(dir, ec)) return dir + " exists and is not a folder";
  int found = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    found += n.rfind("ckpt_", 0) == 0 && n.size() > 9 && n.compare(n.size() - 4, 4, ".bin") == 0;
  }
  if (ec) return dir + ": cannot list the folder: " + ec.message();
  if (!found) return "";
  if (!resume.empty() && fs::equivalent(fs::path(resume).parent_path().empty() ? "." : fs::path(resume).parent_path(), dir, ec))
    return "";
  return dir + " holds " + std::to_string(found) + " checkpoint(s) of another run, which this run would overwrite; name a new folder, "
         "or --resume from one of them to continue that run";
}

// ----------------------------------------------------------------------------------- a run's pieces
// The source's commit, stamped by the Makefile at build time (build/version.cpp), with "-dirty"
// when tracked files differed from it (a run of modified code must not pass for the commit's),
// or "unknown" outside a git checkout; beside it the SHA-256 of the source tree as built (the
// Makefile's SOURCE_DIGEST), which names the code even where the commit cannot ("-dirty").
extern const char* const kGitCommit;
extern const char* const kSourceDigest;

// Dense bf16 tensor-core peak of the GPU (no sparsity), for MFU; 0 when unknown.
static double peak_flops(const std::string& gpu) {
  if (gpu.find("H200") != std::string::npos) return 989.4e12;
  if (gpu.find("H100") != std::string::npos) return gpu.find("PCIe") != std::string::npos ? 756.0e12 : gpu.find("NVL") != std::string::npos ? 835.0e12 : 989.4e12;
  if (gpu.find("A100") != std::string::npos) return 312.0e12;
  return 0;
}

static model::Config model_config(const Options& o);

// The shards, before any GPU is touched: a bad shard is reported on any machine, and the
// validation count is checked against the data before any list of that size is made. With a
// prefix, a run whose validation sequences (or training sequences) keep no target at all is
// refused here: its loss would be undefined (a search that stops at the first sequence keeping one).
// So is a run that trains on validation shards (shared_shards), unless --allow-train-on-val.
struct Data {
  data::TokenStream train, val;
  std::vector<std::string> shared;  // the training shards that are validation shards too (allowed by the flag)
  std::vector<uint64_t> val_seqs;  // this rank's validation sequences
  data::TrainSchedule schedule;
  // the data as read, by content (data/dataloader.h): what the log and a checkpoint record
  std::string digests() const { return "train_data_sha256=" + train.digest() + " val_data_sha256=" + val.digest(); }
  Data(const Options& o, const dist::Context& ctx)
      : train(shard_files(o.train_data, "train"), o.seq_len, o.vocab_size, true),
        val(shard_files(o.val_data, "val"), o.seq_len, o.vocab_size, false),
        schedule{o.seqs_per_step, ctx.world, ctx.rank} {
    shared = shared_shards({train.files(), train.shard_digests()}, {val.files(), val.shard_digests()});
    if (!shared.empty() && !o.allow_train_on_val)
      throw std::runtime_error(shared.front() + (shared.size() > 1 ? " (and " + std::to_string(shared.size() - 1) + " more)" : "") +
                               ": the run would validate on data it trains on; name other shards, or give --allow-train-on-val to "
                               "do so on purpose");
    const uint64_t n_val = (uint64_t)o.val_tokens / (uint64_t)o.seq_len;
    if (n_val == 0) throw CLI::ValidationError("--val-tokens", "must hold at least one sequence of --seq-len tokens");
    if (n_val > val.sequences_per_pass())
      throw CLI::ValidationError("--val-tokens", std::to_string(o.val_tokens) + " asks for more validation than " + o.val_data + " holds (" +
                                                     std::to_string(val.sequences_per_pass() * o.seq_len) + " tokens in whole sequences)");
    val_seqs = data::val_sequences(o.val_tokens, o.seq_len, ctx.world, ctx.rank);
    const model::MaskConfig mask = model_config(o).mask;
    const auto no_target = [&](const char* which, uint64_t n, const std::string& flags) {
      return CLI::ValidationError("--prefix-tokens", std::to_string(o.prefix_tokens) + ": none of the " + std::to_string(n) + " " + which +
                                                         " sequences (" + flags + ") keeps a target: every document there fits inside "
                                                         "its prefix, so the loss is undefined; give a shorter prefix or longer documents");
    };
    if (::train::first_sequence_keeping_targets(val, 0, n_val, mask) == n_val)
      throw no_target("validation", n_val, "--val-tokens " + std::to_string(o.val_tokens) + " of --val-data " + o.val_data);
    const uint64_t n_train = std::min<uint64_t>((uint64_t)o.steps * o.seqs_per_step, train.sequences_per_pass());  // then they repeat
    if (::train::first_sequence_keeping_targets(train, 0, n_train, mask) == n_train)
      throw no_target("training", n_train, "the run's --steps x --seqs-per-step of --train-data " + o.train_data);
  }
};

// This rank's GPU: the one of its rank on its node.
static cudaDeviceProp open_gpu(const dist::Context& ctx) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)
    throw std::runtime_error("no CUDA GPU found (training needs one; --check-data does not)");
  if (ctx.local_rank >= ndev)
    throw std::runtime_error("this node runs " + std::to_string(ctx.local_size) + " ranks but has " + std::to_string(ndev) +
                             " GPU(s): start at most one rank per GPU (mpirun -np / the host file's slots)");
  gpt::cuda_check(cudaSetDevice(ctx.local_rank), "cudaSetDevice");
  cudaDeviceProp prop;
  gpt::cuda_check(cudaGetDeviceProperties(&prop, ctx.local_rank), "device properties");
  if (ctx.world > 1) {
    char host[256] = "?";
    gethostname(host, sizeof(host) - 1);
    std::fprintf(stderr, "train_gpt: %s: pid %d on %s, GPU %d (%s)\n", ctx.who().c_str(), (int)getpid(), host, ctx.local_rank, prop.name);
  }
  return prop;
}

static model::Config model_config(const Options& o) {
  model::Config cfg;
  cfg.vocab = o.model_vocab, cfg.width = o.width, cfg.heads = o.heads, cfg.layers = o.layers, cfg.hidden = o.hidden;
  cfg.mask.causal = o.causal;
  cfg.mask.bidir = o.window_mask == "bi";
  cfg.mask.blocks = o.window_granularity == "block";
  cfg.mask.documents = o.doc_mask;
  cfg.mask.bos = shard::kBos;
  cfg.mask.prefix = o.prefix_tokens;
  cfg.mask.prefix_attention = o.prefix_attention;
  cfg.mask.window = 1;  // set for every step in the loop
  return cfg;
}

// When each tensor's exchange and update run (--grad-sync; train/shard_plan.h Sync).
static train::Sync grad_sync(const Options& o) {
  if (o.grad_sync == "overlap") return train::Sync::kOverlap;
  return o.grad_sync == "embeddings" ? train::Sync::kEmbeddings : train::Sync::kEnd;
}

// The allocator of the model's bf16 weights: memory the copy engines can reach on every rank
// when the all-gathers run on them (train/data_parallel.cuh), else nullptr (cudaMalloc).
static const gpt::ExchangeAllocator* exchange_allocator(const Options& o, const dist::Context& ctx) {
  static const gpt::ExchangeAllocator shared{train::DataParallel::exchange_alloc, train::DataParallel::exchange_free};
  return ctx.world > 1 && o.gather_engine == "copy-engines" ? &shared : nullptr;
}
// The points of the backward with an exchange and update of their own (train/exchange_windows.h).
static std::set<int> points_of(const train::ShardPlan& plan) {
  std::set<int> points;
  for (const auto& [point, pieces] : plan.points) points.insert(point);
  return points;
}

// The window of a step, counted in blocks of 128 (fixed or scheduled); with token granularity
// the same size is applied token by token: N blocks = 128 N tokens.
static int window_at(const Options& o, const model::Schedule& sched, int step) {
  const int blocks = o.window_blocks ? o.window_blocks : sched.window_blocks(step);
  return o.window_granularity == "token" ? blocks * 128 : blocks;
}

// Whether the run's mask lets a prediction see its own target (model/target_leak.h), decided
// from the flags over every window the run uses, before any GPU work.
static model::TargetLeak target_leak(const Options& o) {
  const model::Schedule sched = schedule(o);
  std::vector<int> windows;
  for (int step = 0; step <= o.steps; step++) {
    const int w = window_at(o, sched, step);
    if (std::find(windows.begin(), windows.end(), w) == windows.end()) windows.push_back(w);
  }
  return model::find_target_leak(model_config(o).mask, o.seq_len, windows);
}

// The refusal of a run whose mask shows targets, naming the flags that cause it: each mask flag
// whose safe value alone ends the leak.
static std::string target_leak_refusal(const Options& o, const model::TargetLeak& leak) {
  std::vector<std::string> causes;
  Options fixed = o;
  fixed.causal = 1;
  if (!o.causal && !target_leak(fixed).leaks) causes.push_back("--causal 0");
  fixed = o, fixed.prefix_attention = 0;
  if (o.prefix_tokens > 0 && o.prefix_attention && !target_leak(fixed).leaks)
    causes.push_back("--prefix-tokens " + std::to_string(o.prefix_tokens));
  std::string flags;
  for (const std::string& c : causes) flags += (flags.empty() ? "" : " with ") + c;
  if (flags.empty())
    flags = "--causal " + std::to_string(o.causal) + " --window-mask " + o.window_mask + " --window-granularity " + o.window_granularity +
            " --doc-mask " + std::to_string(o.doc_mask) + " --prefix-tokens " + std::to_string(o.prefix_tokens);
  return flags + ": the attention lets position t see position t + 1, whose token is the target it is scored on (first at t = " +
         std::to_string(leak.query) + ", window " + std::to_string(leak.window) + (o.window_granularity == "token" ? " tokens" : " block(s)") +
         "), so the loss would reward copying; give --allow-target-leak to run such a mask on purpose (its log says "
         "'leaks targets: yes')";
}

// Checkpoints: everything a run needs to continue as if never stopped (train/checkpoint.h). The
// state is gathered from every rank (collective); rank 0 writes the file.
static void save_checkpoint(const Options& o, const dist::Context& ctx, const std::string& data, gpt::Model& model, Optimizer& opt,
                            train::DataParallel* dp, int steps_done, std::string* path) {
  char name[64];
  std::snprintf(name, sizeof(name), "/ckpt_%06d.bin", steps_done);
  train::Checkpoint ck;
  ck.config = train::fingerprint(o);
  ck.data = data;
  ck.step = steps_done;
  opt.save(ck, model.parameters(), dp);
  *path = o.checkpoint_dir + name;
  if (ctx.rank == 0) train::write_checkpoint(*path, ck);
}
static int load_checkpoint(const Options& o, const train::Checkpoint& ck, gpt::Model& model, Optimizer& opt) {
  const size_t n = model.layout().size();
  auto master = ck.blobs.find("master");
  if (master == ck.blobs.end() || master->second.size() != n)
    throw train::CheckpointError(o.resume + ": blob master is missing or of another size");
  if (ck.step < 0 || ck.step > o.steps) throw train::CheckpointError(o.resume + ": step " + std::to_string(ck.step) + " outside the run");
  model.upload_master(master->second);
  opt.load(ck, n, o.resume);
  return (int)ck.step;
}

// Sequence k of a stream as a micro-step's batch at this step's window (model/batch.h: inputs,
// targets, document ids, kept targets, stream index, kept pairs), built once.
struct SequenceReader {
  std::vector<uint16_t> seq;
  model::MaskConfig mask;
  SequenceReader(int T, const model::MaskConfig& m) : seq(T + 1), mask(m) {}
  void load(data::TokenStream& s, uint64_t k, int window, model::Batch& batch) {
    s.sequence(k, seq.data());
    build(seq.data(), k, window, batch);
  }
  // the same from sequence k's tokens (T + 1) already read
  void build(const uint16_t* tokens, uint64_t k, int window, model::Batch& batch) {
    mask.window = window;
    batch.build(tokens, mask, k);
  }
};

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

// Test-only fault injection (--fault RANK:STEP:KIND, checked when parsed): crash throws an
// error, hang stops the rank without exiting, exit ends the process at once (as a kill would).
static void inject_fault(const Options& o, const dist::Context& ctx, int step) {
  int rank = -1, at = -1;
  char kind[16] = {0};
  if (o.fault.empty() || std::sscanf(o.fault.c_str(), "%d:%d:%15s", &rank, &at, kind) != 3 || rank != ctx.rank || at != step) return;
  if (std::string(kind) == "crash") throw std::runtime_error("injected fault at step " + std::to_string(step) + " (--fault)");
  std::fprintf(stderr, "train_gpt: %s: injected fault '%s' at step %d (--fault)\n", ctx.who().c_str(), kind, step);
  if (std::string(kind) == "exit") std::_Exit(3);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // hang
}

// --check-replicas: the fp32 masters (each gathered from the rank that updates it) and every
// rank's bf16 weights must be bit-identical on every rank. What each rank updates alone reaches
// the others through the exchange, so this catches a rank whose update, exchange or copy-back
// went wrong, and the replicated scalars as each rank updated them.
static uint64_t check_replicas(const dist::Context& ctx, gpt::Model& model, Optimizer& opt, train::DataParallel* dp,
                               unsigned long long* d_sum, int step) {
  opt.gather_masters(model.parameters(), dp);
  const size_t n = model.layout().size();
  unsigned long long a = 0, b = 0;
  gpt::cuda_check(layers::checksum(model.master(), n * sizeof(float), d_sum), "checksum");
  gpt::cuda_check(cudaMemcpy(&a, d_sum, sizeof(a), cudaMemcpyDeviceToHost), "checksum");
  gpt::cuda_check(layers::checksum(model.weights(), n / 2 * 2 * sizeof(layers::bf16), d_sum), "checksum");
  gpt::cuda_check(cudaMemcpy(&b, d_sum, sizeof(b), cudaMemcpyDeviceToHost), "checksum");
  const uint64_t sum = a ^ (b * 0x9e3779b97f4a7c15ULL);
  const auto sums = dist::gather_all(ctx, sum);
  for (int r = 1; r < ctx.world; r++)
    if (sums[r] != sums[0]) {
      char msg[160];
      std::snprintf(msg, sizeof(msg), "weights differ across ranks after step %d: rank 0 checksum %016llx, rank %d %016llx (--check-replicas)",
                    step, (unsigned long long)sums[0], r, (unsigned long long)sums[r]);
      throw std::runtime_error(msg);
    }
  return sum;
}

// Start-up: launch to the end of the first training step (reading the data, the GPU's context,
// the model's buffers, the step-0 validation and the first step), the figure the record's 72 s of
// compilation is compared with.
static const auto kLaunched = std::chrono::steady_clock::now();
static void log_startup(train::RunLog& log) {
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
static RankSpread rank_spread(const dist::Context& ctx, const std::vector<double>& mine) {
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
static void report(const Options& o, const dist::Context& ctx, const cudaDeviceProp& prop, Timing& t, gpt::Model& model,
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

// ----------------------------------------------------------------------------------- training
// One training run, piece by piece: the constructor makes everything a step needs (checking
// what can be checked before the GPU is touched), and each method does one job of the loop in
// run_training below.
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

// An error's line on stderr, naming the rank when there are several.
static void report_error(const dist::Context& ctx, const std::exception& e) {
  std::fprintf(stderr, "train_gpt: %s%serror: %s\n", ctx.who().c_str(), ctx.world > 1 ? ": " : "", e.what());
}

// The training loop: validation at step 0, every --val-every steps and at the end; one step at a
// time in between. Returns 0, or the code of a refusal before the GPU, which every rank returns
// (train/start_gate.h); with several ranks any later failure ends the job here.
static int run_training(const Options& o, const dist::Context& ctx) {
  // With several ranks a failure ends the job from here, while the trainer still stands: its
  // destructors would wait for the GPU, whose streams can wait forever for a peer that hung (a
  // copy-engine all-gather waits for its peers' flags, which no abort releases).
  std::optional<Trainer> t;
  train::StartGate gate(ctx);  // a failure before it, on any rank, ends every rank there, none having touched its GPU
  try {
    t.emplace(o, ctx, gate);
    for (int step = t->start_step(); step <= o.steps; step++) {
      const int window = t->window(step);
      if (t->validates_after(step)) t->validate(step, window);
      if (step == o.steps) break;
      inject_fault(o, ctx, step + 1);
      t->after_step(step + 1, t->train_step(step, window));
    }
    t->finish();
  } catch (const train::Refused& e) {  // another rank refused to start; rank 0 printed why
    return e.code;
  } catch (const CLI::ValidationError& e) {
    if (ctx.world < 2) throw;
    if (!gate.passed()) return gate.pass(2, std::string("error: ") + e.what());
    report_error(ctx, e);
    dist::abort_all(ctx, 2);
  } catch (const std::exception& e) {
    if (ctx.world < 2) throw;
    if (!gate.passed()) return gate.pass(1, std::string("error: ") + e.what());
    report_error(ctx, e);
    dist::abort_all(ctx, 1);
  }
  return 0;
}

int main(int argc, char** argv) {
  dist::Context ctx;
  try {
    ctx = dist::init(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: error: %s\n", e.what());
    return 1;
  }
  // one exit path: under mpirun a rank that fails while training takes the job down
  // (MPI_Abort) so that none waits forever; a refusal before the GPU is agreed by every rank
  // (train/start_gate.h), and each rank simply exits with the job's code
  auto finish = [&](int rc, bool every_rank_agrees = false) {
    if (rc != 0 && ctx.world > 1 && !every_rank_agrees) dist::abort_all(ctx, rc);
    dist::finalize(ctx);
    return rc;
  };
  // every rank parses its own flags (mpirun may give each its own); what exists on disk is rank
  // 0's to judge (it alone writes logs and checkpoints). The log and the checkpoint folder are
  // tried for writing now (and made only once the run can start), so that neither is found
  // unwritable after training has begun. Then the ranks agree: one's refusal ends every rank,
  // and so does a rank whose resolved configuration differs from rank 0's.
  Options o;
  std::string refusal;
  int rc = train::parse_options(argc, argv, ctx.world, ctx.rank, &o, &refusal);
  // a mask that shows the loss its own targets runs only on purpose (model/target_leak.h)
  if (rc < 0 && !o.check_data && !o.allow_target_leak) {
    const model::TargetLeak leak = target_leak(o);
    if (leak.leaks) rc = 2, refusal = std::string(ctx.world > 1 ? "" : "train_gpt: ") + target_leak_refusal(o, leak);
  }
  if (rc < 0 && ctx.rank == 0 && !o.check_data) {
    std::string why = o.log_file.empty() ? "" : train::RunLog::refuse_existing(o.log_file);
    const char* flag = "--log-file";
    if (why.empty() && !o.checkpoint_dir.empty()) why = used_checkpoint_dir(o.checkpoint_dir, o.resume), flag = "--checkpoint-dir";
    if (why.empty() && !o.checkpoint_dir.empty()) why = train::unwritable_checkpoint_dir(o.checkpoint_dir);  // made once the run can start
    if (!why.empty()) rc = 2, refusal = std::string(ctx.world > 1 ? "" : "train_gpt: ") + flag + ": " + why;
  }
  // --check-data reads every shard in one process and never reaches the GPU's gate: under
  // mpirun the ranks without it would wait there for ever, so it is refused at this gate
  if (rc < 0 && o.check_data && ctx.world > 1)
    rc = 2, refusal = "--check-data: checks the data in one process; run it without mpirun";
  rc = train::StartGate(ctx).pass(rc, refusal, train::resolved(o));  // every rank given the same configuration
  if (rc >= 0) return finish(rc, true);
  if (o.check_data) {
    int bad = ctx.rank == 0 ? check_data(o) : 0;
    if (bad) std::fprintf(stderr, "check-data: %d problem(s) found\n", bad);
    else if (ctx.rank == 0) std::printf("check-data: all shards good\n");
    return finish(bad ? 1 : 0);
  }
  try {
    return finish(run_training(o, ctx), true);  // (its code is every rank's: a later failure ended the job inside it)
  } catch (const CLI::ValidationError& e) {
    report_error(ctx, e);
    return finish(2);
  } catch (const std::exception& e) {
    report_error(ctx, e);
    return finish(1);
  }
}
