// prepare: text -> token shards (SPEC section 5). Every document is tokenized with the GPT-2
// tokenizer and preceded by token 50256. Documents are kept whole inside a shard unless one is
// longer than a shard. The first shard written is the validation shard (NAME_val_000000.bin),
// then NAME_train_000001.bin, ... Documents are shuffled with a fixed seed by default, since the
// default corpus (GCIDE) is in alphabetical order and a validation set of "A" words would be
// unlike the training data.
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "gcide.h"
#include "shard.h"
#include "tokenizer.h"

struct Options {
  std::vector<std::string> text_files;
  std::string gcide_dir = gcide::kDefaultDir;
  std::string out_dir = "data/gcide";
  std::string name = "gcide";
  std::string vocab_dir = "data/gpt2";
  size_t shard_tokens = 1 << 20;
  unsigned threads = 0;
  uint64_t seed = 1337;
  bool no_shuffle = false;
};

static uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"prepare: tokenize a corpus into llm.c / modded-nanogpt token shards"};
  app.add_option("--text", o.text_files, "text files to tokenize, one document per file (default: the GCIDE dictionary, one entry per document)");
  app.add_option("--gcide-dir", o.gcide_dir, "directory holding gcide.index and gcide.dict.dz")->capture_default_str();
  app.add_option("--out-dir", o.out_dir, "directory for the shards")->capture_default_str();
  app.add_option("--name", o.name, "shard name prefix: NAME_val_000000.bin, NAME_train_000001.bin, ...")->capture_default_str();
  app.add_option("--vocab-dir", o.vocab_dir, "directory with GPT-2's encoder.json and vocab.bpe (downloaded when absent)")->capture_default_str();
  app.add_option("--shard-tokens", o.shard_tokens, "tokens per shard")->capture_default_str()->check(CLI::Range((size_t)1, (size_t)INT32_MAX));
  app.add_option("--threads", o.threads, "tokenizer threads (0: one per core)")->capture_default_str();
  app.add_option("--seed", o.seed, "document shuffle seed")->capture_default_str();
  app.add_flag("--no-shuffle", o.no_shuffle, "keep documents in input order");
  CLI11_PARSE(app, argc, argv);

  try {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::string> docs;
    if (!o.text_files.empty()) {
      for (auto& p : o.text_files) docs.push_back(slurp(p));
    } else {
      std::fprintf(stderr, "prepare: reading GCIDE from %s\n", o.gcide_dir.c_str());
      docs = gcide::load_documents(o.gcide_dir);
    }
    if (!o.no_shuffle) {
      uint64_t s = o.seed;
      for (size_t i = docs.size(); i > 1; i--) std::swap(docs[i - 1], docs[splitmix64(s) % i]);
    }
    size_t total_bytes = 0;
    for (auto& d : docs) total_bytes += d.size();
    gpt2::Tokenizer base(o.vocab_dir);
    if (std::system(("mkdir -p '" + o.out_dir + "'").c_str()) != 0) throw std::runtime_error(o.out_dir + ": cannot create");

    unsigned nthreads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
    std::vector<gpt2::Tokenizer> toks(nthreads, base);
    std::vector<uint16_t> shard_buf;
    int shard_index = 0;
    size_t total_tokens = 0, done_bytes = 0;
    std::vector<std::string> written;
    auto flush = [&] {
      if (shard_buf.empty()) return;
      char fname[64];
      std::snprintf(fname, sizeof(fname), "_%s_%06d.bin", shard_index == 0 ? "val" : "train", shard_index);
      std::string path = o.out_dir + "/" + o.name + fname;
      shard::write_shard(path, shard_buf);
      written.push_back(path);
      shard_index++;
      shard_buf.clear();
    };
    bool tty = isatty(fileno(stderr));
    auto last_report = t0;
    const size_t batch = 2048;
    std::vector<std::vector<int>> ids(batch);
    for (size_t b0 = 0; b0 < docs.size(); b0 += batch) {
      size_t b1 = std::min(docs.size(), b0 + batch);
      std::vector<std::thread> pool;
      for (unsigned t = 0; t < nthreads; t++)
        pool.emplace_back([&, t] {
          for (size_t i = b0 + t; i < b1; i += nthreads) {
            ids[i - b0].clear();
            toks[t].encode(docs[i], ids[i - b0]);
          }
        });
      for (auto& th : pool) th.join();
      for (size_t i = b0; i < b1; i++) {
        auto& d = ids[i - b0];
        size_t len = d.size() + 1;
        if (!shard_buf.empty() && shard_buf.size() + len > o.shard_tokens) flush();
        shard_buf.push_back(shard::kBos);
        for (int id : d) {
          shard_buf.push_back((uint16_t)id);
          if (shard_buf.size() == o.shard_tokens) flush();
        }
        total_tokens += len;
        done_bytes += docs[i].size();
      }
      auto now = std::chrono::steady_clock::now();
      double el = std::chrono::duration<double>(now - t0).count();
      if (std::chrono::duration<double>(now - last_report).count() > (tty ? 0.2 : 5.0) || b1 == docs.size()) {
        last_report = now;
        std::fprintf(stderr, "%sprepare: %5.1f%% of %.1f MB, %zu documents, %.2fM tokens, %.1f MB/s%s",
                     tty ? "\r" : "", 100.0 * done_bytes / std::max<size_t>(total_bytes, 1), total_bytes / 1e6, b1,
                     total_tokens / 1e6, done_bytes / 1e6 / std::max(el, 1e-9), tty ? "" : "\n");
      }
    }
    flush();
    double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "%sprepare: %zu documents, %zu tokens in %zu shards under %s/ (%.1f s, %.2f MB/s with %u threads)\n",
                 tty ? "\n" : "", docs.size(), total_tokens, written.size(), o.out_dir.c_str(), el, total_bytes / 1e6 / el,
                 nthreads);
    if (written.size() < 2)
      std::fprintf(stderr, "prepare: warning: only a validation shard was written; lower --shard-tokens to get train shards\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prepare: error: %s\n", e.what());
    return 1;
  }
}
