// The one knob for test sizes: RESHARD_TEST_SCALE, the percentage of their
// random cases the randomised tests run (the CMake cache variable of the
// same name: 100 by default; the sanitizer presets in CMakePresets.json set
// less, as ASan and TSan run the same code 5-50 times slower and the dev
// build runs every case). Each test's assertions on what its cases covered
// are proportional to the cases it ran.
#pragma once

#include <cstdint>

#ifndef RESHARD_TEST_SCALE
#define RESHARD_TEST_SCALE 100
#endif

namespace reshard {

// `cases` scaled by RESHARD_TEST_SCALE, at least `least`.
constexpr int scaled_cases(int cases, int least = 1) {
  const long long s = static_cast<long long>(cases) * RESHARD_TEST_SCALE / 100;
  return s < least ? least : static_cast<int>(s);
}

// A coverage threshold of `n` cases at full scale: `n` there, and half the
// scaled count below it (a few dozen random cases fluctuate around their
// share).
constexpr int least_covered(int n) { return RESHARD_TEST_SCALE >= 100 ? n : scaled_cases(n) / 2; }

// Whether the `index`-th case of an enumerated grid runs: all of them at
// full scale, below it about RESHARD_TEST_SCALE percent, picked by a hash of
// the index so that every corner of the grid keeps its share.
constexpr bool sampled_case(int index) {
  if (RESHARD_TEST_SCALE >= 100) return true;
  uint64_t h = static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  return h % 100 < static_cast<uint64_t>(RESHARD_TEST_SCALE);
}

}  // namespace reshard
