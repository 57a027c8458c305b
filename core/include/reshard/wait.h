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

#if defined(__linux__)
#include <sys/prctl.h>
#endif

namespace reshard {

using WaitClock = std::chrono::steady_clock;

// Idle waiting on shared, oversubscribed machines: poll a few times (a
// completion about to land costs no sleep), then sleep, from 5 µs doubling
// to at most 50 µs a slice, and never past the waiter's deadline, so that
// the ranks waited for get the cores. Never sched_yield: on a core shared
// with a busy process (a data loader, `yes > /dev/null`) a yield hands that
// process a whole time slice, milliseconds, on every idle poll, where a
// sleeping waiter is woken on time and runs again at once. Measured on 2
// cores, 4 ranks and two spinning processes: waits that yielded made MPI
// executions 4-10x slower than waits that sleep (docs/engine.md, "Sharing
// the machine").
class Backoff {
 public:
  static constexpr int kPolls = 32;
  static constexpr std::chrono::microseconds kFirstSleep{5};
  static constexpr std::chrono::microseconds kMaxSleep{50};

  Backoff() = default;
  Backoff(const Backoff&) = delete;
  Backoff& operator=(const Backoff&) = delete;
  ~Backoff() { restore_slack(); }

  // Called after a poll that found nothing ready; returns at once, or by
  // `deadline` at the latest.
  void pause(WaitClock::time_point deadline = WaitClock::time_point::max()) {
    if (++polls_ <= kPolls) return;
    const auto now = WaitClock::now();
    if (now >= deadline) return;
#if defined(__linux__)
    // Linux rounds a sleep up by the thread's timer slack (50 µs by
    // default): for the waits' short slices, 1 µs while this waiter sleeps.
    if (saved_slack_ < 0) {
      saved_slack_ = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
      if (saved_slack_ >= 0) prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    }
#endif
    std::this_thread::sleep_for(std::min<WaitClock::duration>(sleep_, deadline - now));
    sleep_ = std::min(sleep_ * 2, kMaxSleep);
  }

  // Something became ready: poll before sleeping again.
  void reset() {
    polls_ = 0;
    sleep_ = kFirstSleep;
  }

 private:
  void restore_slack() {
#if defined(__linux__)
    if (saved_slack_ > 0)
      prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(saved_slack_), 0, 0, 0);
#endif
  }

  int polls_ = 0;
  std::chrono::microseconds sleep_ = kFirstSleep;
  long saved_slack_ = -1;
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
