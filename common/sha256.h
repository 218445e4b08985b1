// SHA-256 through OpenSSL's libcrypto (the EVP interface), for knowing files by their contents:
// the GPT-2 vocabulary files by their published sums (data/gpt2/README.md), and token shards by
// the digests their manifest lists (data/manifest.h) and the loader takes of them as it reads
// them (data/dataloader.h). Binaries that use it link -lcrypto. A failure inside libcrypto (it
// cannot allocate) is a std::runtime_error.
#pragma once
#include <openssl/evp.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace sha256 {

// A digest taken in pieces: update() as the bytes come, hex() once at the end.
class Hasher {
 public:
  Hasher() : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
      EVP_MD_CTX_free(ctx_);
      throw std::runtime_error("SHA-256: libcrypto could not start a digest");
    }
  }
  ~Hasher() { EVP_MD_CTX_free(ctx_); }
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  void update(const void* data, size_t n) {
    if (n && EVP_DigestUpdate(ctx_, data, n) != 1) throw std::runtime_error("SHA-256: libcrypto failed to digest");
  }
  void update(const std::string& s) { update(s.data(), s.size()); }
  // The digest as 64 lowercase hex digits; the hasher is spent afterwards.
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx_, md, &len) != 1 || len != 32) throw std::runtime_error("SHA-256: libcrypto failed to finish a digest");
    static const char* digits = "0123456789abcdef";
    std::string out(64, '0');
    for (unsigned i = 0; i < 32; i++) out[2 * i] = digits[md[i] >> 4], out[2 * i + 1] = digits[md[i] & 15];
    return out;
  }

 private:
  EVP_MD_CTX* ctx_;
};

inline std::string hex(const void* data, size_t n) {
  Hasher h;
  h.update(data, n);
  return h.hex();
}
inline std::string hex(const std::string& data) { return hex(data.data(), data.size()); }

// The digest of what is left of f, read in pieces of 4 MiB; false when a read fails.
inline bool hex_of_rest(FILE* f, std::string* out) {
  Hasher h;
  std::vector<char> buf(size_t(4) << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) h.update(buf.data(), n);
  if (std::ferror(f)) return false;
  *out = h.hex();
  return true;
}

}  // namespace sha256
