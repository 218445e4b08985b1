// train_gpt: the GPT speedrun trainer (README.md; SPEC.md sections 3-6), one GPU.
//
// Reads top to bottom: options and presets, data checks, the optimiser over the parameter
// layout, the training loop, main. The model is model/gpt.cuh (forward and backward, checked
// against the fp64 reference); the optimisers are layers/adam.cuh and layers/muon.cuh.
// Checkpoints (--checkpoint-dir, --resume) are written and read by train/checkpoint.h; the
// round trip through the GPU is not yet tested on a GPU. Not yet here (issue 4): MFU, the
// SPEC-sized speed work (2.3 s a step on one H100 against the record's 1.09 s); multi-GPU is
// issue 5.

// ----------------------------------------------------------------------------------- CPU utilities
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "data/dataloader.h"
#include "data/shard.h"
#include "model/optimizer_reference.h"
#include "train/checkpoint.h"
#include "train/run_log.h"
// ----------------------------------------------------------------------------------- GPU
#include "layers/adam.cuh"
#include "layers/muon.cuh"
#include "model/gpt.cuh"

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
  int window_blocks = 0;  // 0: the SPEC schedule
  std::string window_mask = "uni", window_granularity = "block";
  int causal = 1, doc_mask = 1;
  uint64_t seed = 1337;
  std::string checkpoint_dir;  // empty: no checkpoints
  int checkpoint_every = 0;    // 0: only at the end (when checkpoint_dir is set)
  std::string resume;          // a checkpoint file to continue from
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
  if (name == "speedrun") {  // SPEC sections 3-4
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
  }
  return bad;
}

// ----------------------------------------------------------------------------------- optimiser
// SPEC section 4 over the model's parameter layout: Adam for embeddings, head and scalars,
// Muon for the block matrices (the same grouping as model/optimizer_reference.cpp).
struct Optimizer {
  float *m = nullptr, *v = nullptr, *buf = nullptr;
  int adam_steps = 0;
  model_ref::OptimizerHyper hp;
  layers::MuonScratch scratch;
  Optimizer(size_t n, size_t max_matrix, size_t max_square) : scratch(max_matrix, max_square) {
    for (float** p : {&m, &v, &buf}) {
      gpt::cuda_check(cudaMalloc(p, n * sizeof(float)), "optimizer state");
      gpt::cuda_check(cudaMemset(*p, 0, n * sizeof(float)), "optimizer state");
    }
  }
  ~Optimizer() {
    for (float* p : {m, v, buf}) cudaFree(p);
  }
  std::vector<float> download(const float* d, size_t n) const {
    std::vector<float> h(n);
    gpt::cuda_check(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), "optimizer state");
    return h;
  }
  void upload(float* d, const std::vector<float>& h) {
    gpt::cuda_check(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice), "optimizer state");
  }
  void step(gpt::Model& model, layers::Matmul& mm, int step, const model_ref::Schedule& sched) {
    adam_steps++;
    const float mult = (float)sched.lr_multiplier(step), mom = (float)sched.muon_momentum(step);
    for (const model_ref::Tensor& t : model.layout().tensors) {
      float* w = model.master() + t.offset;
      layers::bf16* w16 = model.weights() + t.offset;
      const float* g = model.grads() + t.offset;
      const model_ref::ParamGroup grp = model_ref::group_of(t);
      cudaError_t e;
      if (grp == model_ref::ParamGroup::kMatrix) {
        e = layers::muon_step(mm, scratch, w, w16, g, buf + t.offset, (int)t.rows, (int)t.cols, mult * (float)hp.lr_muon, mom);
      } else {
        const double lr = grp == model_ref::ParamGroup::kEmbed ? hp.lr_embed : grp == model_ref::ParamGroup::kHead ? hp.lr_head : hp.lr_scalar;
        e = layers::adam_step(w, w16, g, m + t.offset, v + t.offset, t.size(), mult * (float)lr, adam_steps, (float)hp.beta1,
                              (float)hp.beta2, (float)hp.adam_eps);
      }
      gpt::cuda_check(e, ("optimizer step on " + t.name).c_str());
    }
  }
};

