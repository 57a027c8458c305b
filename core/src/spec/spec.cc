// JSON spec files (docs/spec.md, schema/spec.schema.json): meshes, tensors
// with source and destination layouts, planner options. Every error names the JSON path of the
// offending value; nothing from nlohmann escapes as anything but a reshard::Error.
#include "reshard/spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "reshard/block_scales.h"
#include "reshard/cast.h"
#include "reshard/error.h"
#include "util/read_file.h"

namespace reshard {
namespace {

using json = nlohmann::json;

constexpr int kMaxSpecDepth = 64;

[[noreturn]] void bad(const std::string& path, const std::string& message) {
  fail(ErrorCode::kInvalidArgument, path, message);
}

// Input quoted back in a message is cut to its first 64 bytes (at a UTF-8
// character boundary): a 16 MB key must not become 16 MB of message.
constexpr size_t kMaxQuoted = 64;
std::string_view truncated(std::string_view s) {
  if (s.size() <= kMaxQuoted) return s;
  size_t n = kMaxQuoted;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;
  return s.substr(0, n);
}
std::string quote(std::string_view s) {
  if (s.size() <= kMaxQuoted) return "\"" + std::string(s) + "\"";
  return "\"" + std::string(truncated(s)) + "\"... (" + std::to_string(s.size()) + " bytes)";
}

// "meshes.train" for identifier-like keys, `meshes["my mesh"]` otherwise.
std::string child(const std::string& path, std::string_view key) {
  const bool plain = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
  if (!plain) {
    if (key.size() > kMaxQuoted)
      return path + "[" + json(std::string(truncated(key))).dump() + "...]";
    return path + "[" + json(std::string(key)).dump() + "]";
  }
  if (key.size() > kMaxQuoted)
    return (path.empty() ? "" : path + ".") + std::string(truncated(key)) + "...";
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}
std::string child(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// Edit distance, to suggest the key a typo meant.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// ---------------------------------------------------------------- typed access

const char* type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    default:
      return "an unsupported value";
  }
}

[[noreturn]] void wrong_type(const json& j, const std::string& path, const char* expected) {
  bad(path, std::string("expected ") + expected + ", got " + type_name(j));
}

const json& as_object(const json& j, const std::string& path) {
  if (!j.is_object()) wrong_type(j, path, "an object");
  return j;
}
const json& as_array(const json& j, const std::string& path) {
  if (!j.is_array()) wrong_type(j, path, "an array");
  return j;
}
std::string as_string(const json& j, const std::string& path) {
  if (!j.is_string()) wrong_type(j, path, "a string");
  return j.get<std::string>();
}
int64_t as_int(const json& j, const std::string& path) {
  if (j.is_number_integer() && !j.is_number_unsigned()) return j.get<int64_t>();
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(ErrorCode::kOverflow, path, std::to_string(u) + " does not fit in 64 bits");
    return static_cast<int64_t>(u);
  }
  if (j.is_number_float()) {
    // 4096.0 and 1e6 are integers written as numbers; 0.5 is not. Past 2^53
    // a double is not exact, so 1e17 may not be the integer that was meant.
    const double d = j.get<double>();
    if (std::isfinite(d) && d == std::floor(d)) {
      // 2^53 itself is refused too: 9007199254740993.0 reads as 2^53.
      if (std::fabs(d) < 9007199254740992.0) return static_cast<int64_t>(d);
      bad(path, j.dump() +
                    " is 2^53 or more in floating-point notation, where it may not be the "
                    "integer written (9007199254740993.0 reads as 2^53); write the integer's "
                    "digits");
    }
    bad(path, "expected an integer, got " + j.dump());
  }
  wrong_type(j, path, "an integer");
}
int32_t as_int32(const json& j, const std::string& path) {
  const int64_t v = as_int(j, path);
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
    fail(ErrorCode::kOutOfRange, path, std::to_string(v) + " does not fit in 32 bits");
  return static_cast<int32_t>(v);
}
double as_number(const json& j, const std::string& path) {
  if (!j.is_number()) wrong_type(j, path, "a number");
  return j.get<double>();
}
std::vector<int64_t> as_int_array(const json& j, const std::string& path) {
  as_array(j, path);
  std::vector<int64_t> out;
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) out.push_back(as_int(j[i], child(path, i)));
  return out;
}

// Rejects keys outside `allowed` (typo protection), suggesting the closest.
void check_keys(const json& obj, const std::string& path,
                std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string_view best;
    size_t best_d = 3;  // suggest only close matches
    std::vector<std::string> names;
    for (std::string_view a : allowed) {
      names.push_back(std::string(a));
      // A key far longer than any allowed one is no typo of it (and would
      // cost its length times theirs).
      if (key.size() > a.size() + best_d) continue;
      const size_t d = edit_distance(key, a);
      if (d < best_d) {
        best_d = d;
        best = a;
      }
    }
    std::string msg = "unknown key " + quote(key);
    if (!best.empty()) msg += " (did you mean " + quote(best) + "?)";
    msg += "; expected one of: " + join(names);
    bad(child(path, key), msg);
  }
}

const json* find(const json& obj, std::string_view key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}
const json& require(const json& obj, const std::string& path, std::string_view key) {
  const json* v = find(obj, key);
  if (!v) bad(path, "missing required key " + quote(key));
  return *v;
}

