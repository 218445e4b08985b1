// The trainer's options: see options.h. Each option is one row of table(): its name, its help,
// the field it sets with its checks, its key in a recipe with its type and range, and its role,
// from which the command line, the recipe's loader and refusals, the recipe keys' docs, the
// fingerprint and the log's configuration are made. A new flag or recipe key is one new row.
#include "train/options.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <toml++/toml.h>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/cli.h"
#include "train/shipped_recipes.h"

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
  std::string name;                       // "--seq-len"; an option that is not a flag has a bare name ("lr_muon")
  Role role;
  std::function<void(CLI::App&)> add;     // adds the flag to the command line (empty: not a flag)
  std::function<Json()> value;
  std::string help;
  // in a recipe (empty recipe: a flag only)
  std::string recipe;                     // "batch.seq_len": the table and the key
  std::string type, range;                // "integer", "1 to 1048576": what the docs and the refusals say it takes
  std::function<std::string(const toml::node&)> load;  // sets the field from a recipe's value; returns why it cannot ("" when set)
  std::function<std::string()> toml;      // the field's value as TOML
  // a removal campaign (scripts/ab_run.py --remove KEY): the value that turns the key's mechanism
  // off, as TOML ("0"), or "=other.key" for the resolved value of another key; empty: none
  std::string neutral, off;               // the value, and what it turns off
  std::string key() const {               // "seq_len", as the fingerprint and the log name it
    std::string k = name.rfind("--", 0) == 0 ? name.substr(2) : name;
    for (char& c : k) c = c == '-' ? '_' : c;
    return k;
  }
  bool is_flag() const { return name.rfind("--", 0) == 0; }
  Row in(const char* recipe_key) const {  // the same row, a key of recipes too
    Row r = *this;
    r.recipe = recipe_key;
    return r;
  }
  Row removable(const char* value, const char* what) const {  // the same row, with a neutral value
    Row r = *this;
    r.neutral = value, r.off = what;
    return r;
  }
};

// "an integer", "a string", ...: a recipe value's type, as a refusal names it.
std::string type_of(const toml::node& n) {
  std::ostringstream s;
  s << n.type();
  const std::string t = s.str();
  return (std::string("aeiou").find(t[0]) != std::string::npos ? "an " : "a ") + t;
}

// A double as the shortest decimal that reads back to it, as a TOML float ("0.008", "1e-08", "1.0").
std::string toml_real(double v) {
  char b[64];
  const auto r = std::to_chars(b, b + sizeof(b), v);
  std::string s(b, r.ptr);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // (n: inf, nan, which no range lets through)
  return s;
}

template <typename T>
Row integer(const char* name, T& v, T lo, T hi, Role role, const char* help) {
  const std::string range = std::to_string(lo) + " to " + std::to_string(hi);
  Row r{name, role, nullptr, [&v] { return Json(v); }, help, "", "integer", range, nullptr, [&v] { return std::to_string(v); }, "", ""};
  if (r.is_flag()) r.add = [name, &v, lo, hi, help](CLI::App& app) { cli::integer<T>(app, name, v, lo, hi, help)->capture_default_str(); };
  r.load = [&v, lo, hi, range](const toml::node& n) -> std::string {
    if constexpr (std::is_signed<T>::value) {
      const auto* x = n.as_integer();
      if (!x) return "want an integer from " + range + ", got " + type_of(n);
      if (x->get() < (int64_t)lo || x->get() > (int64_t)hi) return std::to_string(x->get()) + " is out of range: want an integer from " + range;
      v = (T)x->get();
      return "";
    } else {
      return "not a recipe key";  // (unsigned options are flags only: TOML's integers are signed)
    }
  };
  return r;
}
Row real(const char* name, double& v, double lo, double hi, Role role, const char* help) {
  const std::string range = toml_real(lo) + " to " + toml_real(hi);
  Row r{name, role, nullptr, [&v] { return Json(v); }, help, "", "number", range, nullptr, [&v] { return toml_real(v); }, "", ""};
  if (r.is_flag()) r.add = [name, &v, lo, hi, help](CLI::App& app) { cli::real(app, name, v, lo, hi, help)->capture_default_str(); };
  r.load = [&v, lo, hi, range](const toml::node& n) -> std::string {
    double x;
    if (const auto* f = n.as_floating_point()) x = f->get();
    else if (const auto* i = n.as_integer()) x = (double)i->get();  // (1 for 1.0)
    else return "want a number from " + range + ", got " + type_of(n);
    if (!std::isfinite(x) || x < lo || x > hi) return toml_real(x) + " is out of range: want a number from " + range;
    v = x;
    return "";
  };
  return r;
}
// A text flag given an empty value ('') is refused: for a path it names no file, and a flag whose
// empty default means "none" (--resume, --log-file, --checkpoint-dir) would otherwise be turned
// off without a word by a variable that expanded to nothing.
Row text(const char* name, std::string& v, Role role, const char* help, std::vector<std::string> choices = {}) {
  std::string range;
  for (const auto& c : choices) range += (range.empty() ? "" : ", ") + c;
  Row r{name, role, nullptr, [&v] { return Json(v); }, help, "", "string", range.empty() ? "any" : range, nullptr, [&v] {
          std::ostringstream s;
          s << toml::value<std::string>(v);
          return s.str();
        }, "", ""};
  if (r.is_flag())
    r.add = [name, &v, help, choices](CLI::App& app) {
      CLI::Option* opt = app.add_option(name, v, help)->capture_default_str();
      opt->check(CLI::Validator(
          [](std::string& value) { return value.empty() ? std::string("an empty value names nothing; leave the flag out instead") : std::string(); },
          "", "not empty"));
      if (!choices.empty()) opt->check(CLI::IsMember(choices));
    };
  r.load = [&v, choices, range](const toml::node& n) -> std::string {
    const auto* x = n.as_string();
    if (!x) return "want a string" + (choices.empty() ? std::string() : " (" + range + ")") + ", got " + type_of(n);
    // as a flag's empty value is refused, so is a recipe's; a NUL (TOML's \u0000) would end the
    // path or name where the C library reads it, another value than the one written
    if (x->get().empty()) return "an empty string names nothing";
    if (x->get().find('\0') != std::string::npos) return "holds a NUL character (\\u0000), which no path or name holds";
    const std::string shown = x->get().size() > 60 ? x->get().substr(0, 57) + "..." : x->get();
    if (!choices.empty() && std::find(choices.begin(), choices.end(), x->get()) == choices.end())
      return "'" + shown + "' is not one of " + range;
    v = x->get();
    return "";
  };
  return r;
}
Row flag(const char* name, bool& v, Role role, const char* help) {
  return {name, role, [name, &v, help](CLI::App& app) { app.add_flag(name, v, help); }, [&v] { return Json(v); }, help, "", "", "", nullptr, nullptr, "", ""};
}

