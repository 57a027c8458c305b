// reshard — waiting with deadlines and timing, shared by the engine, the
// transports (reshard/backend.h), the command-line tool and the benchmarks:
// every wait has a deadline, and an idle waiter yields the core to the ranks
// it waits for.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace reshard {

using WaitClock = std::chrono::steady_clock;

// Idle waiting on shared, oversubscribed machines: spin briefly, then yield,
// then sleep in short slices so that the ranks waited for get the cores.
class Backoff {
 public:
  void pause() {
    if (++n_ < 64) return;
    if (n_ < 2048) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  int n_ = 0;
};

// Seconds of wall time since `t0`.
inline double seconds_since(WaitClock::time_point t0) {
  return std::chrono::duration<double>(WaitClock::now() - t0).count();
}

// Now plus `seconds` (capped at 10^7 s, so that "forever" cannot overflow).
inline WaitClock::time_point deadline_after(double seconds) {
  return WaitClock::now() + std::chrono::duration_cast<WaitClock::duration>(
                                std::chrono::duration<double>(std::min(seconds, 1e7)));
}

// "12.5 s"
inline std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", seconds);
  return text;
}

// "1, 4, 7"
inline std::string rank_list(const std::vector<int32_t>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace reshard
