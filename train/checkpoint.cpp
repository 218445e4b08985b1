// Checkpoint files: see checkpoint.h.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/files.h"

namespace train {

static const char kMagic[8] = {'T', 'G', 'P', 'T', 'C', 'K', 'P', 'T'};
static const uint32_t kVersion = 2;  // 1: without the data field (read, with data empty)
static const uint32_t kMaxBlobs = 64;  // train_gpt writes 4 (master, adam_m, adam_v, muon_buf)

namespace {
struct Hasher {  // FNV-1a, 64 bit
  uint64_t h = 1469598103934665603ull;
  void add(const void* p, size_t n) {
    const unsigned char* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  }
};
struct Writer {
  FILE* f;
  Hasher hash;
  bool ok = true;
  void put(const void* p, size_t n) {
    hash.add(p, n);
    ok = ok && std::fwrite(p, 1, n, f) == n;
  }
  template <typename T>
  void put(T v) {
    put(&v, sizeof(v));
  }
};
struct Reader {
  FILE* f;
  const std::string& path;
  size_t left;  // bytes of the file not read yet: every size field is checked against it first
  Hasher hash;
  void need(uint64_t n, const char* what) {
    if (n > left)
      throw CheckpointError(path + ": corrupt or truncated checkpoint (" + what + " of " + std::to_string(n) + " bytes, " +
                            std::to_string(left) + " left in the file)");
  }
  void get(void* p, size_t n) {
    need(n, "field");
    if (std::fread(p, 1, n, f) != n) throw CheckpointError(path + ": truncated checkpoint");
    left -= n;
    hash.add(p, n);
  }
  template <typename T>
  T get() {
    T v;
    get(&v, sizeof(v));
    return v;
  }
};
}  // namespace

void write_checkpoint(const std::string& path, const Checkpoint& c) {
  const std::string tmp = path + ".tmp";
  // whatever is at the temporary name is a leftover of an interrupted write: removed, and the
  // file made afresh (O_EXCL), so that a link there never has its target overwritten and a FIFO
  // is never opened (it would wait for a reader for ever)
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);  // (the umask applies, as to fopen's)
  Writer w{fd >= 0 ? ::fdopen(fd, "wb") : nullptr, Hasher{}, true};
  if (!w.f) {
    if (fd >= 0) ::close(fd);
    throw CheckpointError(path + ": cannot create " + tmp);
  }
  w.put(kMagic, sizeof(kMagic));
  w.put(kVersion);
  w.put((uint64_t)c.config.size());
  w.put(c.config.data(), c.config.size());
  w.put((uint64_t)c.data.size());
  w.put(c.data.data(), c.data.size());
  w.put(c.step);
  w.put(c.adam_steps);
  w.put((uint32_t)c.blobs.size());
  for (auto& [name, data] : c.blobs) {
    w.put((uint32_t)name.size());
    w.put(name.data(), name.size());
    w.put((uint64_t)data.size());
    w.put(data.data(), data.size() * sizeof(float));
  }
  const uint64_t sum = w.hash.h;
  bool ok = w.ok && std::fwrite(&sum, sizeof(sum), 1, w.f) == 1;
  ok = std::fflush(w.f) == 0 && ok;
  ok = fsync(fileno(w.f)) == 0 && ok;
  ok = std::fclose(w.f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw CheckpointError(path + ": write failed (disk full?); the previous checkpoint, if any, is intact");
  }
}

Checkpoint read_checkpoint(const std::string& path) {
  size_t size = 0;
  FILE* f = nullptr;
  try {
    f = files::open_regular(path, &size, "checkpoint (--resume)");
  } catch (const files::FileError& e) {
    throw CheckpointError(e.what());
  }
  Reader r{f, path, size, Hasher{}};
  Checkpoint c;
  try {
    char magic[8];
    r.get(magic, sizeof(magic));
    if (std::memcmp(magic, kMagic, sizeof(kMagic))) throw CheckpointError(path + ": not a train_gpt checkpoint");
    const uint32_t version = r.get<uint32_t>();
    if (version != kVersion && version != 1)
      throw CheckpointError(path + ": checkpoint version " + std::to_string(version) + ", this build reads 1 and " + std::to_string(kVersion));
    const uint64_t clen = r.get<uint64_t>();
    if (clen > (1u << 20)) throw CheckpointError(path + ": corrupt checkpoint (config length)");
    r.need(clen, "configuration");
    c.config.resize(clen);
    r.get(&c.config[0], clen);
    if (version >= 2) {
      const uint64_t dlen = r.get<uint64_t>();
      if (dlen > (1u << 20)) throw CheckpointError(path + ": corrupt checkpoint (data length)");
      r.need(dlen, "data digests");
      c.data.resize(dlen);
      if (dlen) r.get(&c.data[0], dlen);
    }
    // every number is checked against its range as it is read, the file and the field named: the
    // checksum only says that the bytes are those written, not that a writer wrote sense
    const auto outside = [&](const std::string& field, const std::string& value, const std::string& range) {
      return CheckpointError(path + ": field " + field + " is " + value + ", outside its range (" + range + "): not a checkpoint of train_gpt");
    };
    c.step = r.get<int64_t>();
    if (c.step < 0 || c.step > INT32_MAX) throw outside("step", std::to_string(c.step), "0 to " + std::to_string(INT32_MAX));
    c.adam_steps = r.get<int64_t>();
    if (c.adam_steps != c.step)  // the optimiser makes one Adam update a step, from step 0
      throw outside("adam_steps", std::to_string(c.adam_steps), "the step, " + std::to_string(c.step) + ": one Adam update a step");
    const uint32_t n = r.get<uint32_t>();
    if (n > kMaxBlobs) throw outside("blob count", std::to_string(n), "0 to " + std::to_string(kMaxBlobs));
    for (uint32_t i = 0; i < n; i++) {
      const uint32_t nl = r.get<uint32_t>();
      if (nl < 1 || nl > 4096) throw outside("blob " + std::to_string(i) + " name length", std::to_string(nl), "1 to 4096");
      r.need(nl, "blob name");
      std::string name(nl, ' ');
      r.get(&name[0], nl);
      if (c.blobs.count(name)) throw CheckpointError(path + ": blob " + name + " appears twice: not a checkpoint of train_gpt");
      const uint64_t count = r.get<uint64_t>();
      if (count > (1ull << 40)) throw outside("blob " + name + " float count", std::to_string(count), "0 to 2^40");
      r.need(count * sizeof(float), "blob");  // before the allocation: a header cannot claim more than the file holds
      std::vector<float> data(count);
      r.get(data.data(), count * sizeof(float));
      // weights, moments and momenta are finite; Adam's second moments (squares' averages) are not negative
      const bool squares = name == "adam_v";
      for (size_t k = 0; k < data.size(); k++)
        if (!std::isfinite(data[k]) || (squares && data[k] < 0))
          throw outside(name + "[" + std::to_string(k) + "]", std::to_string(data[k]), squares ? "finite, 0 or more" : "finite");
      c.blobs[name] = std::move(data);
    }
    const uint64_t want = r.hash.h;
    uint64_t sum;
    if (std::fread(&sum, sizeof(sum), 1, f) != 1) throw CheckpointError(path + ": truncated checkpoint");
    if (sum != want) throw CheckpointError(path + ": checksum mismatch: the checkpoint is corrupt");
    c.checksum = sum;
    if (std::fgetc(f) != EOF) throw CheckpointError(path + ": trailing bytes after the checkpoint");
  } catch (...) {
    std::fclose(f);
    throw;
  }
  std::fclose(f);
  return c;
}

