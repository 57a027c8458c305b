// The function table for dlopen users (PJRT / ONNX Runtime pattern): one
// exported getter, a static table that only ever grows at the end.
#include <cstddef>

#include "internal.h"
#include "reshard/reshard_mpi.h"
#include "reshard/reshard_nccl.h"

namespace {

// Designated initializers must follow declaration order in C++20, and a
// function pointer initializer must match its field's type exactly: a field
// moved in the header, or a signature changed in one place only, fails here.
constexpr reshard_api_t kApiV1 = {
    .struct_size = sizeof(reshard_api_t),
    .abi_major = RESHARD_ABI_MAJOR,
    .abi_minor = RESHARD_ABI_MINOR,
    .version = &reshard_version,
    .version_number = &reshard_version_number,
    .error_code = &reshard_error_code,
    .error_message = &reshard_error_message,
    .error_destroy = &reshard_error_destroy,
    .error_code_name = &reshard_error_code_name,
    .dtype_size = &reshard_dtype_size,
    .dtype_name = &reshard_dtype_name,
    .dtype_from_name = &reshard_dtype_from_name,
    .mesh_create = &reshard_mesh_create,
    .mesh_destroy = &reshard_mesh_destroy,
    .mesh_rank = &reshard_mesh_rank,
    .mesh_size = &reshard_mesh_size,
    .layout_create_named = &reshard_layout_create_named,
    .layout_create_boxes = &reshard_layout_create_boxes,
    .layout_destroy = &reshard_layout_destroy,
    .layout_rank = &reshard_layout_rank,
    .layout_shape = &reshard_layout_shape,
    .layout_num_entries = &reshard_layout_num_entries,
    .layout_entry = &reshard_layout_entry,
    .topology_create = &reshard_topology_create,
    .topology_destroy = &reshard_topology_destroy,
    .topology_add_device = &reshard_topology_add_device,
    .topology_num_devices = &reshard_topology_num_devices,
    .plan_input_create = &reshard_plan_input_create,
    .plan_input_from_spec = &reshard_plan_input_from_spec,
    .plan_input_destroy = &reshard_plan_input_destroy,
    .plan_input_add_tensor = &reshard_plan_input_add_tensor,
    .plan_input_set_topology = &reshard_plan_input_set_topology,
    .plan_input_set_options = &reshard_plan_input_set_options,
    .plan_input_num_tensors = &reshard_plan_input_num_tensors,
    .plan_input_fingerprint = &reshard_plan_input_fingerprint,
    .plan_create = &reshard_plan_create,
    .plan_destroy = &reshard_plan_destroy,
    .plan_fingerprint = &reshard_plan_fingerprint,
    .plan_stats = &reshard_plan_stats,
    .plan_device_traffic = &reshard_plan_device_traffic,
    .plan_num_tensors = &reshard_plan_num_tensors,
    .plan_tensor_name = &reshard_plan_tensor_name,
    .plan_tensor_dtype = &reshard_plan_tensor_dtype,
    .plan_tensor_rank = &reshard_plan_tensor_rank,
    .plan_tensor_shape = &reshard_plan_tensor_shape,
    .plan_tensor_num_entries = &reshard_plan_tensor_num_entries,
    .plan_tensor_entry = &reshard_plan_tensor_entry,
    .plan_tensor_partial = &reshard_plan_tensor_partial,
    .plan_entry_of_device = &reshard_plan_entry_of_device,
    .plan_num_processes = &reshard_plan_num_processes,
    .plan_process = &reshard_plan_process,
    .plan_has_part = &reshard_plan_has_part,
    .plan_part_info = &reshard_plan_part_info,
    .plan_part_message = &reshard_plan_part_message,
    .plan_part_piece = &reshard_plan_part_piece,
    .buffer_data = &reshard_buffer_data,
    .buffer_size = &reshard_buffer_size,
    .buffer_destroy = &reshard_buffer_destroy,
    .plan_serialize = &reshard_plan_serialize,
    .plan_deserialize = &reshard_plan_deserialize,
    .plan_verify_bytes = &reshard_plan_verify_bytes,
    .executor_create = &reshard_executor_create,
    .executor_destroy = &reshard_executor_destroy,
    .executor_execute = &reshard_executor_execute,
    .oracle_fill_source = &reshard_oracle_fill_source,
    .oracle_check_destination = &reshard_oracle_check_destination,
    .executor_verify = &reshard_executor_verify,
    .transport_available = &reshard_transport_available,
    .executor_info = &reshard_executor_info,
    .mpi_executor_create = &reshard_mpi_executor_create,
    .nccl_unique_id = &reshard_nccl_unique_id,
    .nccl_executor_create = &reshard_nccl_executor_create,
    .plan_device_location = &reshard_plan_device_location,
    .plan_part_scratch = &reshard_plan_part_scratch,
    .plan_deserialize_with_options = &reshard_plan_deserialize_with_options,
    .plan_verify_bytes_with_options = &reshard_plan_verify_bytes_with_options,
    .plan_input_num_flats = &reshard_plan_input_num_flats,
    .plan_input_flat_info = &reshard_plan_input_flat_info,
    .plan_input_flat_device = &reshard_plan_input_flat_device,
    .plan_input_flat_tensor = &reshard_plan_input_flat_tensor,
    .plan_tensor_dst_dtype = &reshard_plan_tensor_dst_dtype,
    .plan_tensor_scales = &reshard_plan_tensor_scales,
};

// One assertion per shipped ABI version (ONNX Runtime's pattern): the offset
// of the last function of that version is frozen. Inserting, removing or
// reordering a field before it breaks the build. Add a line for each new
// minor version; never edit an existing one.
constexpr size_t kHeader = offsetof(reshard_api_t, version);
static_assert(kHeader == sizeof(size_t) + 2 * sizeof(uint32_t) || kHeader == 2 * sizeof(size_t),
              "the table starts with struct_size, abi_major, abi_minor");
// ABI 1.0: 64 functions, the last is executor_verify.
static_assert(offsetof(reshard_api_t, executor_verify) == kHeader + 63 * sizeof(void*),
              "ABI 1.0 table layout changed");
// ABI 1.1: 70 functions, six added (transport_available ...
// plan_device_location); the last is plan_device_location.
static_assert(offsetof(reshard_api_t, transport_available) == kHeader + 64 * sizeof(void*),
              "ABI 1.1 table layout changed");
static_assert(offsetof(reshard_api_t, plan_device_location) == kHeader + 69 * sizeof(void*),
              "ABI 1.1 table layout changed");
// ABI 1.2 appended struct fields (reshard_plan_stats_t, reshard_plan_request_t)
// and an error code, no function: the table ends with 1.1's last function.
static_assert(offsetof(reshard_api_t, plan_device_location) + sizeof(void*) ==
                  offsetof(reshard_api_t, plan_part_scratch),
              "ABI 1.2-1.5 added no function");
// ABI 1.3 appended struct fields for stages (reshard_plan_options_t::relays
// and ::reduce_scatter,
// reshard_plan_stats_t::forwarded_bytes, reshard_message_t::stage,
// reshard_piece_t::stage), no function.
// ABI 1.4 added an enum value (RESHARD_REDUCE_MEAN), no function or field.
// ABI 1.5 appended reshard_plan_stats_t::max_scratch_bytes, no function.
// ABI 1.6: 71 functions, plan_part_scratch added (and
// reshard_part_info_t::num_scratch appended).
static_assert(offsetof(reshard_api_t, plan_part_scratch) == kHeader + 70 * sizeof(void*),
              "ABI 1.6 table layout changed");
// ABI 1.7 appended reshard_plan_options_t::nics_per_host, no function.
// ABI 1.8 appended reshard_plan_options_t::single_hop_guard, no function.
// ABI 1.9 also appended reshard_executor_options_t::timeout_seconds.
// ABI 1.9: 73 functions, plan_deserialize_with_options and
// plan_verify_bytes_with_options added (and reshard_serialize_options_t::key,
// ::key_size appended).
static_assert(offsetof(reshard_api_t, plan_deserialize_with_options) ==
                  kHeader + 71 * sizeof(void*),
              "ABI 1.9 table layout changed");
static_assert(offsetof(reshard_api_t, plan_verify_bytes_with_options) ==
                  kHeader + 72 * sizeof(void*),
              "ABI 1.9 table layout changed");
// ABI 1.10: 77 functions, the flat layouts of a plan input added.
static_assert(offsetof(reshard_api_t, plan_input_num_flats) == kHeader + 73 * sizeof(void*),
              "ABI 1.10 table layout changed");
static_assert(offsetof(reshard_api_t, plan_input_flat_tensor) == kHeader + 76 * sizeof(void*),
              "ABI 1.10 table layout changed");
// ABI 1.11: 78 functions, the destination dtype of a plan's tensor added.
static_assert(offsetof(reshard_api_t, plan_tensor_dst_dtype) == kHeader + 77 * sizeof(void*),
              "ABI 1.11 table layout changed");
// ABI 1.12: 79 functions, the block scales of a plan's tensor added.
static_assert(offsetof(reshard_api_t, plan_tensor_scales) == kHeader + 78 * sizeof(void*),
              "ABI 1.12 table layout changed");
// ABI 1.13: no function; the dtype RESHARD_DTYPE_E8M0 (MXFP8 block scales).
// ABI 1.14: no function; reshard_message_t::sub appended (sub-messages).
static_assert(sizeof(reshard_api_t) == kHeader + 79 * sizeof(void*),
              "a field was appended: bump RESHARD_ABI_MINOR and add a static_assert for it");
static_assert(RESHARD_ABI_MINOR == 14);

}  // namespace

extern "C" const reshard_api_t* reshard_get_api(uint32_t abi_major) {
  return abi_major == 1 ? &kApiV1 : nullptr;
}
