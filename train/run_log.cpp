// Run logs in the record's format: see run_log.h.
#include "train/run_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "common/files.h"

namespace train {

std::string RunLog::jsonl_path(const std::string& path) {
  const size_t dot = path.rfind(".txt");
  return (dot != std::string::npos && dot + 4 == path.size() ? path.substr(0, dot) : path) + ".jsonl";
}

std::string RunLog::refuse_existing(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  struct stat st;
  if (path.empty() || path.back() == '/') return "'" + path + "' is not a file name";
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return dir + ": no such folder for the log";
  if (access(dir.c_str(), W_OK) != 0) return dir + ": cannot write the log there (" + std::strerror(errno) + ")";
  for (const std::string& p : {path, jsonl_path(path)})
    if (files::exists(p))
      return p + " exists: every run writes logs of its own (a resumed run too), so that two runs are never read as one; "
                 "name a new --log-file";
  // the files themselves, made and removed at once: a folder that only looks writable (a
  // read-only mount seen by root) or a name the file system refuses shows now, not once the run
  // has started
  for (const std::string& p : {path, jsonl_path(path)}) {
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return p + ": cannot create the log (" + std::strerror(errno) + ")";
    ::close(fd);
    ::unlink(p.c_str());
  }
  return "";
}

std::string RunLog::new_run_id() {
  std::random_device rd;
  const uint64_t t = (uint64_t)std::chrono::system_clock::now().time_since_epoch().count();
  const uint64_t id = ((uint64_t)rd() << 32 ^ rd()) ^ (t * 0x9e3779b97f4a7c15ull);
  char b[17];
  std::snprintf(b, sizeof(b), "%016llx", (unsigned long long)id);
  return b;
}

// Creates a file that must not exist yet (O_EXCL: even a race cannot append to another run's).
static FILE* create_new(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    throw std::runtime_error(path + (errno == EEXIST ? ": exists: every run writes logs of its own; name a new --log-file"
                                                     : ": cannot create the log file (--log-file): " + std::string(std::strerror(errno))));
  FILE* f = fdopen(fd, "w");
  if (!f) {
    ::close(fd);
    throw std::runtime_error(path + ": cannot write the log file (--log-file)");
  }
  return f;
}

RunLog::RunLog(const std::string& path, bool enabled, const std::string& run_id, const std::string& commit,
               const std::string& source_digest)
    : enabled_(enabled) {
  if (!enabled_ || path.empty()) return;
  txt_path_ = path, jsonl_path_ = jsonl_path(path);
  txt_ = create_new(txt_path_);
  try {
    jsonl_ = create_new(jsonl_path_);
  } catch (...) {
    std::fclose(txt_);
    std::remove(txt_path_.c_str());  // ours, and empty
    throw;
  }
  if (!run_id.empty())
    write(txt_, txt_path_, "run_id:" + run_id + " train_gpt " + commit + (source_digest.empty() ? "" : " source:" + source_digest));
}

void RunLog::write(FILE* f, const std::string& path, const std::string& line) {
  if (std::fprintf(f, "%s\n", line.c_str()) < 0 || std::fflush(f) != 0)
    throw std::runtime_error(path + ": writing the log failed (disk full?): " + std::strerror(errno));
}

RunLog::~RunLog() {
  if (txt_) std::fclose(txt_);
  if (jsonl_) std::fclose(jsonl_);
}

void RunLog::config(const std::string& json_object) { event(json_object); }

void RunLog::event(const std::string& json_object) {
  if (!enabled_ || !jsonl_) return;
  write(jsonl_, jsonl_path_, json_object);
}

void RunLog::note(const std::string& line) {
  if (!enabled_) return;
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  if (txt_) write(txt_, txt_path_, line);
}

static std::string fmt_num(const char* f, double x) {
  if (std::isnan(x)) return "nan";
  char b[64];
  std::snprintf(b, sizeof(b), f, x);
  return b;
}

void RunLog::event(const std::string& name, const std::vector<std::pair<std::string, double>>& fields) {
  nlohmann::ordered_json j;
  j["event"] = name;
  for (const auto& [k, v] : fields) j[k] = std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
  event(j.dump());
}

std::string RunLog::diverged(double loss) {
  return std::string("diverged(") + (std::isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf") + ")";
}

void RunLog::step(int step, int total, double train_time_ms, std::optional<double> val_loss, std::optional<double> train_loss) {
  if (!enabled_) return;
  const double avg = step > 10 ? train_time_ms / (step - 10) : NAN;
  const auto text = [](double x) { return std::isfinite(x) ? fmt_num("%.4f", x) : diverged(x); };
  std::string line = "step:" + std::to_string(step) + "/" + std::to_string(total);
  if (val_loss) line += " val_loss:" + text(*val_loss);
  if (train_loss) line += " train_loss:" + text(*train_loss);
  line += " train_time:" + fmt_num("%.0f", train_time_ms) + "ms step_avg:" + fmt_num("%.2f", avg) + "ms";
  note(line);
  nlohmann::ordered_json j;  // doubles are written so that they read back to the same bits
  const auto value = [](double x) { return std::isfinite(x) ? nlohmann::ordered_json(x) : nlohmann::ordered_json(diverged(x)); };
  j["event"] = val_loss ? "val" : "step";
  j["step"] = step;
  j["total_steps"] = total;
  j["train_time_ms"] = train_time_ms;
  if (val_loss) j["val_loss"] = value(*val_loss);
  if (train_loss) j["train_loss"] = value(*train_loss);
  event(j.dump());
}

}  // namespace train
