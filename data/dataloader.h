// Training and validation sequences from token shards (shard.h), the same for any GPU count.
//
// The token stream is the shards in order, cycled: sequence k is the (seq_len + 1)-token window
// starting at k * seq_len inside its shard (inputs are its first seq_len tokens, targets its
// last seq_len); a shard's tail shorter than a window is skipped. A training step uses sequences
// [seqs_per_step * step, seqs_per_step * (step + 1)); rank r at micro-step m takes sequence
//     seqs_per_step * step + m * world + r,
// so the set of sequences in a step does not depend on the world size, no two ranks share a
// sequence, and resuming at step s needs nothing but s. (With --balance-ranks the trainer hands
// the same sequences out by their attention work instead: data/hand_out.h.) Validation takes the first
// val_tokens / seq_len sequences of the validation stream (no cycling), split round-robin over
// ranks. Shards are checked (header, size, every token id) whenever they are loaded; all headers
// are checked when the loader is built, and the first shard that holds a sequence is loaded whole.
// Shards are known by their contents: building the loader reads every file whole once and takes
// its SHA-256, refusing one whose digest differs from the one its folder's manifest lists
// (data/manifest.h; changed after it was written, even at the same size). Every later load
// takes the digest of the bytes it read again, and a shard that no longer matches the digest
// taken at the start (replaced or edited during a run) is refused, naming the file; so is one
// whose token count changed, since the sequence positions were fixed from that count. digest()
// names the data as read: the SHA-256 of the shards' digests in order, whatever their names.
//
// BOS-aligned training sequences (batch.align_to_bos 1: the stream is built with
// bos_seqs_per_step = S, the run's seqs_per_step): sequence k is the (k % S)-th sequence of
// step k / S of the chain data/bos_align.h computes, the steps of each shard in turn (each
// shard from its token 0, its tail dropped), cycling as above; the sequence reads seq_len + 1
// tokens from its start. The schedule below hands a step's S sequences to the ranks as ever, so
// rank r of S ranks takes the r-th, as the record's loader does, and the step's sequences do not
// depend on the world size. Building the loader reads every shard whole (checked, and its
// SHA-256 taken from those bytes) and computes its chain, so a shard that cannot give it is
// refused then, naming the file: one of fewer than 2 S seq_len + 2 tokens (no whole window), or
// one with a window whose BOS tokens give fewer than S sequences (none at all, or documents too
// long). The chain follows from the shards' contents, seq_len and S alone, so resuming at step s
// still needs nothing but s (a checkpoint pins the data by digest and these options by the
// run's fingerprint). The starts are kept as 32-bit offsets (a shard holds < 2^31 tokens).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/shard.h"

namespace data {

class TokenStream {
 public:
  // bos_seqs_per_step: 0 for sequences every seq_len tokens; S > 0 for BOS-aligned steps of S
  TokenStream(std::vector<std::string> files, int seq_len, int vocab_size, bool cycle, int bos_seqs_per_step = 0);
  // Copies sequence k (seq_len + 1 tokens) into out.
  void sequence(uint64_t k, uint16_t* out);
  uint64_t sequences_per_pass() const { return prefix_.back(); }
  int seq_len() const { return seq_len_; }
  int bos_seqs_per_step() const { return bos_; }  // 0: not BOS-aligned
  const std::vector<std::string>& files() const { return files_; }           // the shards, in order
  const std::vector<std::string>& shard_digests() const { return digests_; }  // each file's SHA-256, in order
  const std::string& digest() const { return digest_; }                       // of the stream (see above)

 private:
  std::vector<std::string> files_;
  std::vector<uint64_t> prefix_;  // prefix_[i] = sequences in files_[0..i)
  std::vector<size_t> tokens_at_start_;  // each file's token count when the loader was built
  std::vector<std::string> digests_;     // and its SHA-256
  std::string digest_;
  int seq_len_, vocab_;
  bool cycle_;
  int bos_ = 0;                              // S of BOS-aligned steps; 0: every seq_len tokens
  std::vector<std::vector<uint32_t>> starts_;  // BOS-aligned: each file's sequences' first tokens, in order
  int loaded_ = -1;
  std::vector<uint16_t> tokens_;
  void load(int file);  // reads files_[file] whole, checked again
};

struct TrainSchedule {
  int seqs_per_step = 8, world = 1, rank = 0;
  int micro_steps() const { return seqs_per_step / world; }
  uint64_t sequence_index(uint64_t step, int micro) const {
    return (uint64_t)seqs_per_step * step + (uint64_t)micro * world + rank;
  }
};

// Sequence indices of the validation set that this rank evaluates.
std::vector<uint64_t> val_sequences(uint64_t val_tokens, int seq_len, int world, int rank);

}  // namespace data
