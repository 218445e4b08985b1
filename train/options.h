// The trainer's options: the fields, the presets, and the one table (train/options.cpp) that
// defines each flag once and from which the command line, the run's fingerprint (what a
// checkpoint must match to be resumed) and the log's configuration are all made.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace train {

struct Options {
  std::string preset = "default";
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

// Parses the command line into *o: the preset's defaults first, then the flags. Returns -1 to
// go on, or the exit code: 0 for --help (its text printed on rank 0), 2 for a bad flag or
// combination, with the message in *refusal, printed by no one here (every rank parses its own
// flags; train/start_gate.h gathers the ranks' refusals). world is the number of ranks, which
// the global batch must split over.
int parse_options(int argc, char** argv, int world, int rank, Options* o, std::string* refusal);

// The flags that define the run's computation, as "name=value ..." (data paths are not in it:
// their contents are the user's to keep).
std::string fingerprint(const Options& o);

// The log's configuration event: every flag, then the facts of this run.
std::string config_json(const Options& o, const std::string& run_id, int world_size, const std::string& gpu, const std::string& commit,
                        const std::vector<std::pair<std::string, std::string>>& extra = {});

}  // namespace train