// ---------------------------------------------------------------- parsing JSON

// 1-based line and column of the character after the first `end` of `text`.
std::pair<size_t, size_t> line_column(std::string_view text, size_t end) {
  end = std::min(text.size(), end);
  size_t line = 1, column = 1;
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

// Rejects duplicate object keys (nlohmann keeps the last silently), naming
// the object's path, and nesting deeper than kMaxSpecDepth. A SAX pass of its
// own before the DOM parse: nlohmann's parser with a callback scans the
// parent container after every closed object (looking for discarded
// values), which made a spec of 100,000 tensors quadratic.
class DuplicateKeyCheck : public nlohmann::json_sax<json> {
 public:
  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(false); }
  bool start_array(std::size_t) override { return open(true); }
  bool key(string_t& key) override {
    Frame& f = frames_.back();
    f.key = key;
    if (!f.keys.insert(key).second)
      bad(f.path.empty() ? std::string("(root)") : f.path, "duplicate key " + quote(key));
    return true;
  }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  // Syntax errors are left to the DOM parse, which reports their position.
  // A number too large for a double (1e309) is no syntax error to the DOM
  // parse, which reports it with neither position nor path (issue 37): here
  // it gets both.
  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::detail::exception& e) override {
    if (e.id == 406) {
      // `position` is past the number: point at its first character.
      const auto [line, column] =
          line_column(text_, position >= token.size() ? position - token.size() : 0);
      const std::string path = next_path();
      fail(ErrorCode::kParse, path.empty() ? std::string("(root)") : path,
           "line " + std::to_string(line) + ", column " + std::to_string(column) + ": number " +
               token + " is too large for a double");
    }
    return false;
  }
  explicit DuplicateKeyCheck(std::string_view text) : text_(text) {}

 private:
  struct Frame {
    bool array = false;
    size_t index = 0;
    std::string path;
    std::set<std::string> keys;
    std::string key;
  };
  bool value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    return true;
  }
  bool open(bool array) {
    // A spec nests 5 deep; capping the depth bounds the paths kept here
    // (one per open container).
    if (frames_.size() >= static_cast<size_t>(kMaxSpecDepth))
      fail(ErrorCode::kParse, "JSON nesting depth exceeds " + std::to_string(kMaxSpecDepth) +
                                  " levels (a spec needs 5)");
    std::string path = next_path();
    frames_.push_back({array, 0, std::move(path), {}, {}});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return value();
  }
  std::string next_path() {
    if (frames_.empty()) return "";
    Frame& f = frames_.back();
    return f.array ? child(f.path, f.index) : child(f.path, f.key);
  }
  std::vector<Frame> frames_;
  std::string_view text_;
};

json parse_json(std::string_view text) {
  // NUL is never valid JSON (not even inside a string), and nlohmann's lexer
  // takes it for the end of the input: the text after it would be ignored
  // (issue 37: the C ABI parsed `{...}\0garbage` as `{...}`). The whole
  // length counts.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    const auto [line, column] = line_column(text, nul);
    fail(ErrorCode::kParse, "line " + std::to_string(line) + ", column " + std::to_string(column) +
                                ": NUL character at byte " + std::to_string(nul) + " of " +
                                std::to_string(text.size()) + " (not valid JSON)");
  }
  try {
    DuplicateKeyCheck check(text);
    json::sax_parse(text.begin(), text.end(), &check);
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    // e.byte is 1-based: the last character read.
    const auto [line, column] = line_column(text, e.byte == 0 ? size_t{0} : e.byte - 1);
    std::string what = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at ...: " prefix.
    const size_t p = what.find("parse error");
    if (p != std::string::npos) {
      const size_t colon = what.find(": ", p);
      if (colon != std::string::npos) what = what.substr(colon + 2);
    }
    fail(ErrorCode::kParse,
         "line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + what);
  } catch (const json::exception& e) {
    fail(ErrorCode::kParse, e.what());
  }
}

// ---------------------------------------------------------------- meshes

// What the spec says about one device, with the path that said it.
struct DeviceFacts {
  std::optional<int32_t> process, host, ordinal;
  std::string process_path, host_path, ordinal_path;
};

void note_fact(std::optional<int32_t>& slot, std::string& slot_path, int32_t value,
               const std::string& path, int64_t device, const char* what) {
  if (!slot) {
    slot = value;
    slot_path = path;
  } else if (*slot != value) {
    bad(path, "device " + std::to_string(device) + " is on " + what + " " + std::to_string(value) +
                  " here but on " + what + " " + std::to_string(*slot) + " in " + slot_path);
  }
}