// The layers a layer-list key names: `all_word` ("none", "all") for none listed, else layer
// indices separated by commas ("7", "0,4,7,11"), each once. Returns why the text is not such a
// list ("" when it is); the indices go to *out (empty for all_word).
std::string layer_list(const std::string& text, const std::string& all_word, std::vector<int>* out) {
  out->clear();
  if (text == all_word) return "";
  const std::string want = "want \"" + all_word + "\" or layer indices separated by commas (\"7\", \"0,4,7,11\")";
  size_t at = 0;
  while (true) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    if (item.empty() || item.size() > 6 || item.find_first_not_of("0123456789") != std::string::npos) return want + ", got '" + text + "'";
    const int layer = std::stoi(item);
    if (std::find(out->begin(), out->end(), layer) != out->end()) return "layer " + item + " is named twice in '" + text + "'";
    out->push_back(layer);
    if (end == text.size()) return "";
    at = end + 1;
  }
}
Row layers_row(const char* name, std::string& v, const std::string& all_word, Role role, const char* help) {
  Row r = text(name, v, role, help);
  r.range = all_word + ", or layer indices (\"7\", \"0,4,7,11\")";
  r.load = [&v, all_word](const toml::node& n) -> std::string {
    const auto* x = n.as_string();
    if (!x) return "want a string (\"" + all_word + "\" or layer indices such as \"0,4,7,11\"), got " + type_of(n);
    std::vector<int> layers;
    const std::string why = layer_list(x->get(), all_word, &layers);
    if (!why.empty()) return why;
    v = x->get();
    return "";
  };
  return r;
}

