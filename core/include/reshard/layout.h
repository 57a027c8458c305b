// reshard — meshes, shardings, topology and box layouts (docs/design.md §1.3).
//
// A NamedSharding (JAX NamedSharding / DTensor placements) lowers to a Layout:
// the canonical list of (device, summand, box) entries, sorted by device.
// Layouts built from explicit boxes (checkpoints, ragged splits) are Layouts
// too. The planner only ever sees Layouts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "reshard/box.h"
#include "reshard/dtype.h"

namespace reshard {

// Stable numeric values shared with the C ABI and the plan format.
// kMean (JAX pmean, DTensor Partial("avg")) is the sum divided by the number
// of summands: accumulated as a sum and divided once, in the accumulation
// type, after the last summand. Floating-point dtypes only, and on sources
// only: a partial destination's op is sum, max or min.
enum class ReduceOp : int32_t { kSum = 1, kMax = 2, kMin = 3, kMean = 4 };
// True for the values above.
constexpr bool reduce_op_valid(int32_t op) noexcept { return op >= 1 && op <= 4; }
// The op that combines summands: kSum for kMean, else `op` itself.
constexpr ReduceOp combining_op(ReduceOp op) noexcept {
  return op == ReduceOp::kMean ? ReduceOp::kSum : op;
}
std::string_view reduce_op_name(ReduceOp op) noexcept;
ReduceOp parse_reduce_op(std::string_view name, const std::string& field);

struct DeviceInfo {
  int64_t device = 0;
  int32_t process = 0;
  int32_t host = 0;
  int32_t ordinal = 0;  // CUDA device index on its host
  friend bool operator==(const DeviceInfo&, const DeviceInfo&) = default;
};

// Maps devices to process, host and local ordinal. Devices never added are
// on process 0, host 0, ordinal 0.
class Topology {
 public:
  // Adds a device. Adding the same device again with identical info is a
  // no-op; conflicting info throws kInvalidArgument naming `field`.
  void add(const DeviceInfo& info, const std::string& field = "topology");
  DeviceInfo info(int64_t device) const;
  bool contains(int64_t device) const;
  // Sorted by device id.
  const std::vector<DeviceInfo>& devices() const { return devices_; }
  friend bool operator==(const Topology& a, const Topology& b) { return a.devices_ == b.devices_; }

 private:
  std::vector<DeviceInfo> devices_;  // sorted by device
};

// An N-d array of distinct devices with named axes; `devices` is row-major.
struct Mesh {
  std::vector<std::string> axis_names;
  std::vector<int64_t> shape;
  std::vector<int64_t> devices;