std::shared_ptr<const Mesh> parse_mesh(const json& j, const std::string& path,
                                       std::map<int64_t, DeviceFacts>& facts) {
  as_object(j, path);
  check_keys(j, path, {"axis_names", "shape", "devices", "processes", "hosts", "ordinals"});
  auto mesh = std::make_shared<Mesh>();
  const std::string names_path = child(path, "axis_names");
  const json& names = as_array(require(j, path, "axis_names"), names_path);
  for (size_t i = 0; i < names.size(); ++i)
    mesh->axis_names.push_back(as_string(names[i], child(names_path, i)));
  mesh->shape = as_int_array(require(j, path, "shape"), child(path, "shape"));
  // Bounded so that a typo cannot ask for billions of devices.
  int64_t count = 1;
  bool shape_ok = true;
  for (int64_t s : mesh->shape)
    shape_ok =
        shape_ok && s >= 1 && !__builtin_mul_overflow(count, s, &count) && count <= kMaxDevices;
  if (!shape_ok &&
      std::all_of(mesh->shape.begin(), mesh->shape.end(), [](int64_t s) { return s >= 1; }))
    fail(ErrorCode::kOutOfRange, child(path, "shape"),
         "more than " + std::to_string(kMaxDevices) + " devices (the most one plan holds)");
  if (const json* d = find(j, "devices")) {
    mesh->devices = as_int_array(*d, child(path, "devices"));
  } else if (shape_ok) {
    // Default 0..N-1; a bad shape is left for validate() to report.
    for (int64_t i = 0; i < count; ++i) mesh->devices.push_back(i);
  }
  mesh->validate(path);

  const size_t n = mesh->devices.size();
  auto per_device = [&](const char* key) {
    std::vector<int32_t> v;
    if (const json* a = find(j, key)) {
      const std::string p = child(path, key);
      as_array(*a, p);
      if (a->size() != n)
        bad(p,
            std::to_string(a->size()) + " entries for a mesh of " + std::to_string(n) + " devices");
      for (size_t i = 0; i < n; ++i) {
        v.push_back(as_int32((*a)[i], child(p, i)));
        if (v.back() < 0) bad(child(p, i), std::to_string(v.back()) + " is negative");
      }
    }
    return v;
  };
  const std::vector<int32_t> processes = per_device("processes");
  const std::vector<int32_t> hosts = per_device("hosts");
  const std::vector<int32_t> ordinals = per_device("ordinals");
  for (size_t i = 0; i < n; ++i) {
    const int64_t dev = mesh->devices[i];
    DeviceFacts& f = facts[dev];
    if (!processes.empty())
      note_fact(f.process, f.process_path, processes[i], child(child(path, "processes"), i), dev,
                "process");
    if (!hosts.empty())
      note_fact(f.host, f.host_path, hosts[i], child(child(path, "hosts"), i), dev, "host");
    if (!ordinals.empty())
      note_fact(f.ordinal, f.ordinal_path, ordinals[i], child(child(path, "ordinals"), i), dev,
                "ordinal");
  }
  return mesh;
}

// Process defaults to 0, host to the process, ordinal to the device's
// position among the devices of its host (ascending id).
Topology build_topology(const std::map<int64_t, DeviceFacts>& facts) {
  Topology topo;
  std::map<int32_t, int32_t> next_ordinal;
  for (const auto& [dev, f] : facts) {
    DeviceInfo info;
    info.device = dev;
    info.process = f.process.value_or(0);
    info.host = f.host.value_or(info.process);
    int32_t& next = next_ordinal[info.host];
    info.ordinal = f.ordinal.value_or(next);
    ++next;
    topo.add(info, f.process ? f.process_path : "meshes");
  }
  return topo;
}

// ---------------------------------------------------------------- layouts

using MeshMap = std::map<std::string, std::shared_ptr<const Mesh>>;

std::string mesh_names(const MeshMap& meshes) {
  std::vector<std::string> names;
  for (const auto& [name, m] : meshes) names.push_back(name);
  return names.empty() ? "none defined" : join(names);
}

// Resolves one axis name of `mesh`, checking it is used at most once.
void use_axis(const Mesh& mesh, const std::string& mesh_name, const std::string& axis,
              const std::string& path, std::map<std::string, std::string>& used) {
  if (mesh.axis_index(axis) < 0)
    bad(path, "unknown axis " + quote(axis) + " of mesh " + quote(mesh_name) +
                  " (axes: " + join(mesh.axis_names) + ")");
  auto [it, inserted] = used.emplace(axis, path);
  if (!inserted) bad(path, "axis " + quote(axis) + " is used twice (also at " + it->second + ")");
}

