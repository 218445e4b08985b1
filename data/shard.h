// Token shards in the llm.c / modded-nanogpt format.
//   header: 256 x int32 = {magic 20240520, version 1, token count n, 0...}
//   body:   n x uint16 token ids
// Readers check the magic, the version, the words after the count (zero), the count against the
// file size and every id against the vocabulary; each failure is a ShardError whose message names
// the file and the fault. Every byte of a shard is thus either checked or a token, so that its
// header follows from its tokens, and a shard is known by the SHA-256 of its whole file (header
// and tokens), as read_shard can give it: two files of the same tokens have the same digest.
// Writers go through a temporary file and a rename, so a crash never leaves a half shard.
#pragma once
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/sha256.h"

namespace shard {

constexpr int32_t kMagic = 20240520;
constexpr int32_t kVersion = 1;
constexpr size_t kHeaderInts = 256;
constexpr size_t kHeaderBytes = kHeaderInts * sizeof(int32_t);
constexpr uint16_t kBos = 50256;  // GPT-2's <|endoftext|>, which begins every document

struct ShardError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ShardInfo {
  std::string path;
  size_t tokens = 0;
  size_t documents = 0;  // BOS tokens
};

inline void write_shard(const std::string& path, const uint16_t* tokens, size_t n) {
  if (n > (size_t)INT32_MAX) throw ShardError(path + ": too many tokens for one shard (" + std::to_string(n) + ")");
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw ShardError(path + ": cannot create " + tmp);
  int32_t header[kHeaderInts] = {kMagic, kVersion, (int32_t)n};
  bool ok = std::fwrite(header, sizeof(header), 1, f) == 1 && (n == 0 || std::fwrite(tokens, sizeof(uint16_t), n, f) == n);
  ok = (std::fflush(f) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw ShardError(path + ": write failed (disk full?)");
  }
}
inline void write_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  write_shard(path, tokens.data(), tokens.size());
}

// Opens a shard for reading: a regular file only (a FIFO would hang the reader).
inline FILE* open(const std::string& path) {
  try {
    return files::open_regular(path, nullptr, "shard");
  } catch (const files::FileError& e) {
    throw ShardError(e.what());
  }
}

// Reads and checks the header (copied to raw when given); returns the token count. Leaves f
// positioned at the body.
inline size_t read_header(FILE* f, const std::string& path, int32_t* raw = nullptr) {
  struct stat st;
  if (fstat(fileno(f), &st) != 0) throw ShardError(path + ": cannot stat");
  int32_t local[kHeaderInts];
  int32_t* header = raw ? raw : local;
  if ((size_t)st.st_size < kHeaderBytes || std::fread(header, kHeaderBytes, 1, f) != 1)
    throw ShardError(path + ": file is " + std::to_string(st.st_size) + " bytes, shorter than the " +
                     std::to_string(kHeaderBytes) + "-byte shard header");
  if (header[0] != kMagic)
    throw ShardError(path + ": bad magic " + std::to_string(header[0]) + " (expected " + std::to_string(kMagic) +
                     "): not a token shard");
  if (header[1] != kVersion)
    throw ShardError(path + ": unsupported version " + std::to_string(header[1]) + " (expected " +
                     std::to_string(kVersion) + ")");
  if (header[2] < 0) throw ShardError(path + ": negative token count " + std::to_string(header[2]));
  for (size_t i = 3; i < kHeaderInts; i++)
    if (header[i] != 0)
      throw ShardError(path + ": header word " + std::to_string(i) + " is " + std::to_string(header[i]) +
                       " (words 3 to 255 of the header are 0): not a shard of this format");
  size_t n = (size_t)header[2];
  size_t body = (size_t)st.st_size - kHeaderBytes;
  if (body != n * sizeof(uint16_t))
    throw ShardError(path + ": header says " + std::to_string(n) + " tokens (" + std::to_string(n * 2) +
                     " bytes) but the file holds " + std::to_string(body) + " bytes after the header (" +
                     (body < n * 2 ? "truncated" : "trailing bytes") + ")");
  return n;
}

// Reads a whole shard, checking every id against vocab_size; digest, when given, receives the
// SHA-256 of the file's bytes as they were read.
inline std::vector<uint16_t> read_shard(const std::string& path, int vocab_size, ShardInfo* info = nullptr, std::string* digest = nullptr) {
  FILE* f = open(path);
  std::vector<uint16_t> tokens;
  int32_t header[kHeaderInts];
  try {
    size_t n = read_header(f, path, header);
    tokens.resize(n);
    if (n && std::fread(tokens.data(), sizeof(uint16_t), n, f) != n) throw ShardError(path + ": read failed");
  } catch (...) {
    std::fclose(f);
    throw;
  }
  std::fclose(f);
  size_t docs = 0;
  for (size_t i = 0; i < tokens.size(); i++) {
    if (tokens[i] >= vocab_size)
      throw ShardError(path + ": token id " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                       " is not below the vocabulary size " + std::to_string(vocab_size));
    docs += tokens[i] == kBos;
  }
  if (info) *info = {path, tokens.size(), docs};
  if (digest) {
    sha256::Hasher h;
    h.update(header, kHeaderBytes);
    h.update(tokens.data(), tokens.size() * sizeof(uint16_t));
    *digest = h.hex();
  }
  return tokens;
}

// Files matching a glob pattern, sorted; no match is an error naming the pattern.
inline std::vector<std::string> expand_pattern(const std::string& pattern, const char* what = "data") {
  glob_t g;
  int rc = glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> files;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; i++) files.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  if (files.empty()) throw ShardError(std::string(what) + " pattern '" + pattern + "' matches no file");
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace shard