// Every option, once. The rows that define the run keep the fingerprint's order of earlier
// versions, so their checkpoints still resume.
std::vector<Row> table(Options& o) {
  const Role run = Role::kDefinesRun, log = Role::kLogged, local = Role::kLocal;
  return {
      text("--preset", o.preset, log,
           "a shipped recipe (recipes/NAME.toml, built into the binary): default (a short run on GCIDE), tiny, 2024-12-10 "
           "(the speedrun record: docs/model.md), speedrun (the same), 2025-08-23 (a later record, whose model the GPU trainer "
           "does not compute: docs/recipes.md); the flags override its values"),
      text("--recipe", o.recipe, log, "a recipe file (TOML: docs/recipes.md) instead of --preset; the flags override its values"),
      flag("--print-recipe", o.print_recipe, local, "print the resolved recipe (the recipe, then the flags) as TOML and exit; needs no GPU"),
      flag("--print-schema", o.print_schema, local,
           "print the recipe keys (key, type, range, flag, log name, whether it defines the run, neutral value, what that "
           "turns off) as JSON and exit; needs no GPU (scripts/ab_run.py --remove reads it)"),
      text("--train-data", o.train_data, log, "glob pattern of training shards").in("data.train"),
      text("--val-data", o.val_data, log, "glob pattern of validation shards").in("data.val"),
      flag("--allow-train-on-val", o.allow_train_on_val, local,
           "train on shards that are validation shards too (the same pattern, or a shard of the same bytes): refused without it, "
           "since the validation loss would measure memory; the log notes the shards shared"),
      integer("--vocab-size", o.vocab_size, 1, 65536, log, "token ids in the shards must be below this").in("data.vocab_size"),
      flag("--check-data", o.check_data, local,
           "check every shard (header, size, token ids, manifest) and that no training shard is a validation shard, and exit; needs no GPU"),
      text("--log-file", o.log_file, log, "write the step lines here (and JSON lines beside it); must not exist yet"),
      integer("--layers", o.layers, 2, 256, run, "transformer blocks (even)").in("model.layers"),
      integer("--width", o.width, 8, 16384, run, "model width").in("model.width"),
      integer("--heads", o.heads, 1, 256, run, "attention heads (width / heads must be 64 or 128)").in("model.heads"),
      integer("--hidden", o.hidden, 8, 65536, run, "MLP hidden width").in("model.hidden"),
      integer("vocab", o.model_vocab, 1, 1 << 20, run,
              "the embedding's and the head's rows (at least data.vocab_size; GPT-2's vocabulary padded to a multiple of 128)")
          .in("model.vocab"),
      integer("--seq-len", o.seq_len, 1, 1 << 20, run, "tokens per sequence").in("batch.seq_len"),
      integer("--seqs-per-step", o.seqs_per_step, 1, 1024, run, "sequences per step (global batch)").in("batch.seqs_per_step"),
      integer("--steps", o.steps, 1, 1000000, run, "training steps").in("run.steps"),
      integer("--window-blocks", o.window_blocks, 0, 1 << 20, run, "fixed attention window in blocks of 128 tokens; 0: the schedule's")
          .in("attention.window_blocks"),
      text("--window-mask", o.window_mask, run, "uni: q - kv < W; bi: |q - kv| < W", {"uni", "bi"}).in("attention.window_mask"),
      text("--window-granularity", o.window_granularity, run, "compare block indices (q/128 - k/128 < N) or tokens (q - k < 128 N)",
           {"block", "token"})
          .in("attention.window_granularity"),
      integer("--causal", o.causal, 0, 1, run, "1: keep k <= q").in("attention.causal"),
      integer("--doc-mask", o.doc_mask, 0, 1, run, "1: attend within documents only")
          .in("attention.doc_mask")
          .removable("0", "the documents' mask: attention crosses documents within the window"),
      integer("--prefix-tokens", o.prefix_tokens, 0, 1 << 20, Role::kDefinesRunIfSet,
              "prefix-LM: the first P tokens of each document see each other both ways and are not predicted (0: off)")
          .in("attention.prefix_tokens")
          .removable("0", "the prefix-LM: causal attention throughout, every target predicted"),
      integer("--prefix-attention", o.prefix_attention, 0, 1, Role::kDefinesRunIfSet,
              "0: keep causal attention but drop the same targets as --prefix-tokens (the baseline of a prefix-LM ablation)")
          .in("attention.prefix_attention"),
      flag("--allow-target-leak", o.allow_target_leak, local,
           "run a mask that lets position t see position t + 1, whose token it is scored on predicting (--causal 0): refused "
           "without it, since the loss would reward copying; the log says 'leaks targets: yes'"),
      integer<uint64_t>("--seed", o.seed, 0, UINT64_MAX, run, "initialisation seed"),
      // the optimiser and its schedules: recipe keys, no flags (model::OptimizerHyper, model::Schedule)
      real("lr_embed", o.lr_embed, 0.0, 100.0, Role::kDefinesRunIfSet, "Adam's learning rate of the token and value embeddings")
          .in("optimizer.adam.lr_embed"),
      real("lr_head", o.lr_head, 0.0, 100.0, Role::kDefinesRunIfSet, "Adam's learning rate of the head").in("optimizer.adam.lr_head"),
      real("lr_scalar", o.lr_scalar, 0.0, 100.0, Role::kDefinesRunIfSet, "Adam's learning rate of the scalars (lambdas, skip weights)")
          .in("optimizer.adam.lr_scalar"),
      real("adam_beta1", o.adam_beta1, 0.0, 0.9999, Role::kDefinesRunIfSet, "Adam's first-moment decay").in("optimizer.adam.beta1"),
      real("adam_beta2", o.adam_beta2, 0.0, 0.9999, Role::kDefinesRunIfSet, "Adam's second-moment decay").in("optimizer.adam.beta2"),
      real("adam_eps", o.adam_eps, 1e-30, 1.0, Role::kDefinesRunIfSet, "Adam's epsilon").in("optimizer.adam.eps"),
      real("lr_muon", o.lr_muon, 0.0, 100.0, Role::kDefinesRunIfSet,
           "Muon's learning rate of the block matrices (times sqrt(max(1, cols / rows)))")
          .in("optimizer.muon.lr"),
      real("muon_momentum_start", o.muon_momentum_start, 0.0, 1.0, Role::kDefinesRunIfSet, "Muon's momentum at the first step")
          .in("optimizer.muon.momentum_start")
          .removable("=optimizer.muon.momentum_end", "Muon's momentum warm-up: momentum_end from the first step"),
      real("muon_momentum_end", o.muon_momentum_end, 0.0, 1.0, Role::kDefinesRunIfSet,
           "Muon's momentum once schedule.momentum_warmup is over (linear in between)")
          .in("optimizer.muon.momentum_end"),
      integer("schedule_steps", o.schedule_steps, 1, 1000000, Role::kDefinesRunIfSet,
              "the schedule's step counts are of a run this long: a run of S steps scales them by S / reference_steps")
          .in("schedule.reference_steps"),
      integer("lr_cooldown_steps", o.lr_cooldown_steps, 1, 1000000, Role::kDefinesRunIfSet,
              "the learning rates fall linearly to 0 over the run's last this many steps (scaled)")
          .in("schedule.lr_cooldown")
          .removable("1", "the learning-rate cooldown: multiplier 1 at every step (in a run of up to 1.5 reference_steps; a "
                          "longer one keeps round(steps / reference_steps) steps of it)"),
      integer("momentum_warmup_steps", o.momentum_warmup_steps, 1, 1000000, Role::kDefinesRunIfSet,
              "Muon's momentum goes from momentum_start to momentum_end over the run's first this many steps (scaled)")
          .in("schedule.momentum_warmup"),
      integer("window_start", o.window_start, 0, 1 << 20, Role::kDefinesRunIfSet,
              "the attention window at the first step, in tokens (to blocks of 128 by schedule.window_rule; 64 or more with its "
              "nearest; attention.window_blocks 0)")
          .in("schedule.window_start")
          .removable("=schedule.window_end", "the window's warm-up: window_end's window from the first step"),
      integer("window_end", o.window_end, 64, 1 << 20, Role::kDefinesRunIfSet,
              "the attention window at the end, in tokens (linear in between)")
          .in("schedule.window_end"),
      // the SparseAttnGate record's pieces (docs/recipes.md, its recipe's section): each neutral
      // value is the speedrun preset's model, so that removing a key puts that piece back as it was
      integer("value_embeds", o.value_embeds, 0, 128, Role::kDefinesRunIfSet,
              "value-embedding tables N, at most layers / 2 (0: layers / 2): layers i < N use table i, layers i >= L - N one "
              "as model.value_embed_layers says, the layers between none (v = a0 v)")
          .in("model.value_embeds")
          .removable("0", "the value embeddings' fewer tables: one for each layer (layers / 2 tables)"),
      text("value_embed_layers", o.value_embed_layers, Role::kDefinesRunIfSet,
           "mirrored: layer i >= L - N uses table L - 1 - i (..., 1, 0); repeated: table i - (L - N) (0, 1, ...)", {"mirrored", "repeated"})
          .in("model.value_embed_layers")
          .removable("\"mirrored\"", "the value tables' repeated order: the last layers use them mirrored"),
      layers_row("skip_attention", o.skip_attention, "none", Role::kDefinesRunIfSet,
                 "the layers without attention: their block is x = l0 x + l1 x0, then the MLP alone")
          .in("model.skip_attention")
          .removable("\"none\"", "the layers without attention: every layer has attention"),
      real("init_bound", o.init_bound, 0.0, 100.0, Role::kDefinesRunIfSet,
           "Wq, Wk, Wv and Wfc start uniform in +-init_bound / sqrt(fan_in)")
          .in("model.init_bound")
          .removable("1.0", "the narrower initialisation: +-1 / sqrt(fan_in)"),
      text("logit_softcap", o.logit_softcap, Role::kDefinesRunIfSet,
           "the logits of the head's output z: tanh: 30 tanh(z / 30); sigmoid: 30 sigmoid(z / 7.5)", {"tanh", "sigmoid"})
          .in("model.logit_softcap")
          .removable("\"tanh\"", "the sigmoid logits: 30 tanh(z / 30)"),
      integer("head_fp8", o.head_fp8, 0, 1, Role::kDefinesRunIfSet,
              "1: the head's training products in FP8 (x / x_scale and W / w_scale in e4m3, the logits' gradient / grad_scale in "
              "e5m2); validation in bf16")
          .in("model.head_fp8")
          .removable("0", "the head's FP8 products: bf16"),
      real("head_fp8_x_scale", o.head_fp8_x_scale, 1e-30, 1e30, Role::kDefinesRunIfSet,
           "the head's input is divided by this before e4m3 (head_fp8 1)")
          .in("model.head_fp8_x_scale"),
      real("head_fp8_w_scale", o.head_fp8_w_scale, 1e-30, 1e30, Role::kDefinesRunIfSet,
           "the head's weight is divided by this before e4m3 (head_fp8 1)")
          .in("model.head_fp8_w_scale"),
      real("head_fp8_grad_scale", o.head_fp8_grad_scale, 1e-30, 1e30, Role::kDefinesRunIfSet,
           "the logits' gradient is divided by this before e5m2 (head_fp8 1)")
          .in("model.head_fp8_grad_scale"),
      real("attn_scale", o.attn_scale, 0.0, 100.0, Role::kDefinesRunIfSet, "the attention logits' scale (0: 1 / sqrt(head size))")
          .in("attention.scale")
          .removable("0.0", "the fixed attention scale: 1 / sqrt(head size)"),
      integer("attn_gate_dims", o.attn_gate_dims, 0, 16384, Role::kDefinesRunIfSet,
              "attention gate: each head's output times sigmoid(W x[:G]) over the first G dims of the attention's normed input, W "
              "(heads x G) a Muon matrix starting at zero (0: no gate)")
          .in("attention.gate_dims")
          .removable("0", "the attention gate"),
      text("rotary", o.rotary, Role::kDefinesRunIfSet,
           "full: D/2 frequencies base^(-j/(D/2)); half-truncated: D/4 frequencies base^(-j/(D/4 - 1)) and D/4 dim pairs not rotated",
           {"full", "half-truncated"})
          .in("attention.rotary")
          .removable("\"full\"", "the rotary's truncation: every dim pair rotated, frequencies base^(-j/(D/2))"),
      real("rotary_base", o.rotary_base, 1.0, 1e9, Role::kDefinesRunIfSet, "the rotary frequencies' base")
          .in("attention.rotary_base")
          .removable("10000.0", "the rotary's lower base: 10000"),
      layers_row("long_window_layers", o.long_window_layers, "all", Role::kDefinesRunIfSet,
                 "the layers with the whole window; the others' window is floor(N / 2) of its N blocks (or tokens), at least 1")
          .in("attention.long_window_layers")
          .removable("\"all\"", "the short windows: every layer the whole window"),
      integer("align_to_bos", o.align_to_bos, 0, 1, Role::kDefinesRunIfSet,
              "1: each training sequence starts at a BOS token and ends before the first BOS seq_len or more tokens on (the rest of "
              "that stretch skipped)")
          .in("batch.align_to_bos")
          .removable("0", "the BOS-aligned sequences: the training stream cut every seq_len tokens"),
      text("loss_reduction", o.loss_reduction, Role::kDefinesRunIfSet,
           "the loss the gradients are of: mean (over the step's tokens) or sequence_sum (each sequence's summed loss, averaged over the "
           "step's sequences: seq_len times the mean's)",
           {"mean", "sequence_sum"})
          .in("batch.loss_reduction")
          .removable("\"mean\"", "the summed loss: the gradient of the mean over the step's tokens"),
      text("adam_eps_form", o.adam_eps_form, Role::kDefinesRunIfSet,
           "torch: w -= lr (m / bc1) / (sqrt(v / bc2) + eps); scaled: w -= lr sqrt(bc2) / bc1 m / (sqrt(v) + eps)", {"torch", "scaled"})
          .in("optimizer.adam.eps_form")
          .removable("\"torch\"", "Adam's eps outside the bias correction: torch.optim.Adam's form"),
      integer("muon_fan_scale", o.muon_fan_scale, 0, 1, Role::kDefinesRunIfSet,
              "1: Muon's learning rate times sqrt(max(1, fan_out / fan_in)) (2 for Wfc at hidden = 4 width); 0: times 1")
          .in("optimizer.muon.fan_scale")
          .removable("1", "Muon's equal learning rates: Wfc's times 2 (sqrt(fan_out / fan_in))"),
      real("lr_cooldown_frac", o.lr_cooldown_frac, 0.0, 1.0, Role::kDefinesRunIfSet,
           "F > 0: the lr multiplier is 1 while x = step / steps < 1 - F, then w + (1 - w) lr_floor with w = (1 - x) / F "
           "(schedule.lr_cooldown unused); 0: lr_cooldown's steps")
          .in("schedule.lr_cooldown_frac")
          .removable("0.0", "the cooldown as a fraction of the run: schedule.lr_cooldown's steps"),
      real("lr_floor", o.lr_floor, 0.0, 1.0, Role::kDefinesRunIfSet,
           "the lr multiplier falls to this at the end of the cooldown (w + (1 - w) lr_floor, w from 1 to 0)")
          .in("schedule.lr_floor")
          .removable("0.0", "the learning rate's floor: the cooldown ends at 0"),
      text("window_rule", o.window_rule, Role::kDefinesRunIfSet,
           "the window in blocks from W = (1 - f) window_start + f window_end tokens, f = step / steps: nearest: floor((W + 64) / 128); "
           "ceil: max(1, ceil(W / 128))",
           {"nearest", "ceil"})
          .in("schedule.window_rule"),
      integer("--val-every", o.val_every, 1, 1000000, log, "validate every N steps (and at the end)").in("validation.every"),
      integer("--val-tokens", o.val_tokens, 1LL, 1LL << 40, log, "validation tokens").in("validation.tokens"),
      integer("val_seq_len", o.val_seq_len, 0, 1 << 20, log,
              "validation sequences' length (consecutive, not aligned to BOS; 0: batch.seq_len)")
          .in("validation.seq_len"),
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

// The shipped recipes' names, and --preset's name as the recipe it names ("" if none).
std::string shipped_name(const std::string& preset) {
  const std::string name = preset == "speedrun" ? "2024-12-10" : preset;  // the record's date, by its old name
  for (int i = 0; i < kShippedRecipeCount; i++)
    if (name == kShippedRecipes[i].name) return name;
  return "";
}

constexpr size_t kMaxRecipeBytes = 1 << 20;  // a recipe file is a few KB

// "FILE:LINE:COLUMN" of a recipe's node (or of the file alone, where it has no position).
std::string where(const std::string& file, const toml::source_region& at) {
  return at.begin.line ? file + ":" + std::to_string(at.begin.line) + ":" + std::to_string(at.begin.column) : file;
}

// Sets the fields of o that a recipe names: --recipe FILE read from disk, else --preset's shipped
// recipe. A recipe gives every recipe key of table() once, each of its type and in its range; an
// unknown key, a wrong type, a value out of range, a key missing, a file that cannot be read or is
// not TOML is refused (CLI::ValidationError), naming the file, the line and column, and the key.
void apply_recipe(Options& o) {
  std::string text, file;
  if (!o.recipe.empty()) {
    file = o.recipe;
    std::error_code ec;
    if (std::filesystem::is_directory(file, ec)) throw CLI::ValidationError("--recipe", file + ": a folder, not a recipe file");
    // only a regular file is opened: a FIFO would wait for a writer, a device such as /dev/zero
    // would be read without end
    const std::filesystem::file_status st = std::filesystem::status(file, ec);
    if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
      throw CLI::ValidationError("--recipe", file + ": not a regular file (" +
                                                 (std::filesystem::is_fifo(st) ? "a FIFO" : "a device or socket") + "), not a recipe file");
    std::ifstream in(file, std::ios::binary);
    if (!in) throw CLI::ValidationError("--recipe", file + ": cannot read it: " + std::strerror(errno));
    text.resize(kMaxRecipeBytes + 1);
    in.read(text.data(), (std::streamsize)text.size());
    if (in.bad()) throw CLI::ValidationError("--recipe", file + ": cannot read it: " + std::strerror(errno));
    text.resize((size_t)in.gcount());
    if (text.size() > kMaxRecipeBytes)
      throw CLI::ValidationError("--recipe", file + ": larger than 1 MiB, not a recipe file (a recipe is a few KB)");
  } else {
    const std::string name = shipped_name(o.preset);
    if (name.empty()) {
      std::string known;
      for (const std::string& n : shipped_recipes()) known += (known.empty() ? "" : ", ") + n;
      throw CLI::ValidationError("--preset", "unknown preset '" + o.preset + "' (" + known + ", speedrun; or --recipe FILE)");
    }
    file = "recipes/" + name + ".toml (built in)";
    text = shipped_recipe(name);
  }
  toml::table doc;
  try {
    doc = toml::parse(std::string_view(text), std::string_view(file));
  } catch (const toml::parse_error& e) {
    throw CLI::ValidationError(where(file, e.source()), "not a TOML file: " + std::string(e.description()));
  }
  std::vector<Row> rows = table(o);
  std::vector<bool> seen(rows.size(), false);
  // every key of the file: a table on the way to recipe keys, or a recipe key
  std::function<void(const toml::table&, const std::string&)> walk = [&](const toml::table& t, const std::string& prefix) {
    for (const auto& [k, node] : t) {
      const std::string key = prefix + std::string(k.str());
      size_t row = rows.size();
      bool table_of_keys = false;
      for (size_t i = 0; i < rows.size(); i++) {
        if (rows[i].recipe == key) row = i;
        if (rows[i].recipe.rfind(key + ".", 0) == 0) table_of_keys = true;
      }
      if (row < rows.size()) {
        const std::string why = rows[row].load(node);
        if (!why.empty()) throw CLI::ValidationError(where(file, node.source()), key + ": " + why);
        seen[row] = true;
      } else if (table_of_keys && node.is_table()) {
        walk(*node.as_table(), key + ".");
      } else {
        std::vector<std::string> known;  // the keys (or tables) of the table it is in
        for (const Row& r : rows)
          if (!r.recipe.empty() && r.recipe.rfind(prefix, 0) == 0) {
            const std::string next = r.recipe.substr(prefix.size(), r.recipe.find('.', prefix.size()) - prefix.size());
            if (std::find(known.begin(), known.end(), next) == known.end()) known.push_back(next);
          }
        std::string list;
        for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
        const std::string in = prefix.empty() ? "the tables" : "[" + prefix.substr(0, prefix.size() - 1) + "]'s keys";
        throw CLI::ValidationError(where(file, node.source()), table_of_keys ? key + ": want a table of keys, got " + type_of(node)
                                                                             : "unknown key " + key + " (" + in + ": " + list +
                                                                                   "; docs/recipes.md lists every key)");
      }
    }
  };
  walk(doc, "");
  for (size_t i = 0; i < rows.size(); i++)
    if (!rows[i].recipe.empty() && !seen[i])
      throw CLI::ValidationError(file, "no key " + rows[i].recipe + ": a recipe gives every key (docs/recipes.md)");
}

// Combinations no single flag's check can see.
void check_combinations(const Options& o, int world) {
  if (o.layers % 2) throw CLI::ValidationError("--layers", "must be even (the U-net pairs layer i with layer L-1-i)");
  if (o.width % o.heads || (o.width / o.heads != 64 && o.width / o.heads != 128))
    throw CLI::ValidationError("--heads", "width / heads must be 64 or 128 (the attention kernel's head sizes)");
  if (o.width % 8 || o.hidden % 8) throw CLI::ValidationError("--width/--hidden", "must be multiples of 8");
  if (o.vocab_size > o.model_vocab)
    throw CLI::ValidationError("--vocab-size", std::to_string(o.vocab_size) + " is above the model's vocabulary (the recipe's model.vocab " +
                                                   std::to_string(o.model_vocab) + "): token ids would have no embedding");
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
  // the SparseAttnGate record's pieces: the layers a list names exist, the tables and the gate fit
  std::vector<int> listed;
  for (const auto& [key, text, word] :
       {std::tuple<const char*, const std::string&, const char*>{"model.skip_attention", o.skip_attention, "none"},
        {"attention.long_window_layers", o.long_window_layers, "all"}}) {
    const std::string why = layer_list(text, word, &listed);
    if (!why.empty()) throw CLI::ValidationError(key, why);
    for (int layer : listed)
      if (layer >= o.layers)
        throw CLI::ValidationError(key, "layer " + std::to_string(layer) + " of '" + text + "' is not one of the model's " +
                                            std::to_string(o.layers) + " layers (0 to " + std::to_string(o.layers - 1) + ")");
  }
  if (o.value_embeds > o.layers / 2)
    throw CLI::ValidationError("model.value_embeds", std::to_string(o.value_embeds) + " tables is more than layers / 2 = " +
                                                         std::to_string(o.layers / 2) + " (the first and the last N layers use them)");
  if (o.attn_gate_dims > o.width)
    throw CLI::ValidationError("attention.gate_dims",
                               std::to_string(o.attn_gate_dims) + " is more than the model's width " + std::to_string(o.width));
  if (o.window_rule == "nearest" && o.window_start < 64)
    throw CLI::ValidationError("schedule.window_start", std::to_string(o.window_start) +
                                                            " tokens gives a window of 0 blocks at the first step under "
                                                            "schedule.window_rule \"nearest\" (floor((W + 64) / 128)): want 64 or more");
  if (!o.fault.empty()) {
    int rank, step;
    char kind[16] = {0};
    if (std::sscanf(o.fault.c_str(), "%d:%d:%15s", &rank, &step, kind) != 3 ||
        (std::string(kind) != "crash" && std::string(kind) != "hang" && std::string(kind) != "exit"))
      throw CLI::ValidationError("--fault", "want RANK:STEP:crash|hang|exit, got '" + o.fault + "'");
  }
}

}  // namespace

namespace {
// Writes what a printing flag prints to the standard output: 0 once it is all written, else 1
// with the refusal naming the flag (a full disk or a closed output is no success).
int print_or_refuse(const std::string& text, const char* flag, int world, std::string* refusal) {
  if (text.empty()) return 0;
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), stdout) == text.size() && std::fflush(stdout) == 0 && !std::ferror(stdout)) return 0;
  *refusal = std::string(world > 1 ? "" : "train_gpt: ") + flag + ": cannot write the standard output: " +
             (errno ? std::strerror(errno) : "write error");
  return 1;
}
}  // namespace

