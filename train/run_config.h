// What a run's options make of the model: its configuration, the attention window of a step, when
// the gradients are exchanged (--grad-sync), and whether its mask shows the loss its own targets
// (model/target_leak.h), with the refusal that names the flags causing it.
#pragma once
#include <string>

#include "model/config.h"
#include "model/target_leak.h"
#include "train/options.h"
#include "train/shard_plan.h"

namespace train {

// The model's configuration from the options (the window is set for every step in the loop).
model::Config model_config(const Options& o);

// When each tensor's exchange and update run (--grad-sync; train/shard_plan.h Sync).
Sync grad_sync(const Options& o);

// The window of a step, counted in blocks of 128 (fixed or scheduled); with token granularity
// the same size is applied token by token: N blocks = 128 N tokens.
int window_at(const Options& o, const model::Schedule& sched, int step);

// Whether the run's mask lets a prediction see its own target (model/target_leak.h), decided
// from the flags over every window the run uses, before any GPU work.
model::TargetLeak target_leak(const Options& o);

// The refusal of a run whose mask shows targets, naming the flags that cause it: each mask flag
// whose safe value alone ends the leak.
std::string target_leak_refusal(const Options& o, const model::TargetLeak& leak);

}  // namespace train
