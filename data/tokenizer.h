// GPT-2 byte-level BPE tokenizer, giving the same token ids as tiktoken's "gpt2" encoding
// (encode_ordinary: the text <|endoftext|> is plain text, never the special token).
//
// Steps, each as tiktoken does them:
//   1. bytes -> UTF-8 text, each maximal invalid subsequence replaced by U+FFFD (Python's
//      bytes.decode('utf-8', errors='replace')); the clean UTF-8 is what gets tokenized.
//   2. pre-tokenize with GPT-2's pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (leftmost-first alternation; \s is Unicode White_Space), written here as a hand scanner.
//   3. each piece: if its bytes are a token, that token; else start from single bytes and
//      repeatedly merge the adjacent pair whose concatenation has the lowest rank (leftmost on
//      ties). GPT-2's ids are those ranks: 0..255 bytes, then merges in vocab.bpe order.
//
// encoder.json and vocab.bpe are read from a directory (the repository ships them in data/gpt2)
// and must match GPT-2's published SHA-256 sums. Nothing is downloaded.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace gpt2 {

constexpr int kEndOfText = 50256;
constexpr int kVocabSize = 50257;

// Decodes bytes as UTF-8 with replacement and returns clean UTF-8.
std::string utf8_sanitize(const std::string& bytes);

// Splits clean UTF-8 text into pre-token pieces (byte ranges [begin, end)).
void pretokenize(const std::string& text, std::vector<std::pair<size_t, size_t>>& pieces);

bool is_letter(uint32_t cp);
bool is_number(uint32_t cp);
bool is_whitespace(uint32_t cp);

class Tokenizer {
 public:
  // Loads DIR/encoder.json and DIR/vocab.bpe, checking their SHA-256 sums.
  // Throws std::runtime_error with a message naming the file on any problem.
  explicit Tokenizer(const std::string& dir);

  // Appends the ids of `text` (any bytes) to `out`. Not thread-safe (it caches pieces);
  // use one Tokenizer per thread, or copy one.
  void encode(const std::string& text, std::vector<int>& out);
  std::vector<int> encode(const std::string& text) {
    std::vector<int> ids;
    encode(text, ids);
    return ids;
  }
  std::string decode(const std::vector<int>& ids) const;
  int vocab_size() const { return (int)id_to_bytes_.size(); }

 private:
  void encode_piece(const char* p, size_t n, std::vector<int>& out);
  std::unordered_map<std::string, int> bytes_to_id_;  // token bytes -> id (= BPE rank)
  std::vector<std::string> id_to_bytes_;
  std::unordered_map<std::string, std::vector<int>> cache_;
};

}  // namespace gpt2