int parse_options(int argc, char** argv, int world, int rank, Options* o, std::string* refusal) {
  // The recipe sets the values first, then the flags override them: a first pass reads only
  // --preset and --recipe (in any of CLI11's forms: --preset NAME, --preset=NAME), the second
  // reads every flag.
  CLI::Option *preset = nullptr, *recipe = nullptr;
  CLI::App pre;
  pre.allow_extras();
  pre.set_help_flag();
  preset = pre.add_option("--preset", o->preset);
  recipe = pre.add_option("--recipe", o->recipe);
  std::unique_ptr<CLI::ParseError> pre_error;  // --recipe or --preset twice, or without a value
  try {
    pre.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    pre_error = std::make_unique<CLI::ParseError>(e);
  }
  CLI::App app{"train_gpt: GPT speedrun trainer (C++/CUDA)"};
  try {
    if (pre_error) throw *pre_error;  // reported as such, not as the recipe that was not read
    if (recipe->count() && o->recipe.empty())
      throw CLI::ValidationError("--recipe", "an empty value names no recipe file; leave the flag out instead");
    if (preset->count() && recipe->count())
      throw CLI::ValidationError("--preset/--recipe", "give one: --preset NAME runs a shipped recipe, --recipe FILE a recipe file");
    if (recipe->count()) o->preset.clear();
    apply_recipe(*o);
    for (const Row& r : table(*o))
      if (r.add) r.add(app);
    for (int i = 1; i < argc; i++) {  // --flag= : CLI11 drops the empty value and reads on; refused as text() refuses ''
      const std::string a = argv[i];
      if (a == "--") break;
      if (a.size() > 3 && a.rfind("--", 0) == 0 && a.back() == '=' && a.find('=') == a.size() - 1)
        throw CLI::ValidationError(a.substr(0, a.size() - 1), "an empty value names nothing; leave the flag out instead");
    }
    app.parse(argc, argv);
    if (o->print_recipe && o->print_schema)
      throw CLI::ValidationError("--print-recipe/--print-schema", "give one: each prints its own text and exits");
    check_combinations(*o, world);
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    if (app.exit(e, out, err) == 0)  // --help: its text, once
      return print_or_refuse(rank == 0 ? out.str() : "", "--help", world, refusal);
    *refusal = err.str();  // every rank's own: train/start_gate.h prints it
    return 2;
  }
  if (o->print_recipe) return print_or_refuse(rank == 0 ? recipe_toml(*o) : "", "--print-recipe", world, refusal);
  if (o->print_schema) return print_or_refuse(rank == 0 ? schema_json() + "\n" : "", "--print-schema", world, refusal);
  // a run of a model the GPU trainer does not compute is refused here, before any GPU
  // work, rather than run as another model (--check-data reads the shards alone)
  const std::vector<std::string> missing = o->check_data ? std::vector<std::string>() : unimplemented_on_gpu(*o);
  if (!missing.empty()) {
    std::string list;
    for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
    *refusal = std::string(world > 1 ? "" : "train_gpt: ") + "the GPU trainer does not implement these recipe values: " + list +
               " (docs/recipes.md, \"The 2025-08-23 recipe\"; each key's neutral value there is the model it computes)\n";
    return 2;
  }
  return -1;
}

