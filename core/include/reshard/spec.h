// reshard — JSON spec files (format: docs/spec.md; JSON Schema:
// schema/spec.schema.json).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/flat.h"
#include "reshard/plan.h"

namespace reshard {

// A flat layout of a spec ("flat" at the top level, docs/spec.md): the
// tensors whose source (or destination) names it, in the spec's order, and
// its lowering (their layouts in `input` are lowered.layouts[k]).
struct SpecFlat {
  std::string name;
  bool source = true;           // the tensors' source (else destination)
  std::vector<size_t> tensors;  // indices into input.tensors, in buffer order
  FlatLayout layout;
  FlatLowered lowered;
};

struct Spec {
  std::map<std::string, std::shared_ptr<const Mesh>> meshes;
  std::vector<SpecFlat> flats;  // the flat layouts some tensor uses, by name
  PlanInput input;              // tensors (with lowered layouts), topology, options
  // Meshes that give no "hosts" and have a device whose host no other mesh
  // gives either: those devices' hosts defaulted to their processes (one
  // process per GPU then means one host per GPU). Sorted by name.
  std::vector<std::string> hosts_defaulted;
};

// Parses a spec. A named layout's "spec" may have fewer entries than the
// tensor's rank (the remaining dims are unsharded, as JAX's PartitionSpec),
// never more. Malformed JSON is kParse with line and column; a well-formed
// but inconsistent spec (unknown mesh, bad axis, more spec entries than the
// rank, conflicting processes for a device, ...) is kInvalidArgument (or
// kOutOfRange / kOverflow for sizes) whose message starts with the JSON path
// of the offending value, e.g. "tensors[2].src.spec[1]: unknown axis \"tq\"
// of mesh \"train\" (axes: dp, tp)".
Spec parse_spec(std::string_view json_text);
// load_spec's default cap on a spec file's size. The parsed JSON takes about
// ten times the file's bytes, so 64 MiB of spec (a million explicit boxes)
// stays well inside a few GiB.
inline constexpr int64_t kDefaultMaxSpecFileBytes = int64_t{64} << 20;
// Reads and parses a file; an unreadable file is kInvalidArgument naming it,
// one larger than `max_bytes` (checked before it is read whole: /dev/zero
// is refused) kResourceExhausted naming it and the limit.
Spec load_spec(const std::string& path, int64_t max_bytes = kDefaultMaxSpecFileBytes);

}  // namespace reshard
