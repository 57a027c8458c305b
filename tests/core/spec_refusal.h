// Refused inputs: a spec refused with an error code whose message starts
// with the field's path and says what is wrong (the spec parser's and
// make_plan's checks), and plan bytes refused by decode_plan as corrupt.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "reshard/plan.h"
#include "reshard/spec.h"
#include "reshard/wire.h"

namespace reshard::testing {

// Parses and plans `spec` (JSON); expects an error of `code` whose message
// begins with `field` and contains `words`.
inline void expect_spec_refused(const std::string& spec, ErrorCode code, const std::string& field,
                                const std::string& words) {
  try {
    const Spec s = parse_spec(spec);
    (void)make_plan(s.input);
    FAIL() << "accepted: " << spec;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind(field, 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

// Expects decode_plan(bytes) to refuse them as kCorrupt, the message
// containing `words`.
inline void expect_plan_corrupt(const std::vector<uint8_t>& bytes, const std::string& words) {
  try {
    (void)decode_plan(bytes);
    ADD_FAILURE() << "decoded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorrupt) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

}  // namespace reshard::testing
