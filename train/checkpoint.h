// Checkpoints: everything a run needs to continue as if never stopped, in one file written
// atomically (a temporary file, fsync, rename: a kill mid-write leaves the previous checkpoint).
//   "TGPTCKPT" | u32 version (2) | u64 config length | config (the training-relevant flags, as the
//   run's fingerprint) | u64 data length | data (the digests of the data the run read, by
//   content: "train_data_sha256=H val_data_sha256=H", data/dataloader.h) | i64 step | i64
//   adam_steps | u32 blob count | per blob: u32 name length, name, u64 float count, floats |
//   u64 FNV-1a checksum of every byte before it
// Version 1 had no data field: it reads with data empty, which a resume refuses (the data it was
// made on cannot be known).
// Blobs are fp32 arrays (master weights, Adam moments, Muon momentum). The data position is the
// step (the loader needs nothing else: with batch.align_to_bos too, whose positions follow from
// the data, pinned by its digests, and the options in the fingerprint) and training draws no
// random numbers after the start.
// Reading checks the magic, version, sizes and checksum, and every number against its range (the
// step 0 to 2^31 - 1, adam_steps equal to it, at most 64 blobs of named, distinct names, floats
// finite and Adam's second moments not negative), and names the file and field in every error;
// a checkpoint whose config differs from the run's is refused, showing both, and so is one made
// on other data (check_same_data), naming both digests.
#pragma once
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace train {

struct CheckpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Checkpoint {
  std::string config;
  std::string data;  // the digests of the data the run read (empty in a version 1 file)
  int64_t step = 0, adam_steps = 0;
  std::map<std::string, std::vector<float>> blobs;
  uint64_t checksum = 0;  // read_checkpoint: the file's checksum, which names its contents (the ranks of a job compare it)
};

void write_checkpoint(const std::string& path, const Checkpoint& c);
Checkpoint read_checkpoint(const std::string& path);
// Throws CheckpointError unless c.config == config.
void check_same_config(const Checkpoint& c, const std::string& config, const std::string& path);
// Throws CheckpointError unless c.data == data (the run's data digests), naming both.
void check_same_data(const Checkpoint& c, const std::string& data, const std::string& path);

// The checkpoint folder, checked before a run starts and made only once it can start:
// why checkpoints could not be written into dir, or "" when they can. dir, or where it does not
// exist yet the nearest folder above it that does, must be a folder in which a file can be made
// (tried with a probe file, removed at once: a read-only mount shows even to root). Leaves nothing.
std::string unwritable_checkpoint_dir(const std::string& dir);
// Why a run may not write checkpoints into dir, or "" when it may: a folder holding checkpoints
// is another run's, unless this run resumes from one of them (continuing that run).
std::string used_checkpoint_dir(const std::string& dir, const std::string& resume);
// Makes dir and any missing folders above it; returns the folders it made, outermost first
// (empty when dir existed). Throws CheckpointError naming dir.
std::vector<std::string> make_checkpoint_dir(const std::string& dir);
// Removes folders make_checkpoint_dir made, innermost first, while they are empty.
void remove_made_dirs(const std::vector<std::string>& made);

}  // namespace train
