// Minimal .npy (format 1.0/2.0, C order, little-endian) reading and writing for attn_run:
// float32 ('<f4'), raw bf16 bits ('<u2'), int32 ('<i4'). The reader takes regular files only and
// checks the header's shape against the file's size before allocating anything.
#pragma once
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/files.h"

namespace npy {

struct Array {
  std::string dtype;  // "<f4", "<u2", "<i4"
  std::vector<size_t> shape;
  std::vector<char> data;
  size_t size() const {
    size_t n = 1;
    for (size_t s : shape) n *= s;
    return n;
  }
};

inline Array load(const std::string& path) {
  size_t file_size = 0;
  FILE* f = files::open_regular(path, &file_size, ".npy input");
  char magic[8];
  Array a;
  auto fail = [&](const std::string& why) {
    std::fclose(f);
    throw std::runtime_error(path + ": " + why);
  };
  if (std::fread(magic, 1, 8, f) != 8 || std::string(magic, 6) != "\x93NUMPY") fail("not a .npy file");
  uint32_t hlen = 0;
  if (magic[6] == 1) {
    uint16_t h16;
    if (std::fread(&h16, 2, 1, f) != 1) fail("short header");
    hlen = h16;
  } else if (std::fread(&hlen, 4, 1, f) != 1) {
    fail("short header");
  }
  if (hlen > 65536 || hlen > file_size) fail("header length " + std::to_string(hlen) + " is not plausible");
  std::string h(hlen, ' ');
  if (std::fread(&h[0], 1, hlen, f) != hlen) fail("short header");
  auto field = [&](const std::string& key) {
    size_t p = h.find("'" + key + "'");
    if (p == std::string::npos) fail("header lacks " + key);
    return h.substr(h.find(':', p) + 1);
  };
  std::string descr = field("descr");
  descr = descr.substr(descr.find('\'') + 1);
  a.dtype = descr.substr(0, descr.find('\''));
  if (field("fortran_order").find("True") < 8) fail("Fortran order is not supported");
  std::string shape = field("shape");
  shape = shape.substr(shape.find('(') + 1, shape.find(')') - shape.find('(') - 1);
  for (size_t p = 0; p < shape.size();) {
    size_t q = shape.find(',', p);
    std::string tok = shape.substr(p, q == std::string::npos ? std::string::npos : q - p);
    const size_t b = tok.find_first_not_of(" "), e = tok.find_last_not_of(" ");
    if (b != std::string::npos) {
      tok = tok.substr(b, e - b + 1);
      if (tok.empty() || tok.size() > 15 || tok.find_first_not_of("0123456789") != std::string::npos) fail("bad shape entry '" + tok + "'");
      a.shape.push_back(std::stoull(tok));
    }
    if (q == std::string::npos) break;
    p = q + 1;
  }
  size_t item = a.dtype == "<f4" || a.dtype == "<i4" ? 4 : a.dtype == "<u2" ? 2 : 0;
  if (!item) fail("dtype " + a.dtype + " not supported (use float32, int32, or uint16 holding bf16 bits)");
  size_t bytes = item;
  for (size_t d : a.shape) {
    if (d != 0 && bytes > file_size / d) fail("shape says more data than the file holds");
    bytes *= d;
  }
  const size_t header_bytes = (magic[6] == 1 ? 10 : 12) + (size_t)hlen;
  if (header_bytes + bytes != file_size)
    fail("shape says " + std::to_string(bytes) + " bytes of data, the file holds " + std::to_string(file_size - std::min(file_size, header_bytes)));
  a.data.resize(bytes);
  if (std::fread(a.data.data(), 1, a.data.size(), f) != a.data.size()) fail("file shorter than its shape says");
  std::fclose(f);
  return a;
}

inline void save_f32(const std::string& path, const std::vector<float>& x, const std::vector<size_t>& shape) {
  std::string s = "(";
  for (size_t d : shape) s += std::to_string(d) + ",";
  s += ")";
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': " + s + ", }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  FILE* f = std::fopen((path + ".tmp").c_str(), "wb");
  if (!f) throw std::runtime_error(path + ": cannot create");
  uint16_t hl = (uint16_t)h.size();
  bool ok = std::fwrite("\x93NUMPY\x01\x00", 1, 8, f) == 8 && std::fwrite(&hl, 2, 1, f) == 1 &&
            std::fwrite(h.data(), 1, h.size(), f) == h.size() && std::fwrite(x.data(), 4, x.size(), f) == x.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename((path + ".tmp").c_str(), path.c_str()) != 0) throw std::runtime_error(path + ": write failed");
}

}  // namespace npy
