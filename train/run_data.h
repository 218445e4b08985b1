// A run's data: the training and validation shards, checked before any GPU is touched (Data),
// and a sequence of them made into a micro-step's batch (SequenceReader).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataloader.h"
#include "model/batch.h"
#include "model/config.h"
#include "train/dist.h"
#include "train/options.h"

namespace train {

// The shards, before any GPU is touched: a bad shard is reported on any machine, and the
// validation count is checked against the data before any list of that size is made. With a
// prefix, a run whose validation sequences (or training sequences) keep no target at all is
// refused here: its loss would be undefined (a search that stops at the first sequence keeping one).
// So is a run that trains on validation shards (shared_shards), unless --allow-train-on-val.
// With batch.align_to_bos 1 the training stream is BOS-aligned, in steps of seqs_per_step
// (data/dataloader.h); validation stays consecutive.
struct Data {
  data::TokenStream train, val;
  std::vector<std::string> shared;  // the training shards that are validation shards too (allowed by the flag)
  std::vector<uint64_t> val_seqs;  // this rank's validation sequences
  data::TrainSchedule schedule;
  // the data as read, by content (data/dataloader.h): what the log and a checkpoint record
  std::string digests() const { return "train_data_sha256=" + train.digest() + " val_data_sha256=" + val.digest(); }
  Data(const Options& o, const dist::Context& ctx);
};

// Sequence k of a stream as a micro-step's batch at this step's window (model/batch.h: inputs,
// targets, document ids, kept targets, stream index, kept pairs), built once.
struct SequenceReader {
  std::vector<uint16_t> seq;
  model::MaskConfig mask;
  SequenceReader(int T, const model::MaskConfig& m) : seq(T + 1), mask(m) {}
  void load(data::TokenStream& s, uint64_t k, int window, model::Batch& batch) {
    s.sequence(k, seq.data());
    build(seq.data(), k, window, batch);
  }
  // the same from sequence k's tokens (T + 1) already read
  void build(const uint16_t* tokens, uint64_t k, int window, model::Batch& batch) {
    mask.window = window;
    batch.build(tokens, mask, k);
  }
};

}  // namespace train