Layout parse_named_layout(const json& j, const std::string& path, const std::vector<int64_t>& shape,
                          const MeshMap& meshes) {
  check_keys(j, path, {"mesh", "spec", "partial"});
  const std::string mesh_path = child(path, "mesh");
  const std::string mesh_name = as_string(require(j, path, "mesh"), mesh_path);
  auto mit = meshes.find(mesh_name);
  if (mit == meshes.end())
    bad(mesh_path, "unknown mesh " + quote(mesh_name) + " (meshes: " + mesh_names(meshes) + ")");
  const Mesh& mesh = *mit->second;

  NamedSharding sharding;
  sharding.mesh = mit->second;
  std::map<std::string, std::string> used;
  const std::string spec_path = child(path, "spec");
  if (const json* spec = find(j, "spec")) {
    as_array(*spec, spec_path);
    // Fewer entries than the rank leave the trailing dims unsharded, as in
    // JAX (PartitionSpec("x") on a rank-2 array); [] replicates everything.
    if (spec->size() > shape.size())
      bad(spec_path, std::to_string(spec->size()) + " entries for a tensor of rank " +
                         std::to_string(shape.size()) + " (at most one per dim)");
    for (size_t d = 0; d < spec->size(); ++d) {
      const json& e = (*spec)[d];
      const std::string ep = child(spec_path, d);
      std::vector<std::string> axes;
      if (e.is_null()) {
      } else if (e.is_string()) {
        axes.push_back(e.get<std::string>());
        use_axis(mesh, mesh_name, axes.back(), ep, used);
      } else if (e.is_array()) {
        for (size_t k = 0; k < e.size(); ++k) {
          axes.push_back(as_string(e[k], child(ep, k)));
          use_axis(mesh, mesh_name, axes.back(), child(ep, k), used);
        }
      } else {
        wrong_type(e, ep, "null, an axis name or a list of axis names");
      }
      sharding.dims.push_back(std::move(axes));
    }
  }
  sharding.dims.resize(shape.size());  // missing entries (or no spec): unsharded
  if (const json* partial = find(j, "partial")) {
    const std::string pp = child(path, "partial");
    as_object(*partial, pp);
    check_keys(*partial, pp, {"axes", "op"});
    const std::string ap = child(pp, "axes");
    const json& axes = require(*partial, pp, "axes");
    if (axes.is_string()) {
      sharding.partial_axes.push_back(axes.get<std::string>());
      use_axis(mesh, mesh_name, sharding.partial_axes.back(), ap, used);
    } else {
      as_array(axes, ap);
      for (size_t k = 0; k < axes.size(); ++k) {
        sharding.partial_axes.push_back(as_string(axes[k], child(ap, k)));
        use_axis(mesh, mesh_name, sharding.partial_axes.back(), child(ap, k), used);
      }
    }
    if (const json* op = find(*partial, "op"))
      sharding.partial_op = parse_reduce_op(as_string(*op, child(pp, "op")), child(pp, "op"));
  }
  return Layout::from_named(sharding, shape, path);
}

Layout parse_box_layout(const json& j, const std::string& path, const std::vector<int64_t>& shape) {
  check_keys(j, path, {"boxes", "summands", "op"});
  int32_t summands = 1;
  if (const json* s = find(j, "summands")) {
    summands = as_int32(*s, child(path, "summands"));
    if (summands < 1)
      bad(child(path, "summands"), std::to_string(summands) + " must be at least 1");
  }
  ReduceOp op = ReduceOp::kSum;
  if (const json* o = find(j, "op"))
    op = parse_reduce_op(as_string(*o, child(path, "op")), child(path, "op"));

  const std::string bp = child(path, "boxes");
  const json& boxes = as_array(require(j, path, "boxes"), bp);
  const int rank = static_cast<int>(shape.size());
  std::vector<LayoutEntry> entries;
  std::map<int64_t, std::string> seen;
  for (size_t i = 0; i < boxes.size(); ++i) {
    const std::string ep = child(bp, i);
    const json& b = as_object(boxes[i], ep);
    check_keys(b, ep, {"device", "lo", "hi", "summand"});
    LayoutEntry e;
    e.device = as_int(require(b, ep, "device"), child(ep, "device"));
    if (e.device < 0)
      bad(child(ep, "device"), "device id " + std::to_string(e.device) + " is negative");
    auto [it, inserted] = seen.emplace(e.device, ep);
    if (!inserted)
      bad(child(ep, "device"),
          "device " + std::to_string(e.device) + " already holds " + it->second);
    if (const json* s = find(b, "summand")) e.summand = as_int32(*s, child(ep, "summand"));
    if (e.summand < 0 || e.summand >= summands)
      bad(child(ep, "summand"), std::to_string(e.summand) + " is outside [0, " +
                                    std::to_string(summands) +
                                    ") (set \"summands\" on the layout)");
    e.box.rank = rank;
    // lo defaults to the origin, hi to the shape: {"device": 3} holds everything.
    for (int d = 0; d < rank; ++d) e.box.hi[d] = shape[d];
    for (const char* key : {"lo", "hi"}) {
      const json* v = find(b, key);
      if (!v) continue;
      const std::string kp = child(ep, key);
      const std::vector<int64_t> c = as_int_array(*v, kp);
      if (static_cast<int>(c.size()) != rank)
        bad(kp, std::to_string(c.size()) + " entries for a tensor of rank " + std::to_string(rank));
      for (int d = 0; d < rank; ++d) (key[0] == 'l' ? e.box.lo : e.box.hi)[d] = c[d];
    }
    for (int d = 0; d < rank; ++d) {
      if (e.box.lo[d] < 0 || e.box.lo[d] > shape[d])
        bad(child(child(ep, "lo"), d),
            std::to_string(e.box.lo[d]) + " is outside [0, " + std::to_string(shape[d]) + "]");
      if (e.box.hi[d] < e.box.lo[d] || e.box.hi[d] > shape[d])
        bad(child(child(ep, "hi"), d), std::to_string(e.box.hi[d]) +
                                           " is outside [lo=" + std::to_string(e.box.lo[d]) + ", " +
                                           std::to_string(shape[d]) + "]");
    }
    entries.push_back(e);
  }
  return Layout::from_boxes(shape, std::move(entries), summands, op, bp);
}

