// The GNU Collaborative International Dictionary of English (Debian package dict-gcide) as a
// list of documents: one dictionary entry = one document. gcide.index holds, per headword,
// "word TAB offset TAB length" with offset and length in dictd's base-64 digits; several
// headwords can share one entry, so entries are the distinct (offset, length) pairs, in file
// order. gcide.dict.dz is gzip-compatible (dictzip). The 00-database-* entries are metadata.
#pragma once
#include <zlib.h>

#include <algorithm>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

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

inline std::string gunzip_file(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error(path + ": cannot open (install the dict-gcide package: scripts/setup.sh)");
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, n);
  int err;
  const char* msg = gzerror(f, &err);
  gzclose(f);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END)) throw std::runtime_error(path + ": corrupt gzip data (" + msg + ")");
  return out;
}

inline std::vector<std::string> load_documents(const std::string& dir = kDefaultDir) {
  std::string index_path = dir + "/gcide.index", dict_path = dir + "/gcide.dict.dz";
  std::ifstream idx(index_path);
  if (!idx) throw std::runtime_error(index_path + ": cannot open (install the dict-gcide package: scripts/setup.sh)");
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
