// What a run's options make of the model (train/run_config.h).
#include "train/run_config.h"

#include <algorithm>
#include <vector>

#include "data/shard.h"

namespace train {

model::Config model_config(const Options& o) {
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

Sync grad_sync(const Options& o) {
  if (o.grad_sync == "overlap") return Sync::kOverlap;
  return o.grad_sync == "embeddings" ? Sync::kEmbeddings : Sync::kEnd;
}

int window_at(const Options& o, const model::Schedule& sched, int step) {
  const int blocks = o.window_blocks ? o.window_blocks : sched.window_blocks(step);
  return o.window_granularity == "token" ? blocks * 128 : blocks;
}

model::TargetLeak target_leak(const Options& o) {
  const model::Schedule sched = schedule(o);
  std::vector<int> windows;
  for (int step = 0; step <= o.steps; step++) {
    const int w = window_at(o, sched, step);
    if (std::find(windows.begin(), windows.end(), w) == windows.end()) windows.push_back(w);
  }
  return model::find_target_leak(model_config(o).mask, o.seq_len, windows);
}

std::string target_leak_refusal(const Options& o, const model::TargetLeak& leak) {
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

}  // namespace train
