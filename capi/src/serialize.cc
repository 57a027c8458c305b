// Plans as bytes (schema/plan.fbs): serialize, verify, deserialize.
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "internal.h"
#include "reshard/wire.h"

using reshard::capi::guard;
using reshard::capi::read_struct;
using reshard::capi::require;

namespace {

constexpr size_t kSerializeOptionsV1Size =
    RESHARD_CAPI_V1_SIZE(reshard_serialize_options_t, process);
// ABI 1.9 appended key and key_size.
static_assert(RESHARD_CAPI_V1_SIZE(reshard_serialize_options_t, key_size) ==
              sizeof(reshard_serialize_options_t));
constexpr size_t kDeserializeOptionsV1Size =
    RESHARD_CAPI_V1_SIZE(reshard_deserialize_options_t, key_size);
static_assert(kDeserializeOptionsV1Size == sizeof(reshard_deserialize_options_t));

// A caller's key: absent (NULL, 0) or checked, each problem naming the
// field at fault.
std::optional<std::vector<uint8_t>> key_of(const void* key, size_t key_size) {
  if (key == nullptr && key_size == 0) return std::nullopt;
  if (key == nullptr)
    reshard::fail(reshard::ErrorCode::kInvalidArgument, "options->key",
                  "is NULL but options->key_size is " + std::to_string(key_size));
  if (key_size == 0)
    reshard::fail(reshard::ErrorCode::kInvalidArgument, "options->key_size",
                  "is 0: the key is empty (NULL key and 0 size: no key)");
  if (key_size > reshard::kPlanMacKeyMaxBytes)
    reshard::fail(reshard::ErrorCode::kInvalidArgument, "options->key_size",
                  std::to_string(key_size) + " bytes exceeds the maximum of " +
                      std::to_string(reshard::kPlanMacKeyMaxBytes));
  const auto* p = static_cast<const uint8_t*>(key);
  std::vector<uint8_t> out(p, p + key_size);
  reshard::check_plan_mac_key(out, "options->key_size");
  return out;
}

reshard::Plan decode(const void* data, size_t size, const reshard_deserialize_options_t* options) {
  if (size > 0) require(data, "data");
  reshard::DecodeOptions cpp;
  if (options != nullptr) {
    reshard_deserialize_options_t o = RESHARD_DESERIALIZE_OPTIONS_INIT;
    read_struct(options, kDeserializeOptionsV1Size, "options", &o);
    cpp.mac_key = key_of(o.key, o.key_size);
  }
  return reshard::decode_plan(std::span<const uint8_t>(static_cast<const uint8_t*>(data), size),
                              cpp);
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
    cpp.mac_key = key_of(o.key, o.key_size);
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
    handle->plan = decode(data, size, nullptr);
    *out_plan = handle.release();
  });
}

reshard_error_t* reshard_plan_verify_bytes(const void* data, size_t size) {
  return guard([&] { decode(data, size, nullptr); });
}

reshard_error_t* reshard_plan_deserialize_with_options(const void* data, size_t size,
                                                       const reshard_deserialize_options_t* options,
                                                       reshard_plan_t** out_plan) {
  return guard([&] {
    require(out_plan, "out_plan");
    auto handle = std::make_unique<reshard_plan>();
    handle->plan = decode(data, size, options);
    *out_plan = handle.release();
  });
}

reshard_error_t* reshard_plan_verify_bytes_with_options(
    const void* data, size_t size, const reshard_deserialize_options_t* options) {
  return guard([&] { decode(data, size, options); });
}

}  // extern "C"
