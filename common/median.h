// The median of a list of times (the mean of the middle two for an even count; NaN for none).
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

inline double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}
