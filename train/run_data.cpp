// A run's data (train/run_data.h).
#include "train/run_data.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <stdexcept>

#include "data/manifest.h"
#include "data/shard.h"
#include "train/data_check.h"
#include "train/loss_mean.h"
#include "train/run_config.h"

namespace train {

// The shards a pattern matches, refused when they disagree with their folder's manifest (a shard
// of another run beside them, one missing, or one of another size); contents are --check-data's.
static std::vector<std::string> shard_files(const std::string& pattern, const char* what) {
  std::vector<std::string> files = shard::expand_pattern(pattern, what);
  const std::vector<std::string> problems = manifest::check(files, pattern, false);
  if (!problems.empty())
    throw shard::ShardError(problems.front() + (problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) + " more)" : "") +
                            " (flag --" + what + "-data; --check-data lists every problem)");
  return files;
}

Data::Data(const Options& o, const dist::Context& ctx)
    : train(shard_files(o.train_data, "train"), o.seq_len, o.vocab_size, true, o.align_to_bos ? o.seqs_per_step : 0),
      val(shard_files(o.val_data, "val"), o.seq_len, o.vocab_size, false),
      schedule{o.seqs_per_step, ctx.world, ctx.rank} {
  shared = shared_shards({train.files(), train.shard_digests()}, {val.files(), val.shard_digests()});
  if (!shared.empty() && !o.allow_train_on_val)
    throw std::runtime_error(shared.front() + (shared.size() > 1 ? " (and " + std::to_string(shared.size() - 1) + " more)" : "") +
                             ": the run would validate on data it trains on; name other shards, or give --allow-train-on-val to "
                             "do so on purpose");
  const uint64_t n_val = (uint64_t)o.val_tokens / (uint64_t)o.seq_len;
  if (n_val == 0) throw CLI::ValidationError("--val-tokens", "must hold at least one sequence of --seq-len tokens");
  if (n_val > val.sequences_per_pass())
    throw CLI::ValidationError("--val-tokens", std::to_string(o.val_tokens) + " asks for more validation than " + o.val_data + " holds (" +
                                                   std::to_string(val.sequences_per_pass() * o.seq_len) + " tokens in whole sequences)");
  val_seqs = data::val_sequences(o.val_tokens, o.seq_len, ctx.world, ctx.rank);
  const model::MaskConfig mask = model_config(o).mask;
  const auto no_target = [&](const char* which, uint64_t n, const std::string& flags) {
    return CLI::ValidationError("--prefix-tokens", std::to_string(o.prefix_tokens) + ": none of the " + std::to_string(n) + " " + which +
                                                       " sequences (" + flags + ") keeps a target: every document there fits inside "
                                                       "its prefix, so the loss is undefined; give a shorter prefix or longer documents");
  };
  if (::train::first_sequence_keeping_targets(val, 0, n_val, mask) == n_val)
    throw no_target("validation", n_val, "--val-tokens " + std::to_string(o.val_tokens) + " of --val-data " + o.val_data);
  const uint64_t n_train = std::min<uint64_t>((uint64_t)o.steps * o.seqs_per_step, train.sequences_per_pass());  // then they repeat
  if (::train::first_sequence_keeping_targets(train, 0, n_train, mask) == n_train)
    throw no_target("training", n_train, "the run's --steps x --seqs-per-step of --train-data " + o.train_data);
}

}  // namespace train