Layout parse_layout(const json& j, const std::string& path, const std::vector<int64_t>& shape,
                    const MeshMap& meshes) {
  as_object(j, path);
  const bool named = j.contains("mesh");
  const bool boxes = j.contains("boxes");
  if (named && boxes) bad(path, "give either \"mesh\" (with \"spec\") or \"boxes\", not both");
  if (boxes) return parse_box_layout(j, path, shape);
  if (named) return parse_named_layout(j, path, shape, meshes);
  bad(path, "missing \"mesh\" (with \"spec\"), \"boxes\" or \"flat\"");
}

// ---------------------------------------------------------------- flat layouts

// A flat layout as the top-level "flat" object gives it; its tensors come
// from the layouts that name it.
struct FlatDecl {
  std::string path;
  std::string mesh;   // its "mesh" (empty: given by "devices")
  FlatLayout layout;  // without tensors, offsets and members
};

FlatDecl parse_flat_decl(const json& j, const std::string& path, const MeshMap& meshes) {
  as_object(j, path);
  check_keys(j, path,
             {"mesh", "devices", "partition", "align_elements", "pad_multiple", "total_elements"});
  FlatDecl d;
  d.path = path;
  const json* mesh = find(j, "mesh");
  const json* devices = find(j, "devices");
  if (mesh && devices) bad(path, "give either \"mesh\" or \"devices\", not both");
  if (mesh) {
    const std::string mp = child(path, "mesh");
    const std::string name = as_string(*mesh, mp);
    auto it = meshes.find(name);
    if (it == meshes.end())
      bad(mp, "unknown mesh " + quote(name) + " (meshes: " + mesh_names(meshes) + ")");
    d.layout.devices = it->second->devices;
    d.mesh = name;
  } else if (devices) {
    d.layout.devices = as_int_array(*devices, child(path, "devices"));
  } else {
    bad(path, "missing \"mesh\" or \"devices\" (the ranks, in order)");
  }
  if (const json* p = find(j, "partition"))
    d.layout.partition =
        parse_flat_partition(as_string(*p, child(path, "partition")), child(path, "partition"));
  if (const json* a = find(j, "align_elements"))
    d.layout.align_elements = as_int(*a, child(path, "align_elements"));
  if (const json* a = find(j, "pad_multiple"))
    d.layout.pad_multiple = as_int(*a, child(path, "pad_multiple"));
  if (const json* a = find(j, "total_elements")) {
    d.layout.total_elements = as_int(*a, child(path, "total_elements"));
    if (d.layout.total_elements < 0)
      bad(child(path, "total_elements"), std::to_string(d.layout.total_elements) + " is negative");
  }
  // Checked here (without tensors) so that errors name the flat layout's
  // own keys even when no tensor uses it.
  FlatLayout probe = d.layout;
  probe.tensors.push_back(FlatTensor{{}, DType::kF32});
  probe.total_elements = -1;
  if (probe.partition == FlatPartition::kFused)
    probe.members.push_back(Layout::from_boxes({}, {}, 1, ReduceOp::kSum, path));
  lower_flat(probe, path);
  return d;
}

// A tensor's "src" or "dst" naming a flat layout.
struct FlatUse {
  size_t tensor = 0;
  bool source = true;
  std::string path;               // tensors[i].src
  std::optional<int64_t> offset;  // "offset"
  std::optional<Layout> member;   // a fused flat layout's member: its own layout
};

// A member of a fused flat layout: its own named sharding over the flat
// layout's mesh ("spec", "mesh" optional) or explicit boxes on its devices;
// no partial sums.
Layout parse_fused_member(const json& j, const std::string& path, const std::string& name,
                          const FlatDecl& decl, const std::vector<int64_t>& shape,
                          const MeshMap& meshes) {
  check_keys(j, path, {"flat", "offset", "mesh", "spec", "partial", "boxes", "summands", "op"});
  for (const char* key : {"partial", "summands", "op"})
    if (j.contains(key))
      bad(child(path, key), "a member of fused flat layout " + quote(name) +
                                " holds whole values; partial sums are not supported");
  json m = j;
  m.erase("flat");
  m.erase("offset");
  if (m.contains("boxes") && (m.contains("spec") || m.contains("mesh")))
    bad(path, "give either \"spec\" (over the flat layout's mesh) or \"boxes\", not both");
  if (!m.contains("boxes")) {
    if (decl.mesh.empty())
      bad(path, "fused flat layout " + quote(name) +
                    " gives \"devices\", not a mesh: give this member \"boxes\" (a named "
                    "sharding is over its flat layout's \"mesh\")");
    if (const json* mj = find(m, "mesh")) {
      const std::string mp = child(path, "mesh");
      const std::string mesh = as_string(*mj, mp);
      if (mesh != decl.mesh)
        bad(mp, "mesh " + quote(mesh) + " is not fused flat layout " + quote(name) + "'s mesh " +
                    quote(decl.mesh) + " (a member is sharded over its flat layout's mesh)");
    } else {
      m["mesh"] = decl.mesh;
    }
  }
  return parse_layout(m, path, shape, meshes);
}

