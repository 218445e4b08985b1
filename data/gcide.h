// The GNU Collaborative International Dictionary of English (Debian package dict-gcide) as a
// list of documents: one dictionary entry = one document. gcide.index holds, per headword,
// "word TAB offset TAB length" with offset and length in dictd's base-64 digits; several
// headwords can share one entry, so entries are the distinct (offset, length) pairs, in file
// order. gcide.dict.dz is gzip-compatible (dictzip). The 00-database-* entries are metadata.
#pragma once
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/files.h"

namespace gcide {

constexpr const char* kDefaultDir = "/usr/share/dictd";

inline long long dictd_b64(const std::string& s, const std::string& where) {
  static const std::string digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  long long v = 0;
  for (char c : s) {
    size_t d = digits.find(c);
    if (d == std::string::npos || s.empty()) throw std::runtime_error(where + ": bad base-64 number '" + s + "'");
    v = v * 64 + (long long)d;
  }
  return v;
}

// The decompressed text, refusing more than max_bytes (a small file can inflate without bound).
inline std::string gunzip_file(const std::string& path, size_t max_bytes = size_t(1) << 30) {
  FILE* raw = nullptr;
  try {
    raw = files::open_regular(path, nullptr, "GCIDE dictionary");
  } catch (const files::FileError& e) {
    throw std::runtime_error(std::string(e.what()) + " (install the dict-gcide package: scripts/setup.sh)");
  }
  const int fd = dup(fileno(raw));
  std::fclose(raw);
  gzFile f = fd >= 0 ? gzdopen(fd, "rb") : nullptr;
  if (!f) {
    if (fd >= 0) close(fd);
    throw std::runtime_error(path + ": cannot read");
  }
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) {
    out.append(buf, n);
    if (out.size() > max_bytes) {
      gzclose(f);
      throw std::runtime_error(path + ": decompresses to more than " + std::to_string(max_bytes) + " bytes; not the GCIDE dictionary");
    }
  }
  int err;
  const char* msg = gzerror(f, &err);
  gzclose(f);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END)) throw std::runtime_error(path + ": corrupt gzip data (" + msg + ")");
  return out;
}

inline std::vector<std::string> load_documents(const std::string& dir = kDefaultDir) {
  std::string index_path = dir + "/gcide.index", dict_path = dir + "/gcide.dict.dz";
  std::string index_text;
  try {
    index_text = files::read_regular(index_path, size_t(256) << 20, "GCIDE index");
  } catch (const files::FileError& e) {
    throw std::runtime_error(std::string(e.what()) + " (install the dict-gcide package: scripts/setup.sh)");
  }
  std::istringstream idx(index_text);
  std::vector<std::pair<long long, long long>> entries;
  std::string line;
  size_t lineno = 0;
  while (std::getline(idx, line)) {
    lineno++;
    size_t t1 = line.find('\t'), t2 = t1 == std::string::npos ? t1 : line.find('\t', t1 + 1);
    if (t2 == std::string::npos) throw std::runtime_error(index_path + ":" + std::to_string(lineno) + ": not 'word TAB offset TAB length'");
    if (line.rfind("00-database", 0) == 0) continue;
    std::string where = index_path + ":" + std::to_string(lineno);
    entries.emplace_back(dictd_b64(line.substr(t1 + 1, t2 - t1 - 1), where), dictd_b64(line.substr(t2 + 1), where));
  }
  std::sort(entries.begin(), entries.end());
  entries.erase(std::unique(entries.begin(), entries.end()), entries.end());
  std::string text = gunzip_file(dict_path);
  std::vector<std::string> docs;
  docs.reserve(entries.size());
  for (auto [off, len] : entries) {
    if (off < 0 || len <= 0 || off + len > (long long)text.size())
      throw std::runtime_error(index_path + ": entry at offset " + std::to_string(off) + " runs past the end of " + dict_path);
    docs.emplace_back(text, off, len);
  }
  return docs;
}

}  // namespace gcide