  // Throws kInvalidArgument (empty/duplicate axis name, shape entry < 1,
  // duplicate or negative device, devices.size() != product(shape)) naming
  // `field`, e.g. "meshes.train.devices[3]".
  void validate(const std::string& field) const;
  int64_t size() const;
  // -1 when absent.
  int axis_index(std::string_view name) const;
  friend bool operator==(const Mesh&, const Mesh&) = default;
};

// For each tensor dim, the mesh axes (major to minor) that split it; unused
// axes replicate; `partial_axes` hold unreduced summands combined by `op`.
struct NamedSharding {
  std::shared_ptr<const Mesh> mesh;
  std::vector<std::vector<std::string>> dims;
  std::vector<std::string> partial_axes;
  ReduceOp partial_op = ReduceOp::kSum;
};

// One shard: `device` holds `box` of summand `summand` (0 unless partial).
struct LayoutEntry {
  int64_t device = 0;
  int32_t summand = 0;
  Box box;
};

class Geometry;  // shared, shape-independent part of a lowered layout

// Chunking of one dim split k ways: chunk c = ceil(n/k); shard i covers
// [min(n, i*c), min(n, (i+1)*c)). Shards at the end may be empty.
struct Split {
  int64_t n = 0;
  int64_t k = 1;
  int64_t chunk() const { return k == 0 ? 0 : (n + k - 1) / k; }
  int64_t lo(int64_t i) const { return std::min(n, i * chunk()); }
  int64_t hi(int64_t i) const { return std::min(n, (i + 1) * chunk()); }
};

class Layout {
 public:
  Layout();
  // Lowers a NamedSharding for a tensor of `shape`. Validates the mesh, every
  // axis name (exists, used at most once across dims and partial), the rank
  // (dims.size() == shape.size() <= kMaxRank), the shape (non-negative, product
  // fits in 63 bits). Errors name `field` (e.g. "tensors[2].src.spec[1]").
  static Layout from_named(const NamedSharding& sharding, std::span<const int64_t> shape,
                           const std::string& field);
  // An explicit layout. Entries may come in any order (they are sorted by
  // device); boxes must lie inside `shape`; a device appears at most once;
  // summands lie in [0, num_summands). Boxes may overlap (replicas).
  static Layout from_boxes(std::span<const int64_t> shape, std::vector<LayoutEntry> entries,
                           int32_t num_summands, ReduceOp op, const std::string& field);
  // A tiled layout from its parts (what the plan format stores): per-dim
  // shard counts, and per entry its device, summand and per-dim shard index
  // (`shard_indices` holds rank values per entry). Validated like from_boxes.
  struct TileEntry {
    int64_t device = 0;
    int32_t summand = 0;
    std::array<int64_t, kMaxRank> shard{};
  };
  static Layout from_tiles(std::span<const int64_t> shape, std::span<const int64_t> counts,
                           std::vector<TileEntry> entries, int32_t num_summands, ReduceOp op,
                           const std::string& field);

  // The same tiled layout for a tensor of another shape of the same rank,
  // sharing the geometry (no per-device work). Throws kInvalidArgument
  // naming `field` for an explicit layout, a rank change or a bad shape.
  Layout with_shape(std::span<const int64_t> shape, const std::string& field) const;

  int32_t rank() const { return static_cast<int32_t>(shape_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t num_elements() const;
  size_t num_entries() const;
  int64_t device(size_t entry) const;
  int32_t summand(size_t entry) const;
  Box box(size_t entry) const;
  Box full_box() const;
  int32_t num_summands() const;
  ReduceOp reduce_op() const;
  bool partial() const { return num_summands() > 1; }
  // Entry held by `device`, if any (binary search).
  std::optional<size_t> entry_of(int64_t device) const;

  // Tiled layouts (every NamedSharding) are products of per-dim splits; the
  // planner intersects them by arithmetic instead of searching.
  bool tiled() const;
  Split split(int dim) const;                        // tiled only
  int64_t shard_index(size_t entry, int dim) const;  // tiled only
  int64_t shard_count(int dim) const;                // tiled only

  // Canonical form: entries sorted by device. Equality compares the
  // canonical (device, summand, box) lists, shape, summands and op, so a
  // tiled layout equals the explicit layout with the same boxes.
  friend bool operator==(const Layout& a, const Layout& b);
  // Stable across processes, runs and platforms (FNV-1a over the canonical
  // form, little-endian).
  uint64_t hash() const;
  // Cheaper stable hash used in plan fingerprints: shape plus a hash of the
  // geometry (computed once per geometry). Equal layouts of the same kind
  // (tiled or explicit) have equal fingerprint_hash.
  uint64_t fingerprint_hash() const;
  std::vector<LayoutEntry> entries() const;
  const std::shared_ptr<const Geometry>& geometry() const { return geometry_; }

 private:
  std::vector<int64_t> shape_;
  std::shared_ptr<const Geometry> geometry_;
};

// Validates a tensor shape: rank <= kMaxRank, sizes >= 0, element count and
// byte count (with `element_size`) fit in int64. Errors name `field`.
void validate_shape(std::span<const int64_t> shape, int64_t element_size, const std::string& field);

}  // namespace reshard
