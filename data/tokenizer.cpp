// GPT-2 BPE tokenizer: see tokenizer.h for the steps and why each is as it is.
#include "tokenizer.h"

#include <climits>
#include <cstdio>
#include <functional>
#include <queue>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "common/files.h"
#include "common/sha256.h"
#include "unicode_tables.h"

namespace gpt2 {

// ---------------------------------------------------------------- UTF-8 and character classes

static void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += (char)cp;
  } else if (cp < 0x800) {
    out += (char)(0xC0 | (cp >> 6));
    out += (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += (char)(0xE0 | (cp >> 12));
    out += (char)(0x80 | ((cp >> 6) & 0x3F));
    out += (char)(0x80 | (cp & 0x3F));
  } else {
    out += (char)(0xF0 | (cp >> 18));
    out += (char)(0x80 | ((cp >> 12) & 0x3F));
    out += (char)(0x80 | ((cp >> 6) & 0x3F));
    out += (char)(0x80 | (cp & 0x3F));
  }
}

// Python's errors='replace' replaces each "maximal subpart" of an ill-formed sequence (the
// longest prefix of a valid sequence that the bytes begin) by one U+FFFD (Unicode 15, 3.9).
std::string utf8_sanitize(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  const unsigned char* p = (const unsigned char*)s.data();
  size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c < 0x80) {
      out += (char)c;
      i++;
      continue;
    }
    int need;
    unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      out += "\xEF\xBF\xBD";
      i++;
      continue;
    }
    size_t j = i + 1;
    bool ok = true;
    for (int k = 0; k < need; k++, j++) {
      unsigned lo_k = k == 0 ? lo : 0x80, hi_k = k == 0 ? hi : 0xBF;
      if (j >= n || p[j] < lo_k || p[j] > hi_k) {
        ok = false;
        break;
      }
    }
    if (ok) {
      out.append((const char*)p + i, j - i);
    } else {
      out += "\xEF\xBF\xBD";
    }
    i = j;  // on failure j is the first byte not part of the maximal subpart
  }
  return out;
}

