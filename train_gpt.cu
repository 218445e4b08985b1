// train_gpt: the GPT speedrun trainer (README.md; docs/model.md, docs/formats.md), on one GPU or many.
//
// Reads top to bottom: options and presets, data checks, the optimiser over the parameter
// layout, the training loop, main. The model is model/gpt.cuh (forward and backward, checked
// against the fp64 reference); the optimisers are layers/adam.cuh and layers/muon.cuh.
// Checkpoints (--checkpoint-dir, --resume) are train/checkpoint.h. Several GPUs: one process
// each under mpirun (train/dist.h), gradients averaged over NCCL while the backward runs and
// Muon's matrices shared out among the ranks (train/data_parallel.cuh); the global batch stays
// --seqs-per-step sequences whatever the GPU count, so runs on 1, 2 or 8 GPUs are one experiment.

// ----------------------------------------------------------------------------------- CPU utilities
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "common/cli.h"
#include "common/files.h"
#include "data/dataloader.h"
#include "data/manifest.h"
#include "data/shard.h"
#include "model/optimizer_reference.h"
#include "train/checkpoint.h"
#include "train/dist.h"
#include "train/json.h"
#include "train/run_log.h"
// ----------------------------------------------------------------------------------- GPU
#include "layers/adam.cuh"
#include "layers/checksum.cuh"
#include "layers/muon.cuh"
#include "model/gpt.cuh"
#include "train/data_parallel.cuh"

// ----------------------------------------------------------------------------------- options
struct Options {
  std::string preset = "default";
  std::string train_data = "data/gcide/gcide_train_*.bin";
  std::string val_data = "data/gcide/gcide_val_*.bin";
  std::string log_file;
  int vocab_size = 50257;  // token ids in the data must be below this (GPT-2's vocabulary)
  bool check_data = false;
  // model and run (presets fill these; flags override)
  int model_vocab = 50304, layers = 4, width = 256, heads = 2, hidden = 1024;
  int seq_len = 8192, seqs_per_step = 8, steps = 300, val_every = 50;
  long long val_tokens = 8 * 8192;
  int window_blocks = 0;  // 0: the record's schedule
  std::string window_mask = "uni", window_granularity = "block";
  int causal = 1, doc_mask = 1;
  uint64_t seed = 1337;
  std::string checkpoint_dir;  // empty: no checkpoints
  int checkpoint_every = 0;    // 0: only at the end (when checkpoint_dir is set)
  std::string resume;          // a checkpoint file to continue from
  // several GPUs
  std::string grad_sync = "overlap";  // overlap: bucketed all-reduce during the backward; end: one after it
  double timeout = 300;               // seconds a rank waits for the others before ending the job
  bool check_replicas = false;        // compare weight checksums across ranks after every step
  std::string fault;                  // tests: RANK:STEP:crash|hang|exit
  int profile = 0;                    // > 0: per-category GPU time over the timed steps
};

// The flags that define the run's computation: a checkpoint resumes only a run with the same.
// (Data paths may move; their contents are the user's to keep.)
static std::string fingerprint(const Options& o) {
  char b[512];
  std::snprintf(b, sizeof(b),
                "layers=%d width=%d heads=%d hidden=%d vocab=%d seq_len=%d seqs_per_step=%d steps=%d window_blocks=%d "
                "window_mask=%s window_granularity=%s causal=%d doc_mask=%d seed=%llu",
                o.layers, o.width, o.heads, o.hidden, o.model_vocab, o.seq_len, o.seqs_per_step, o.steps, o.window_blocks,
                o.window_mask.c_str(), o.window_granularity.c_str(), o.causal, o.doc_mask, (unsigned long long)o.seed);
  return b;
}

static void apply_preset(Options& o, const std::string& name) {
  if (name == "default") return;  // the fields' initial values: a short run on GCIDE
  if (name == "tiny") {
    o.layers = 2, o.width = 128, o.heads = 2, o.hidden = 512, o.seq_len = 1024, o.steps = 30, o.val_every = 10,
    o.val_tokens = 8 * 1024;
    return;
  }
  if (name == "speedrun") {  // docs/model.md
    o.layers = 12, o.width = 768, o.heads = 6, o.hidden = 3072, o.seq_len = 65536, o.steps = 1480, o.val_every = 125,
    o.val_tokens = 10485760;
    o.train_data = "data/fineweb10B/fineweb_train_*.bin", o.val_data = "data/fineweb10B/fineweb_val_*.bin";
    return;
  }
  throw CLI::ValidationError("--preset", "unknown preset '" + name + "' (default, tiny, speedrun)");
}