FlatUse parse_flat_use(const json& j, const std::string& path, size_t tensor, bool source,
                       const std::map<std::string, FlatDecl>& decls,
                       const std::vector<int64_t>& shape, const MeshMap& meshes,
                       std::string& name) {
  FlatUse u;
  u.tensor = tensor;
  u.source = source;
  u.path = path;
  const std::string fp = child(path, "flat");
  as_object(j, path);
  name = as_string(require(j, path, "flat"), fp);
  if (!decls.count(name)) {
    std::vector<std::string> names;
    for (const auto& [n, d] : decls) names.push_back(n);
    bad(fp, "unknown flat layout " + quote(name) +
                " (flat layouts: " + (names.empty() ? "none defined" : join(names)) + ")");
  }
  const FlatDecl& decl = decls.at(name);
  if (decl.layout.partition == FlatPartition::kFused) {
    u.member = parse_fused_member(j, path, name, decl, shape, meshes);
  } else {
    for (const char* key : {"mesh", "spec", "partial", "boxes", "summands", "op"})
      if (j.contains(key))
        bad(child(path, key),
            std::string("only a member of a fused flat layout has its own layout (flat layout ") +
                quote(name) + " is " + std::string(flat_partition_name(decl.layout.partition)) +
                ")");
    check_keys(j, path, {"flat", "offset"});
  }
  if (const json* o = find(j, "offset")) u.offset = as_int(*o, child(path, "offset"));
  return u;
}

// ---------------------------------------------------------------- options

PlanOptions parse_options(const json& j, const std::string& path) {
  as_object(j, path);
  check_keys(j, path,
             {"split_min_bytes", "alpha_seconds", "intra_host_bytes_per_second",
              "inter_host_bytes_per_second", "staging_budget_bytes", "relays", "reduce_scatter",
              "nics_per_host", "single_hop_guard"});
  PlanOptions o;
  // Types here; values by the one rule for options (validate below).
  auto integer = [&](const char* key, int64_t& out) {
    if (const json* v = find(j, key)) out = as_int(*v, child(path, key));
  };
  auto number = [&](const char* key, double& out) {
    if (const json* v = find(j, key)) out = as_number(*v, child(path, key));
  };
  integer("split_min_bytes", o.split_min_bytes);
  integer("staging_budget_bytes", o.staging_budget_bytes);
  number("alpha_seconds", o.alpha_seconds);
  number("intra_host_bytes_per_second", o.intra_host_bytes_per_second);
  number("inter_host_bytes_per_second", o.inter_host_bytes_per_second);
  auto flag = [&](const char* key, bool& out) {
    if (const json* v = find(j, key)) {
      if (!v->is_boolean()) wrong_type(*v, child(path, key), "true or false");
      out = v->get<bool>();
    }
  };
  flag("relays", o.relays);
  flag("reduce_scatter", o.reduce_scatter);
  flag("single_hop_guard", o.single_hop_guard);
  int64_t nics = 0;
  integer("nics_per_host", nics);
  if (nics < 0 || nics > (1 << 20))
    bad(child(path, "nics_per_host"),
        "must be in [0, 1048576] (0: one NIC per device), got " + std::to_string(nics));
  o.nics_per_host = static_cast<int32_t>(nics);
  validate(o, path + ".");
  return o;
}

// Lowers the flat layouts the tensors use, sets those tensors' layouts and
// adds the slot devices to the topology.
void lower_spec_flats(Spec& spec, const std::map<std::string, FlatDecl>& decls,
                      const std::map<std::string, std::vector<FlatUse>>& uses) {
  // Device ids from 2^40 name slots: no mesh or box may use one.
  for (const auto& [name, mesh] : spec.meshes)
    for (size_t k = 0; k < mesh->devices.size(); ++k)
      if (mesh->devices[k] >= kFlatSlotStride)
        fail(ErrorCode::kOutOfRange, child(child(child("meshes", name), "devices"), k),
             "device id " + std::to_string(mesh->devices[k]) +
                 " is at or above 2^40, which names the slots of flat layouts in a spec that "
                 "has flat layouts");
  for (size_t i = 0; i < spec.input.tensors.size(); ++i)
    for (const bool source : {true, false}) {
      const Layout& l = source ? spec.input.tensors[i].src : spec.input.tensors[i].dst;
      for (size_t e = 0; e < l.num_entries(); ++e)
        if (l.device(e) >= kFlatSlotStride)
          fail(ErrorCode::kOutOfRange, child(child("tensors", i), source ? "src" : "dst"),
               "device id " + std::to_string(l.device(e)) +
                   " is at or above 2^40, which names the slots of flat layouts in a spec that "
                   "has flat layouts");
    }
  for (const auto& [name, list] : uses) {
    const FlatDecl& decl = decls.at(name);
    SpecFlat sf;
    sf.name = name;
    sf.source = list.front().source;
    sf.layout = decl.layout;
    const bool with_offsets = list.front().offset.has_value();
    for (const FlatUse& u : list) {
      if (u.source != sf.source)
        bad(child(u.path, "flat"), "flat layout " + quote(name) + " is the " +
                                       (sf.source ? "source" : "destination") + " of " +
                                       list.front().path + "; a flat layout is one side only");
      if (u.offset.has_value() != with_offsets)
        bad(u.path, std::string("give \"offset\" for every tensor of flat layout ") + quote(name) +
                        " or for none (" + list.front().path +
                        (with_offsets ? " gives one)" : " does not)"));
      const TensorSpec& t = spec.input.tensors[u.tensor];
      if (t.dtype != spec.input.tensors[list.front().tensor].dtype)
        bad(child(child("tensors", u.tensor), "dtype"),
            std::string(dtype_name(t.dtype)) + " in flat layout " + quote(name) + " of " +
                std::string(dtype_name(spec.input.tensors[list.front().tensor].dtype)) +
                " (one dtype per flat buffer)");
      sf.tensors.push_back(u.tensor);
      sf.layout.tensors.push_back(FlatTensor{t.shape, t.dtype});
      if (u.offset) sf.layout.offsets.push_back(*u.offset);
      if (u.member) sf.layout.members.push_back(*u.member);
    }
    try {
      sf.lowered = lower_flat(sf.layout, decl.path);
    } catch (const Error& e) {
      // An offset's error names the tensor's "offset".
      const std::string prefix = decl.path + ".offsets[";
      const std::string_view field = e.field();
      if (field.substr(0, prefix.size()) == prefix) {
        const size_t k = std::stoul(std::string(field.substr(prefix.size())));
        fail(e.code(), child(list[k].path, "offset"), std::string(e.detail()));
      }
      // A member layout's error names the tensor's layout.
      const std::string mprefix = decl.path + ".members[";
      if (field.substr(0, mprefix.size()) == mprefix) {
        const size_t k = std::stoul(std::string(field.substr(mprefix.size())));
        fail(e.code(), list[k].path, std::string(e.detail()));
      }
      throw;
    }
    for (size_t k = 0; k < list.size(); ++k) {
      TensorSpec& t = spec.input.tensors[list[k].tensor];
      (sf.source ? t.src : t.dst) = sf.lowered.layouts[k];
    }
    add_flat_slots(spec.input.topology, sf.lowered, decl.path);
    spec.flats.push_back(std::move(sf));
  }
}

