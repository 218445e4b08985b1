// JSON text for the run's machine-readable log: strings escaped as RFC 8259 requires (a data
// path may hold quotes, backslashes or control characters), numbers written so that they read
// back to the same double, and non-finite numbers as null (JSON has no NaN).
#pragma once
#include <cmath>
#include <cstdio>
#include <string>

namespace json {

inline std::string str(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\u%04x", c);
          out += b;
        } else {
          out += (char)c;
        }
    }
  }
  return out + "\"";
}

inline std::string num(double x) {
  if (!std::isfinite(x)) return "null";
  char b[32];
  std::snprintf(b, sizeof(b), "%.17g", x);
  return b;
}
inline std::string num(long long x) { return std::to_string(x); }
inline std::string num(unsigned long long x) { return std::to_string(x); }
inline std::string num(int x) { return std::to_string(x); }

// An object built field by field: Object().add("a", json::str("x")).add("b", json::num(1)).text()
class Object {
 public:
  Object& add(const std::string& key, const std::string& json_value) {
    body_ += (body_.empty() ? "" : ", ") + str(key) + ": " + json_value;
    return *this;
  }
  std::string text() const { return "{" + body_ + "}"; }

 private:
  std::string body_;
};

}  // namespace json
