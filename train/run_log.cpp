// Run logs in the record's format: see run_log.h.
#include "train/run_log.h"

#include <stdexcept>

namespace train {

std::string RunLog::jsonl_path(const std::string& path) {
  const size_t dot = path.rfind(".txt");
  return (dot != std::string::npos && dot + 4 == path.size() ? path.substr(0, dot) : path) + ".jsonl";
}

RunLog::RunLog(const std::string& path, bool enabled) : enabled_(enabled) {
  if (!enabled_ || path.empty()) return;
  txt_ = std::fopen(path.c_str(), "a");
  if (!txt_) throw std::runtime_error(path + ": cannot open the log file for writing (--log-file)");
  jsonl_ = std::fopen(jsonl_path(path).c_str(), "a");
  if (!jsonl_) throw std::runtime_error(jsonl_path(path) + ": cannot open for writing");
}

RunLog::~RunLog() {
  if (txt_) std::fclose(txt_);
  if (jsonl_) std::fclose(jsonl_);
}

void RunLog::config(const std::string& json_object) { event(json_object); }

void RunLog::event(const std::string& json_object) {
  if (!enabled_ || !jsonl_) return;
  std::fprintf(jsonl_, "%s\n", json_object.c_str());
  std::fflush(jsonl_);
}

void RunLog::note(const std::string& line) {
  if (!enabled_) return;
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  if (txt_) {
    std::fprintf(txt_, "%s\n", line.c_str());
    std::fflush(txt_);
  }
}

static std::string fmt_num(const char* f, double x) {
  if (std::isnan(x)) return "nan";
  char b[64];
  std::snprintf(b, sizeof(b), f, x);
  return b;
}

void RunLog::step(int step, int total, double train_time_ms, double val_loss, double train_loss) {
  if (!enabled_) return;
  const double avg = step > 10 ? train_time_ms / (step - 10) : NAN;
  std::string line = "step:" + std::to_string(step) + "/" + std::to_string(total);
  if (!std::isnan(val_loss)) line += " val_loss:" + fmt_num("%.4f", val_loss);
  if (!std::isnan(train_loss)) line += " train_loss:" + fmt_num("%.4f", train_loss);
  line += " train_time:" + fmt_num("%.0f", train_time_ms) + "ms step_avg:" + fmt_num("%.2f", avg) + "ms";
  note(line);
  std::string js = "{\"event\": \"" + std::string(std::isnan(val_loss) ? "step" : "val") + "\", \"step\": " + std::to_string(step) +
                   ", \"total_steps\": " + std::to_string(total) + ", \"train_time_ms\": " + fmt_num("%.3f", train_time_ms);
  if (!std::isnan(val_loss)) js += ", \"val_loss\": " + fmt_num("%.17g", val_loss);
  if (!std::isnan(train_loss)) js += ", \"train_loss\": " + fmt_num("%.17g", train_loss);
  event(js + "}");
}

}  // namespace train
