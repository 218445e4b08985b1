// tokenize: GPT-2 token ids of text, for tests and for checking against other tokenizers.
//   tokenize [--vocab-dir DIR] FILE      ids of the whole file, space-separated, one line
//   tokenize [--vocab-dir DIR] --hex     each stdin line is hex bytes; prints one line of ids each
// A line of --hex input must hold an even number of hex digits and nothing else; any other line
// is an error naming its number (exit 1), before anything of that line is printed.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "common/files.h"
#include "tokenizer.h"

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static std::string from_hex(const std::string& h, size_t lineno) {
  const std::string where = "stdin line " + std::to_string(lineno) + " (--hex)";
  if (h.size() % 2) throw std::runtime_error(where + ": odd number of hex digits (" + std::to_string(h.size()) + ")");
  std::string out;
  out.reserve(h.size() / 2);
  for (size_t i = 0; i < h.size(); i += 2) {
    const int a = hex_digit(h[i]), b = hex_digit(h[i + 1]);
    if (a < 0 || b < 0) throw std::runtime_error(where + ": not a hex digit at column " + std::to_string(i + (a < 0 ? 1 : 2)));
    out += (char)(a * 16 + b);
  }
  return out;
}

static bool print_ids(const std::vector<int>& ids) {
  for (size_t i = 0; i < ids.size(); i++)
    if (std::printf(i ? " %d" : "%d", ids[i]) < 0) return false;
  return std::printf("\n") >= 0;
}

int main(int argc, char** argv) {
  std::string vocab_dir = "data/gpt2", file;
  bool hex = false, bench = false;
  CLI::App app{"tokenize: GPT-2 token ids (same as tiktoken's gpt2 encode_ordinary)"};
  app.add_option("--vocab-dir", vocab_dir, "directory with encoder.json and vocab.bpe")->capture_default_str();
  app.add_flag("--hex", hex, "read hex-encoded lines from stdin, print one line of ids per line");
  app.add_flag("--bench", bench, "print only the token count and speed for FILE");
  app.add_option("file", file, "text file to tokenize");
  try {
    app.parse(argc, argv);
    if (hex && !file.empty()) throw CLI::ValidationError("--hex", "reads stdin: give either --hex or FILE, not both");
    if (!hex && file.empty()) throw CLI::ValidationError("FILE", "give a FILE to tokenize, or --hex");
    if (bench && hex) throw CLI::ValidationError("--bench", "times FILE; it does not go with --hex");
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    gpt2::Tokenizer tok(vocab_dir);
    bool ok = true;
    if (hex) {
      std::string line;
      for (size_t lineno = 1; ok && std::getline(std::cin, line); lineno++) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        ok = print_ids(tok.encode(from_hex(line, lineno)));
      }
    } else {
      const std::string text = files::read_regular(file, size_t(1) << 30, "input file");
      auto t0 = std::chrono::steady_clock::now();
      auto ids = tok.encode(text);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (bench)
        ok = std::printf("%zu bytes, %zu tokens, %.3f s, %.2f MB/s (one thread)\n", text.size(), ids.size(), s, text.size() / 1e6 / s) >= 0;
      else
        ok = print_ids(ids);
    }
    if (std::fflush(stdout) != 0 || !ok) throw std::runtime_error("writing the ids to stdout failed (disk full or closed pipe?)");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenize: error: %s\n", e.what());
    return 1;
  }
}