model::OptimizerHyper optimizer_hyper(const Options& o) {
  model::OptimizerHyper h;
  h.lr_embed = o.lr_embed, h.lr_head = o.lr_head, h.lr_scalar = o.lr_scalar, h.lr_muon = o.lr_muon;
  h.beta1 = o.adam_beta1, h.beta2 = o.adam_beta2, h.adam_eps = o.adam_eps;
  h.adam_eps_scaled = o.adam_eps_form == "scaled", h.muon_fan_scale = o.muon_fan_scale == 1;
  return h;
}

// The learning-rate cooldown and the momentum warm-up scale with --steps (the record's 600 and
// 300 of 1480: schedule.lr_cooldown and momentum_warmup of reference_steps).
model::Schedule schedule(const Options& o) {
  model::Schedule sched;
  sched.steps = o.steps;
  sched.cooldown = std::max(1, (int)std::lround(o.steps * (double)o.lr_cooldown_steps / o.schedule_steps));
  sched.momentum_warmup = std::max(1, (int)std::lround(o.steps * (double)o.momentum_warmup_steps / o.schedule_steps));
  sched.momentum_start = o.muon_momentum_start, sched.momentum_end = o.muon_momentum_end;
  sched.window_start = o.window_start, sched.window_end = o.window_end;
  sched.cooldown_frac = o.lr_cooldown_frac, sched.lr_floor = o.lr_floor, sched.window_ceil = o.window_rule == "ceil";
  return sched;
}

