// Test helper: an oracle report as text for assertion messages (the count
// of mismatches and each reported one: tensor, device, index, values).
#pragma once

#include <cstdint>
#include <string>

#include "reshard/oracle.h"

namespace reshard::testing {

inline std::string describe(const OracleReport& r) {
  std::string s = std::to_string(r.mismatches) + " mismatches";
  for (const OracleMismatch& m : r.first) {
    s += "\n  " + m.tensor + " device " + std::to_string(m.device) + " [";
    for (int64_t i : m.index) s += std::to_string(i) + ",";
    s += "] expected " + m.expected + " got " + m.got;
  }
  return s;
}

}  // namespace reshard::testing