// ----------------------------------------------------------------------------------- data checks
// Checks every shard of both patterns: header, size, token ids. Prints one line per shard and
// returns the number of bad shards (a pattern that matches nothing counts as bad).
static int check_data(const Options& o) {
  int bad = 0;
  for (auto [what, pattern] : {std::pair<const char*, std::string>{"train", o.train_data}, {"val", o.val_data}}) {
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
        shard::read_shard(f, o.vocab_size, &info);
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

// ----------------------------------------------------------------------------------- optimiser
// docs/model.md, optimisation over the model's parameter layout: Adam for embeddings, head and scalars,
// Muon for the block matrices (the same grouping as model/optimizer_reference.cpp). Every rank
// runs Adam and Muon's momentum on the averaged gradients; matrix j's Newton-Schulz runs only
// on rank j % world, which broadcasts the result (X, bf16) to the others; then every rank
// applies every X. With one GPU this is muon_step, stage by stage (tests/test_layers_gpu.cu).
// Adam's state is not sharded (ZeRO-1): see the note in README.md.
struct Optimizer {
  float *m = nullptr, *v = nullptr, *buf = nullptr;
  layers::bf16* X = nullptr;     // orthogonalised updates, one slot per matrix
  std::vector<size_t> x_offset;  // by matrix index
  int adam_steps = 0;
  model_ref::OptimizerHyper hp;
  layers::MuonScratch scratch;
  Optimizer(const model_ref::Params& layout, size_t max_matrix, size_t max_square) : scratch(max_matrix, max_square) {
    const size_t n = layout.size();
    for (float** p : {&m, &v, &buf}) {
      gpt::cuda_check(cudaMalloc(p, n * sizeof(float)), "optimizer state");
      gpt::cuda_check(cudaMemset(*p, 0, n * sizeof(float)), "optimizer state");
    }
    size_t total = 0;
    for (const model_ref::Tensor& t : layout.tensors)
      if (model_ref::group_of(t) == model_ref::ParamGroup::kMatrix) {
        x_offset.push_back(total);
        total += (t.size() + 63) / 64 * 64;  // 128-byte aligned slots (cuBLASLt wants 16)
      }
    gpt::cuda_check(cudaMalloc(&X, std::max<size_t>(total, 1) * sizeof(layers::bf16)), "Muon update buffer");
  }
  ~Optimizer() {
    for (float* p : {m, v, buf}) cudaFree(p);
    cudaFree(X);
  }
  std::vector<float> download(const float* d, size_t n) const {
    std::vector<float> h(n);
    gpt::cuda_check(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), "optimizer state");
    return h;
  }
  void upload(float* d, const std::vector<float>& h) {
    gpt::cuda_check(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice), "optimizer state");
  }
  void step(gpt::Model& model, layers::Matmul& mm, int step, const model_ref::Schedule& sched, train::DataParallel* dp) {
    adam_steps++;
    const float mult = (float)sched.lr_multiplier(step), mom = (float)sched.muon_momentum(step);
    const int rank = dp ? dp->rank() : 0, world = dp ? dp->world() : 1;
    std::vector<const model_ref::Tensor*> matrices;
    std::vector<train::DataParallel::Broadcast> shares;
    for (const model_ref::Tensor& t : model.layout().tensors) {
      float* w = model.master() + t.offset;
      const float* g = model.grads() + t.offset;
      const model_ref::ParamGroup grp = model_ref::group_of(t);
      cudaError_t e;
      if (grp == model_ref::ParamGroup::kMatrix) {
        const int j = (int)matrices.size(), owner = j % world;
        matrices.push_back(&t);
        e = layers::muon_momentum(scratch, g, buf + t.offset, t.size(), mom, owner == rank);
        if (e == cudaSuccess && owner == rank) e = layers::muon_orthogonalize(mm, scratch, X + x_offset[j], (int)t.rows, (int)t.cols);
        shares.push_back({X + x_offset[j], t.size(), owner});
      } else {
        const double lr = grp == model_ref::ParamGroup::kEmbed ? hp.lr_embed : grp == model_ref::ParamGroup::kHead ? hp.lr_head : hp.lr_scalar;
        e = layers::adam_step(w, model.weights() + t.offset, g, m + t.offset, v + t.offset, t.size(), mult * (float)lr, adam_steps,
                              (float)hp.beta1, (float)hp.beta2, (float)hp.adam_eps);
      }
      gpt::cuda_check(e, ("optimizer step on " + t.name).c_str());
    }
    if (dp) dp->broadcast(shares);
    for (size_t j = 0; j < matrices.size(); j++) {
      const model_ref::Tensor& t = *matrices[j];
      gpt::cuda_check(layers::muon_apply(model.master() + t.offset, model.weights() + t.offset, X + x_offset[j], (int)t.rows, (int)t.cols,
                                         mult * (float)hp.lr_muon),
                      ("Muon update of " + t.name).c_str());
    }
  }
};

