// Token stream over shards: see dataloader.h.
#include "data/dataloader.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "common/sha256.h"
#include "data/bos_align.h"
#include "data/manifest.h"

namespace data {

// The first tokens of a shard's BOS-aligned sequences (data/bos_align.h's steps, in order), or a
// ShardError naming the shard when it cannot give them.
static std::vector<uint32_t> bos_starts(const std::string& f, const std::vector<uint16_t>& tokens, int seq_len, int seqs_per_step) {
  const size_t window = 2 * (size_t)seqs_per_step * (size_t)seq_len;
  const std::string rule = "batch.align_to_bos 1: each window of 2 x " + std::to_string(seqs_per_step) + " x " + std::to_string(seq_len) +
                           " = " + std::to_string(window) + " tokens gives a step's " + std::to_string(seqs_per_step) +
                           " sequences, each from a BOS token to the first BOS token " + std::to_string(seq_len) + " or more tokens on";
  if (tokens.size() < window + 2)
    throw shard::ShardError(f + ": " + std::to_string(tokens.size()) + " tokens, fewer than the " + std::to_string(window + 2) +
                            " of one BOS-aligned step (" + rule + ")");
  std::vector<std::vector<size_t>> steps;
  std::string why;
  if (!bos_aligned_steps(tokens.data(), tokens.size(), seq_len, seqs_per_step, &steps, &why))
    throw shard::ShardError(f + ": " + why + " (positions in this shard; " + rule +
                            "): a stretch without BOS tokens, or documents too long for the window");
  std::vector<uint32_t> out;
  out.reserve(steps.size() * seqs_per_step);
  for (const auto& step : steps)
    for (size_t start : step) out.push_back((uint32_t)start);  // (< 2^31: a shard's count is an int32)
  return out;
}

TokenStream::TokenStream(std::vector<std::string> files, int seq_len, int vocab_size, bool cycle, int bos_seqs_per_step)
    : files_(std::move(files)), seq_len_(seq_len), vocab_(vocab_size), cycle_(cycle), bos_(bos_seqs_per_step) {
  if (seq_len < 1) throw shard::ShardError("sequence length must be positive");
  if (bos_seqs_per_step < 0) throw shard::ShardError("BOS-aligned sequences per step must not be negative");
  prefix_.push_back(0);
  std::map<std::string, std::map<std::string, std::string>> listed;  // folder -> file -> its manifest's SHA-256
  sha256::Hasher stream;
  for (auto& f : files_) {
    size_t n;
    std::string digest;
    std::vector<uint16_t> tokens;  // BOS-aligned: the shard whole, for its chain
    if (bos_) {
      tokens = shard::read_shard(f, vocab_, nullptr, &digest);  // (the digest of the file's bytes, as below)
      n = tokens.size();
    } else {
      FILE* fp = shard::open(f);
      try {
        n = shard::read_header(fp, f);
        std::rewind(fp);
        if (!sha256::hex_of_rest(fp, &digest)) throw shard::ShardError(f + ": read failed");
      } catch (...) {
        std::fclose(fp);
        throw;
      }
      std::fclose(fp);
    }
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
    if (bos_) {
      starts_.push_back(bos_starts(f, tokens, seq_len, bos_));
      prefix_.push_back(prefix_.back() + starts_.back().size());
    } else {
      prefix_.push_back(prefix_.back() + (n >= (size_t)seq_len + 1 ? (n - 1) / seq_len : 0));
    }
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
  const uint64_t start = bos_ ? (uint64_t)starts_[file][k - prefix_[file]] : (k - prefix_[file]) * (uint64_t)seq_len_;
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
