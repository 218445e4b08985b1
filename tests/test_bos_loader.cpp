// The training loader with and without batch.align_to_bos (data/dataloader.h, train/run_data.h):
//  - align_to_bos 0: the batches every rank reads for the first steps, and the validation
//    sequences, hash to the value the loader gave before BOS alignment existed (kConsecutiveHash,
//    taken from that loader on these shards), through TokenStream and through train::Data;
//  - align_to_bos 1: every rank of world sizes 1, 2, 4, 8 reads, step by step and across shard
//    boundaries (a shard cut inside a document; one of exactly one step's window), the sequences
//    data/bos_align.h gives each shard, in turn, cycling; those starts are also the record's loader's
//    (its loop transcribed below, rank r of 8 ranks); train::Data builds this stream from the
//    options, its validation stays as without alignment, and the data's digests are the same;
//  - resume: a loader built afresh (as a resumed run builds it) reads step s without the steps
//    before it, and the fingerprint a checkpoint keeps names align_to_bos, so a checkpoint of the
//    other mode is refused;
//  - hostile shards under align_to_bos 1 (shorter than a window, empty, no BOS at all, a window
//    without enough BOS tokens) are refused when the loader is built, naming the shard.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "data/bos_align.h"
#include "data/dataloader.h"
#include "data/hand_out.h"
#include "data/shard.h"
#include "tests/check.h"
#include "train/checkpoint.h"
#include "train/data_check.h"
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

// Documents mostly of 1 to 40 tokens, every 25th of 60 to 119 (longer than the tests' seq_len 64).
static std::vector<uint16_t> mixed_documents(std::mt19937& rng, size_t n) {
  std::vector<uint16_t> t;
  t.reserve(n);
  for (int doc = 0; t.size() < n; doc++) {
    const int len = doc % 25 == 24 ? 60 + (int)(rng() % 60) : 1 + (int)(rng() % 40);
    t.push_back(shard::kBos);
    for (int j = 1; j < len && t.size() < n; j++) t.push_back((uint16_t)(rng() % 50000));
  }
  return t;
}

// The record's loader (modded-nanogpt's distributed_data_generator with align_to_bos, the SparseAttnGate record's),
// transcribed: the start of the sequence rank `rank` of `world` ranks reads at each step, as
// (shard, position), for as many steps as the shards give (its file iterator does not cycle).
static std::vector<std::pair<size_t, size_t>> record_loader(const std::vector<std::vector<uint16_t>>& shards, int seq_len, int world, int rank) {
  std::vector<std::pair<size_t, size_t>> out;
  const size_t batch_size = (size_t)world * seq_len, local_batch_size = seq_len, max_batch_span = 2 * batch_size;
  size_t file = 0, pos = 0;
  while (true) {
    if (pos + max_batch_span + 1 >= shards[file].size()) {  // the next shard, from its token 0
      if (++file == shards.size()) return out;
      pos = 0;
    }
    const std::vector<uint16_t>& tokens = shards[file];
    // find_batch_starts(tokens, pos, local_batch_size, max_batch_span)
    std::vector<size_t> boundary;
    for (size_t i = pos; i < std::min(pos + max_batch_span, tokens.size()); i++)
      if (tokens[i] == 50256) boundary.push_back(i);
    if (boundary.empty()) return out;  // (the record fails here: an IndexError)
    size_t start = boundary[0], span = 0;
    std::vector<size_t> starts;
    for (size_t i = 1; i < boundary.size() && !span; i++) {
      const size_t end = boundary[i];
      if (end - start >= local_batch_size) {
        starts.push_back(start);
        if ((int)starts.size() == world) span = end - pos;
        start = end;
      }
    }
    if (!span) return out;  // (the record asserts)
    out.push_back({file, starts[rank]});
    pos += span;
  }
}

static bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The message of the ShardError that building a BOS-aligned stream of files gives ("" if none).
static std::string aligned_error(const std::vector<std::string>& files, int seq_len, int seqs_per_step) {
  try {
    data::TokenStream s(files, seq_len, 50257, true, seqs_per_step);
    return "";
  } catch (const shard::ShardError& e) {
    return e.what();
  }
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

  // ---- align_to_bos 1: data/bos_align.h's sequences --------------------------------------
  // seq_len 64, 8 sequences a step: windows of 1024 tokens. Shards of 20000, 1026 (one window and
  // 2 tokens: exactly one step), 9000 and 15000 tokens cut from one stream of documents, so that
  // shards start inside a document.
  const std::string bdir = dir + "/aligned";
  std::filesystem::create_directories(bdir);
  const std::vector<size_t> sizes = {20000, 1026, 9000, 15000};
  size_t total_tokens = 0;
  for (size_t n : sizes) total_tokens += n;
  const std::vector<std::vector<uint16_t>> shards = write_shards(bdir, "train", mixed_documents(rng, total_tokens), sizes);
  write_shards(bdir, "val", documents(rng, 2500, 300), {2500});
  std::vector<std::string> files;
  for (size_t i = 0; i < sizes.size(); i++) files.push_back(bdir + "/train_00000" + std::to_string(i) + ".bin");
  // the expected steps: each shard's, in turn, as (shard, its sequences' starts)
  std::vector<std::pair<size_t, std::vector<size_t>>> expect;
  for (size_t f = 0; f < shards.size(); f++) {
    std::vector<std::vector<size_t>> steps;
    std::string why;
    const bool ok = data::bos_aligned_steps(shards[f].data(), shards[f].size(), L, S, &steps, &why);
    CHECK(ok && !steps.empty(), "shard %zu of the aligned test: %zu steps (%s)", f, steps.size(), why.c_str());
    for (auto& st : steps) expect.push_back({f, st});
  }
  CHECK(expect.size() > 30, "the aligned test's shards give %zu steps, want more than 30", expect.size());
  const size_t total_steps = expect.size();
  // the record's loop gives the same starts to each of 8 ranks (exact)
  {
    int bad = 0;
    for (int rank = 0; rank < S; rank++) {
      const auto rec = record_loader(shards, L, S, rank);
      bad += rec.size() != total_steps;
      for (size_t st = 0; st < std::min(rec.size(), total_steps); st++)
        bad += rec[st] != std::make_pair(expect[st].first, expect[st].second[rank]);
    }
    CHECK(bad == 0, "the record's loader, transcribed, differs from data/bos_align.h at %d (rank, step)s of %zu steps (exact)", bad, total_steps);
  }
  // what rank r of `world` reads at step s, micro-step m must be the (m world + r)-th sequence of
  // expected step s mod total_steps: its seq_len + 1 tokens from its start (exact)
  const auto check_ranks = [&](const char* what, const std::function<Reader(int world, int rank)>& open, int steps) {
    int wrong = 0, off_bos = 0, cover = 0;
    std::vector<uint16_t> buf(L + 1);
    for (int world : {1, 2, 4, 8}) {
      std::vector<std::vector<int>> seen(steps, std::vector<int>(S, 0));
      for (int rank = 0; rank < world; rank++) {
        const Reader read = open(world, rank);
        data::TrainSchedule ts{S, world, rank};
        for (int step = 0; step < steps; step++)
          for (int m = 0; m < ts.micro_steps(); m++) {
            read(ts.sequence_index(step, m), buf.data());
            const int i = m * world + rank;
            const auto& [f, starts] = expect[step % total_steps];
            wrong += std::memcmp(buf.data(), shards[f].data() + starts[i], (L + 1) * sizeof(uint16_t)) != 0;
            off_bos += buf[0] != shard::kBos;
            seen[step][i]++;
          }
      }
      for (const auto& st : seen)
        for (int c : st) cover += c != 1;
    }
    CHECK(wrong == 0 && off_bos == 0 && cover == 0,
          "%s: %d sequences differ from data/bos_align.h's, %d start off a BOS, %d of a step's sequences not read exactly once "
          "(world sizes 1, 2, 4, 8, %d steps; exact)",
          what, wrong, off_bos, cover, steps);
  };
  const int b_steps = 2 * (int)total_steps + 5;  // twice round the shards, and on
  {
    data::TokenStream train(files, L, 50257, true, S);
    CHECK(train.sequences_per_pass() == total_steps * S, "aligned: %llu sequences a pass, want %zu (exact)",
          (unsigned long long)train.sequences_per_pass(), total_steps * S);
    CHECK(train.bos_seqs_per_step() == S, "aligned: %d sequences a step, want %d", train.bos_seqs_per_step(), S);
    check_ranks("aligned TokenStream", [&](int, int) { return [&](uint64_t k, uint16_t* out) { train.sequence(k, out); }; }, b_steps);
    data::TokenStream plain(files, L, 50257, true);
    CHECK(train.digest() == plain.digest() && train.shard_digests() == plain.shard_digests(),
          "aligned: the data's digest %s differs from the consecutive loader's %s on the same shards", train.digest().c_str(),
          plain.digest().c_str());
    // --balance-ranks hands out the same step's sequences, with their tokens
    data::TrainSchedule two{S, 2, 1};
    data::StepHandOut hand(two, L, true);
    int stray = 0;
    std::vector<uint16_t> buf(L + 1);
    for (int step = 0; step < 5; step++)
      for (int m = 0; m < two.micro_steps(); m++) {
        const uint64_t k = hand.sequence(train, step, m, 128);
        train.sequence(k, buf.data());
        const uint16_t* t = hand.tokens_of(k);
        stray += k / S != (uint64_t)step || !t || std::memcmp(t, buf.data(), (L + 1) * sizeof(uint16_t)) != 0;
      }
    CHECK(stray == 0, "aligned with --balance-ranks: %d hand-outs outside their step or with other tokens (exact)", stray);
  }
  {  // through train::Data, from the options
    train::Options o;
    o.train_data = bdir + "/train_*.bin", o.val_data = bdir + "/val_*.bin";
    o.seq_len = L, o.seqs_per_step = S, o.steps = b_steps, o.val_tokens = 30LL * L;
    o.align_to_bos = 1;
    check_ranks("aligned train::Data",
                [&](int world, int rank) -> Reader {
                  dist::Context ctx;
                  ctx.world = world, ctx.rank = rank;
                  auto d = std::make_shared<train::Data>(o, ctx);
                  return [d](uint64_t k, uint16_t* out) { d->train.sequence(k, out); };
                },
                b_steps);
    dist::Context one;
    train::Data aligned(o, one);
    o.align_to_bos = 0;
    train::Data plain(o, one);
    int differ = aligned.val_seqs != plain.val_seqs;
    std::vector<uint16_t> a(L + 1), b(L + 1);
    for (uint64_t k : aligned.val_seqs) {
      aligned.val.sequence(k, a.data()), plain.val.sequence(k, b.data());
      differ += a != b;
    }
    CHECK(differ == 0 && aligned.digests() == plain.digests(), "aligned train::Data: validation differs from the consecutive run's at %d sequences",
          differ);

    // ---- resume ---------------------------------------------------------------------------
    // a loader built afresh, as a resumed run builds it, reads step s without the steps before
    // it: every rank's sequences of steps from s on equal the expected ones (exact)
    for (int from : {1, (int)total_steps - 1, (int)total_steps + 3}) {
      int wrong = 0;
      std::vector<uint16_t> buf(L + 1);
      for (int world : {1, 8})
        for (int rank = 0; rank < world; rank++) {
          data::TokenStream fresh(files, L, 50257, true, S);
          data::TrainSchedule ts{S, world, rank};
          for (int step = from; step < from + 3; step++)
            for (int m = 0; m < ts.micro_steps(); m++) {
              fresh.sequence(ts.sequence_index(step, m), buf.data());
              const auto& [f, starts] = expect[step % total_steps];
              wrong += std::memcmp(buf.data(), shards[f].data() + starts[m * world + rank], (L + 1) * sizeof(uint16_t)) != 0;
            }
        }
      CHECK(wrong == 0, "resume at step %d: a fresh loader reads %d sequences otherwise than data/bos_align.h (exact)", from, wrong);
    }
    // the fingerprint a checkpoint keeps names the mode, so a checkpoint of the other is refused
    o.align_to_bos = 1;
    const std::string with = train::fingerprint(o);
    o.align_to_bos = 0;
    const std::string without = train::fingerprint(o);
    CHECK(has(with, "align_to_bos=1") && !has(without, "align_to_bos") && has(with, "seq_len=64") && has(with, "seqs_per_step=8"),
          "the fingerprint names align_to_bos, seq_len and seqs_per_step: '%s' / '%s'", with.c_str(), without.c_str());
    train::Checkpoint ck;
    ck.config = without;
    std::string refused;
    try {
      train::check_same_config(ck, with, "ck.bin");
    } catch (const train::CheckpointError& e) {
      refused = e.what();
    }
    CHECK(has(refused, "ck.bin") && has(refused, "align_to_bos"), "resuming an align_to_bos 0 checkpoint with 1 is refused: '%s'", refused.c_str());
  }

  // ---- hostile shards under align_to_bos 1 --------------------------------------------------
  // each refused when the loader is built, naming the shard; the same shards pass without alignment
  {
    const std::string hdir = dir + "/hostile";
    std::filesystem::create_directories(hdir);
    const std::string good = files[0];
    const auto write = [&](const std::string& name, const std::vector<uint16_t>& t) {
      shard::write_shard(hdir + "/" + name, t);
      return hdir + "/" + name;
    };
    // a shard of one window and one token: no step fits (1025 < 1026)
    std::string e = aligned_error({good, write("short.bin", std::vector<uint16_t>(shards[0].begin(), shards[0].begin() + 1025))}, L, S);
    CHECK(has(e, "short.bin") && has(e, "1025 tokens, fewer than the 1026") && has(e, "batch.align_to_bos"), "a shard shorter than a window: %s",
          e.c_str());
    e = aligned_error({write("empty.bin", {})}, L, S);
    CHECK(has(e, "empty.bin") && has(e, "0 tokens, fewer than the 1026"), "an empty shard: %s", e.c_str());
    // no BOS at all
    const std::string none = write("no_bos.bin", std::vector<uint16_t>(5000, 7));
    e = aligned_error({good, none}, L, S);
    CHECK(has(e, "no_bos.bin") && has(e, "step 0: the window [0, 1024) holds BOS tokens for 0 of its 8 sequences") && !has(e, good),
          "a shard without a BOS token: %s", e.c_str());
    CHECK(aligned_error({good, none}, L, 0).empty(), "the shard without a BOS token passes the consecutive loader: %s",
          aligned_error({good, none}, L, 0).c_str());
    // a good start, then 3000 tokens without a BOS token
    std::vector<uint16_t> gap(shards[0].begin(), shards[0].begin() + 8000);
    std::fill(gap.begin() + 4000, gap.begin() + 7000, (uint16_t)7);
    e = aligned_error({good, write("gap.bin", gap)}, L, S);
    CHECK(has(e, "gap.bin") && has(e, "step ") && has(e, " of its 8 sequences") && has(e, "positions in this shard"),
          "a window without enough BOS tokens: %s", e.c_str());
    // documents of 130 tokens: each sequence spans 130, 8 of them more than the window
    std::vector<uint16_t> long_docs(6000, 9);
    for (size_t i = 0; i < long_docs.size(); i += 130) long_docs[i] = shard::kBos;
    e = aligned_error({write("long_docs.bin", long_docs)}, L, S);
    CHECK(has(e, "long_docs.bin") && has(e, "holds BOS tokens for 7 of its 8 sequences"), "documents too long for the window: %s", e.c_str());
    // the same refusal through train::Data, as the trainer meets it
    train::Options o;
    o.train_data = hdir + "/no_bos.bin", o.val_data = bdir + "/val_*.bin";
    o.seq_len = L, o.seqs_per_step = S, o.steps = 10, o.val_tokens = 30LL * L, o.align_to_bos = 1;
    e.clear();
    try {
      dist::Context one;
      train::Data d(o, one);
    } catch (const shard::ShardError& ex) {
      e = ex.what();
    }
    CHECK(has(e, "no_bos.bin") && has(e, "of its 8 sequences"), "train::Data refuses the shard without a BOS token: %s", e.c_str());
    // and through --check-data, which reads the shards alone: the same shard is an error there,
    // while without alignment it passes
    CHECK(train::check_data(o) == 1, "--check-data with batch.align_to_bos 1 counts the shard without a BOS token as an error");
    o.align_to_bos = 0;
    CHECK(train::check_data(o) == 0, "--check-data without alignment passes the same shard");
    o.align_to_bos = 1, o.train_data = bdir + "/train_*.bin";
    CHECK(train::check_data(o) == 0, "--check-data with batch.align_to_bos 1 passes shards that hold their steps' sequences");
  }

  std::filesystem::remove_all(dir);
  return test_summary("bos-loader");
}
