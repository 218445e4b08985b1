// prepare: text -> token shards (format: docs/formats.md). Every document is tokenized with the
// GPT-2 tokenizer and preceded by token 50256. Documents are kept whole inside a shard unless
// one is longer than a shard, which is then split at shard boundaries; every shard but the last
// holds exactly --shard-tokens tokens or ends where the next document would not fit. The first
// shard written is the validation shard (NAME_val_000000.bin), then NAME_train_000001.bin, ...
// Documents are shuffled with a fixed seed by default, since the default corpus (GCIDE) is in
// alphabetical order and a validation set of "A" words would be unlike the training data.
//
// The output is a fresh folder, never a used one: shards are written into a hidden folder beside
// it, with a manifest (data/manifest.h), which is renamed into place at the end. A folder that
// exists and is not empty is refused, so old shards are never left beside new ones, and a crash
// or a full disk leaves no partial set behind.
#include <CLI/CLI.hpp>

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cctype>
#include <map>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "common/cli.h"
#include "common/files.h"
#include "common/sha256.h"
#include "data/gcide.h"
#include "data/manifest.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace fs = std::filesystem;

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

// The output folder must not exist yet, or be empty (it is replaced as a whole at the end).
static fs::path check_out_dir(const std::string& out_dir) {
  fs::path out = fs::path(out_dir).lexically_normal();
  if (out.has_filename() == false) out = out.parent_path();  // "dir/" -> "dir"
  if (out.empty() || out == "." || out == ".." || out == "/")
    throw CLI::ValidationError("--out-dir", "'" + out_dir + "' cannot be replaced: name a folder of its own for the shards");
  std::error_code ec;
  const auto st = fs::symlink_status(out, ec);
  if (!ec && fs::exists(st)) {
    if (!fs::is_directory(st)) throw CLI::ValidationError("--out-dir", out_dir + " exists and is not a folder");
    if (!fs::is_empty(out, ec))
      throw CLI::ValidationError("--out-dir", out_dir + " is not empty: prepare writes a fresh folder, so that shards of two runs "
                                                        "never mix; remove it or name another");
  }
  return out;
}

