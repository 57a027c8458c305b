// reshard — JSON spec files (format: docs/spec.md).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "reshard/plan.h"

namespace reshard {

struct Spec {
  std::map<std::string, std::shared_ptr<const Mesh>> meshes;
  PlanInput input;  // tensors (with lowered layouts), topology, options
};

// Parses a spec. Malformed JSON is kParse with line and column; a
// well-formed but inconsistent spec (unknown mesh, bad axis, rank mismatch,
// conflicting processes for a device, ...) is kInvalidArgument whose message
// starts with the JSON path of the offending value, e.g.
// "tensors[2].src.spec[1]: unknown mesh axis \"tq\"".
Spec parse_spec(std::string_view json_text);
// Reads and parses a file; an unreadable file is kInvalidArgument naming it.
Spec load_spec(const std::string& path);

}  // namespace reshard
