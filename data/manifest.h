// The manifest of a folder of shards written by `prepare`: manifest.tsv lists every shard of the
// run with its token count, document count and SHA-256,
//     # train_gpt shard manifest v1
//     file<TAB>tokens<TAB>documents<TAB>sha256
//     gcide_val_000000.bin<TAB>1048576<TAB>5443<TAB>9f86d0...
// so that a shard that does not belong to the run (copied in by hand, left from another run) or
// one that is missing is found rather than silently mixed in. `prepare` writes a fresh folder
// only, with the manifest last. Folders without a manifest (FineWeb's published shards) are
// taken as they are. check() compares the files a pattern matched against the manifest of
// their folder: names and sizes always, contents (SHA-256) when asked (--check-data).
#pragma once
#include <fnmatch.h>

#include <cctype>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/sha256.h"
#include "data/shard.h"

namespace manifest {

constexpr const char* kFile = "manifest.tsv";
constexpr const char* kHeader = "# train_gpt shard manifest v1";

struct Entry {
  std::string file;  // name inside the folder
  size_t tokens = 0, documents = 0;
  std::string sha256;
};

inline std::string dir_of(const std::string& path) {
  const size_t s = path.rfind('/');
  return s == std::string::npos ? "." : s == 0 ? "/" : path.substr(0, s);
}
inline std::string base_of(const std::string& path) {
  const size_t s = path.rfind('/');
  return s == std::string::npos ? path : path.substr(s + 1);
}

// Writes DIR/manifest.tsv atomically (temporary file and rename).
inline void write(const std::string& dir, const std::vector<Entry>& entries) {
  const std::string path = dir + "/" + kFile, tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw shard::ShardError(path + ": cannot create");
  bool ok = std::fprintf(f, "%s\nfile\ttokens\tdocuments\tsha256\n", kHeader) > 0;
  for (const Entry& e : entries) ok = ok && std::fprintf(f, "%s\t%zu\t%zu\t%s\n", e.file.c_str(), e.tokens, e.documents, e.sha256.c_str()) > 0;
  ok = std::fflush(f) == 0 && ok;
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw shard::ShardError(path + ": write failed (disk full?)");
  }
}

// Reads DIR/manifest.tsv; false when the folder has none. A malformed one is an error.
inline bool read(const std::string& dir, std::vector<Entry>* out) {
  const std::string path = dir + "/" + kFile;
  if (!files::exists(path)) return false;
  const std::string text = files::read_regular(path, size_t(64) << 20, "shard manifest");
  std::istringstream in(text);
  std::string line;
  size_t lineno = 0;
  out->clear();
  while (std::getline(in, line)) {
    lineno++;
    if (lineno == 1) {
      if (line != kHeader) throw shard::ShardError(path + ": first line is not '" + kHeader + "'");
      continue;
    }
    if (lineno == 2 || line.empty()) continue;
    Entry e;
    char name[4096], sum[80];
    unsigned long long t, d;
    int used = 0;
    if (std::sscanf(line.c_str(), "%4095[^\t]\t%llu\t%llu\t%79s%n", name, &t, &d, sum, &used) != 4 || (size_t)used != line.size())
      throw shard::ShardError(path + ":" + std::to_string(lineno) + ": not 'file TAB tokens TAB documents TAB sha256'");
    // the digest is compared with sha256::hex's lowercase digits: hex of either case is taken, as
    // lowercase; anything else is refused here rather than reported later as a changed shard
    e.sha256 = sum;
    bool hex = e.sha256.size() == 64;
    for (char& c : e.sha256) {
      hex = hex && std::isxdigit((unsigned char)c);
      c = (char)std::tolower((unsigned char)c);
    }
    if (!hex)
      throw shard::ShardError(path + ":" + std::to_string(lineno) + ": field sha256 '" + std::string(sum) + "' is not 64 hex digits");
    e.file = name, e.tokens = t, e.documents = d;
    out->push_back(e);
  }
  return true;
}

// Problems of the matched files against their folders' manifests, one message each (empty: none).
// pattern is the glob the files came from: listed shards it would match but that are missing
// are reported too. With contents, every listed file's SHA-256 is checked.
inline std::vector<std::string> check(const std::vector<std::string>& matched, const std::string& pattern, bool contents) {
  std::vector<std::string> problems;
  std::map<std::string, std::vector<std::string>> by_dir;
  for (const std::string& f : matched) by_dir[dir_of(f)].push_back(f);
  for (const auto& [dir, list] : by_dir) {
    std::vector<Entry> entries;
    try {
      if (!read(dir, &entries)) continue;
    } catch (const std::exception& e) {
      problems.push_back(e.what());
      continue;
    }
    const std::string mpath = dir + "/" + kFile;
    std::map<std::string, const Entry*> listed;
    for (const Entry& e : entries) listed[e.file] = &e;
    std::map<std::string, bool> seen;
    for (const std::string& f : list) {
      const std::string name = base_of(f);
      auto it = listed.find(name);
      if (it == listed.end()) {
        problems.push_back(f + ": not listed in " + mpath + ": a shard from another run in this folder? (prepare writes a fresh folder)");
        continue;
      }
      seen[name] = true;
      size_t size = 0;
      try {
        FILE* fp = files::open_regular(f, &size, "shard");
        std::string data;
        if (contents) {
          data.resize(size);
          if (size && std::fread(&data[0], 1, size, fp) != size) data.clear();
        }
        std::fclose(fp);
        if (size != shard::kHeaderBytes + 2 * it->second->tokens)
          problems.push_back(f + ": " + std::to_string(size) + " bytes, but " + mpath + " lists " + std::to_string(it->second->tokens) +
                             " tokens (" + std::to_string(shard::kHeaderBytes + 2 * it->second->tokens) + " bytes)");
        else if (contents && sha256::hex(data) != it->second->sha256)
          problems.push_back(f + ": SHA-256 differs from " + mpath + ": the shard was changed after it was written");
      } catch (const std::exception& e) {
        problems.push_back(e.what());
      }
    }
    const std::string pat_base = base_of(pattern);
    for (const Entry& e : entries)
      if (!seen.count(e.file) && fnmatch(pat_base.c_str(), e.file.c_str(), 0) == 0)
        problems.push_back(dir + "/" + e.file + ": listed in " + mpath + " but missing");
  }
  return problems;
}

}  // namespace manifest
