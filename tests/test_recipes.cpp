// Recipes (recipes/*.toml, docs/recipes.md) without a GPU: each shipped recipe resolves to the
// Options, optimiser hyper-parameters and schedules the trainer ran before its settings were
// recipes (the table below, frozen from the code of that time: the Options fields' initial
// values, the presets' assignments, model::OptimizerHyper's values and the schedule's formulas);
// flags over a recipe; --preset with --recipe refused; the fingerprint of each recipe its own;
// the log's configuration carrying every recipe key; the resolved recipe read back as a recipe.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/check.h"
#include "train/options.h"

namespace {

// The values of the time before recipes, by preset: the fields the preset set, the rest the
// Options fields' initial values then; the optimiser's were model::OptimizerHyper's for every
// preset.
struct Old {
  std::string train_data, val_data;
  int layers, width, heads, hidden, seq_len, steps, val_every;
  long long val_tokens;
};
const Old kDefault{"data/gcide/gcide_train_*.bin", "data/gcide/gcide_val_*.bin", 4, 256, 2, 1024, 8192, 300, 50, 8 * 8192};
const Old kTiny{"data/gcide/gcide_train_*.bin", "data/gcide/gcide_val_*.bin", 2, 128, 2, 512, 1024, 30, 10, 8 * 1024};
const Old kSpeedrun{"data/fineweb10B/fineweb_train_*.bin", "data/fineweb10B/fineweb_val_*.bin", 12, 768, 6, 3072, 65536, 1480, 125, 10485760};

// The schedule as the trainer computed it then (train_gpt.cu's schedule() and model::Schedule's
// formulas with the record's constants), for the update at step s of a run of `steps`.
double old_lr_multiplier(int steps, int s) {
  const int cooldown = std::max(1, (int)std::lround(steps * 600.0 / 1480));
  return s < steps - cooldown ? 1.0 : (double)(steps - s) / cooldown;
}
double old_momentum(int steps, int s) {
  const int warmup = std::max(1, (int)std::lround(steps * 300.0 / 1480));
  const double f = std::min(1.0, (double)s / warmup);
  return (1 - f) * 0.85 + f * 0.95;
}
int old_window_blocks(int steps, int s) {
  const double f = (double)s / steps;
  return (int)std::floor(((1 - f) * 64 + f * 1792 + 64) / 128);
}

// A resolved recipe without its first line (which names its source).
std::string values_of(const train::Options& o) {
  const std::string t = train::recipe_toml(o);
  return t.substr(t.find('\n') + 1);
}

// parse_options over these arguments (after argv[0]); returns its code, the refusal in *why.
int parse(std::vector<std::string> args, train::Options* o, std::string* why) {
  args.insert(args.begin(), "train_gpt");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(&a[0]);
  return train::parse_options((int)argv.size(), argv.data(), 1, 1, o, why);  // (rank 1: --help and the like print nothing)
}

// Every field of o against the old values: those a preset set, and every other field at its
// value of the time. Prints each that differs; returns how many.
int differences(const char* what, const train::Options& o, const Old& x) {
  int bad = 0;
  auto eq = [&](const char* field, auto got, auto want) {
    if (!(got == want)) {
      std::printf("  %s: %s differs from the value before recipes\n", what, field);
      bad++;
    }
  };
  eq("train_data", o.train_data, x.train_data), eq("val_data", o.val_data, x.val_data);
  eq("layers", o.layers, x.layers), eq("width", o.width, x.width), eq("heads", o.heads, x.heads), eq("hidden", o.hidden, x.hidden);
  eq("seq_len", o.seq_len, x.seq_len), eq("steps", o.steps, x.steps), eq("val_every", o.val_every, x.val_every);
  eq("val_tokens", o.val_tokens, x.val_tokens);
  eq("log_file", o.log_file, std::string()), eq("vocab_size", o.vocab_size, 50257), eq("check_data", o.check_data, false);
  eq("allow_train_on_val", o.allow_train_on_val, false), eq("model_vocab", o.model_vocab, 50304);
  eq("seqs_per_step", o.seqs_per_step, 8), eq("window_blocks", o.window_blocks, 0), eq("window_mask", o.window_mask, std::string("uni"));
  eq("window_granularity", o.window_granularity, std::string("block")), eq("causal", o.causal, 1), eq("doc_mask", o.doc_mask, 1);
  eq("prefix_tokens", o.prefix_tokens, 0), eq("prefix_attention", o.prefix_attention, 1), eq("seed", o.seed, (uint64_t)1337);
  eq("checkpoint_dir", o.checkpoint_dir, std::string()), eq("checkpoint_every", o.checkpoint_every, 0), eq("resume", o.resume, std::string());
  eq("grad_sync", o.grad_sync, std::string("end")), eq("grad_exchange", o.grad_exchange, std::string("fp32"));
  eq("gather_wait", o.gather_wait, std::string("layer")), eq("gather_engine", o.gather_engine, std::string("copy-engines"));
  eq("timeout", o.timeout, 300.0), eq("check_replicas", o.check_replicas, false), eq("balance_ranks", o.balance_ranks, false);
  eq("fault", o.fault, std::string()), eq("profile", o.profile, 0);
  // the optimiser: model::OptimizerHyper's values of the time, exactly
  const model::OptimizerHyper h = train::optimizer_hyper(o);
  eq("lr_embed", h.lr_embed, 0.6), eq("lr_head", h.lr_head, 0.008), eq("lr_scalar", h.lr_scalar, 0.04), eq("lr_muon", h.lr_muon, 0.05);
  eq("beta1", h.beta1, 0.8), eq("beta2", h.beta2, 0.95), eq("adam_eps", h.adam_eps, 1e-8);
  // the schedules at every step, to the bit
  const model::Schedule s = train::schedule(o);
  int lr = 0, mom = 0, win = 0;
  for (int i = 0; i < o.steps; i++) {
    lr += s.lr_multiplier(i) != old_lr_multiplier(o.steps, i);
    mom += s.muon_momentum(i) != old_momentum(o.steps, i);
    win += s.window_blocks(i) != old_window_blocks(o.steps, i);
  }
  eq("the lr multiplier's steps off", lr, 0), eq("the Muon momentum's steps off", mom, 0), eq("the window's steps off", win, 0);
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--keys") {  // the table docs/recipes.md holds
    std::fputs(train::recipe_keys_markdown().c_str(), stdout);
    return 0;
  }
  // docs/recipes.md's table of keys is the schema's (run from the repository's root)
  {
    std::ifstream in("docs/recipes.md");
    std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(in.good() || in.eof(), "docs/recipes.md: cannot read it (run from the repository's root)");
    CHECK(doc.find(train::recipe_keys_markdown()) != std::string::npos,
          "docs/recipes.md does not hold the recipe keys' table of train/options.cpp; build/tests/test_recipes --keys prints it:\n%s",
          train::recipe_keys_markdown().c_str());
  }
  // each shipped recipe, by its preset name and by its own, gives the values of the time
  for (auto [args, old] : std::vector<std::pair<std::vector<std::string>, Old>>{
           {{}, kDefault},
           {{"--preset", "default"}, kDefault},
           {{"--preset", "tiny"}, kTiny},
           {{"--preset", "speedrun"}, kSpeedrun},
           {{"--preset=2024-12-10"}, kSpeedrun}}) {
    train::Options o;
    std::string why;
    const int rc = parse(args, &o, &why);
    const std::string what = args.empty() ? "no flag" : args[0] + (args.size() > 1 ? " " + args[1] : "");
    CHECK(rc == -1, "%s: parse refused (%d): %s", what.c_str(), rc, why.c_str());
    CHECK(differences(what.c_str(), o, old) == 0, "%s: the Options differ from the values before recipes (above)", what.c_str());
  }
  // the Options fields' initial values are recipes/default.toml's
  {
    train::Options o, fresh;
    std::string why;
    parse({}, &o, &why);
    CHECK(train::recipe_toml(o) == train::recipe_toml(fresh), "the Options' initial values are not default.toml's:\n%s\n---\n%s",
          train::recipe_toml(o).c_str(), train::recipe_toml(fresh).c_str());
  }
  // the shorter runs the presets are also run at keep the old schedules (they scale with --steps)
  for (const char* steps : {"1", "7", "50", "333", "1000", "2960"}) {
    train::Options o;
    std::string why;
    CHECK(parse({"--preset", "speedrun", "--steps", steps}, &o, &why) == -1, "--steps %s refused: %s", steps, why.c_str());
    Old x = kSpeedrun;
    x.steps = std::atoi(steps);
    CHECK(differences("speedrun --steps", o, x) == 0, "speedrun --steps %s: differs (above)", steps);
  }
  // flags over a recipe, in either order on the command line
  for (auto args : std::vector<std::vector<std::string>>{{"--preset", "tiny", "--seq-len", "2048", "--steps", "12"},
                                                         {"--seq-len=2048", "--steps", "12", "--preset", "tiny"}}) {
    train::Options o;
    std::string why;
    CHECK(parse(args, &o, &why) == -1 && o.seq_len == 2048 && o.steps == 12 && o.layers == 2 && o.width == 128 && o.val_every == 10,
          "flags over the tiny recipe: seq_len %d steps %d layers %d (%s)", o.seq_len, o.steps, o.layers, why.c_str());
  }
  // --preset and --recipe together, an unknown preset
  {
    train::Options o;
    std::string why;
    CHECK(parse({"--preset", "tiny", "--recipe", "recipes/tiny.toml"}, &o, &why) == 2 && why.find("--preset") != std::string::npos &&
              why.find("--recipe") != std::string::npos,
          "--preset with --recipe: %s", why.c_str());
    why.clear();
    train::Options p;
    CHECK(parse({"--preset", "nope"}, &p, &why) == 2 && why.find("nope") != std::string::npos && why.find("2024-12-10") != std::string::npos,
          "unknown preset: %s", why.c_str());
  }
  // the resolved recipe, written out, reads back as the same Options (flags included)
  {
    train::Options a, b;
    std::string why;
    parse({"--preset", "tiny", "--hidden", "768", "--window-mask", "bi"}, &a, &why);
    const std::string path = "/tmp/test_recipes_" + std::to_string(::getpid()) + ".toml";
    std::ofstream(path) << train::recipe_toml(a);
    const int rc = parse({"--recipe", path}, &b, &why);
    CHECK(rc == -1 && values_of(b) == values_of(a) && b.hidden == 768 && b.window_mask == "bi" && b.recipe == path &&
              b.preset.empty(),
          "the resolved recipe read back (%d: %s)", rc, why.c_str());
    std::remove(path.c_str());
  }
  // each recipe its own fingerprint; a change of one optimiser value changes it, and the
  // default recipe's is the fingerprint of the time before recipes (its checkpoints resume)
  {
    std::vector<std::string> prints;
    for (const std::string& name : train::shipped_recipes()) {
      if (name == "2024-12-10" || name == "2025-08-23") continue;  // (below)
      train::Options o;
      std::string why;
      parse({"--preset", name}, &o, &why);
      prints.push_back(train::fingerprint(o));
    }
    train::Options s, lr;
    std::string why;
    parse({"--preset", "speedrun"}, &s, &why);
    prints.push_back(train::fingerprint(s));
    lr = s, lr.lr_muon = 0.04;
    prints.push_back(train::fingerprint(lr));
    lr = s, lr.lr_cooldown_steps = 601;
    prints.push_back(train::fingerprint(lr));
    train::Options later;
    parse({"--preset", "2025-08-23"}, &later, &why);  // (refused as a run: the fingerprint is of its values all the same)
    prints.push_back(train::fingerprint(later));
    for (size_t i = 0; i < prints.size(); i++)
      for (size_t j = i + 1; j < prints.size(); j++) CHECK(prints[i] != prints[j], "fingerprints %zu and %zu agree: %s", i, j, prints[i].c_str());
    CHECK(prints.size() == 6, "%zu fingerprints (default, tiny, speedrun, two changes of it, 2025-08-23)", prints.size());
    // the keys added for the SparseAttnGate record are in a fingerprint only away from their neutral values,
    // so that the checkpoints made before them still resume
    CHECK(prints[2].find("attn_scale") == std::string::npos && prints[5].find("attn_scale=0.12") != std::string::npos,
          "the new keys in the fingerprints only where set: %s / %s", prints[2].c_str(), prints[5].c_str());
    CHECK(prints[0] ==
              "layers=4 width=256 heads=2 hidden=1024 vocab=50304 seq_len=8192 seqs_per_step=8 steps=300 window_blocks=0 "
              "window_mask=uni window_granularity=block causal=1 doc_mask=1 seed=1337",
          "the default recipe's fingerprint: %s", prints[0].c_str());
    CHECK(prints[3].find("lr_muon=0.04") != std::string::npos, "the changed optimiser value in the fingerprint: %s", prints[3].c_str());
  }
  // the log's configuration: every recipe key's value, under its field's name, and the recipe's source
  {
    train::Options o;
    std::string why;
    parse({"--preset", "speedrun", "--steps", "20"}, &o, &why);
    const auto cfg = nlohmann::json::parse(train::config_json(o, "0123456789abcdef", 1, "GPU", "abc"));
    CHECK(cfg.at("preset") == "speedrun" && cfg.at("recipe") == "" && cfg.at("steps") == 20 && cfg.at("layers") == 12 &&
              cfg.at("lr_muon") == 0.05 && cfg.at("adam_beta1") == 0.8 && cfg.at("lr_cooldown_steps") == 600 &&
              cfg.at("schedule_steps") == 1480 && cfg.at("window_end") == 1792 && cfg.at("muon_momentum_start") == 0.85 &&
              cfg.at("val_tokens") == 10485760 && cfg.at("train_data") == "data/fineweb10B/fineweb_train_*.bin",
          "configuration: %s", cfg.dump().c_str());
    // every key of the resolved recipe is in it, with the same value
    train::Options back;
    const std::string path = "/tmp/test_recipes_cfg_" + std::to_string(::getpid()) + ".toml";
    std::ofstream(path) << train::recipe_toml(o);
    parse({"--recipe", path}, &back, &why);
    std::remove(path.c_str());
    const auto cfg_back = nlohmann::json::parse(train::config_json(back, "0123456789abcdef", 1, "GPU", "abc"));
    int same = 0, keys = 0;
    for (auto& [k, v] : cfg.items())
      if (k != "preset" && k != "recipe") keys++, same += cfg_back.contains(k) && cfg_back.at(k) == v;
    CHECK(keys > 30 && same == keys, "%d of %d configuration entries the same after the recipe's round trip", same, keys);
  }
  // the schema (--print-schema, what scripts/ab_run.py --remove reads): every recipe key once;
  // every neutral value one its key takes (schema_json throws otherwise); the removable keys and
  // their neutral values these
  {
    std::string text;
    try {
      text = train::schema_json();
    } catch (const std::logic_error& e) {
      CHECK(false, "schema_json: %s", e.what());
    }
    const auto schema = nlohmann::json::parse(text.empty() ? "[]" : text);
    std::vector<std::string> keys, removable;
    for (const auto& e : schema) {
      keys.push_back(e.at("key"));
      if (!e.at("neutral").is_null()) removable.push_back(e.at("key").get<std::string>() + "=" + e.at("neutral").dump());
    }
    CHECK(keys.size() == 56 && std::set<std::string>(keys.begin(), keys.end()).size() == keys.size(),
          "%zu keys in the schema (56 in recipes/default.toml), some twice?", keys.size());
    const std::vector<std::string> want{
        "attention.doc_mask=0", "attention.prefix_tokens=0", "optimizer.muon.momentum_start={\"same_as\":\"optimizer.muon.momentum_end\"}",
        "schedule.lr_cooldown=1", "schedule.window_start={\"same_as\":\"schedule.window_end\"}",
        // the SparseAttnGate record's pieces, each back to the speedrun preset's model
        "model.value_embeds=0", "model.value_embed_layers=\"mirrored\"", "model.skip_attention=\"none\"", "model.init_bound=1.0",
        "model.logit_softcap=\"tanh\"", "model.head_fp8=0", "attention.scale=0.0", "attention.gate_dims=0", "attention.rotary=\"full\"",
        "attention.rotary_base=10000.0", "attention.long_window_layers=\"all\"", "batch.align_to_bos=0", "batch.loss_reduction=\"mean\"",
        "optimizer.adam.eps_form=\"torch\"", "optimizer.muon.fan_scale=1", "schedule.lr_cooldown_frac=0.0", "schedule.lr_floor=0.0"};
    std::string got;
    for (const auto& r : removable) got += r + " ";
    CHECK(removable == want, "the removable keys: %s", got.c_str());
    for (const auto& e : schema) {
      const bool data = e.at("key").get<std::string>().rfind("data.", 0) == 0 || e.at("key").get<std::string>().rfind("validation.", 0) == 0;
      CHECK(e.at("defines_run") == !data, "%s: defines_run %s", e.at("key").get<std::string>().c_str(), e.at("defines_run").dump().c_str());
    }
  }
  // the SparseAttnGate record's recipe (docs/recipes.md, its section): its values resolve and
  // print; a run is refused naming each key the GPU trainer does not implement, and only those;
  // its schedules are the record's, step for step
  {
    train::Options o;
    std::string why;
    const int rc = parse({"--preset", "2025-08-23"}, &o, &why);
    const char* unimplemented[] = {"model.value_embeds = 3",
                                   "model.value_embed_layers = 'repeated'",
                                   "model.skip_attention = '7'",
                                   "model.init_bound = 0.8660254037844386",
                                   "model.logit_softcap = 'sigmoid'",
                                   "model.head_fp8 = 1",
                                   "attention.scale = 0.12",
                                   "attention.gate_dims = 12",
                                   "attention.rotary = 'half-truncated'",
                                   "attention.rotary_base = 1024.0",
                                   "attention.long_window_layers = '0,4,7,11'",
                                   "batch.loss_reduction = 'sequence_sum'",
                                   "optimizer.adam.eps_form = 'scaled'",
                                   "optimizer.muon.fan_scale = 0",
                                   "validation.seq_len = 262144"};
    int named = 0;
    for (const char* k : unimplemented) named += why.find(k) != std::string::npos;  // (TOML's strings as the resolved recipe writes them)
    CHECK(rc == 2 && named == 15 && why.find("schedule.") == std::string::npos && why.find("optimizer.adam.eps =") == std::string::npos &&
              why.find("batch.align_to_bos") == std::string::npos,
          "the 2025-08-23 recipe as a run: exit %d (want 2), %d of the 15 keys named, no schedule's key, not batch.align_to_bos (the "
          "host's loader runs it): %s",
          rc, named, why.c_str());
    CHECK(o.steps == 1695 && o.seq_len == 49152 && o.val_seq_len == 262144 && o.adam_eps == 1e-10 && o.attn_gate_dims == 12 &&
              o.rotary_base == 1024.0 && o.init_bound == std::sqrt(3.0) * 0.5 && o.head_fp8_x_scale == std::sqrt(768.0) / 448 &&
              o.head_fp8_w_scale == std::ldexp(1.0, -9) && o.head_fp8_grad_scale == 1.0 / 448,
          "the 2025-08-23 recipe's values");
    train::Options p;
    CHECK(parse({"--preset", "2025-08-23", "--print-recipe"}, &p, &why) == 0, "--print-recipe of the 2025-08-23 recipe: %s", why.c_str());
    train::Options c;
    why.clear();
    CHECK(parse({"--preset", "2025-08-23", "--check-data"}, &c, &why) == -1, "--check-data of the 2025-08-23 recipe refused: %s",
          why.c_str());
    // the record's get_lr (cooldown_frac 0.45, floor 0.1) and window (next multiple of 128 of
    // 1728 x, in blocks), written out from its code; momentum as before
    const model::Schedule sched = train::schedule(o);
    int lr = 0, win = 0, mom = 0;
    for (int step = 0; step <= 1695; step++) {
      const double x = (double)step / 1695;
      double want = 1.0;
      if (!(x < 1 - 0.45)) {
        const double w = (1 - x) / 0.45;
        want = w * 1.0 + (1 - w) * 0.1;
      }
      const double v = 1728 * x;
      int m = 128;
      while (m < v) m += 128;
      lr += step < 1695 && sched.lr_multiplier(step) != want;
      win += sched.window_blocks(step) != m / 128;
      const double f = std::min((double)step / 300, 1.0);
      mom += sched.muon_momentum(step) != (1 - f) * 0.85 + f * 0.95;
    }
    CHECK(lr == 0 && win == 0 && mom == 0, "the 2025-08-23 schedules: %d lr, %d window, %d momentum steps off the record's (exact)", lr,
          win, mom);
    CHECK(sched.lr_multiplier(932) == 1.0 && sched.lr_multiplier(933) < 1.0 &&
              std::fabs(sched.lr_multiplier(1694) - 0.10117994100294984) < 1e-15,
          "the 2025-08-23 lr: 1 up to step 932, then below (at 1694: %.17g, want 0.10117994100294984 within 1e-15)",
          sched.lr_multiplier(1694));
    // the model's keys as a Config: tables, layers without attention, short windows
    model::Config cfg;
    cfg.layers = 12, cfg.width = 768, cfg.heads = 6;
    train::set_model_keys(o, &cfg);
    std::string tables, attn, shorts;
    for (int i = 0; i < 12; i++) {
      tables += std::to_string(cfg.value_table(i)) + " ";
      attn += cfg.has_attention(i) ? "a" : "-";
      shorts += cfg.has_short_window(i) ? "s" : "L";
    }
    CHECK(tables == "0 1 2 -1 -1 -1 -1 -1 -1 0 1 2 " && attn == "aaaaaaa-aaaa" && shorts == "LsssLssLsssL" && cfg.gate_dims == 12 &&
              cfg.rotary_half && cfg.logit_sigmoid && cfg.attn_scale == 0.12,
          "the 2025-08-23 Config: tables %s, attention %s, windows %s", tables.c_str(), attn.c_str(), shorts.c_str());
    train::Options s;
    parse({"--preset", "speedrun"}, &s, &why);
    model::Config old_cfg;
    old_cfg.layers = 12;
    train::set_model_keys(s, &old_cfg);
    tables.clear();
    for (int i = 0; i < 12; i++) tables += std::to_string(old_cfg.value_table(i)) + " ";
    CHECK(tables == "0 1 2 3 4 5 5 4 3 2 1 0 " && old_cfg.no_attention.empty() && old_cfg.short_window.empty() && !old_cfg.gate_dims &&
              !old_cfg.rotary_half && !old_cfg.logit_sigmoid && old_cfg.attn_scale == 0 && old_cfg.init_bound == 1.0,
          "the 2024-12-10 Config: tables %s", tables.c_str());
  }
  // one key of the record over the speedrun recipe: refused naming it alone; a schedule's key runs
  {
    const std::string path = "/tmp/test_recipes_one_" + std::to_string(::getpid()) + ".toml";
    auto with = [&](const std::string& from, const std::string& to) {
      std::ifstream in("recipes/2024-12-10.toml");
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const size_t at = text.find(from);
      if (at == std::string::npos) return false;
      text.replace(at, from.size(), to);
      std::ofstream(path) << text;
      return true;
    };
    struct Case {
      std::string from, to;
      int rc;
      std::string named;  // in the refusal
    };
    const std::vector<Case> cases{
        {"scale = 0.0", "scale = 0.12", 2, "attention.scale = 0.12"},
        {"gate_dims = 0", "gate_dims = 12", 2, "attention.gate_dims = 12"},
        {"skip_attention = \"none\"", "skip_attention = \"7\"", 2, "model.skip_attention = '7'"},
        {"lr_floor = 0.0", "lr_floor = 0.1", -1, ""},
        {"window_rule = \"nearest\"", "window_rule = \"ceil\"", -1, ""},
        {"skip_attention = \"none\"", "skip_attention = \"7,7\"", 2, "layer 7 is named twice"},
        {"skip_attention = \"none\"", "skip_attention = \"12\"", 2, "layer 12 of '12' is not one of the model's 12 layers"},
        {"long_window_layers = \"all\"", "long_window_layers = \"0;4\"", 2, "attention.long_window_layers"},
        {"long_window_layers = \"all\"", "long_window_layers = \"0,1,2,3,4,5,6,7,8,9,10,11\"", -1, ""},
        {"value_embeds = 0", "value_embeds = 7", 2, "more than layers / 2"},
        {"value_embeds = 0", "value_embeds = 6", -1, ""},
        {"gate_dims = 0", "gate_dims = 769", 2, "more than the model's width"},
        {"window_start = 64", "window_start = 0", 2, "schedule.window_start"},
        {"align_to_bos = 0", "align_to_bos = 1", -1, ""},  // (the host's loader runs it: data/dataloader.h)
        {"seq_len = 65536", "seq_len = 49152", -1, ""},    // (the record's sequence length)
    };
    for (const Case& k : cases) {
      CHECK(with(k.from, k.to), "recipes/2024-12-10.toml has no '%s' (run from the repository's root)", k.from.c_str());
      train::Options o;
      std::string why;
      const int rc = parse({"--recipe", path}, &o, &why);
      const bool others = why.find(" = ", why.find(k.named) + k.named.size()) != std::string::npos &&
                          why.find("implement") != std::string::npos;  // (another key named after it)
      CHECK(rc == k.rc && why.find(k.named) != std::string::npos && !others, "%s -> %s: exit %d (want %d), want '%s' alone in: %s",
            k.from.c_str(), k.to.c_str(), rc, k.rc, k.named.c_str(), why.c_str());
    }
    std::remove(path.c_str());
  }
  return test_summary("recipes");
}
