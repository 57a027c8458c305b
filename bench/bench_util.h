// Shared helpers of the benchmark programs.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace reshard::bench {

// Median wall time of `repeat` calls of f.
inline double median_seconds(int repeat, const std::function<void()>& f) {
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) {
    auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace reshard::bench