void set_model_keys(const Options& o, model::Config* cfg) {
  cfg->value_embeds = o.value_embeds;
  cfg->value_embeds_repeated = o.value_embed_layers == "repeated";
  layer_list(o.skip_attention, "none", &cfg->no_attention);
  std::vector<int> long_layers;
  layer_list(o.long_window_layers, "all", &long_layers);
  cfg->short_window.clear();
  if (o.long_window_layers != "all")
    for (int i = 0; i < o.layers; i++)
      if (std::find(long_layers.begin(), long_layers.end(), i) == long_layers.end()) cfg->short_window.push_back(i);
  cfg->init_bound = o.init_bound;
  cfg->attn_scale = o.attn_scale;
  cfg->gate_dims = o.attn_gate_dims;
  cfg->rotary_half = o.rotary == "half-truncated";
  cfg->rotary_base = o.rotary_base;
  cfg->logit_sigmoid = o.logit_softcap == "sigmoid";
}

std::vector<std::string> unimplemented_on_gpu(const Options& o) {
  // what the GPU trainer computes: each key at its neutral value, or at a value that
  // gives the same model (value_embeds = layers / 2 mirrored; a long-window list of every
  // layer; validation sequences of seq_len). The schedules' keys are model::Schedule's, which
  // it runs. The FP8 head's scales matter only with head_fp8 1. batch.align_to_bos is the host
  // loader's alone (data/dataloader.h): the model takes sequences of any content, and reads their
  // documents from the BOS tokens either way.
  const Options neutral;
  std::vector<std::string> out;
  Options copy = o;
  std::vector<int> long_layers;
  layer_list(o.long_window_layers, "all", &long_layers);
  const bool same[] = {
      o.value_embeds == neutral.value_embeds || (o.value_embeds == o.layers / 2 && o.value_embed_layers == "mirrored"),
      o.value_embed_layers == neutral.value_embed_layers,
      o.skip_attention == neutral.skip_attention,
      o.init_bound == neutral.init_bound,
      o.logit_softcap == neutral.logit_softcap,
      o.head_fp8 == neutral.head_fp8,
      o.attn_scale == neutral.attn_scale,
      o.attn_gate_dims == neutral.attn_gate_dims,
      o.rotary == neutral.rotary,
      o.rotary_base == neutral.rotary_base,
      o.long_window_layers == neutral.long_window_layers || (int)long_layers.size() == o.layers,
      o.loss_reduction == neutral.loss_reduction,
      o.adam_eps_form == neutral.adam_eps_form,
      o.muon_fan_scale == neutral.muon_fan_scale,
      o.val_seq_len == neutral.val_seq_len || o.val_seq_len == o.seq_len,
  };
  const char* keys[] = {"model.value_embeds",      "model.value_embed_layers",     "model.skip_attention",
                        "model.init_bound",        "model.logit_softcap",          "model.head_fp8",
                        "attention.scale",         "attention.gate_dims",          "attention.rotary",
                        "attention.rotary_base",   "attention.long_window_layers", "batch.loss_reduction",
                        "optimizer.adam.eps_form", "optimizer.muon.fan_scale",     "validation.seq_len"};
  static_assert(sizeof(same) / sizeof(same[0]) == sizeof(keys) / sizeof(keys[0]), "one verdict a key");
  const std::vector<Row> rows = table(copy);
  for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
    if (same[k]) continue;
    for (const Row& r : rows)
      if (r.recipe == keys[k]) out.push_back(r.recipe + " = " + r.toml());
  }
  return out;
}

