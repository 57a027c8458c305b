// Layouts: named shardings lowered to entries, and explicit box layouts.
#include <span>
#include <string>
#include <vector>

#include "internal.h"

using reshard::Box;
using reshard::ErrorCode;
using reshard::Layout;
using reshard::ReduceOp;
using reshard::capi::check_index;
using reshard::capi::guard;
using reshard::capi::renamed;
using reshard::capi::require;

static_assert(RESHARD_REDUCE_SUM == static_cast<int32_t>(ReduceOp::kSum));
static_assert(RESHARD_REDUCE_MAX == static_cast<int32_t>(ReduceOp::kMax));
static_assert(RESHARD_REDUCE_MIN == static_cast<int32_t>(ReduceOp::kMin));
static_assert(RESHARD_REDUCE_MEAN == static_cast<int32_t>(ReduceOp::kMean));
static_assert(RESHARD_MAX_RANK == reshard::kMaxRank);

namespace {

std::vector<std::string> axis_list(const reshard_axes_t& axes, const std::string& name) {
  std::vector<std::string> out;
  if (axes.count > 0 && axes.names == nullptr) {
    reshard::fail(ErrorCode::kInvalidArgument, name + ".names: must not be NULL");
  }
  for (size_t j = 0; j < axes.count; ++j) {
    if (axes.names[j] == nullptr) {
      reshard::fail(ErrorCode::kInvalidArgument,
                    name + ".names[" + std::to_string(j) + "]: must not be NULL");
    }
    out.emplace_back(axes.names[j]);
  }
  return out;
}

// Shape checks shared by both constructors, before any box is built (a box
// holds at most RESHARD_MAX_RANK dimensions).
std::vector<int64_t> checked_shape(size_t rank, const int64_t* shape) {
  std::vector<int64_t> out = reshard::capi::copy_array(shape, rank, "shape");
  reshard::validate_shape(out, 1, "shape");
  return out;
}

ReduceOp reduce_op(reshard_reduce_op_t op, const char* name) {
  if (!reshard::reduce_op_valid(op)) {
    reshard::capi::bad_enum(name, op, "RESHARD_REDUCE_SUM, _MAX, _MIN or _MEAN");
  }
  return static_cast<ReduceOp>(op);
}

}  // namespace

extern "C" {

reshard_error_t* reshard_layout_create_named(const reshard_mesh_t* mesh, size_t rank,
                                             const int64_t* shape, const reshard_axes_t* dims,
                                             const reshard_axes_t* partial,
                                             reshard_reduce_op_t partial_op,
                                             reshard_layout_t** out_layout) {
  return guard([&] {
    require(mesh, "mesh");
    require(out_layout, "out_layout");
    const std::vector<int64_t> sizes = checked_shape(rank, shape);
    if (rank > 0) require(dims, "dims");
    reshard::NamedSharding sharding;
    sharding.mesh = mesh->mesh;
    for (size_t d = 0; d < rank; ++d) {
      sharding.dims.push_back(axis_list(dims[d], "dims[" + std::to_string(d) + "]"));
    }
    if (partial != nullptr && partial->count > 0) {
      sharding.partial_axes = axis_list(*partial, "partial");
      sharding.partial_op = reduce_op(partial_op, "partial_op");
    }
    Layout layout = renamed({{"layout.spec", "dims"},
                             {"layout.partial.axes", "partial.names"},
                             {"layout.partial.op", "partial_op"},
                             {"layout.mesh", "mesh"},
                             {"layout.shape", "shape"}},
                            [&] { return Layout::from_named(sharding, sizes, "layout"); });
    auto handle = std::make_unique<reshard_layout>();
    handle->layout = std::move(layout);
    *out_layout = handle.release();
  });
}

reshard_error_t* reshard_layout_create_boxes(size_t rank, const int64_t* shape, size_t num_entries,
                                             const int64_t* devices, const int32_t* summands,
                                             const int64_t* lo, const int64_t* hi,
                                             int32_t num_summands, reshard_reduce_op_t op,
                                             reshard_layout_t** out_layout) {
  return guard([&] {
    require(out_layout, "out_layout");
    const std::vector<int64_t> sizes = checked_shape(rank, shape);
    if (num_entries > 0) {
      require(devices, "devices");
      if (rank > 0) {
        require(lo, "lo");
        require(hi, "hi");
      }
    }
    const ReduceOp reduce = num_summands > 1 ? reduce_op(op, "op") : ReduceOp::kSum;
    std::vector<reshard::LayoutEntry> entries(num_entries);
    for (size_t e = 0; e < num_entries; ++e) {
      reshard::LayoutEntry& entry = entries[e];
      entry.device = devices[e];
      entry.summand = summands != nullptr ? summands[e] : 0;
      entry.box.rank = static_cast<int32_t>(rank);
      for (size_t d = 0; d < rank; ++d) {
        entry.box.lo[d] = lo[e * rank + d];
        entry.box.hi[d] = hi[e * rank + d];
      }
    }
    Layout layout = renamed({{"layout.entries", "entries"},
                             {"layout.summands", "num_summands"},
                             {"layout.op", "op"},
                             {"layout.shape", "shape"}},
                            [&] {
                              return Layout::from_boxes(sizes, std::move(entries), num_summands,
                                                        reduce, "layout");
                            });
    auto handle = std::make_unique<reshard_layout>();
    handle->layout = std::move(layout);
    *out_layout = handle.release();
  });
}

void reshard_layout_destroy(reshard_layout_t* layout) {
  std::unique_ptr<reshard_layout>{layout}.reset();
}

reshard_error_t* reshard_layout_rank(const reshard_layout_t* layout, size_t* out_rank) {
  return guard([&] {
    require(layout, "layout");
    require(out_rank, "out_rank");
    *out_rank = static_cast<size_t>(layout->layout.rank());
  });
}

reshard_error_t* reshard_layout_shape(const reshard_layout_t* layout, int64_t* out_shape) {
  return guard([&] {
    require(layout, "layout");
    const std::vector<int64_t>& shape = layout->layout.shape();
    if (!shape.empty()) require(out_shape, "out_shape");
    std::copy(shape.begin(), shape.end(), out_shape);
  });
}

reshard_error_t* reshard_layout_num_entries(const reshard_layout_t* layout, size_t* out_count) {
  return guard([&] {
    require(layout, "layout");
    require(out_count, "out_count");
    *out_count = layout->layout.num_entries();
  });
}

reshard_error_t* reshard_layout_entry(const reshard_layout_t* layout, size_t entry,
                                      int64_t* out_device, int32_t* out_summand, int64_t* out_lo,
                                      int64_t* out_hi) {
  return guard([&] {
    require(layout, "layout");
    const Layout& l = layout->layout;
    check_index(entry, l.num_entries(), "entry", "entries");
    const Box box = l.box(entry);
    if (out_device != nullptr) *out_device = l.device(entry);
    if (out_summand != nullptr) *out_summand = l.summand(entry);
    reshard::capi::write_box(box, out_lo, out_hi);
  });
}

}  // extern "C"