// ----------------------------------------------------------------------------------- training
static std::string shell_line(const char* cmd) {
  std::string out;
  if (FILE* p = popen(cmd, "r")) {
    char b[256];
    if (std::fgets(b, sizeof(b), p)) out = b;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// The source's commit, or "unknown" where the tree is not a git checkout.
static std::string git_commit() {
  std::string c = shell_line("git rev-parse --short HEAD 2>/dev/null");
  return c.empty() ? "unknown" : c;
}

static int run_training(const Options& o) {
  // everything that can be checked without a GPU is checked first
  train::Checkpoint resume_from;
  if (!o.resume.empty()) {
    resume_from = train::read_checkpoint(o.resume);
    train::check_same_config(resume_from, fingerprint(o), o.resume);
  }
  if (!o.checkpoint_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.checkpoint_dir, ec);
    if (ec) throw std::runtime_error(o.checkpoint_dir + ": cannot create the checkpoint directory (--checkpoint-dir): " + ec.message());
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::fprintf(stderr, "train_gpt: error: no CUDA GPU found (training needs one; --check-data does not)\n");
    return 1;
  }
  // data first: a bad shard is reported before any GPU memory is taken
  data::TokenStream train_stream(shard::expand_pattern(o.train_data, "train"), o.seq_len, o.vocab_size, true);
  data::TokenStream val_stream(shard::expand_pattern(o.val_data, "val"), o.seq_len, o.vocab_size, false);
  const auto val_seqs = data::val_sequences(o.val_tokens, o.seq_len, 1, 0);
  if (val_seqs.empty()) throw CLI::ValidationError("--val-tokens", "must hold at least one sequence of --seq-len tokens");
  if (val_seqs.back() >= val_stream.sequences_per_pass())
    throw std::runtime_error("--val-tokens " + std::to_string(o.val_tokens) + " asks for more validation than " + o.val_data + " holds (" +
                             std::to_string(val_stream.sequences_per_pass() * o.seq_len) + " tokens)");

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
  Optimizer opt(model.layout().size(), max_matrix, max_square);
  layers::Matmul mm;
  data::TrainSchedule ts{o.seqs_per_step, 1, 0};
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
  auto save_checkpoint = [&](int steps_done) {
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

  cudaDeviceProp prop;
  gpt::cuda_check(cudaGetDeviceProperties(&prop, 0), "device properties");
  train::RunLog log(o.log_file, true);
  char cfgjson[1024];
  std::snprintf(cfgjson, sizeof(cfgjson),
                "{\"event\": \"config\", \"preset\": \"%s\", \"train_data\": \"%s\", \"val_data\": \"%s\", \"layers\": %d, \"width\": %d, "
                "\"heads\": %d, \"hidden\": %d, \"vocab\": %d, \"seq_len\": %d, \"seqs_per_step\": %d, \"steps\": %d, \"val_every\": %d, "
                "\"val_tokens\": %lld, \"window_blocks\": %d, \"window_mask\": \"%s\", \"window_granularity\": \"%s\", \"causal\": %d, "
                "\"doc_mask\": %d, \"seed\": %llu, \"world_size\": 1, \"gpu\": \"%s\", \"git_commit\": \"%s\"}",
                o.preset.c_str(), o.train_data.c_str(), o.val_data.c_str(), o.layers, o.width, o.heads, o.hidden, o.model_vocab, o.seq_len,
                o.seqs_per_step, o.steps, o.val_every, o.val_tokens, o.window_blocks, o.window_mask.c_str(), o.window_granularity.c_str(),
                o.causal, o.doc_mask, (unsigned long long)o.seed, prop.name, git_commit().c_str());
  log.config(cfgjson);
  log.note("train_gpt: " + std::string(prop.name) + ", " + std::to_string(model.layout().size()) + " parameters, " +
           std::to_string(o.steps) + " steps of " + std::to_string((long long)o.seq_len * o.seqs_per_step) + " tokens");

  std::vector<uint16_t> seq(o.seq_len + 1);
  std::vector<int> inputs(o.seq_len), targets(o.seq_len);
  auto load_seq = [&](data::TokenStream& s, uint64_t k) {
    s.sequence(k, seq.data());
    for (int i = 0; i < o.seq_len; i++) inputs[i] = seq[i], targets[i] = seq[i + 1];
  };
  auto now = [] { return std::chrono::steady_clock::now(); };
  double train_ms = 0;  // from the end of step 10, validation excluded
  const int micro = ts.micro_steps();
  if (start_step) log.note("train_gpt: resumed from " + o.resume + " at step " + std::to_string(start_step));
  for (int step = start_step; step <= o.steps; step++) {
    // the window's size is counted in blocks of 128 (fixed or scheduled); with token granularity
    // the same size is applied token by token: N blocks = 128 N tokens
    const int window_blocks = o.window_blocks ? o.window_blocks : sched.window_blocks(step);
    model.set_window(o.window_granularity == "token" ? window_blocks * 128 : window_blocks);
    if (step % o.val_every == 0 || step == o.steps) {
      double vl = 0;
      for (uint64_t k : val_seqs) {
        load_seq(val_stream, k);
        vl += model.forward(inputs, targets);
      }
      vl /= val_seqs.size();
      log.step(step, o.steps, train_ms, vl);
      if (!std::isfinite(vl))
        throw std::runtime_error("validation loss is " + std::to_string(vl) + " at step " + std::to_string(step) +
                                 "; last checkpoint: " + last_checkpoint);
    }
    if (step == o.steps) break;
    gpt::cuda_check(cudaDeviceSynchronize(), "step");
    const auto t0 = now();
    model.zero_grad();
    double tl = 0;
    for (int m = 0; m < micro; m++) {
      load_seq(train_stream, ts.sequence_index(step, m));
      tl += model.forward(inputs, targets, 1.f / ((float)o.seq_len * micro));
      model.backward();
    }
    tl /= micro;
    opt.step(model, mm, step, sched);
    gpt::cuda_check(cudaDeviceSynchronize(), "optimizer");
    const double ms = std::chrono::duration<double, std::milli>(now() - t0).count();
    if (step >= 10) train_ms += ms;  // steps 11, 12, ... (1-based) are timed
    if (!std::isfinite(tl))
      throw std::runtime_error("training loss is " + std::to_string(tl) + " at step " + std::to_string(step + 1) +
                               "; last checkpoint: " + last_checkpoint);
    log.step(step + 1, o.steps, train_ms, NAN, tl);
    if (!o.checkpoint_dir.empty() && ((o.checkpoint_every && (step + 1) % o.checkpoint_every == 0) || step + 1 == o.steps))
      save_checkpoint(step + 1);
  }
  size_t free_b, total;
  cudaMemGetInfo(&free_b, &total);
  log.note("train_gpt: done; GPU memory in use at the end " + std::to_string((total - free_b) >> 20) + " MiB; " +
           (o.steps > 10 ? std::to_string((long long)(o.seq_len * (double)o.seqs_per_step * (o.steps - 10) / (train_ms / 1e3))) : "-") +
           " tokens/s");
  return 0;
}

int main(int argc, char** argv) {
  Options o;
  // the preset sets the defaults first; flags given on the command line then override them
  for (int i = 1; i + 1 < argc; i++)
    if (std::string(argv[i]) == "--preset") o.preset = argv[i + 1];
  try {
    apply_preset(o, o.preset);
  } catch (const CLI::ValidationError& e) {
    std::fprintf(stderr, "train_gpt: %s\n", e.what());
    return 2;
  }
  CLI::App app{"train_gpt: GPT speedrun trainer (C++/CUDA)"};
  app.add_option("--preset", o.preset, "default (short run on GCIDE), tiny, speedrun (SPEC sections 3-4)")->capture_default_str();
  app.add_option("--train-data", o.train_data, "glob pattern of training shards")->capture_default_str();
  app.add_option("--val-data", o.val_data, "glob pattern of validation shards")->capture_default_str();
  app.add_option("--vocab-size", o.vocab_size, "token ids in the shards must be below this")->capture_default_str()->check(CLI::Range(1, 65536));
  app.add_flag("--check-data", o.check_data, "check every shard (header, size, token ids) and exit; needs no GPU");
  app.add_option("--log-file", o.log_file, "append the step lines here (and JSON lines beside it)");
  app.add_option("--steps", o.steps, "training steps")->check(CLI::Range(1, 1000000));
  app.add_option("--seq-len", o.seq_len, "tokens per sequence")->check(CLI::Range(1, 1 << 20));
  app.add_option("--seqs-per-step", o.seqs_per_step, "sequences per step (global batch)")->check(CLI::Range(1, 1024));
  app.add_option("--val-every", o.val_every, "validate every N steps (and at the end)")->check(CLI::Range(1, 1000000));
  app.add_option("--val-tokens", o.val_tokens, "validation tokens")->check(CLI::Range(1LL, 1LL << 40));
  app.add_option("--layers", o.layers, "transformer blocks (even)")->check(CLI::Range(2, 256));
  app.add_option("--width", o.width, "model width")->check(CLI::Range(8, 16384));
  app.add_option("--heads", o.heads, "attention heads (width / heads must be 64 or 128)")->check(CLI::Range(1, 256));
  app.add_option("--hidden", o.hidden, "MLP hidden width")->check(CLI::Range(8, 65536));
  app.add_option("--window-blocks", o.window_blocks, "fixed attention window in blocks of 128 tokens; 0: the SPEC schedule")->check(CLI::Range(0, 1 << 20));
  app.add_option("--window-mask", o.window_mask, "uni: q - kv < W; bi: |q - kv| < W")->check(CLI::IsMember({"uni", "bi"}))->capture_default_str();
  app.add_option("--window-granularity", o.window_granularity, "compare block indices (q/128 - k/128 < N) or tokens (q - k < 128 N)")->check(CLI::IsMember({"block", "token"}))->capture_default_str();
  app.add_option("--causal", o.causal, "1: keep k <= q")->check(CLI::Range(0, 1));
  app.add_option("--doc-mask", o.doc_mask, "1: attend within documents only")->check(CLI::Range(0, 1));
  app.add_option("--seed", o.seed, "initialisation seed");
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "write checkpoints here (every --checkpoint-every steps and at the end)");
  app.add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints (0: only at the end)")->check(CLI::NonNegativeNumber);
  app.add_option("--resume", o.resume, "continue from this checkpoint (same configuration only)");
  try {
    app.parse(argc, argv);
    if (o.layers % 2) throw CLI::ValidationError("--layers", "must be even (the U-net pairs layer i with layer L-1-i)");
    if (o.width % o.heads || (o.width / o.heads != 64 && o.width / o.heads != 128))
      throw CLI::ValidationError("--heads", "width / heads must be 64 or 128 (the attention kernel's head sizes)");
    if (o.width % 8 || o.hidden % 8) throw CLI::ValidationError("--width/--hidden", "must be multiples of 8");
    if (o.checkpoint_every && o.checkpoint_dir.empty()) throw CLI::ValidationError("--checkpoint-every", "needs --checkpoint-dir");
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;  // bad flags: exit code 2
  }
  if (o.check_data) {
    int bad = check_data(o);
    if (bad) std::fprintf(stderr, "check-data: %d problem(s) found\n", bad);
    else std::printf("check-data: all shards good\n");
    return bad ? 1 : 0;
  }
  try {
    return run_training(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: error: %s\n", e.what());
    return 1;
  }
}
