// Plans as bytes (schema/plan.fbs): serialize, verify, deserialize.
#include <span>

#include "internal.h"
#include "reshard/wire.h"

using reshard::capi::guard;
using reshard::capi::read_struct;
using reshard::capi::require;

namespace {

constexpr size_t kSerializeOptionsV1Size =
    RESHARD_CAPI_V1_SIZE(reshard_serialize_options_t, process);
static_assert(kSerializeOptionsV1Size == sizeof(reshard_serialize_options_t));

reshard::Plan decode(const void* data, size_t size) {
  if (size > 0) require(data, "data");
  return reshard::decode_plan(std::span<const uint8_t>(static_cast<const uint8_t*>(data), size));
}

}  // namespace

extern "C" {

const void* reshard_buffer_data(const reshard_buffer_t* buffer) {
  return buffer == nullptr ? nullptr : buffer->bytes.data();
}

size_t reshard_buffer_size(const reshard_buffer_t* buffer) {
  return buffer == nullptr ? 0 : buffer->bytes.size();
}

void reshard_buffer_destroy(reshard_buffer_t* buffer) {
  std::unique_ptr<reshard_buffer>{buffer}.reset();
}

reshard_error_t* reshard_plan_serialize(const reshard_plan_t* plan,
                                        const reshard_serialize_options_t* options,
                                        reshard_buffer_t** out_buffer) {
  return guard([&] {
    require(plan, "plan");
    require(out_buffer, "out_buffer");
    reshard_serialize_options_t o = RESHARD_SERIALIZE_OPTIONS_INIT;
    if (options != nullptr) read_struct(options, kSerializeOptionsV1Size, "options", &o);
    reshard::EncodeOptions cpp;
    cpp.all_parts = o.all_parts != 0;
    cpp.process = o.process;
    auto handle = std::make_unique<reshard_buffer>();
    handle->bytes = reshard::encode_plan(plan->plan, cpp);
    *out_buffer = handle.release();
  });
}

reshard_error_t* reshard_plan_deserialize(const void* data, size_t size,
                                          reshard_plan_t** out_plan) {
  return guard([&] {
    require(out_plan, "out_plan");
    auto handle = std::make_unique<reshard_plan>();
    handle->plan = decode(data, size);
    *out_plan = handle.release();
  });
}

reshard_error_t* reshard_plan_verify_bytes(const void* data, size_t size) {
  return guard([&] { decode(data, size); });
}

}  // extern "C"