// The shard name prefix becomes file names, glob patterns (--train-data NAME_train_*.bin) and
// manifest lines: letters, digits, '.', '_', '-' and '+' only (no '/', space, tab, newline or other
// control character, no glob or shell character), not starting with '.' or '-', and short
// enough for a file name.
static void check_name(const std::string& name) {
  const char* why = nullptr;
  if (name.empty()) why = "is empty";
  else if (name.size() > 200) why = "is longer than 200 characters";
  else if (name[0] == '.' || name[0] == '-') why = "starts with '.' or '-'";
  else
    for (unsigned char c : name)
      if (!(c < 128 && std::isalnum(c)) && c != '.' && c != '_' && c != '-' && c != '+') {
        why = "holds a character other than letters, digits, '.', '_', '-' and '+'";
        break;
      }
  if (!why) return;
  std::string shown;  // control characters made visible
  for (unsigned char c : name.substr(0, 80)) {
    char b[8];
    if (c < 32 || c == 127) std::snprintf(b, sizeof(b), "\\x%02x", c), shown += b;
    else shown += (char)c;
  }
  throw CLI::ValidationError("--name", "'" + shown + (name.size() > 80 ? "...'" : "'") + " " + why + " (it names the shard files)");
}

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"prepare: tokenize a corpus into llm.c / modded-nanogpt token shards"};
  app.add_option("--text", o.text_files, "text files to tokenize, one document per file (default: the GCIDE dictionary, one entry per document)");
  app.add_option("--gcide-dir", o.gcide_dir, "directory holding gcide.index and gcide.dict.dz")->capture_default_str();
  app.add_option("--out-dir", o.out_dir, "new (or empty) folder for the shards")->capture_default_str();
  app.add_option("--name", o.name, "shard name prefix (letters, digits, . _ - +): NAME_val_000000.bin, NAME_train_000001.bin, ...")->capture_default_str();
  app.add_option("--vocab-dir", o.vocab_dir, "directory with GPT-2's encoder.json and vocab.bpe")->capture_default_str();
  cli::integer<size_t>(app, "--shard-tokens", o.shard_tokens, 64, (size_t)INT32_MAX, "tokens per shard")->capture_default_str();
  cli::integer<unsigned>(app, "--threads", o.threads, 0, 256, "tokenizer threads (0: one per core)")->capture_default_str();
  cli::integer<uint64_t>(app, "--seed", o.seed, 0, UINT64_MAX, "document shuffle seed")->capture_default_str();
  app.add_flag("--no-shuffle", o.no_shuffle, "keep documents in input order");
  fs::path out;
  try {
    app.parse(argc, argv);
    check_name(o.name);
    out = check_out_dir(o.out_dir);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  signal(SIGPIPE, SIG_IGN);

  std::string staging;
  try {
    auto t0 = std::chrono::steady_clock::now();
    gpt2::Tokenizer base(o.vocab_dir);
    std::vector<std::string> docs;
    if (!o.text_files.empty()) {
      // a document given twice (one file named twice, or a copy) could be shuffled into the
      // validation shard and a training shard both: known by its SHA-256, refused naming both
      std::map<std::string, std::string> first_of;  // digest -> the file that gave it first
      for (auto& p : o.text_files) {
        docs.push_back(files::read_regular(p, size_t(1) << 30, "input text (--text)"));
        const std::string digest = sha256::hex(docs.back());
        const auto [at, fresh] = first_of.emplace(digest, p);
        if (!fresh)
          throw std::runtime_error("--text " + at->second + " and " + p + ": the same document (SHA-256 " + digest.substr(0, 16) +
                                   "...): it could land in the validation and the training shards both; give it once");
      }
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

    // the shards go into a hidden folder beside the output, renamed into place when complete
    const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
    fs::create_directories(parent);
    std::string tmpl = (parent / ("." + out.filename().string() + ".partial-XXXXXX")).string();
    if (!mkdtemp(&tmpl[0])) throw std::runtime_error(parent.string() + ": cannot create a folder there (--out-dir)");
    staging = tmpl;
    const mode_t mask = umask(0);  // mkdtemp makes it 0700; the shards' folder gets the usual mode
    umask(mask);
    fs::permissions(staging, static_cast<fs::perms>(0777 & ~mask));

    unsigned nthreads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
    std::vector<gpt2::Tokenizer> toks(nthreads, base);
    std::vector<uint16_t> shard_buf;
    int shard_index = 0;
    size_t total_tokens = 0, done_bytes = 0;
    std::vector<manifest::Entry> written;
    auto flush = [&] {
      if (shard_buf.empty()) return;
      char fname[64];
      std::snprintf(fname, sizeof(fname), "_%s_%06d.bin", shard_index == 0 ? "val" : "train", shard_index);
      const std::string file = o.name + fname;
      shard::write_shard(staging + "/" + file, shard_buf);
      const std::string bytes = std::string((const char*)shard_buf.data(), shard_buf.size() * 2);
      size_t documents = 0;
      for (uint16_t t : shard_buf) documents += t == shard::kBos;
      // the SHA-256 is of the whole file: header, then the tokens
      int32_t header[shard::kHeaderInts] = {shard::kMagic, shard::kVersion, (int32_t)shard_buf.size()};
      written.push_back({file, shard_buf.size(), documents, sha256::hex(std::string((const char*)header, sizeof(header)) + bytes)});
      shard_index++;
      shard_buf.clear();
    };
    auto push = [&](uint16_t t) {
      shard_buf.push_back(t);
      if (shard_buf.size() == o.shard_tokens) flush();
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
        if (!shard_buf.empty() && shard_buf.size() + len > o.shard_tokens) flush();  // keep short documents whole
        push(shard::kBos);
        for (int id : d) push((uint16_t)id);
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
    manifest::write(staging, written);
    // into place: rename() replaces only a missing or empty folder, so a folder filled meanwhile is not touched
    std::error_code ec;
    fs::rename(staging, out, ec);
    if (ec) throw std::runtime_error(out.string() + ": cannot move the new shards into place (" + ec.message() + "); is it still empty?");
    staging.clear();
    double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "%sprepare: %zu documents, %zu tokens in %zu shards under %s/ (%.1f s, %.2f MB/s with %u threads)\n",
                 tty ? "\n" : "", docs.size(), total_tokens, written.size(), out.c_str(), el, total_bytes / 1e6 / el, nthreads);
    if (written.size() < 2)
      std::fprintf(stderr, "prepare: warning: only a validation shard was written; lower --shard-tokens to get train shards\n");
    return 0;
  } catch (const std::exception& e) {
    if (!staging.empty()) {
      std::error_code ec;
      fs::remove_all(staging, ec);
    }
    std::fprintf(stderr, "prepare: error: %s\n", e.what());
    return 1;
  }
}
