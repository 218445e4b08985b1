// Token stream over shards: see dataloader.h.
#include "data/dataloader.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "common/sha256.h"
#include "data/manifest.h"

namespace data {

TokenStream::TokenStream(std::vector<std::string> files, int seq_len, int vocab_size, bool cycle)
    : files_(std::move(files)), seq_len_(seq_len), vocab_(vocab_size), cycle_(cycle) {
  if (seq_len < 1) throw shard::ShardError("sequence length must be positive");
  prefix_.push_back(0);
  std::map<std::string, std::map<std::string, std::string>> listed;  // folder -> file -> its manifest's SHA-256
  sha256::Hasher stream;
  for (auto& f : files_) {
    FILE* fp = shard::open(f);
    size_t n;
    std::string digest;
    try {
      n = shard::read_header(fp, f);
      std::rewind(fp);
      if (!sha256::hex_of_rest(fp, &digest)) throw shard::ShardError(f + ": read failed");
    } catch (...) {
      std::fclose(fp);
      throw;
    }
    std::fclose(fp);
    const std::string dir = manifest::dir_of(f);
    if (!listed.count(dir)) {
      std::vector<manifest::Entry> entries;
      auto& sums = listed[dir];
      if (manifest::read(dir, &entries))
        for (const manifest::Entry& e : entries) sums[e.file] = e.sha256;
    }
    const auto& sums = listed[dir];
    const auto want = sums.find(manifest::base_of(f));
    if (want != sums.end() && want->second != digest)
      throw shard::ShardError(f + ": SHA-256 " + digest + " differs from " + dir + "/" + manifest::kFile + "'s " + want->second +
                              ": the shard was changed after it was written");
    digests_.push_back(digest);
    stream.update(digest + "\n");
    tokens_at_start_.push_back(n);
    prefix_.push_back(prefix_.back() + (n >= (size_t)seq_len + 1 ? (n - 1) / seq_len : 0));
  }
  digest_ = stream.hex();
  if (prefix_.back() == 0)
    throw shard::ShardError("no shard holds a whole sequence of " + std::to_string(seq_len + 1) + " tokens (" +
                            (files_.empty() ? std::string("no files") : files_.front() + "...") + ")");
  // the first shard whole (every id checked) now, so that the common faults show before training
  const int first = (int)(std::upper_bound(prefix_.begin(), prefix_.end(), 0) - prefix_.begin()) - 1;
  load(first);
}

void TokenStream::load(int file) {
  loaded_ = -1;  // nothing usable is loaded until the new shard has passed every check
  std::string digest;
  tokens_ = shard::read_shard(files_[file], vocab_, nullptr, &digest);
  if (tokens_.size() != tokens_at_start_[file])
    throw shard::ShardError(files_[file] + ": now holds " + std::to_string(tokens_.size()) + " tokens, but " +
                            std::to_string(tokens_at_start_[file]) +
                            " when the run started: the shard was replaced during the run (its sequences were counted from the "
                            "first); restore it, or start a new run on the new data");
  if (digest != digests_[file])
    throw shard::ShardError(files_[file] + ": SHA-256 " + digest + ", but " + digests_[file] +
                            " when the run started: the shard was changed during the run; restore it, or start a new run on the new data");
  loaded_ = file;
}

void TokenStream::sequence(uint64_t k, uint16_t* out) {
  const uint64_t total = prefix_.back();
  if (k >= total) {
    if (!cycle_)
      throw shard::ShardError("sequence " + std::to_string(k) + " is past the end of the data (" + std::to_string(total) +
                              " sequences of " + std::to_string(seq_len_) + " tokens)");
    k %= total;
  }
  const int file = (int)(std::upper_bound(prefix_.begin(), prefix_.end(), k) - prefix_.begin()) - 1;
  if (file != loaded_) load(file);
  const uint64_t start = (k - prefix_[file]) * (uint64_t)seq_len_;
  if (start + (uint64_t)seq_len_ + 1 > tokens_.size())  // cannot happen after load()'s check; never read past the shard
    throw shard::ShardError(files_[file] + ": sequence " + std::to_string(k) + " lies past the shard's " +
                            std::to_string(tokens_.size()) + " tokens");
  std::memcpy(out, tokens_.data() + start, ((size_t)seq_len_ + 1) * sizeof(uint16_t));
}

std::vector<uint64_t> val_sequences(uint64_t val_tokens, int seq_len, int world, int rank) {
  const uint64_t n = val_tokens / seq_len;
  std::vector<uint64_t> out;
  for (uint64_t k = rank; k < n; k += world) out.push_back(k);
  return out;
}

}  // namespace data