// ----------------------------------------------------------------------------------- training
// The source's commit, stamped by the Makefile at build time (build/version.cpp), with "-dirty"
// when tracked files differed from it (a run of modified code must not pass for the commit's),
// or "unknown" outside a git checkout.
extern const char* const kGitCommit;

// Dense bf16 tensor-core peak of the GPU (no sparsity), for MFU; 0 when unknown.
static double peak_flops(const std::string& gpu) {
  if (gpu.find("H200") != std::string::npos) return 989.4e12;
  if (gpu.find("H100") != std::string::npos) return gpu.find("PCIe") != std::string::npos ? 756.0e12 : gpu.find("NVL") != std::string::npos ? 835.0e12 : 989.4e12;
  if (gpu.find("A100") != std::string::npos) return 312.0e12;
  return 0;
}

// Test-only fault injection (--fault RANK:STEP:KIND): KIND crash throws an error, hang stops
// the rank without exiting, exit ends the process at once (as a kill would).
struct Fault {
  int rank = -1, step = -1;
  std::string kind;
};
static Fault parse_fault(const std::string& f) {
  Fault r;
  char kind[16] = {0};
  if (f.empty()) return r;
  if (std::sscanf(f.c_str(), "%d:%d:%15s", &r.rank, &r.step, kind) != 3 ||
      (std::string(kind) != "crash" && std::string(kind) != "hang" && std::string(kind) != "exit"))
    throw CLI::ValidationError("--fault", "want RANK:STEP:crash|hang|exit, got '" + f + "'");
  r.kind = kind;
  return r;
}

static double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