void check_same_config(const Checkpoint& c, const std::string& config, const std::string& path) {
  if (c.config != config)
    throw CheckpointError(path + ": checkpoint from another configuration; refusing to resume.\n  checkpoint: " + c.config +
                          "\n  this run:   " + config);
}

void check_same_data(const Checkpoint& c, const std::string& data, const std::string& path) {
  if (c.data.empty())
    throw CheckpointError(path + ": the checkpoint records no digest of the data it was made on (a version 1 file); refusing to resume, "
                                 "since it may be of other data.\n  this run:   " + data);
  if (c.data != data)
    throw CheckpointError(path + ": checkpoint made on other data (the shards' contents differ); refusing to resume.\n  checkpoint: " + c.data +
                          "\n  this run:   " + data);
}

namespace {
std::filesystem::path folder_path(const std::string& dir) {  // "a/b/" -> "a/b"
  std::filesystem::path p = std::filesystem::path(dir).lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  return p.empty() ? std::filesystem::path(".") : p;
}
}  // namespace

std::string unwritable_checkpoint_dir(const std::string& dir) {
  if (dir.empty()) return "'' is not a folder name";
  std::filesystem::path at = folder_path(dir);
  struct stat st;
  while (stat(at.c_str(), &st) != 0) {  // the nearest part of the path that exists
    if (errno != ENOENT && errno != ENOTDIR) return at.string() + ": " + std::strerror(errno);
    at = at.has_relative_path() && at.has_parent_path() ? at.parent_path() : std::filesystem::path(at.is_absolute() ? "/" : ".");
  }
  if (!S_ISDIR(st.st_mode)) return at.string() + " exists and is not a folder";
  std::string probe = (at / ".train_gpt_probe_XXXXXX").string();
  const int fd = mkstemp(&probe[0]);
  if (fd < 0)
    return "cannot write checkpoints " + std::string(at == folder_path(dir) ? "in " : "under ") + at.string() + " (" +
           std::strerror(errno) + ")";
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

std::string used_checkpoint_dir(const std::string& dir, const std::string& resume) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return "";
  if (!fs::is_directory(dir, ec)) return dir + " exists and is not a folder";
  int found = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    found += n.rfind("ckpt_", 0) == 0 && n.size() > 9 && n.compare(n.size() - 4, 4, ".bin") == 0;
  }
  if (ec) return dir + ": cannot list the folder: " + ec.message();
  if (!found) return "";
  if (!resume.empty() && fs::equivalent(fs::path(resume).parent_path().empty() ? "." : fs::path(resume).parent_path(), dir, ec))
    return "";
  return dir + " holds " + std::to_string(found) + " checkpoint(s) of another run, which this run would overwrite; name a new folder, "
         "or --resume from one of them to continue that run";
}

std::vector<std::string> make_checkpoint_dir(const std::string& dir) {
  std::vector<std::string> made;
  std::filesystem::path p = folder_path(dir), sofar;
  for (const auto& part : p) {
    sofar /= part;
    std::error_code ec;
    if (std::filesystem::create_directory(sofar, ec)) made.push_back(sofar.string());
    else if (ec) {
      remove_made_dirs(made);
      throw CheckpointError(dir + ": cannot create the checkpoint folder (--checkpoint-dir): " + ec.message());
    }
  }
  if (!std::filesystem::is_directory(p)) {
    remove_made_dirs(made);
    throw CheckpointError(dir + ": the checkpoint folder (--checkpoint-dir) is not a folder");
  }
  return made;
}

void remove_made_dirs(const std::vector<std::string>& made) {
  for (auto it = made.rbegin(); it != made.rend(); ++it) {
    std::error_code ec;
    std::filesystem::remove(*it, ec);  // an empty folder only: a non-empty one fails and stays
  }
}

}  // namespace train
