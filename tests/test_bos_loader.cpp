// The training loader with and without batch.align_to_bos (data/dataloader.h, train/run_data.h):
//  - align_to_bos 0: the batches every rank reads for the first steps, and the validation
//    sequences, hash to the value the loader gave before BOS alignment existed (kConsecutiveHash,
//    taken from that loader on these shards), through TokenStream and through train::Data;
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "data/dataloader.h"
#include "data/shard.h"
#include "tests/check.h"
#include "train/dist.h"
#include "train/options.h"
#include "train/run_data.h"

// FNV-1a over bytes, continued from h.
static uint64_t fnv(uint64_t h, const void* p, size_t n) {
  const unsigned char* b = (const unsigned char*)p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}
static constexpr uint64_t kFnvStart = 0xcbf29ce484222325ULL;

// A token stream of documents whose lengths are drawn from [1, max_doc]: a BOS, then ids below 50000.
static std::vector<uint16_t> documents(std::mt19937& rng, size_t n, int max_doc) {
  std::vector<uint16_t> t;
  t.reserve(n);
  while (t.size() < n) {
    const int len = 1 + (int)(rng() % (uint32_t)max_doc);
    t.push_back(shard::kBos);
    for (int j = 1; j < len && t.size() < n; j++) t.push_back((uint16_t)(rng() % 50000));
  }
  return t;
}

// Writes the stream cut into shards of the given sizes (a shard may start inside a document):
// dir/PREFIX_000000.bin, ...; returns each shard's tokens.
static std::vector<std::vector<uint16_t>> write_shards(const std::string& dir, const std::string& prefix, const std::vector<uint16_t>& stream,
                                                       const std::vector<size_t>& sizes) {
  std::vector<std::vector<uint16_t>> out;
  size_t at = 0;
  for (size_t i = 0; i < sizes.size(); i++) {
    out.emplace_back(stream.begin() + at, stream.begin() + at + sizes[i]);
    at += sizes[i];
    char name[64];
    std::snprintf(name, sizeof(name), "/%s_%06zu.bin", prefix.c_str(), i);
    shard::write_shard(dir + name, out.back());
  }
  return out;
}

// Reads sequence k of a rank's training stream into out (seq_len + 1 tokens).
using Reader = std::function<void(uint64_t k, uint16_t* out)>;

// The hash of what every rank of world sizes 1, 2, 4, 8 reads for steps [0, steps): for each
// world, rank, step and micro-step, the sequence's stream index and its seq_len + 1 tokens.
// open(world, rank) gives that rank's reader.
static uint64_t train_hash(int seqs_per_step, int steps, int seq_len, const std::function<Reader(int world, int rank)>& open) {
  uint64_t h = kFnvStart;
  std::vector<uint16_t> buf(seq_len + 1);
  for (int world : {1, 2, 4, 8})
    for (int rank = 0; rank < world; rank++) {
      const Reader read = open(world, rank);
      data::TrainSchedule ts{seqs_per_step, world, rank};
      for (int step = 0; step < steps; step++)
        for (int m = 0; m < ts.micro_steps(); m++) {
          const uint64_t k = ts.sequence_index(step, m);
          read(k, buf.data());
          h = fnv(h, &k, sizeof(k));
          h = fnv(h, buf.data(), buf.size() * sizeof(uint16_t));
        }
    }
  return h;
}

int main() {
  char tmpl[] = "/tmp/bos_loader_test_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const int L = 64, S = 8;

  // ---- align_to_bos 0: the loader as before -------------------------------------------------
  // Shards of 5000, 700, 40 (no whole sequence) and 3001 tokens: 78 + 10 + 0 + 46 = 134 sequences
  // a pass, so 40 steps of 8 cycle through them more than twice; validation: 30 sequences of a
  // 2500-token shard. kConsecutiveHash is what the loader of the commit before BOS alignment
  // gave for exactly this (the hash must match to the bit: tolerance 0).
  constexpr uint64_t kConsecutiveHash = 0xeb61ac2cdbca60f1ULL;
  const std::string adir = dir + "/consecutive";
  std::filesystem::create_directories(adir);
  std::mt19937 rng(2025);
  const std::vector<uint16_t> a_stream = documents(rng, 5000 + 700 + 40 + 3001, 300);
  write_shards(adir, "train", a_stream, {5000, 700, 40, 3001});
  write_shards(adir, "val", documents(rng, 2500, 300), {2500});
  const int a_steps = 40;
  const long long a_val_tokens = 30LL * L;
  uint64_t direct = 0;
  {
    std::vector<std::string> files;
    for (int i = 0; i < 4; i++) files.push_back(adir + "/train_00000" + std::to_string(i) + ".bin");
    data::TokenStream train(files, L, 50257, true);
    data::TokenStream val({adir + "/val_000000.bin"}, L, 50257, false);
    CHECK(train.sequences_per_pass() == 134, "consecutive: %llu sequences a pass, want 134 (exact)", (unsigned long long)train.sequences_per_pass());
    direct = train_hash(S, a_steps, L, [&](int, int) { return [&](uint64_t k, uint16_t* out) { train.sequence(k, out); }; });
    std::vector<uint16_t> buf(L + 1);
    for (int world : {1, 2, 4, 8})
      for (int rank = 0; rank < world; rank++)
        for (uint64_t k : data::val_sequences(a_val_tokens, L, world, rank)) {
          val.sequence(k, buf.data());
          direct = fnv(direct, &k, sizeof(k));
          direct = fnv(direct, buf.data(), buf.size() * sizeof(uint16_t));
        }
  }
  CHECK(direct == kConsecutiveHash, "align_to_bos 0: TokenStream's batches hash to %016llx, the loader before BOS alignment to %016llx (exact)",
        (unsigned long long)direct, (unsigned long long)kConsecutiveHash);
  {  // the same through train::Data, as the trainer builds its streams from the options
    train::Options o;
    o.train_data = adir + "/train_*.bin", o.val_data = adir + "/val_*.bin";
    o.seq_len = L, o.seqs_per_step = S, o.steps = a_steps, o.val_tokens = a_val_tokens;
    uint64_t via_data = train_hash(S, a_steps, L, [&](int world, int rank) -> Reader {
      dist::Context ctx;
      ctx.world = world, ctx.rank = rank;
      auto d = std::make_shared<train::Data>(o, ctx);
      return [d](uint64_t k, uint16_t* out) { d->train.sequence(k, out); };
    });
    std::vector<uint16_t> buf(L + 1);
    for (int world : {1, 2, 4, 8})
      for (int rank = 0; rank < world; rank++) {
        dist::Context ctx;
        ctx.world = world, ctx.rank = rank;
        train::Data d(o, ctx);
        for (uint64_t k : d.val_seqs) {
          d.val.sequence(k, buf.data());
          via_data = fnv(via_data, &k, sizeof(k));
          via_data = fnv(via_data, buf.data(), buf.size() * sizeof(uint16_t));
        }
      }
    CHECK(via_data == kConsecutiveHash, "align_to_bos 0: train::Data's batches hash to %016llx, the loader before BOS alignment to %016llx (exact)",
          (unsigned long long)via_data, (unsigned long long)kConsecutiveHash);
  }

  std::filesystem::remove_all(dir);
  return test_summary("bos-loader");
}
