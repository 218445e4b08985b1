// tokenize: GPT-2 token ids of text, for tests and for checking against other tokenizers.
//   tokenize [--vocab-dir DIR] FILE      ids of the whole file, space-separated, one line
//   tokenize [--vocab-dir DIR] --hex     each stdin line is hex bytes; prints one line of ids each
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "tokenizer.h"

static std::string from_hex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out += (char)std::stoi(h.substr(i, 2), nullptr, 16);
  return out;
}

int main(int argc, char** argv) {
  std::string vocab_dir = "data/gpt2", file;
  bool hex = false, bench = false;
  CLI::App app{"tokenize: GPT-2 token ids (same as tiktoken's gpt2 encode_ordinary)"};
  app.add_option("--vocab-dir", vocab_dir, "directory with encoder.json and vocab.bpe")->capture_default_str();
  app.add_flag("--hex", hex, "read hex-encoded lines from stdin, print one line of ids per line");
  app.add_flag("--bench", bench, "print only the token count and speed for FILE");
  app.add_option("file", file, "text file to tokenize");
  CLI11_PARSE(app, argc, argv);
  try {
    gpt2::Tokenizer tok(vocab_dir);
    if (hex) {
      std::string line;
      while (std::getline(std::cin, line)) {
        auto ids = tok.encode(from_hex(line));
        for (size_t i = 0; i < ids.size(); i++) std::printf(i ? " %d" : "%d", ids[i]);
        std::printf("\n");
      }
      return 0;
    }
    if (file.empty()) throw std::runtime_error("give a FILE or --hex");
    std::ifstream f(file, std::ios::binary);
    if (!f) throw std::runtime_error(file + ": cannot open");
    std::ostringstream ss;
    ss << f.rdbuf();
    auto t0 = std::chrono::steady_clock::now();
    auto ids = tok.encode(ss.str());
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (bench) {
      std::printf("%zu bytes, %zu tokens, %.3f s, %.2f MB/s (one thread)\n", ss.str().size(), ids.size(), s, ss.str().size() / 1e6 / s);
      return 0;
    }
    for (size_t i = 0; i < ids.size(); i++) std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenize: error: %s\n", e.what());
    return 1;
  }
}