std::string recipe_toml(const Options& o) {
  Options copy = o;
  const std::vector<Row> rows = table(copy);
  std::string out = "# The resolved recipe: " +
                    (o.recipe.empty() ? "recipes/" + shipped_name(o.preset) + ".toml" : o.recipe) +
                    ", then the flags (train_gpt --print-recipe; keys: docs/recipes.md)\n";
  std::vector<std::string> tables;  // in the order table() first names them
  for (const Row& r : rows)
    if (!r.recipe.empty()) {
      const std::string t = r.recipe.substr(0, r.recipe.rfind('.'));
      if (std::find(tables.begin(), tables.end(), t) == tables.end()) tables.push_back(t);
    }
  for (const std::string& t : tables) {
    out += "\n[" + t + "]\n";
    for (const Row& r : rows)
      if (!r.recipe.empty() && r.recipe.substr(0, r.recipe.rfind('.')) == t) out += r.recipe.substr(t.size() + 1) + " = " + r.toml() + "\n";
  }
  return out;
}

std::string recipe_keys_markdown() {
  Options o;
  std::string out =
      "| key | type | values | flag | log and fingerprint name | what it sets | neutral value (`--remove`): what it turns off |\n"
      "|---|---|---|---|---|---|---|\n";
  auto cell = [](std::string s) {  // a table cell: its pipes escaped
    for (size_t i = 0; (i = s.find('|', i)) != std::string::npos; i += 2) s.insert(i, "\\");
    return s;
  };
  for (const Row& r : table(o))
    if (!r.recipe.empty())
      out += "| `" + r.recipe + "` | " + r.type + " | " + cell(r.range) + " | " + (r.is_flag() ? "`" + r.name + "`" : "") + " | " + r.key() +
             " | " + cell(r.help) + " | " +
             (r.neutral.empty() ? ""
                                : "`" + (r.neutral[0] == '=' ? "= " + r.neutral.substr(1) : r.neutral) + "`: " + cell(r.off)) +
             " |\n";
  return out;
}

