// The trainer's options: see options.h. Each flag is one row of table(): its name, its help, the
// field it sets with its checks, and its role, from which the command line, the fingerprint and
// the log's configuration are made. A new flag is one new row.
#include "train/options.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "common/cli.h"

namespace train {

namespace {

using Json = nlohmann::ordered_json;

enum class Role {
  kDefinesRun,  // in the fingerprint and the log: a checkpoint resumes only a run with the same value
  kDefinesRunIfSet,  // the same, but in the fingerprint only away from its default: options added
                     // later, so that earlier checkpoints (made without them) still resume
  kLogged,      // in the log only (paths, schedules of output, multi-GPU mechanics)
  kLocal,       // neither (modes of the binary, test hooks, --allow-train-on-val: the log names the shards it let through,
                //   --allow-target-leak: the log says whether the mask leaks targets)
};

struct Row {
  std::string name;                       // "--seq-len"; a fixed value that is not a flag has a bare name
  Role role;
  std::function<void(CLI::App&)> add;     // adds the flag to the command line (empty: not a flag)
  std::function<Json()> value;
  std::string key() const {               // "seq_len", as the fingerprint and the log name it
    std::string k = name.rfind("--", 0) == 0 ? name.substr(2) : name;
    for (char& c : k) c = c == '-' ? '_' : c;
    return k;
  }
};

template <typename T>
Row integer(const char* name, T& v, T lo, T hi, Role role, const char* help) {
  return {name, role, [name, &v, lo, hi, help](CLI::App& app) { cli::integer<T>(app, name, v, lo, hi, help)->capture_default_str(); },
          [&v] { return Json(v); }};
}
Row real(const char* name, double& v, double lo, double hi, Role role, const char* help) {
  return {name, role, [name, &v, lo, hi, help](CLI::App& app) { cli::real(app, name, v, lo, hi, help)->capture_default_str(); },
          [&v] { return Json(v); }};
}
Row text(const char* name, std::string& v, Role role, const char* help, std::vector<std::string> choices = {}) {
  return {name, role,
          [name, &v, help, choices](CLI::App& app) {
            CLI::Option* opt = app.add_option(name, v, help)->capture_default_str();
            if (!choices.empty()) opt->check(CLI::IsMember(choices));
          },
          [&v] { return Json(v); }};
}
Row flag(const char* name, bool& v, Role role, const char* help) {
  return {name, role, [name, &v, help](CLI::App& app) { app.add_flag(name, v, help); }, [&v] { return Json(v); }};
}
Row fixed(const char* key, int& v) { return {key, Role::kDefinesRun, nullptr, [&v] { return Json(v); }}; }

// Every option, once. The rows that define the run keep the fingerprint's order of earlier
// versions, so their checkpoints still resume.
std::vector<Row> table(Options& o) {
  const Role run = Role::kDefinesRun, log = Role::kLogged, local = Role::kLocal;
  return {
      text("--preset", o.preset, log, "default (short run on GCIDE), tiny, speedrun (the 2024-12-10 record: docs/model.md)"),
      text("--train-data", o.train_data, log, "glob pattern of training shards"),
      text("--val-data", o.val_data, log, "glob pattern of validation shards"),
      flag("--allow-train-on-val", o.allow_train_on_val, local,
           "train on shards that are validation shards too (the same pattern, or a shard of the same bytes): refused without it, "
           "since the validation loss would measure memory; the log notes the shards shared"),
      integer("--vocab-size", o.vocab_size, 1, 65536, log, "token ids in the shards must be below this"),
      flag("--check-data", o.check_data, local,
           "check every shard (header, size, token ids, manifest) and that no training shard is a validation shard, and exit; needs no GPU"),
      text("--log-file", o.log_file, log, "write the step lines here (and JSON lines beside it); must not exist yet"),
      integer("--layers", o.layers, 2, 256, run, "transformer blocks (even)"),
      integer("--width", o.width, 8, 16384, run, "model width"),
      integer("--heads", o.heads, 1, 256, run, "attention heads (width / heads must be 64 or 128)"),
      integer("--hidden", o.hidden, 8, 65536, run, "MLP hidden width"),
      fixed("vocab", o.model_vocab),
      integer("--seq-len", o.seq_len, 1, 1 << 20, run, "tokens per sequence"),
      integer("--seqs-per-step", o.seqs_per_step, 1, 1024, run, "sequences per step (global batch)"),
      integer("--steps", o.steps, 1, 1000000, run, "training steps"),
      integer("--window-blocks", o.window_blocks, 0, 1 << 20, run, "fixed attention window in blocks of 128 tokens; 0: the record's schedule"),
      text("--window-mask", o.window_mask, run, "uni: q - kv < W; bi: |q - kv| < W", {"uni", "bi"}),
      text("--window-granularity", o.window_granularity, run, "compare block indices (q/128 - k/128 < N) or tokens (q - k < 128 N)",
           {"block", "token"}),
      integer("--causal", o.causal, 0, 1, run, "1: keep k <= q"),
      integer("--doc-mask", o.doc_mask, 0, 1, run, "1: attend within documents only"),
      integer("--prefix-tokens", o.prefix_tokens, 0, 1 << 20, Role::kDefinesRunIfSet,
              "prefix-LM: the first P tokens of each document see each other both ways and are not predicted (0: off)"),
      integer("--prefix-attention", o.prefix_attention, 0, 1, Role::kDefinesRunIfSet,
              "0: keep causal attention but drop the same targets as --prefix-tokens (the baseline of a prefix-LM ablation)"),
      flag("--allow-target-leak", o.allow_target_leak, local,
           "run a mask that lets position t see position t + 1, whose token it is scored on predicting (--causal 0): refused "
           "without it, since the loss would reward copying; the log says 'leaks targets: yes'"),
      integer<uint64_t>("--seed", o.seed, 0, UINT64_MAX, run, "initialisation seed"),
      integer("--val-every", o.val_every, 1, 1000000, log, "validate every N steps (and at the end)"),
      integer("--val-tokens", o.val_tokens, 1LL, 1LL << 40, log, "validation tokens"),
      text("--checkpoint-dir", o.checkpoint_dir, log,
           "write checkpoints here (every --checkpoint-every steps and at the end); a new or empty folder, or the one --resume reads from"),
      integer("--checkpoint-every", o.checkpoint_every, 0, 1000000, log, "steps between checkpoints (0: only at the end)"),
      text("--resume", o.resume, log, "continue from this checkpoint (same configuration only)"),
      text("--grad-sync", o.grad_sync, log,
           "end (the gradients' exchange and the optimiser's update after the backward, in large collectives), embeddings (the "
           "head's and the value embeddings' during the backward, each started with the attention backward of the layer after "
           "its gradients became final, the rest after it) or overlap "
           "(each layer's during the backward, which on one host slows the backward more than it saves)",
           {"end", "embeddings", "overlap"}),
      text("--grad-exchange", o.grad_exchange, Role::kDefinesRunIfSet,
           "several GPUs: the gradients' type on the wire: fp32, or bf16 (half the bytes; bf16 sums change the numerics)", {"fp32", "bf16"}),
      text("--gather-wait", o.gather_wait, log,
           "several GPUs: layer (the step ends once the optimiser's update is done, and the next step's forward waits for each "
           "layer's gathered weights just before that layer, so that the last all-gathers run beside it) or step (every "
           "all-gather done before the step ends); the same numbers either way",
           {"layer", "step"}),
      text("--gather-engine", o.gather_engine, log,
           "several GPUs: copy-engines (the weights' all-gathers on the GPUs' copy engines, which hold no SMs while they run beside "
           "the forward; NCCL's kernels where the ranks span hosts) or kernels (NCCL's kernels); the same bits either way",
           {"copy-engines", "kernels"}),
      real("--timeout", o.timeout, 1.0, 86400.0, log, "several GPUs: seconds to wait for the other ranks before ending the job"),
      flag("--check-replicas", o.check_replicas, log, "several GPUs: compare weight checksums across ranks after every step"),
      flag("--balance-ranks", o.balance_ranks, log,
           "several GPUs: hand each step's sequences to the ranks so that their attention work (pairs kept inside documents) is even, "
           "instead of rank r taking the step's sequences r, N + r, ...; the same sequences a step, summed in another order"),
      integer("--profile", o.profile, 0, 1000000, local, "GPU time by category over this many timed steps, printed at the end"),
      text("--fault", o.fault, local, "tests only: RANK:STEP:crash|hang|exit makes that rank fail before that step"),
  };
}

void apply_preset(Options& o, const std::string& name) {
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

// Combinations no single flag's check can see.
void check_combinations(const Options& o, int world) {
  if (o.layers % 2) throw CLI::ValidationError("--layers", "must be even (the U-net pairs layer i with layer L-1-i)");
  if (o.width % o.heads || (o.width / o.heads != 64 && o.width / o.heads != 128))
    throw CLI::ValidationError("--heads", "width / heads must be 64 or 128 (the attention kernel's head sizes)");
  if (o.width % 8 || o.hidden % 8) throw CLI::ValidationError("--width/--hidden", "must be multiples of 8");
  if (o.prefix_tokens > 0 && !o.causal)
    throw CLI::ValidationError("--prefix-tokens", "needs --causal 1 (it relaxes the causal mask; without it every pair is kept already)");
  if (o.prefix_tokens >= o.seq_len)
    throw CLI::ValidationError("--prefix-tokens", std::to_string(o.prefix_tokens) + " must be below --seq-len " + std::to_string(o.seq_len) +
                                                      " (else no target of a sequence is left to predict)");
  if (!o.prefix_attention && o.prefix_tokens == 0)
    throw CLI::ValidationError("--prefix-attention", "0 needs --prefix-tokens P > 0 (it keeps the loss rule of a prefix without its attention)");
  if (o.train_data == o.val_data && !o.allow_train_on_val && !o.check_data)
    throw CLI::ValidationError("--train-data/--val-data", "both are '" + o.train_data + "': the run would validate on the data it trains "
                                                          "on; name other validation shards, or give --allow-train-on-val to do so on purpose");
  if (o.checkpoint_every && o.checkpoint_dir.empty()) throw CLI::ValidationError("--checkpoint-every", "needs --checkpoint-dir");
  if (o.check_data && (!o.resume.empty() || !o.checkpoint_dir.empty() || !o.log_file.empty()))
    throw CLI::ValidationError("--check-data", "only checks the shards: it does not go with --resume, --checkpoint-dir or --log-file");
  if (o.seqs_per_step % world) {
    std::string ok;
    for (int n = 1; n <= o.seqs_per_step; n++)
      if (o.seqs_per_step % n == 0) ok += (ok.empty() ? "" : ", ") + std::to_string(n);
    throw CLI::ValidationError("--seqs-per-step", "the global batch of " + std::to_string(o.seqs_per_step) + " sequences does not split over " +
                                                      std::to_string(world) + " GPUs; GPU counts that work: " + ok);
  }
  if (!o.fault.empty()) {
    int rank, step;
    char kind[16] = {0};
    if (std::sscanf(o.fault.c_str(), "%d:%d:%15s", &rank, &step, kind) != 3 ||
        (std::string(kind) != "crash" && std::string(kind) != "hang" && std::string(kind) != "exit"))
      throw CLI::ValidationError("--fault", "want RANK:STEP:crash|hang|exit, got '" + o.fault + "'");
  }
}

}  // namespace

int parse_options(int argc, char** argv, int world, int rank, Options* o, std::string* refusal) {
  // The preset sets the defaults first, then the flags override them: a first pass reads only
  // --preset (in any of CLI11's forms: --preset NAME, --preset=NAME), the second reads every flag.
  {
    CLI::App pre;
    pre.allow_extras();
    pre.set_help_flag();
    pre.add_option("--preset", o->preset);
    try {
      pre.parse(argc, argv);
    } catch (const CLI::ParseError&) {
      // the full parse below reports it
    }
  }
  CLI::App app{"train_gpt: GPT speedrun trainer (C++/CUDA)"};
  try {
    apply_preset(*o, o->preset);
    for (const Row& r : table(*o))
      if (r.add) r.add(app);
    app.parse(argc, argv);
    check_combinations(*o, world);
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    if (app.exit(e, out, err) == 0) {  // --help: its text, once
      if (rank == 0) std::fputs(out.str().c_str(), stdout);
      return 0;
    }
    *refusal = err.str();  // every rank's own: train/start_gate.h prints it
    return 2;
  }
  return -1;
}

std::string fingerprint(const Options& o) {
  Options copy = o, defaults;  // the table's rows refer to the fields of the Options they are made from
  std::string out;
  const std::vector<Row> rows = table(copy), default_rows = table(defaults);
  for (size_t i = 0; i < rows.size(); i++) {
    const Row& r = rows[i];
    if (r.role != Role::kDefinesRun && r.role != Role::kDefinesRunIfSet) continue;
    const Json v = r.value();
    if (r.role == Role::kDefinesRunIfSet && v == default_rows[i].value()) continue;
    out += (out.empty() ? "" : " ") + r.key() + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  }
  return out;
}

std::string config_json(const Options& o, const std::string& run_id, int world_size, const std::string& gpu, const std::string& commit,
                        const std::vector<std::pair<std::string, std::string>>& extra) {
  Options copy = o;
  Json j;
  j["event"] = "config";
  j["run_id"] = run_id;
  for (const Row& r : table(copy))
    if (r.role != Role::kLocal) j[r.key()] = r.value();
  j["world_size"] = world_size;
  j["gpu"] = gpu;
  j["git_commit"] = commit;
  for (const auto& [k, v] : extra) j[k] = v;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // bytes that are not UTF-8 become U+FFFD
}

}  // namespace train