// Decodes the code point at text[i] of clean UTF-8; sets len to its byte length.
static inline uint32_t decode_at(const std::string& t, size_t i, int& len) {
  const unsigned char* p = (const unsigned char*)t.data() + i;
  unsigned c = p[0];
  if (c < 0x80) { len = 1; return c; }
  if (c < 0xE0) { len = 2; return ((c & 0x1F) << 6) | (p[1] & 0x3F); }
  if (c < 0xF0) { len = 3; return ((c & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F); }
  len = 4;
  return ((c & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

static bool in_ranges(uint32_t cp, const uint32_t (*r)[2], int count) {
  int lo = 0, hi = count - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (cp < r[mid][0]) hi = mid - 1;
    else if (cp > r[mid][1]) lo = mid + 1;
    else return true;
  }
  return false;
}

bool is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return in_ranges(cp, kUnicodeLetterRanges, kUnicodeLetterRanges_count);
}
bool is_number(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_ranges(cp, kUnicodeNumberRanges, kUnicodeNumberRanges_count);
}
// Unicode's White_Space property, which is what \s means in tiktoken's regex engine.
bool is_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

enum CharClass { kLetter, kNumber, kSpace, kOther };
static inline CharClass classify(uint32_t cp) {
  if (is_letter(cp)) return kLetter;
  if (is_number(cp)) return kNumber;
  if (is_whitespace(cp)) return kSpace;
  return kOther;
}

// ---------------------------------------------------------------- pre-tokenizer

void pretokenize(const std::string& t, std::vector<std::pair<size_t, size_t>>& pieces) {
  size_t n = t.size(), i = 0;
  int len;
  while (i < n) {
    uint32_t c = decode_at(t, i, len);
    // 's|'t|'re|'ve|'m|'ll|'d
    if (c == '\'' && i + 1 < n) {
      char a = t[i + 1], b = i + 2 < n ? t[i + 2] : 0;
      size_t m = 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') m = 2;
      else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) m = 3;
      if (m) {
        pieces.emplace_back(i, i + m);
        i += m;
        continue;
      }
    }
    CharClass cls = classify(c);
    size_t start = i, j = i + len;
    if (c == ' ' && j < n) {  // ' ?' binds a single space to a following run of L, N or other
      int len2;
      CharClass next = classify(decode_at(t, j, len2));
      if (next != kSpace) {
        cls = next;
        j += len2;
      }
    }
    if (cls != kSpace) {
      while (j < n) {
        int l2;
        if (classify(decode_at(t, j, l2)) != cls) break;
        j += l2;
      }
      pieces.emplace_back(start, j);
      i = j;
      continue;
    }
    // \s+(?!\S) then \s+ : a whitespace run; if text follows it, the run's last character is
    // left to start the next piece, unless the run is a single character.
    size_t last = i;
    j = i;
    while (j < n) {
      int l2;
      if (!is_whitespace(decode_at(t, j, l2))) break;
      last = j;
      j += l2;
    }
    if (j < n && last > i) j = last;
    pieces.emplace_back(i, j);
    i = j;
  }
}

// ---------------------------------------------------------------- vocabulary files

// The only pair of files this tokenizer accepts (data/gpt2/README.md gives the same sums).
static const char* kEncoderSha256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783";
static const char* kVocabBpeSha256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5";

// Reads one of the two files and checks its SHA-256, so that another vocabulary (or a damaged
// copy) can never tokenize silently into other ids.
static std::string read_vocab_file(const std::string& dir, const char* name, const char* want_sha) {
  const std::string path = dir + "/" + name;
  std::string data;
  try {
    data = files::read_regular(path, 16u << 20, "GPT-2 vocabulary file");
  } catch (const files::FileError& e) {
    throw std::runtime_error(std::string(e.what()) + ". The GPT-2 tokenizer needs encoder.json and vocab.bpe: the repository ships "
                             "them in data/gpt2 (--vocab-dir DIR points elsewhere)");
  }
  const std::string got = sha256::hex(data);
  if (got != want_sha)
    throw std::runtime_error(path + ": SHA-256 " + got + " is not GPT-2's " + want_sha +
                             " (a damaged or different file; data/gpt2 holds the right one)");
  return data;
}

// The byte <-> printable-character table GPT-2's files are written in.
static void bytes_to_unicode(uint32_t table[256]) {
  bool direct[256] = {};
  for (int b = '!'; b <= '~'; b++) direct[b] = true;
  for (int b = 0xA1; b <= 0xAC; b++) direct[b] = true;
  for (int b = 0xAE; b <= 0xFF; b++) direct[b] = true;
  int extra = 0;
  for (int b = 0; b < 256; b++) table[b] = direct[b] ? b : 256 + extra++;
}

// Parses encoder.json: one JSON object of string -> integer. Returns (key as UTF-8, id).
static std::vector<std::pair<std::string, int>> parse_encoder_json(const std::string& path, const std::string& s) {
  std::vector<std::pair<std::string, int>> out;
  size_t i = 0, n = s.size();
  auto fail = [&](const char* what) {
    throw std::runtime_error(path + ": not a GPT-2 encoder.json (" + what + " near byte " +
                             std::to_string(i) + ")");
  };
  auto skip_ws = [&] { while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++; };
  auto hex4 = [&]() -> uint32_t {
    if (i + 4 > n) fail("short \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
      char c = s[i++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else fail("bad \\u escape");
    }
    return v;
  };
  skip_ws();
  if (i >= n || s[i++] != '{') fail("expected '{'");
  for (;;) {
    skip_ws();
    if (i < n && s[i] == '}') break;
    if (i >= n || s[i++] != '"') fail("expected a string key");
    std::string key;
    while (i < n && s[i] != '"') {
      char c = s[i++];
      if (c != '\\') { key += c; continue; }
      if (i >= n) fail("bad escape");
      char e = s[i++];
      switch (e) {
        case '"': key += '"'; break;
        case '\\': key += '\\'; break;
        case '/': key += '/'; break;
        case 'b': key += '\b'; break;
        case 'f': key += '\f'; break;
        case 'n': key += '\n'; break;
        case 'r': key += '\r'; break;
        case 't': key += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 <= n && s[i] == '\\' && s[i + 1] == 'u') {
            i += 2;
            uint32_t lo = hex4();
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(key, cp);
          break;
        }
        default: fail("bad escape");
      }
    }
    if (i >= n) fail("unterminated string");
    i++;
    skip_ws();
    if (i >= n || s[i++] != ':') fail("expected ':'");
    skip_ws();
    size_t st = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    if (st == i) fail("expected an integer id");
    out.emplace_back(key, std::atoi(s.c_str() + st));
    skip_ws();
    if (i < n && s[i] == ',') { i++; continue; }
    if (i < n && s[i] == '}') break;
    fail("expected ',' or '}'");
  }
  return out;
}

Tokenizer::Tokenizer(const std::string& dir) {
  const std::string enc_path = dir + "/encoder.json", bpe_path = dir + "/vocab.bpe";
  const std::string enc_text = read_vocab_file(dir, "encoder.json", kEncoderSha256);
  const std::string bpe_text = read_vocab_file(dir, "vocab.bpe", kVocabBpeSha256);
  uint32_t b2u[256];
  bytes_to_unicode(b2u);
  std::unordered_map<uint32_t, int> u2b;
  for (int b = 0; b < 256; b++) u2b[b2u[b]] = b;

  auto entries = parse_encoder_json(enc_path, enc_text);
  if (entries.size() != (size_t)kVocabSize)
    throw std::runtime_error(enc_path + ": expected " + std::to_string(kVocabSize) + " entries, found " +
                             std::to_string(entries.size()));
  id_to_bytes_.assign(kVocabSize, std::string());
  std::vector<bool> seen(kVocabSize, false);
  for (auto& [key, id] : entries) {
    if (id < 0 || id >= kVocabSize || seen[id])
      throw std::runtime_error(enc_path + ": id " + std::to_string(id) + " out of range or repeated");
    seen[id] = true;
    std::string bytes;
    if (id == kEndOfText) {
      bytes = key;  // "<|endoftext|>": a special token, never produced from text
    } else {
      for (size_t i = 0; i < key.size();) {
        int len;
        uint32_t cp = decode_at(key, i, len);
        auto it = u2b.find(cp);
        if (it == u2b.end())
          throw std::runtime_error(enc_path + ": key of id " + std::to_string(id) + " holds a character outside GPT-2's byte table");
        bytes += (char)it->second;
        i += len;
      }
    }
    id_to_bytes_[id] = bytes;
  }
  for (int id = 0; id < kVocabSize; id++)
    if (id != kEndOfText) bytes_to_id_.emplace(id_to_bytes_[id], id);

  // vocab.bpe must describe the same vocabulary: merge k creates token 256 + k.
  std::istringstream bpe(bpe_text);
  std::string line;
  int k = 0;
  std::getline(bpe, line);
  if (line.rfind("#version", 0) != 0) throw std::runtime_error(bpe_path + ": first line is not '#version: ...'");
  while (std::getline(bpe, line)) {
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    if (sp == std::string::npos) throw std::runtime_error(bpe_path + ": line " + std::to_string(k + 2) + " is not 'a b'");
    std::string merged;
    std::string parts[2] = {line.substr(0, sp), line.substr(sp + 1)};
    for (auto& part : parts)
      for (size_t i = 0; i < part.size();) {
        int len;
        auto it = u2b.find(decode_at(part, i, len));
        if (it == u2b.end()) throw std::runtime_error(bpe_path + ": bad character on line " + std::to_string(k + 2));
        merged += (char)it->second;
        i += len;
      }
    auto it = bytes_to_id_.find(merged);
    if (it == bytes_to_id_.end() || it->second != 256 + k)
      throw std::runtime_error(bpe_path + ": merge " + std::to_string(k) + " does not match encoder.json (is this the GPT-2 pair of files?)");
    k++;
  }
  if (k != kVocabSize - 257)
    throw std::runtime_error(bpe_path + ": expected " + std::to_string(kVocabSize - 257) + " merges, found " + std::to_string(k));
}

// ---------------------------------------------------------------- encoding

void Tokenizer::encode_piece(const char* p, size_t n, std::vector<int>& out) {
  auto whole = bytes_to_id_.find(std::string(p, n));
  if (whole != bytes_to_id_.end()) {
    out.push_back(whole->second);
    return;
  }
  std::string key(p, n);
  auto cached = cache_.find(key);
  if (cached != cache_.end()) {
    out.insert(out.end(), cached->second.begin(), cached->second.end());
    return;
  }
  // The parts form a linked list (each part's start never changes; a merge absorbs the right
  // part into the left). Candidate merges wait in a min-heap ordered by (rank, start): the
  // lowest rank, leftmost on ties, exactly the pair a scan of every pair would pick, in
  // O(n log n) instead of O(n^2) for a long piece. A heap entry is stale once either of its parts
  // has changed: it records the boundaries (start, mid, end) and is skipped unless they still hold.
  std::string tmp;
  auto rank_of = [&](size_t a, size_t b) -> int {
    tmp.assign(p + a, b - a);
    auto it = bytes_to_id_.find(tmp);
    return it == bytes_to_id_.end() ? INT_MAX : it->second;
  };
  std::vector<size_t> next(n), prev(n);  // by start byte; next = end of the part
  std::vector<char> alive(n, 1);
  for (size_t i = 0; i < n; i++) next[i] = i + 1, prev[i] = i - 1;  // prev[0] wraps: never read
  struct Cand {
    int rank;
    size_t start, mid, end;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : start > o.start; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](size_t a) {  // the merge of the part at a with the one after it
    const size_t mid = next[a];
    if (mid >= n) return;
    const size_t end = next[mid];
    const int r = rank_of(a, end);
    if (r != INT_MAX) heap.push({r, a, mid, end});
  };
  for (size_t i = 0; i + 1 < n; i++) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (!alive[c.start] || next[c.start] != c.mid || !alive[c.mid] || next[c.mid] != c.end) continue;
    alive[c.mid] = 0;
    next[c.start] = c.end;
    if (c.end < n) prev[c.end] = c.start;
    if (c.start > 0) push(prev[c.start]);
    push(c.start);
  }
  std::vector<int> ids;
  for (size_t i = 0; i < n; i = next[i]) ids.push_back(rank_of(i, next[i]));
  out.insert(out.end(), ids.begin(), ids.end());
  if (cache_.size() > (1u << 20)) cache_.clear();
  cache_.emplace(std::move(key), std::move(ids));
}

void Tokenizer::encode(const std::string& text, std::vector<int>& out) {
  std::string clean = utf8_sanitize(text);
  std::vector<std::pair<size_t, size_t>> pieces;
  pretokenize(clean, pieces);
  for (auto& [a, b] : pieces) encode_piece(clean.data() + a, b - a, out);
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string s;
  for (int id : ids) s += id_to_bytes_.at(id);
  return s;
}

}  // namespace gpt2
