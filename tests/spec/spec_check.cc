// Runs the spec parser on many documents for schema_test.py, in one process:
// reads a JSON array of spec texts on stdin and writes a JSON array with,
// for each text, {"code": "ok", "options": {...}} (the planner options the
// spec resolves to, defaults included) or {"code": <error_code_name>,
// "message": <what>}. Anything but a reshard::Error escapes and fails the
// test.
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "reshard/error.h"
#include "reshard/spec.h"

int main() {
  using nlohmann::json;
  const json texts = json::parse(std::cin);
  json results = json::array();
  for (const json& text : texts) {
    try {
      const reshard::Spec spec = reshard::parse_spec(text.get<std::string>());
      const reshard::PlanOptions& o = spec.input.options;
      results.push_back({{"code", "ok"},
                         {"options",
                          {{"split_min_bytes", o.split_min_bytes},
                           {"alpha_seconds", o.alpha_seconds},
                           {"intra_host_bytes_per_second", o.intra_host_bytes_per_second},
                           {"inter_host_bytes_per_second", o.inter_host_bytes_per_second},
                           {"staging_budget_bytes", o.staging_budget_bytes},
                           {"relays", o.relays},
                           {"reduce_scatter", o.reduce_scatter},
                           {"nics_per_host", o.nics_per_host},
                           {"single_hop_guard", o.single_hop_guard}}}});
    } catch (const reshard::Error& e) {
      results.push_back({{"code", reshard::error_code_name(e.code())}, {"message", e.what()}});
    }
  }
  std::cout << results.dump() << "\n";
  return 0;
}
