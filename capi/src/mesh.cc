// Meshes: N-d arrays of distinct devices with named axes.
#include <numeric>
#include <string>

#include "internal.h"

using reshard::ErrorCode;
using reshard::capi::guard;
using reshard::capi::renamed;
using reshard::capi::require;

extern "C" {

reshard_error_t* reshard_mesh_create(size_t rank, const char* const* axis_names,
                                     const int64_t* shape, const int64_t* devices,
                                     reshard_mesh_t** out_mesh) {
  return guard([&] {
    require(out_mesh, "out_mesh");
    auto mesh = std::make_shared<reshard::Mesh>();
    if (rank > 0) {
      require(axis_names, "axis_names");
      require(shape, "shape");
    }
    for (size_t i = 0; i < rank; ++i) {
      if (axis_names[i] == nullptr) {
        reshard::fail(ErrorCode::kInvalidArgument,
                      "axis_names[" + std::to_string(i) + "]: must not be NULL");
      }
      mesh->axis_names.emplace_back(axis_names[i]);
    }
    mesh->shape.assign(shape, shape + rank);
    // The device count, when every size is valid (validate() reports bad
    // sizes and counts past reshard::kMaxDevices itself, before anything is
    // sized by them).
    int64_t count = 1;
    bool sizes_ok = true;
    for (int64_t n : mesh->shape) {
      if (n < 1 || __builtin_mul_overflow(count, n, &count) || count > reshard::kMaxDevices) {
        sizes_ok = false;
        break;
      }
    }
    if (devices != nullptr) {
      if (sizes_ok) mesh->devices.assign(devices, devices + count);
    } else if (sizes_ok) {
      mesh->devices.resize(static_cast<size_t>(count));
      std::iota(mesh->devices.begin(), mesh->devices.end(), int64_t{0});
    }
    renamed({{"mesh.", ""}}, [&] { mesh->validate("mesh"); });
    auto handle = std::make_unique<reshard_mesh>();
    handle->mesh = std::move(mesh);
    *out_mesh = handle.release();
  });
}

void reshard_mesh_destroy(reshard_mesh_t* mesh) { std::unique_ptr<reshard_mesh>{mesh}.reset(); }

reshard_error_t* reshard_mesh_rank(const reshard_mesh_t* mesh, size_t* out_rank) {
  return guard([&] {
    require(mesh, "mesh");
    require(out_rank, "out_rank");
    *out_rank = mesh->mesh->shape.size();
  });
}

reshard_error_t* reshard_mesh_size(const reshard_mesh_t* mesh, int64_t* out_size) {
  return guard([&] {
    require(mesh, "mesh");
    require(out_size, "out_size");
    *out_size = mesh->mesh->size();
  });
}

}  // extern "C"