// A destination's "scales" (docs/spec.md "Block scales"), applied once every
// tensor (and flat layout) is known.
struct SpecScales {
  size_t tensor = 0;
  std::string name;
  std::vector<int64_t> block;
  std::string path;
  DType dtype = DType::kF32;  // f32 (amax / M) or e8m0 (MXFP8)
};

SpecScales parse_scales(const json& j, const std::string& path, size_t tensor) {
  as_object(j, path);
  check_keys(j, path, {"name", "block", "dtype"});
  SpecScales s;
  s.tensor = tensor;
  s.path = path;
  const std::string np = child(path, "name");
  s.name = as_string(require(j, path, "name"), np);
  if (s.name.empty()) bad(np, "empty tensor name");
  if (s.name.find('\0') != std::string::npos) bad(np, "contains a NUL character");
  s.block = as_int_array(require(j, path, "block"), child(path, "block"));
  if (const json* d = find(j, "dtype")) {
    const std::string dp = child(path, "dtype");
    std::string name = as_string(*d, dp);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    s.dtype = name == "e8m0" || name == "float8_e8m0fnu" ? DType::kE8M0 : parse_dtype(name, dp);
    if (!scale_dtype_supported(s.dtype))
      fail(ErrorCode::kUnsupported, dp,
           "block scales are f32 (DeepSeek-V3's) or e8m0 (MXFP8's), not " +
               std::string(dtype_name(s.dtype)));
  }
  return s;
}

// Appends each scale tensor after the spec's tensors, in their order.
void add_spec_scales(Spec& spec, const std::vector<SpecScales>& scales,
                     std::map<std::string, std::string>& names) {
  for (const SpecScales& s : scales) {
    const std::string np = child(s.path, "name");
    auto [it, inserted] = names.emplace(s.name, np);
    if (!inserted) bad(np, "duplicate tensor name " + quote(s.name) + " (also " + it->second + ")");
    add_block_scales(spec.input.tensors, s.tensor, s.name, s.block, s.path, s.dtype);
  }
}