static int run_training(const Options& o, const dist::Context& ctx) {
  const Fault fault = parse_fault(o.fault);
  // everything that can be checked without a GPU is checked first
  train::Checkpoint resume_from;
  if (!o.resume.empty()) {
    resume_from = train::read_checkpoint(o.resume);
    train::check_same_config(resume_from, fingerprint(o), o.resume);
  }
  if (!o.checkpoint_dir.empty() && ctx.rank == 0) {
    std::error_code ec;
    std::filesystem::create_directories(o.checkpoint_dir, ec);
    if (ec) throw std::runtime_error(o.checkpoint_dir + ": cannot create the checkpoint directory (--checkpoint-dir): " + ec.message());
  }
  // the data before the GPU: a bad shard is reported on any machine, before GPU memory is taken
  data::TokenStream train_stream(shard_files(o.train_data, "train"), o.seq_len, o.vocab_size, true);
  data::TokenStream val_stream(shard_files(o.val_data, "val"), o.seq_len, o.vocab_size, false);
  // the count is checked against the data before any list of that size is made
  const uint64_t n_val = (uint64_t)o.val_tokens / (uint64_t)o.seq_len;
  if (n_val == 0) throw CLI::ValidationError("--val-tokens", "must hold at least one sequence of --seq-len tokens");
  if (n_val > val_stream.sequences_per_pass())
    throw CLI::ValidationError("--val-tokens", std::to_string(o.val_tokens) + " asks for more validation than " + o.val_data + " holds (" +
                                                   std::to_string(val_stream.sequences_per_pass() * o.seq_len) + " tokens in whole sequences)");
  const auto val_seqs = data::val_sequences(o.val_tokens, o.seq_len, ctx.world, ctx.rank);
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

  model_ref::Config cfg;
  cfg.vocab = o.model_vocab, cfg.width = o.width, cfg.heads = o.heads, cfg.layers = o.layers, cfg.hidden = o.hidden;
  cfg.mask.causal = o.causal;
  cfg.mask.bidir = o.window_mask == "bi";
  cfg.mask.blocks = o.window_granularity == "block";
  static int32_t doc_flag = 1;  // the GPU model takes documents from the tokens; this only switches them on
  cfg.mask.doc = o.doc_mask ? &doc_flag : nullptr;
  model_ref::Schedule sched;
  sched.steps = o.steps;
  sched.cooldown = std::max(1, (int)std::lround(o.steps * 600.0 / 1480));
  sched.momentum_warmup = std::max(1, (int)std::lround(o.steps * 300.0 / 1480));
  cfg.mask.window = 1;  // set for every step in the loop below

  gpt::Model model(cfg, o.seq_len, shard::kBos);
  {
    model_ref::Params init(cfg);
    init.init(o.seed);
    model.load(init);
  }
  size_t max_matrix = 0, max_square = 0;
  for (auto& t : model.layout().tensors)
    if (model_ref::group_of(t) == model_ref::ParamGroup::kMatrix) {
      max_matrix = std::max(max_matrix, t.size());
      max_square = std::max(max_square, std::min(t.rows, t.cols) * std::min(t.rows, t.cols));
    }
  Optimizer opt(model.layout(), max_matrix, max_square);
  layers::Matmul mm;
  std::unique_ptr<train::DataParallel> dp;
  if (ctx.world > 1) {
    const bool overlap = o.grad_sync == "overlap";
    dp = std::make_unique<train::DataParallel>(ctx, train::grad_buckets(model.layout(), o.layers, overlap), model.grads(), overlap,
                                               o.timeout);
  }
  data::TrainSchedule ts{o.seqs_per_step, ctx.world, ctx.rank};
  const size_t n_params = model.layout().size();
  int start_step = 0;
  if (!o.resume.empty()) {
    train::Checkpoint& ck = resume_from;
    for (const char* name : {"master", "adam_m", "adam_v", "muon_buf"})
      if (!ck.blobs.count(name) || ck.blobs[name].size() != n_params)
        throw train::CheckpointError(o.resume + ": blob " + name + " is missing or of another size");
    model.upload_master(ck.blobs["master"]);
    opt.upload(opt.m, ck.blobs["adam_m"]);
    opt.upload(opt.v, ck.blobs["adam_v"]);
    opt.upload(opt.buf, ck.blobs["muon_buf"]);
    opt.adam_steps = (int)ck.adam_steps;
    start_step = (int)ck.step;
    if (start_step < 0 || start_step > o.steps) throw train::CheckpointError(o.resume + ": step " + std::to_string(start_step) + " outside the run");
  }
  std::string last_checkpoint = o.resume.empty() ? "none" : o.resume;
  auto save_checkpoint = [&](int steps_done) {  // rank 0; every rank holds the same state
    char name[64];
    std::snprintf(name, sizeof(name), "/ckpt_%06d.bin", steps_done);
    train::Checkpoint ck;
    ck.config = fingerprint(o);
    ck.step = steps_done;
    ck.adam_steps = opt.adam_steps;
    ck.blobs["master"] = model.download_master();
    ck.blobs["adam_m"] = opt.download(opt.m, n_params);
    ck.blobs["adam_v"] = opt.download(opt.v, n_params);
    ck.blobs["muon_buf"] = opt.download(opt.buf, n_params);
    const std::string path = o.checkpoint_dir + name;
    train::write_checkpoint(path, ck);
    last_checkpoint = path;
  };

  const std::string run_id = train::RunLog::new_run_id();
  train::RunLog log(o.log_file, ctx.rank == 0, run_id, kGitCommit);
  log.config(json::Object()
                 .add("event", json::str("config"))
                 .add("run_id", json::str(run_id))
                 .add("preset", json::str(o.preset))
                 .add("train_data", json::str(o.train_data))
                 .add("val_data", json::str(o.val_data))
                 .add("layers", json::num(o.layers))
                 .add("width", json::num(o.width))
                 .add("heads", json::num(o.heads))
                 .add("hidden", json::num(o.hidden))
                 .add("vocab", json::num(o.model_vocab))
                 .add("seq_len", json::num(o.seq_len))
                 .add("seqs_per_step", json::num(o.seqs_per_step))
                 .add("steps", json::num(o.steps))
                 .add("val_every", json::num(o.val_every))
                 .add("val_tokens", json::num(o.val_tokens))
                 .add("window_blocks", json::num(o.window_blocks))
                 .add("window_mask", json::str(o.window_mask))
                 .add("window_granularity", json::str(o.window_granularity))
                 .add("causal", json::num(o.causal))
                 .add("doc_mask", json::num(o.doc_mask))
                 .add("seed", json::num((unsigned long long)o.seed))
                 .add("world_size", json::num(ctx.world))
                 .add("grad_sync", json::str(o.grad_sync))
                 .add("gpu", json::str(prop.name))
                 .add("git_commit", json::str(kGitCommit))
                 .text());
  log.note("train_gpt: " + std::string(prop.name) + " x " + std::to_string(ctx.world) + ", " + std::to_string(n_params) + " parameters, " +
           std::to_string(o.steps) + " steps of " + std::to_string((long long)o.seq_len * o.seqs_per_step) + " tokens (" +
           std::to_string(ts.micro_steps()) + " micro-step(s) of one sequence per GPU)");

  std::vector<uint16_t> seq(o.seq_len + 1);
  std::vector<int> inputs(o.seq_len), targets(o.seq_len);
  std::vector<int32_t> doc(o.seq_len);
  auto load_seq = [&](data::TokenStream& s, uint64_t k) {
    s.sequence(k, seq.data());
    for (int i = 0; i < o.seq_len; i++) inputs[i] = seq[i], targets[i] = seq[i + 1];
  };
  // model FLOPs of one sequence (MFU): 6 per matmul weight per token, and 12 C per kept
  // attention pair per layer (forward 4 C: QK^T and PV; backward twice that)
  double matmul_weights = (double)o.model_vocab * o.width;  // the head
  for (auto& t : model.layout().tensors)
    if (model_ref::group_of(t) == model_ref::ParamGroup::kMatrix) matmul_weights += (double)t.size();
  auto sequence_flops = [&](int window) {
    attn::MaskDesc m;
    m.causal = o.causal, m.window = window, m.window_bidir = o.window_mask == "bi", m.window_blocks = o.window_granularity == "block";
    if (o.doc_mask) {
      for (int t = 0, c = 0; t < o.seq_len; t++) doc[t] = (c += inputs[t] == shard::kBos);
      m.doc_ids = doc.data();
    }
    const long long pairs = attn::kept_pairs(attn::make_bounds(m, o.seq_len));
    return 6.0 * matmul_weights * o.seq_len + 12.0 * o.width * o.layers * (double)pairs;
  };
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto sync = [&](const std::string& what) {
    if (dp) dp->sync(what);
    else gpt::cuda_check(cudaDeviceSynchronize(), what.c_str());
  };
  double train_ms = 0, timed_flops = 0;  // from the end of step 10, validation excluded
  double comm_ms = 0, exposed_ms = 0, bcast_ms = 0, peak_mem = 0;
  std::vector<double> step_ms;
  const int micro = ts.micro_steps();
  const float grad_scale = 1.f / ((float)o.seq_len * o.seqs_per_step);
  gpt::Profiler& prof = model.profiler();
  unsigned long long* d_sum = nullptr;
  if (o.check_replicas) gpt::cuda_check(cudaMalloc(&d_sum, sizeof(unsigned long long)), "checksum");
  uint64_t last_sum = 0;
  if (start_step) log.note("train_gpt: resumed from " + o.resume + " at step " + std::to_string(start_step));
  for (int step = start_step; step <= o.steps; step++) {
    // the window's size is counted in blocks of 128 (fixed or scheduled); with token granularity
    // the same size is applied token by token: N blocks = 128 N tokens
    const int window_blocks = o.window_blocks ? o.window_blocks : sched.window_blocks(step);
    const int window = o.window_granularity == "token" ? window_blocks * 128 : window_blocks;
    model.set_window(window);
    if (step % o.val_every == 0 || step == o.steps) {
      double vl[2] = {0, (double)val_seqs.size()};
      for (uint64_t k : val_seqs) {
        load_seq(val_stream, k);
        vl[0] += model.forward(inputs, targets);
      }
      dist::sum(ctx, vl, 2);
      const double val_loss = vl[0] / vl[1];
      log.step(step, o.steps, train_ms, val_loss);
      if (!std::isfinite(val_loss))
        throw std::runtime_error("validation loss is " + std::to_string(val_loss) + " at step " + std::to_string(step) +
                                 "; last checkpoint: " + last_checkpoint);
    }
    if (step == o.steps) break;
    if (fault.rank == ctx.rank && fault.step == step + 1) {
      if (fault.kind == "crash") throw std::runtime_error("injected fault at step " + std::to_string(step + 1) + " (--fault)");
      std::fprintf(stderr, "train_gpt: %s: injected fault '%s' at step %d (--fault)\n", ctx.who().c_str(), fault.kind.c_str(), step + 1);
      if (fault.kind == "exit") std::_Exit(3);
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // hang
    }
    sync("step " + std::to_string(step + 1));
    const bool timed = step >= 10;  // steps 11, 12, ... (1-based) are timed, as in the record
    prof.on = o.profile > 0 && timed && step < 10 + o.profile;
    const auto t0 = now();
    model.zero_grad();
    double tl[2] = {0, (double)micro};
    for (int m = 0; m < micro; m++) {
      const bool last = m == micro - 1;
      load_seq(train_stream, ts.sequence_index(step, m));
      if (timed) timed_flops += sequence_flops(window);
      tl[0] += model.forward(inputs, targets, grad_scale);
      if (dp && last) dp->ready(o.layers);  // the head's gradient is final
      if (dp && last) model.backward([&](int point) { dp->ready(point); });
      else model.backward();
    }
    prof.mark(gpt::Profiler::kComm);
    if (dp) dp->wait();
    prof.mark(gpt::Profiler::kOptimizer);
    opt.step(model, mm, step, sched, dp.get());
    prof.mark(gpt::Profiler::kHost);
    sync("optimizer step " + std::to_string(step + 1));
    prof.collect();
    prof.on = false;  // validation is not profiled
    const double ms = std::chrono::duration<double, std::milli>(now() - t0).count();
    if (timed) {
      train_ms += ms;
      step_ms.push_back(ms);
      if (dp) {
        auto t = dp->times();
        comm_ms += t.allreduce_ms, exposed_ms += t.exposed_ms, bcast_ms += t.broadcast_ms;
      }
    } else if (dp) {
      dp->times();
    }
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) peak_mem = std::max(peak_mem, (double)(total_b - free_b));
    dist::sum(ctx, tl, 2);
    const double train_loss = tl[0] / tl[1];
    if (!std::isfinite(train_loss))
      throw std::runtime_error("training loss is " + std::to_string(train_loss) + " at step " + std::to_string(step + 1) +
                               "; last checkpoint: " + last_checkpoint);
    log.step(step + 1, o.steps, train_ms, NAN, train_loss);
    if (o.check_replicas) {  // the fp32 masters and their bf16 copies, on every rank
      unsigned long long a = 0, b = 0;
      gpt::cuda_check(layers::checksum(model.master(), n_params * sizeof(float), d_sum), "checksum");
      gpt::cuda_check(cudaMemcpy(&a, d_sum, sizeof(a), cudaMemcpyDeviceToHost), "checksum");
      gpt::cuda_check(layers::checksum(model.weights(), n_params / 2 * 2 * sizeof(layers::bf16), d_sum), "checksum");
      gpt::cuda_check(cudaMemcpy(&b, d_sum, sizeof(b), cudaMemcpyDeviceToHost), "checksum");
      last_sum = a ^ (b * 0x9e3779b97f4a7c15ULL);
      const auto sums = dist::gather_all(ctx, last_sum);
      for (int r = 1; r < ctx.world; r++)
        if (sums[r] != sums[0]) {
          char b2[160];
          std::snprintf(b2, sizeof(b2), "weights differ across ranks after step %d: rank 0 checksum %016llx, rank %d %016llx (--check-replicas)",
                        step + 1, (unsigned long long)sums[0], r, (unsigned long long)sums[r]);
          throw std::runtime_error(b2);
        }
    }
    if (!o.checkpoint_dir.empty() && ctx.rank == 0 && ((o.checkpoint_every && (step + 1) % o.checkpoint_every == 0) || step + 1 == o.steps))
      save_checkpoint(step + 1);
  }
  peak_mem = dist::max(ctx, peak_mem);
  double sums[2] = {timed_flops, 0};
  dist::sum(ctx, sums, 2);
  const int timed_steps = (int)step_ms.size();
  char b[512];
  if (timed_steps > 0) {
    const double tok_s = (double)o.seq_len * o.seqs_per_step * timed_steps / (train_ms / 1e3);
    const double peak = peak_flops(prop.name) * ctx.world, mfu = peak > 0 ? sums[0] / (train_ms / 1e3) / peak : NAN;
    std::snprintf(b, sizeof(b), "train_gpt: %d timed steps: median %.1f ms a step, %.0f tokens/s, %.1f TFLOP/s a GPU, MFU %.1f%% (bf16 dense peak %.0f TFLOP/s a GPU)",
                  timed_steps, median(step_ms), tok_s, sums[0] / (train_ms / 1e3) / ctx.world / 1e12, 100 * mfu, peak_flops(prop.name) / 1e12);
    log.note(b);
    if (dp) {
      std::snprintf(b, sizeof(b), "train_gpt: gradient all-reduce %.1f ms a step (%s), of which %.1f ms exposed after the backward (%.0f%% hidden); Muon broadcast %.1f ms",
                    comm_ms / timed_steps, o.grad_sync.c_str(), exposed_ms / timed_steps,
                    comm_ms > 0 ? 100 * (1 - exposed_ms / comm_ms) : 0.0, bcast_ms / timed_steps);
      log.note(b);
    }
    log.event(json::Object()
                  .add("event", json::str("summary"))
                  .add("timed_steps", json::num(timed_steps))
                  .add("median_step_ms", json::num(median(step_ms)))
                  .add("tokens_per_s", json::num(tok_s))
                  .add("mfu", json::num(std::isfinite(mfu) ? mfu : 0.0))
                  .add("peak_memory_mib", json::num(peak_mem / (1 << 20)))
                  .add("allreduce_ms", json::num(comm_ms / timed_steps))
                  .add("exposed_ms", json::num(exposed_ms / timed_steps))
                  .add("broadcast_ms", json::num(bcast_ms / timed_steps))
                  .text());
  }
  if (o.profile > 0) log.note(prof.table());
  if (o.check_replicas) {
    std::snprintf(b, sizeof(b), "train_gpt: replicas identical on all %d rank(s) after every step (last checksum %016llx)", ctx.world,
                  (unsigned long long)last_sum);
    log.note(b);
  }
  std::snprintf(b, sizeof(b), "train_gpt: done; peak GPU memory %.0f MiB%s", peak_mem / (1 << 20), ctx.world > 1 ? " (the largest rank's)" : "");
  log.note(b);
  if (d_sum) cudaFree(d_sum);
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
  // (MPI_Abort) so that none waits forever; a flag error is the same on every rank, and each
  // rank simply exits with it
  auto finish = [&](int rc, bool every_rank_agrees = false) {
    if (rc != 0 && ctx.world > 1 && !every_rank_agrees) dist::abort_all(ctx, rc);
    dist::finalize(ctx);
    return rc;
  };
  Options o;
  // The preset sets the defaults first, then the flags override them: a first pass reads only
  // --preset (in any of CLI11's forms: --preset NAME, --preset=NAME), the second reads every flag.
  {
    CLI::App pre;
    pre.allow_extras();
    pre.set_help_flag();
    pre.add_option("--preset", o.preset);
    try {
      pre.parse(argc, argv);
    } catch (const CLI::ParseError&) {
      // the full parse below reports it
    }
  }
  try {
    apply_preset(o, o.preset);
  } catch (const CLI::ValidationError& e) {
    if (ctx.rank == 0) std::fprintf(stderr, "train_gpt: %s\n", e.what());
    return finish(2, true);
  }
  CLI::App app{"train_gpt: GPT speedrun trainer (C++/CUDA)"};
  app.add_option("--preset", o.preset, "default (short run on GCIDE), tiny, speedrun (the 2024-12-10 record: docs/model.md)")->capture_default_str();
  app.add_option("--train-data", o.train_data, "glob pattern of training shards")->capture_default_str();
  app.add_option("--val-data", o.val_data, "glob pattern of validation shards")->capture_default_str();
  cli::integer(app, "--vocab-size", o.vocab_size, 1, 65536, "token ids in the shards must be below this")->capture_default_str();
  app.add_flag("--check-data", o.check_data, "check every shard (header, size, token ids, manifest) and exit; needs no GPU");
  app.add_option("--log-file", o.log_file, "write the step lines here (and JSON lines beside it); must not exist yet");
  cli::integer(app, "--steps", o.steps, 1, 1000000, "training steps")->capture_default_str();
  cli::integer(app, "--seq-len", o.seq_len, 1, 1 << 20, "tokens per sequence")->capture_default_str();
  cli::integer(app, "--seqs-per-step", o.seqs_per_step, 1, 1024, "sequences per step (global batch)")->capture_default_str();
  cli::integer(app, "--val-every", o.val_every, 1, 1000000, "validate every N steps (and at the end)")->capture_default_str();
  cli::integer(app, "--val-tokens", o.val_tokens, 1LL, 1LL << 40, "validation tokens")->capture_default_str();
  cli::integer(app, "--layers", o.layers, 2, 256, "transformer blocks (even)")->capture_default_str();
  cli::integer(app, "--width", o.width, 8, 16384, "model width")->capture_default_str();
  cli::integer(app, "--heads", o.heads, 1, 256, "attention heads (width / heads must be 64 or 128)")->capture_default_str();
  cli::integer(app, "--hidden", o.hidden, 8, 65536, "MLP hidden width")->capture_default_str();
  cli::integer(app, "--window-blocks", o.window_blocks, 0, 1 << 20, "fixed attention window in blocks of 128 tokens; 0: the record's schedule")->capture_default_str();
  app.add_option("--window-mask", o.window_mask, "uni: q - kv < W; bi: |q - kv| < W")->check(CLI::IsMember({"uni", "bi"}))->capture_default_str();
  app.add_option("--window-granularity", o.window_granularity, "compare block indices (q/128 - k/128 < N) or tokens (q - k < 128 N)")->check(CLI::IsMember({"block", "token"}))->capture_default_str();
  cli::integer(app, "--causal", o.causal, 0, 1, "1: keep k <= q")->capture_default_str();
  cli::integer(app, "--doc-mask", o.doc_mask, 0, 1, "1: attend within documents only")->capture_default_str();
  cli::integer<uint64_t>(app, "--seed", o.seed, 0, UINT64_MAX, "initialisation seed")->capture_default_str();
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "write checkpoints here (every --checkpoint-every steps and at the end); a new or empty folder, or the one --resume reads from");
  cli::integer(app, "--checkpoint-every", o.checkpoint_every, 0, 1000000, "steps between checkpoints (0: only at the end)")->capture_default_str();
  app.add_option("--resume", o.resume, "continue from this checkpoint (same configuration only)");
  app.add_option("--grad-sync", o.grad_sync, "several GPUs: overlap (all-reduce each layer's gradients during the backward) or end (one all-reduce after it)")
      ->check(CLI::IsMember({"overlap", "end"}))->capture_default_str();
  cli::real(app, "--timeout", o.timeout, 1.0, 86400.0, "several GPUs: seconds to wait for the other ranks before ending the job")->capture_default_str();
  app.add_flag("--check-replicas", o.check_replicas, "several GPUs: compare weight checksums across ranks after every step");
  cli::integer(app, "--profile", o.profile, 0, 1000000, "GPU time by category over this many timed steps, printed at the end")->capture_default_str();
  app.add_option("--fault", o.fault, "tests only: RANK:STEP:crash|hang|exit makes that rank fail before that step");
  try {
    app.parse(argc, argv);
    if (o.layers % 2) throw CLI::ValidationError("--layers", "must be even (the U-net pairs layer i with layer L-1-i)");
    if (o.width % o.heads || (o.width / o.heads != 64 && o.width / o.heads != 128))
      throw CLI::ValidationError("--heads", "width / heads must be 64 or 128 (the attention kernel's head sizes)");
    if (o.width % 8 || o.hidden % 8) throw CLI::ValidationError("--width/--hidden", "must be multiples of 8");
    if (o.checkpoint_every && o.checkpoint_dir.empty()) throw CLI::ValidationError("--checkpoint-every", "needs --checkpoint-dir");
    if (o.check_data && (!o.resume.empty() || !o.checkpoint_dir.empty() || !o.log_file.empty()))
      throw CLI::ValidationError("--check-data", "only checks the shards: it does not go with --resume, --checkpoint-dir or --log-file");
    if (o.seqs_per_step % ctx.world) {
      std::string ok;
      for (int n = 1; n <= o.seqs_per_step; n++)
        if (o.seqs_per_step % n == 0) ok += (ok.empty() ? "" : ", ") + std::to_string(n);
      throw CLI::ValidationError("--seqs-per-step", "the global batch of " + std::to_string(o.seqs_per_step) + " sequences does not split over " +
                                                        std::to_string(ctx.world) + " GPUs; GPU counts that work: " + ok);
    }
    parse_fault(o.fault);
  } catch (const CLI::ParseError& e) {
    if (ctx.rank != 0) return finish(e.get_exit_code() == 0 ? 0 : 2, true);  // rank 0 prints the message
    int rc = app.exit(e);
    return finish(rc == 0 ? 0 : 2, true);  // bad flags: exit code 2
  }
  // what exists on disk is rank 0's to judge (it alone writes logs and checkpoints); a refusal
  // there ends every rank
  if (ctx.rank == 0 && !o.check_data) {
    std::string why = o.log_file.empty() ? "" : train::RunLog::refuse_existing(o.log_file);
    const char* flag = "--log-file";
    if (why.empty() && !o.checkpoint_dir.empty()) why = used_checkpoint_dir(o.checkpoint_dir, o.resume), flag = "--checkpoint-dir";
    if (!why.empty()) {
      std::fprintf(stderr, "train_gpt: %s: %s\n", flag, why.c_str());
      return finish(2);
    }
  }
  if (o.check_data) {
    int bad = ctx.rank == 0 ? check_data(o) : 0;
    if (bad) std::fprintf(stderr, "check-data: %d problem(s) found\n", bad);
    else if (ctx.rank == 0) std::printf("check-data: all shards good\n");
    return finish(bad ? 1 : 0);
  }
  try {
    return finish(run_training(o, ctx));
  } catch (const CLI::ValidationError& e) {
    std::fprintf(stderr, "train_gpt: %s%serror: %s\n", ctx.who().c_str(), ctx.world > 1 ? ": " : "", e.what());
    return finish(2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: %s%serror: %s\n", ctx.who().c_str(), ctx.world > 1 ? ": " : "", e.what());
    return finish(1);
  }
}
