// The shards checked before a run: --check-data's report on every shard of both patterns, and
// the training shards that are validation shards too (by content), which a run refuses.
#pragma once
#include <string>
#include <vector>

#include "train/options.h"

namespace train {

// Shards known by their contents: each file beside the SHA-256 of its bytes as read.
struct ShardDigests {
  std::vector<std::string> files, digests;
};

// The training shards whose bytes are a validation shard's (by the SHA-256 the shards were read
// with: the same file under two names, a copy under another name, or both patterns matching one
// file), one line each naming both files. A run that trains on them validates on what it has
// learnt by heart.
std::vector<std::string> shared_shards(const ShardDigests& train, const ShardDigests& val);

// Checks every shard of both patterns: header, size, token ids, its manifest, and that no training
// shard is a validation shard (shared_shards, as a run refuses; noted only with
// --allow-train-on-val). Prints one line per shard and returns the number of problems found (a
// pattern that matches nothing counts as one).
int check_data(const Options& o);

}  // namespace train
