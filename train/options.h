// The trainer's options: the fields, and the one table (train/options.cpp) that defines each
// option once (its flag, its recipe key with its type and range, its role) and from which the
// command line, the recipe's loader and its refusals, the recipe keys' documentation
// (docs/recipes.md), the run's fingerprint (what a checkpoint must match to be resumed) and the
// log's configuration are all made. A run's settings are a recipe (recipes/NAME.toml, or
// --recipe FILE), then the flags over it.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"

namespace train {

// The field initial values are recipes/default.toml's (tests/test_recipes.cpp checks that they agree).
struct Options {
  std::string preset = "default";  // a shipped recipe by name (speedrun: the record's); "" with --recipe
  std::string recipe;              // --recipe FILE as given; "" with a shipped recipe
  bool print_recipe = false;       // print the resolved recipe (the recipe, then the flags) as TOML and exit
  bool print_schema = false;       // print the recipe keys with their neutral values as JSON and exit
  std::string train_data = "data/gcide/gcide_train_*.bin";
  std::string val_data = "data/gcide/gcide_val_*.bin";
  std::string log_file;
  int vocab_size = 50257;  // token ids in the data must be below this (GPT-2's vocabulary)
  bool check_data = false;
  bool allow_train_on_val = false;  // train on shards that are validation shards too, on purpose (a memorisation check)
  bool allow_target_leak = false;   // run a mask that lets a prediction see its own target, on purpose (model/target_leak.h)
  // model and run (presets fill these; flags override)
  int model_vocab = 50304;  // the embedding's and the head's rows: GPT-2's vocabulary padded to a multiple of 128
  int layers = 4, width = 256, heads = 2, hidden = 1024;
  int seq_len = 8192, seqs_per_step = 8, steps = 300, val_every = 50;
  long long val_tokens = 8 * 8192;
  int window_blocks = 0;  // 0: the record's schedule
  std::string window_mask = "uni", window_granularity = "block";
  int causal = 1, doc_mask = 1;
  int prefix_tokens = 0;     // prefix-LM: the first P tokens of each document are not predicted and see each other; 0: off
  int prefix_attention = 1;  // 0: keep the causal attention (the baseline scored on the same targets)
  uint64_t seed = 1337;
  // the optimiser (recipe keys only, no flags; model::OptimizerHyper, model::Schedule)
  double lr_embed = 0.6, lr_head = 0.008, lr_scalar = 0.04;  // Adam's groups: embeddings, head, scalars
  double adam_beta1 = 0.8, adam_beta2 = 0.95, adam_eps = 1e-8;
  double lr_muon = 0.05, muon_momentum_start = 0.85, muon_momentum_end = 0.95;
  // the schedules' step counts are of a run of schedule_steps steps, and scale with --steps
  int schedule_steps = 1480, lr_cooldown_steps = 600, momentum_warmup_steps = 300;
  int window_start = 64, window_end = 1792;  // the attention window's schedule, in tokens (when window_blocks is 0)
  // The SparseAttnGate record's pieces (docs/recipes.md, its recipe's section): each a recipe key
  // whose initial value here is its neutral one, the speedrun preset's model.
  int value_embeds = 0;                         // value-embedding tables; 0: layers / 2
  std::string value_embed_layers = "mirrored";  // mirrored (layer i >= L - N: table L - 1 - i) or repeated (i - (L - N))
  std::string skip_attention = "none";          // "none", or the layers without attention ("7", "3,7")
  double init_bound = 1.0;                      // Wq, Wk, Wv, Wfc uniform in +-init_bound / sqrt(fan_in)
  std::string logit_softcap = "tanh";           // tanh: 30 tanh(z / 30); sigmoid: 30 sigmoid(z / 7.5)
  int head_fp8 = 0;                             // 1: the head's training products in FP8 with the scales below
  double head_fp8_x_scale = 1.0, head_fp8_w_scale = 1.0, head_fp8_grad_scale = 1.0;
  double attn_scale = 0;                        // 0: 1 / sqrt(head_dim)
  int attn_gate_dims = 0;                       // 0: no attention gate
  std::string rotary = "full";                  // full, half-truncated
  double rotary_base = 10000;
  std::string long_window_layers = "all";       // "all", or the layers with the whole window (the others: half)
  int align_to_bos = 0;                         // 1: each training sequence starts at a BOS token
  std::string loss_reduction = "mean";          // mean (over the step's tokens) or sequence_sum
  std::string adam_eps_form = "torch";          // torch: m^/(sqrt(v^) + eps); scaled: the record's DistAdam
  int muon_fan_scale = 1;                       // 1: Muon's lr times sqrt(max(1, fan_out / fan_in)); 0: times 1
  double lr_cooldown_frac = 0, lr_floor = 0;    // model::Schedule's cooldown_frac and lr_floor
  std::string window_rule = "nearest";          // nearest (+64, floor) or ceil (model::Schedule)
  int val_seq_len = 0;                          // validation sequences' length; 0: seq_len
  std::string checkpoint_dir;  // empty: no checkpoints
  int checkpoint_every = 0;    // 0: only at the end (when checkpoint_dir is set)
  std::string resume;          // a checkpoint file to continue from
  // several GPUs
  std::string grad_sync = "end";  // end: the exchange and the update after the backward; embeddings: the head's and value
                                  // embeddings' during it, each beside an attention backward; overlap: each layer's during it
  std::string grad_exchange = "fp32";  // the gradients' type on the wire: fp32 (the sums are exact to fp32), bf16
  std::string gather_wait = "layer";  // layer: the next step's forward waits for each layer's gathered weights there; step: all at the step's end
  std::string gather_engine = "copy-engines";  // the weights' all-gathers: copy-engines (no SMs held) or kernels
  double timeout = 300;               // seconds a rank waits for the others before ending the job
  bool check_replicas = false;        // compare weight checksums across ranks after every step
  bool balance_ranks = false;         // hand each step's sequences to the ranks by their attention work
  std::string fault;                  // tests: RANK:STEP:crash|hang|exit
  int profile = 0;                    // > 0: per-category GPU time over the timed steps
};

// Parses the command line into *o: the recipe's values first (--recipe FILE, or the shipped
// recipe --preset names), then the flags. Returns -1 to go on, or the exit code: 0 for --help
// and --print-recipe / --print-schema (printed on rank 0), 2 for a bad flag, recipe or combination, with the
// message in *refusal, printed by no one here (every rank parses its own
// flags; train/start_gate.h gathers the ranks' refusals). world is the number of ranks, which
// the global batch must split over.
int parse_options(int argc, char** argv, int world, int rank, Options* o, std::string* refusal);

// The optimiser's hyper-parameters and the schedules of a run of these options.
model::OptimizerHyper optimizer_hyper(const Options& o);
model::Schedule schedule(const Options& o);

// The model's pieces of the SparseAttnGate recipe's keys, set in *cfg (the fields the Config
// declares after its mask; the shape and the mask are the caller's to set). The keys have been
// checked: every layer a list names exists.
void set_model_keys(const Options& o, model::Config* cfg);

// The recipe keys whose values the GPU trainer does not implement, each as "key = value"
// (empty when it implements every value given). parse_options refuses a run (not --print-recipe,
// --print-schema, --help or --check-data) that names any, before any GPU work.
std::vector<std::string> unimplemented_on_gpu(const Options& o);

// The resolved recipe (every recipe key's value in o) as a TOML recipe that --recipe reads back.
std::string recipe_toml(const Options& o);
// The recipe keys (type, range, field, flag, help) as a Markdown table: docs/recipes.md's.
std::string recipe_keys_markdown();
// The recipe keys as a JSON array, one object a key: "key" (optimizer.muon.lr), "type"
// (integer, number, string), "range" (as the docs write it), "flag" (--doc-mask, or null), "log"
// (the log's and fingerprint's name), "defines_run" (false for the data's and validation's keys),
// "neutral" (the value that turns the key's mechanism off: a number or a string, {"same_as": KEY}
// for another key's resolved value, or null where it has none) and "off" (what the neutral value
// turns off, or null). --print-schema prints it; scripts/ab_run.py --remove reads it. Throws
// std::logic_error naming the key if a neutral value is not one its key takes.
std::string schema_json();
// The shipped recipes' names (recipes/*.toml, built into the binary), and one's text ("" if none).
std::vector<std::string> shipped_recipes();
std::string shipped_recipe(const std::string& name);

// The flags that define the run's computation, as "name=value ..." (data paths are not in it:
// their contents are the user's to keep).
std::string fingerprint(const Options& o);

// Every option as resolved (the preset's values, then the flags'), as (flag, value) in the
// table's order: what every rank of a job must be given alike (train/start_gate.h compares it).
// --log-file alone is left out: rank 0 alone writes the log.
std::vector<std::pair<std::string, std::string>> resolved(const Options& o);

// The log's configuration event: every flag, then the facts of this run.
std::string config_json(const Options& o, const std::string& run_id, int world_size, const std::string& gpu, const std::string& commit,
                        const std::vector<std::pair<std::string, std::string>>& extra = {});

}  // namespace train
