// A spec refused with an error code whose message starts with the field's
// path and says what is wrong (the spec parser's and make_plan's checks).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "reshard/plan.h"
#include "reshard/spec.h"

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

}  // namespace reshard::testing
