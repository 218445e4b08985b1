// The shards checked before a run (train/data_check.h).
#include "train/data_check.h"

#include <cstdio>
#include <map>
#include <tuple>

#include "data/dataloader.h"
#include "data/manifest.h"
#include "data/shard.h"

namespace train {

std::vector<std::string> shared_shards(const ShardDigests& train, const ShardDigests& val) {
  std::map<std::string, std::string> val_by_digest;
  for (size_t i = 0; i < val.files.size(); i++) val_by_digest.emplace(val.digests[i], val.files[i]);
  std::vector<std::string> out;
  for (size_t i = 0; i < train.files.size(); i++)
    if (auto v = val_by_digest.find(train.digests[i]); v != val_by_digest.end())
      out.push_back("--train-data shard " + train.files[i] + " holds the same bytes as --val-data shard " + v->second + " (SHA-256 " +
                    v->first + ")");
  return out;
}

int check_data(const Options& o) {
  int bad = 0;
  ShardDigests read[2];  // the train and val shards read whole, with their digests
  size_t train_listed = 0;  // the training shards the pattern names (all read: none refused)
  for (auto [what, pattern, digested] : {std::tuple<const char*, std::string, ShardDigests*>{"train", o.train_data, &read[0]},
                                         {"val", o.val_data, &read[1]}}) {
    std::vector<std::string> files;
    try {
      files = shard::expand_pattern(pattern, what);
      if (digested == &read[0]) train_listed = files.size();
    } catch (const shard::ShardError& e) {
      std::fprintf(stderr, "check-data: error: %s (flag --%s-data)\n", e.what(), what);
      bad++;
      continue;
    }
    for (auto& f : files) {
      try {
        shard::ShardInfo info;
        std::string digest;
        shard::read_shard(f, o.vocab_size, &info, &digest);
        digested->files.push_back(f), digested->digests.push_back(digest);
        std::printf("check-data: ok %s: %zu tokens, %zu documents\n", f.c_str(), info.tokens, info.documents);
      } catch (const shard::ShardError& e) {
        std::fprintf(stderr, "check-data: error: %s\n", e.what());
        bad++;
      }
    }
    for (const std::string& problem : manifest::check(files, pattern, true)) {  // mixed or changed shards
      std::fprintf(stderr, "check-data: error: %s (flag --%s-data)\n", problem.c_str(), what);
      bad++;
    }
  }
  for (const std::string& s : shared_shards(read[0], read[1])) {
    if (o.allow_train_on_val) {
      std::printf("check-data: allowed by --allow-train-on-val: %s\n", s.c_str());
      continue;
    }
    std::fprintf(stderr, "check-data: error: %s: a run would validate on data it trains on (--allow-train-on-val lets it)\n", s.c_str());
    bad++;
  }
  // BOS-aligned training sequences (batch.align_to_bos 1): every window of every training shard
  // holds its step's sequences, as the loader requires when a run builds it (data/dataloader.h)
  if (o.align_to_bos && !read[0].files.empty() && read[0].files.size() == train_listed) {
    try {
      data::TokenStream aligned(read[0].files, o.seq_len, o.vocab_size, true, o.seqs_per_step);
      std::printf("check-data: ok BOS-aligned training sequences: %d a step of %d tokens (batch.align_to_bos)\n", o.seqs_per_step,
                  o.seq_len);
    } catch (const shard::ShardError& e) {
      std::fprintf(stderr, "check-data: error: %s\n", e.what());
      bad++;
    }
  }
  return bad;
}

}  // namespace train