Spec parse_spec_impl(std::string_view json_text) {
  const json root = parse_json(json_text);
  if (!root.is_object()) wrong_type(root, "(root)", "an object");
  // "$schema" lets an editor find schema/spec.schema.json; like
  // "description" it is checked for type and otherwise ignored.
  check_keys(root, "", {"meshes", "flat", "tensors", "options", "description", "$schema"});
  if (const json* d = find(root, "description")) as_string(*d, "description");
  if (const json* d = find(root, "$schema")) as_string(*d, child("", "$schema"));

  Spec spec;
  std::map<int64_t, DeviceFacts> facts;
  std::vector<std::string> without_hosts;
  if (const json* meshes = find(root, "meshes")) {
    as_object(*meshes, "meshes");
    for (const auto& [name, value] : meshes->items()) {
      const std::string path = child("meshes", name);
      if (name.empty()) bad(path, "empty mesh name");
      spec.meshes.emplace(name, parse_mesh(value, path, facts));
      if (!value.contains("hosts")) without_hosts.push_back(name);
    }
  }
  spec.input.topology = build_topology(facts);
  // A mesh without "hosts" whose devices all got a host from another mesh
  // defaulted nothing.
  for (const std::string& name : without_hosts) {
    const auto& devices = spec.meshes.at(name)->devices;
    if (std::any_of(devices.begin(), devices.end(),
                    [&](int64_t d) { return !facts.at(d).host.has_value(); }))
      spec.hosts_defaulted.push_back(name);
  }
  if (const json* options = find(root, "options"))
    spec.input.options = parse_options(*options, "options");

  std::map<std::string, FlatDecl> flat_decls;
  if (const json* flat = find(root, "flat")) {
    as_object(*flat, "flat");
    for (const auto& [name, value] : flat->items()) {
      const std::string path = child("flat", name);
      if (name.empty()) bad(path, "empty flat layout name");
      flat_decls.emplace(name, parse_flat_decl(value, path, spec.meshes));
    }
  }
  std::map<std::string, std::vector<FlatUse>> flat_uses;
  std::vector<SpecScales> scales;

  // Named paths: GCC 13's -Wdangling-reference flags a returned reference
  // whenever an argument binds a temporary (here the path strings).
  const std::string root_path = "(root)", tensors_path = "tensors";
  const json& tensors = as_array(require(root, root_path, "tensors"), tensors_path);
  if (tensors.empty()) bad("tensors", "no tensors");
  std::map<std::string, std::string> names;
  spec.input.tensors.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string path = child("tensors", i);
    const json& t = as_object(tensors[i], path);
    check_keys(t, path, {"name", "shape", "dtype", "src", "dst"});
    TensorSpec ts;
    const std::string name_path = child(path, "name");
    ts.name = as_string(require(t, path, "name"), name_path);
    if (ts.name.empty()) bad(name_path, "empty tensor name");
    if (ts.name.find('\0') != std::string::npos) bad(name_path, "contains a NUL character");
    auto [it, inserted] = names.emplace(ts.name, name_path);
    if (!inserted)
      bad(name_path, "duplicate tensor name " + quote(ts.name) + " (also " + it->second + ")");
    ts.dtype = parse_dtype(as_string(require(t, path, "dtype"), child(path, "dtype")),
                           child(path, "dtype"));
    ts.shape = as_int_array(require(t, path, "shape"), child(path, "shape"));
    validate_shape(ts.shape, dtype_size(ts.dtype), child(path, "shape"));
    for (const bool source : {true, false}) {
      const char* key = source ? "src" : "dst";
      const std::string lp = child(path, key);
      const json& lj0 = as_object(require(t, path, key), lp);
      Layout& out = source ? ts.src : ts.dst;
      // A cast in flight: the destination's own "dtype" (docs/spec.md "Casts").
      json without_dtype;
      const json* ljp = &lj0;
      if (const json* sc = find(lj0, "scales")) {
        const std::string sp = child(lp, "scales");
        if (source)
          bad(sp,
              "block scales belong to the destination (the executor computes them from the "
              "source)");
        scales.push_back(parse_scales(*sc, sp, i));
        without_dtype = lj0;
        without_dtype.erase("scales");
        ljp = &without_dtype;
      }
      if (const json* d = find(*ljp, "dtype")) {
        const std::string dp = child(lp, "dtype");
        if (source)
          bad(dp, "the source's dtype is the tensor's \"dtype\"; only a destination gives its own");
        if (lj0.contains("flat"))
          bad(dp, "a flat destination holds its tensors' dtype; a cast needs a layout of its own");
        const DType dd = parse_dtype(as_string(*d, dp), dp);
        if (dd != ts.dtype) {
          if (!cast_supported(ts.dtype, dd))
            fail(ErrorCode::kUnsupported, dp,
                 "no cast from " + std::string(dtype_name(ts.dtype)) + " to " +
                     std::string(dtype_name(dd)) +
                     " (casts are between f32, f16, bf16, f8e4m3 and f8e5m2)");
          ts.dst_dtype = dd;
        }
        if (ljp == &lj0) without_dtype = lj0;
        without_dtype.erase("dtype");
        ljp = &without_dtype;
      }
      const json& lj = *ljp;
      if (lj.contains("flat")) {
        std::string name;
        FlatUse u = parse_flat_use(lj, lp, i, source, flat_decls, ts.shape, spec.meshes, name);
        flat_uses[name].push_back(std::move(u));
      } else {
        out = parse_layout(lj, lp, ts.shape, spec.meshes);
      }
    }
    spec.input.tensors.push_back(std::move(ts));
  }
  if (!flat_uses.empty()) lower_spec_flats(spec, flat_decls, flat_uses);
  add_spec_scales(spec, scales, names);
  return spec;
}

}  // namespace

Spec parse_spec(std::string_view json_text) {
  try {
    return parse_spec_impl(json_text);
  } catch (const std::bad_alloc&) {
    fail(ErrorCode::kOutOfMemory, "spec", "out of memory while parsing");
  }
}

Spec load_spec(const std::string& path, int64_t max_bytes) {
  if (max_bytes < 1)
    fail(ErrorCode::kInvalidArgument, "max_bytes", std::to_string(max_bytes) + " is not positive");
  const std::vector<char> text = read_file_capped(
      path, max_bytes, "spec file",
      "split the spec, or raise the limit (--max-input-bytes on the command line)");
  try {
    return parse_spec(std::string_view(text.data(), text.size()));
  } catch (const Error& e) {
    // Syntax errors get the file name; inconsistencies keep their JSON path first.
    if (e.code() == ErrorCode::kParse) fail(ErrorCode::kParse, path, e.what());
    throw;
  }
}

}  // namespace reshard