std::string schema_json() {
  Options o, scratch;  // scratch: the rows that try each neutral value, so that o's stay its defaults
  const std::vector<Row> rows = table(o), tries = table(scratch);
  auto find = [&](const std::string& key) -> const Row* {
    for (const Row& r : rows)
      if (r.recipe == key) return &r;
    return nullptr;
  };
  Json out = Json::array();
  for (size_t i = 0; i < rows.size(); i++) {
    const Row& r = rows[i];
    if (r.recipe.empty()) continue;
    Json neutral;  // null: none
    if (r.neutral.rfind("=", 0) == 0) {
      const Row* other = find(r.neutral.substr(1));
      if (!other || other->type != r.type || other == &r)
        throw std::logic_error(r.recipe + ": neutral value " + r.neutral + " names no other key of type " + r.type);
      neutral = Json{{"same_as", other->recipe}};
    } else if (!r.neutral.empty()) {
      toml::table t;
      try {
        t = toml::parse("v = " + r.neutral);
      } catch (const toml::parse_error& e) {
        throw std::logic_error(r.recipe + ": neutral value " + r.neutral + " is not a TOML value: " + std::string(e.description()));
      }
      const std::string why = tries[i].load(*t.get("v"));
      if (!why.empty()) throw std::logic_error(r.recipe + ": neutral value " + r.neutral + ": " + why);
      const toml::node& v = *t.get("v");
      if (v.is_integer()) neutral = v.as_integer()->get();
      else if (v.is_floating_point()) neutral = v.as_floating_point()->get();
      else neutral = v.as_string()->get();
    }
    out.push_back(Json{{"key", r.recipe},
                       {"type", r.type},
                       {"range", r.range},
                       {"flag", r.is_flag() ? Json(r.name) : Json()},
                       {"log", r.key()},
                       {"defines_run", r.role == Role::kDefinesRun || r.role == Role::kDefinesRunIfSet},
                       {"neutral", neutral},
                       {"off", r.off.empty() ? Json() : Json(r.off)}});
  }
  return out.dump(1);
}

std::vector<std::string> shipped_recipes() {
  std::vector<std::string> names;
  for (int i = 0; i < kShippedRecipeCount; i++) names.push_back(kShippedRecipes[i].name);
  return names;
}

std::string shipped_recipe(const std::string& name) {
  for (int i = 0; i < kShippedRecipeCount; i++)
    if (name == kShippedRecipes[i].name) return kShippedRecipes[i].text;
  return "";
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

std::vector<std::pair<std::string, std::string>> resolved(const Options& o) {
  Options copy = o;
  std::vector<std::pair<std::string, std::string>> out;
  for (const Row& r : table(copy)) {
    if (r.name == "--log-file") continue;  // rank 0's alone
    const Json v = r.value();
    out.emplace_back(r.name, v.is_string() ? v.get<std::string>() : v.dump());
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
