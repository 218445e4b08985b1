// train_gpt: the GPT speedrun trainer (see README.md and SPEC.md).
//
// Reads top to bottom: options, data checks, main. The model, its kernels and the training
// loop arrive with issue 4 (layers/ and the sections marked below); today the binary parses
// its flags, validates data shards (--check-data, no GPU needed) and refuses to train.

// ----------------------------------------------------------------------------------- CPU utilities
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "data/shard.h"

// ----------------------------------------------------------------------------------- options
struct Options {
  std::string train_data = "data/gcide/gcide_train_*.bin";
  std::string val_data = "data/gcide/gcide_val_*.bin";
  int vocab_size = 50257;  // token ids in the data must be below this (GPT-2's vocabulary)
  bool check_data = false;
};

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

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"train_gpt: GPT speedrun trainer (C++/CUDA)"};
  app.add_option("--train-data", o.train_data, "glob pattern of training shards")->capture_default_str();
  app.add_option("--val-data", o.val_data, "glob pattern of validation shards")->capture_default_str();
  app.add_option("--vocab-size", o.vocab_size, "token ids in the shards must be below this")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  app.add_flag("--check-data", o.check_data, "check every shard (header, size, token ids) and exit; needs no GPU");
  try {
    app.parse(argc, argv);
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
  std::fprintf(stderr,
               "train_gpt: training is not built yet (issue 4: model, optimizers, training loop).\n"
               "           Available now: --check-data. See README.md.\n");
  return 2;
}
