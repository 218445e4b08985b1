// Shard reader and writer: round trip, and each corruption the reader must name.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "data/bos_align.h"
#include "data/shard.h"
#include "tests/check.h"

static std::string dir;

static void write_raw(const std::string& path, const void* p, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(p, 1, n, f);
  std::fclose(f);
}

// Runs read_shard and returns the error message ("" when it succeeded).
static std::string read_error(const std::string& path, int vocab = 50257) {
  try {
    shard::read_shard(path, vocab);
    return "";
  } catch (const shard::ShardError& e) {
    return e.what();
  }
}

static bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

int main() {
  char tmpl[] = "/tmp/shard_test_XXXXXX";
  dir = mkdtemp(tmpl);

  // round trip on random ids, with BOS tokens among them
  std::mt19937 rng(1234);
  std::vector<uint16_t> tokens(100003);
  for (auto& t : tokens) t = rng() % 50257;
  for (size_t i = 0; i < tokens.size(); i += 997) tokens[i] = shard::kBos;
  size_t bos = 0;
  for (auto t : tokens) bos += t == shard::kBos;
  std::string good = dir + "/good_000001.bin";
  shard::write_shard(good, tokens);
  shard::ShardInfo info;
  auto back = shard::read_shard(good, 50257, &info);
  CHECK(back == tokens, "round trip changed the tokens");
  CHECK(info.tokens == tokens.size() && info.documents == bos, "info %zu tokens %zu docs, want %zu %zu", info.tokens,
        info.documents, tokens.size(), bos);
  {
    FILE* f = std::fopen(good.c_str(), "rb");
    int32_t h[256];
    CHECK(std::fread(h, sizeof(h), 1, f) == 1, "header read");
    std::fclose(f);
    bool rest_zero = true;
    for (int i = 3; i < 256; i++) rest_zero &= h[i] == 0;
    CHECK(h[0] == 20240520 && h[1] == 1 && h[2] == (int32_t)tokens.size() && rest_zero, "header fields %d %d %d", h[0], h[1], h[2]);
  }
  CHECK(!std::fopen((good + ".tmp").c_str(), "rb"), "temporary file left behind");

  // empty shard is valid
  std::string empty = dir + "/empty.bin";
  shard::write_shard(empty, std::vector<uint16_t>{});
  CHECK(read_error(empty).empty(), "empty shard rejected: %s", read_error(empty).c_str());

  // corruptions, each with the message that names it
  std::vector<char> bytes;
  {
    FILE* f = std::fopen(good.c_str(), "rb");
    bytes.resize(1024 + tokens.size() * 2);
    CHECK(std::fread(bytes.data(), 1, bytes.size(), f) == bytes.size(), "raw read");
    std::fclose(f);
  }
  auto corrupt = [&](const std::string& name, std::vector<char> b) {
    std::string p = dir + "/" + name;
    write_raw(p, b.data(), b.size());
    return p;
  };
  std::string e;
  {
    auto b = bytes;
    int32_t bad = 12345;
    std::memcpy(b.data(), &bad, 4);
    e = read_error(corrupt("magic.bin", b));
    CHECK(has(e, "magic.bin") && has(e, "bad magic 12345"), "%s", e.c_str());
  }
  {
    auto b = bytes;
    int32_t v = 7;
    std::memcpy(b.data() + 4, &v, 4);
    e = read_error(corrupt("version.bin", b));
    CHECK(has(e, "version.bin") && has(e, "unsupported version 7"), "%s", e.c_str());
  }
  {
    auto b = bytes;
    b.resize(b.size() - 10);
    e = read_error(corrupt("truncated.bin", b));
    CHECK(has(e, "truncated.bin") && has(e, "truncated"), "%s", e.c_str());
  }
  {
    auto b = bytes;
    b.push_back(1);
    b.push_back(2);
    e = read_error(corrupt("trailing.bin", b));
    CHECK(has(e, "trailing.bin") && has(e, "trailing bytes"), "%s", e.c_str());
  }
  {
    std::vector<char> b(100, 0);
    e = read_error(corrupt("short.bin", b));
    CHECK(has(e, "short.bin") && has(e, "shorter than the 1024-byte shard header"), "%s", e.c_str());
  }
  {
    auto b = bytes;
    int32_t n = -5;
    std::memcpy(b.data() + 8, &n, 4);
    e = read_error(corrupt("negative.bin", b));
    CHECK(has(e, "negative.bin") && has(e, "negative token count"), "%s", e.c_str());
  }
  {
    auto b = bytes;
    uint16_t big = 50257;
    std::memcpy(b.data() + 1024 + 2 * 777, &big, 2);
    e = read_error(corrupt("range.bin", b));
    CHECK(has(e, "range.bin") && has(e, "token id 50257 at position 777") && has(e, "vocabulary size 50257"), "%s", e.c_str());
    CHECK(read_error(dir + "/range.bin", 50304).empty(), "id 50257 must pass with vocab 50304");
  }
  e = read_error(dir + "/does_not_exist.bin");
  CHECK(has(e, "does_not_exist.bin") && has(e, "cannot open"), "%s", e.c_str());

  // patterns
  try {
    auto files = shard::expand_pattern(dir + "/*.bin");
    CHECK(files.size() == 9 && files.front() < files.back(), "pattern found %zu files", files.size());
  } catch (...) {
    CHECK(false, "pattern threw");
  }
  try {
    shard::expand_pattern(dir + "/nothing_*.bin", "train");
    CHECK(false, "a pattern matching nothing must throw");
  } catch (const shard::ShardError& ex) {
    CHECK(has(ex.what(), "train pattern") && has(ex.what(), "nothing_*.bin") && has(ex.what(), "matches no file"), "%s", ex.what());
  }
  // writing into a missing directory fails with the file named
  try {
    shard::write_shard(dir + "/no/such/dir/x.bin", tokens);
    CHECK(false, "write into a missing directory must throw");
  } catch (const shard::ShardError& ex) {
    CHECK(has(ex.what(), "x.bin"), "%s", ex.what());
  }
  // not regular files: a FIFO among the shards must not hang the reader, a directory is named
  const std::string fifo = dir + "/pipe.bin";
  if (mkfifo(fifo.c_str(), 0600) == 0) {
    e = read_error(fifo);
    CHECK(has(e, "pipe.bin") && has(e, "FIFO"), "%s", e.c_str());
  }
  std::filesystem::create_directory(dir + "/folder.bin");
  e = read_error(dir + "/folder.bin");
  CHECK(has(e, "folder.bin") && has(e, "directory"), "%s", e.c_str());
  // a full disk (here: the file size limit, which fails writes the same way) is an error, and the
  // shard is not left half written
  {
    struct rlimit old, small = {4096, 4096};
    getrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_IGN);
    small.rlim_max = old.rlim_max;
    setrlimit(RLIMIT_FSIZE, &small);
    try {
      shard::write_shard(dir + "/full.bin", std::vector<uint16_t>(100000, 7));
      CHECK(false, "a write past the size limit must throw");
    } catch (const shard::ShardError& ex) {
      CHECK(has(ex.what(), "full.bin") && has(ex.what(), "write failed"), "%s", ex.what());
    }
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(!std::filesystem::exists(dir + "/full.bin") && !std::filesystem::exists(dir + "/full.bin.tmp"), "half shard left behind");
  }
  std::filesystem::remove_all(dir);
  // BOS-aligned sequences (data/bos_align.h) on a worked example: seq_len 4, 2 sequences a step
  // (windows of 16 tokens), a shard of 40 tokens. Step 0, window [0, 16): BOS at 0, 3, 5, 9, 12;
  // 0 -> 5 (3 is too near), 5 -> 9, pos 9. Step 1, window [9, 25): BOS at 9, 12, 20, 22, 24;
  // 9 -> 20, 20 -> 24, pos 24. Then 24 + 16 + 1 >= 40: the shard is done. Without the BOS at 24
  // step 1 finds one sequence, and the loader stops there, naming the step.
  {
    std::vector<uint16_t> toks(40, 7);
    for (int at : {0, 3, 5, 9, 12, 20, 22, 24, 30, 33, 39}) toks[at] = shard::kBos;
    std::vector<std::vector<size_t>> steps;
    std::string why;
    const bool ok = data::bos_aligned_steps(toks.data(), toks.size(), 4, 2, &steps, &why);
    CHECK(ok && steps == std::vector<std::vector<size_t>>({{0, 5}, {9, 20}}), "BOS-aligned steps of the worked example (%s)", why.c_str());
    toks[24] = 7;
    why.clear();
    CHECK(!data::bos_aligned_steps(toks.data(), toks.size(), 4, 2, &steps, &why) && why.find("step 1") != std::string::npos &&
              why.find("[9, 25)") != std::string::npos,
          "BOS-aligned steps: too few BOS tokens in step 1's window refused, naming it: %s", why.c_str());
    // every sequence starts at a BOS, reads seq_len + 1 tokens inside the shard, and the next
    // one starts at or after the seq_len tokens of the one before, on a random shard
    std::mt19937 r(5);
    std::vector<uint16_t> big(200000);
    for (auto& t : big) t = r() % 8 == 0 ? shard::kBos : 11;  // (documents of 8 tokens on average: every window holds its 8 sequences)
    CHECK(data::bos_aligned_steps(big.data(), big.size(), 64, 8, &steps, &why) && steps.size() > 100, "BOS-aligned steps of a random shard: %zu (%s)",
          steps.size(), why.c_str());
    int bad = 0;
    size_t last = 0;
    bool first = true;
    for (const auto& st : steps)
      for (size_t s0 : st) {
        bad += big[s0] != shard::kBos || s0 + 64 + 1 > big.size() || (!first && s0 < last + 64);
        last = s0, first = false;
      }
    CHECK(bad == 0, "BOS-aligned steps of a random shard: %d sequences off a BOS, past the shard or overlapping", bad);
  }
  return test_summary("shards");
}
