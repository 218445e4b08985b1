// Numeric command-line values read strictly, for every binary of the project (CLI11 options).
//
// CLI11 on its own reads integers with base detection ("010" is 8, "0x10" is 16), lets NaN
// through range checks (every comparison with NaN is false) and, for unsigned types, wraps
// negative values. These options instead take plain decimal numbers only ("010" is 10), refuse
// values outside the option's range or its type's with a message naming the flag, and refuse
// NaN and infinities. The value is checked as text, before CLI11 converts it.
#pragma once
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>

namespace cli {

namespace detail {
inline bool plain_integer(const std::string& s, bool allow_minus) {
  size_t i = 0;
  if (!s.empty() && (s[0] == '+' || (allow_minus && s[0] == '-'))) i = 1;
  if (i == s.size()) return false;
  for (; i < s.size(); i++)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}
}  // namespace detail

// A whole number in [lo, hi], written in decimal.
template <typename T>
CLI::Option* integer(CLI::App& app, const std::string& name, T& var, T lo, T hi, const std::string& desc) {
  static_assert(std::is_integral<T>::value, "integer options only");
  const std::string range = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  CLI::Validator v(
      [lo, hi, range](std::string& s) -> std::string {
        const bool is_signed = std::is_signed<T>::value;
        if (!detail::plain_integer(s, is_signed)) {
          if (!s.empty() && s[0] == '-' && !is_signed) return "'" + s + "' is negative: want " + range;
          return "'" + s + "' is not a decimal integer: want " + range;
        }
        errno = 0;
        char* end = nullptr;
        if (is_signed) {
          const long long x = std::strtoll(s.c_str(), &end, 10);
          if (errno == ERANGE || x < (long long)lo || x > (long long)hi) return "'" + s + "' is out of range: want " + range;
          s = std::to_string(x);
        } else {
          const unsigned long long x = std::strtoull(s.c_str(), &end, 10);
          if (errno == ERANGE || x < (unsigned long long)lo || x > (unsigned long long)hi)
            return "'" + s + "' is out of range: want " + range;
          s = std::to_string(x);
        }
        return std::string();
      },
      "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]", "integer");
  return app.add_option(name, var, desc)->transform(v);
}

// A finite real number in [lo, hi].
inline CLI::Option* real(CLI::App& app, const std::string& name, double& var, double lo, double hi, const std::string& desc) {
  char b[64];
  std::snprintf(b, sizeof(b), "%g, %g", lo, hi);
  const std::string range = "a finite number in [" + std::string(b) + "]";
  CLI::Validator v(
      [lo, hi, range](std::string& s) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double x = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || s.find_first_of(" \t\n") != std::string::npos)
          return "'" + s + "' is not a number: want " + range;
        if (!std::isfinite(x) || errno == ERANGE || x < lo || x > hi) return "'" + s + "' is out of range: want " + range;
        char out[40];
        std::snprintf(out, sizeof(out), "%.17g", x);
        s = out;
        return std::string();
      },
      std::string("[") + b + "]", "real");
  return app.add_option(name, var, desc)->transform(v);
}

}  // namespace cli
