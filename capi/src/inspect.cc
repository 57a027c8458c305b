// Reading a plan: its tensors and layouts, its processes, and the pieces and
// messages of each process part.
#include <algorithm>
#include <cstddef>
#include <iterator>
#include <string>

#include "internal.h"

using reshard::Box;
using reshard::ErrorCode;
using reshard::Layout;
using reshard::Piece;
using reshard::ProcessPart;
using reshard::TensorSpec;
using reshard::capi::check_index;
using reshard::capi::check_out_struct;
using reshard::capi::guard;
using reshard::capi::plan_tensor;
using reshard::capi::require;
using reshard::capi::tensor_side;
using reshard::capi::write_box;
using reshard::capi::write_struct;

namespace {

constexpr size_t kPartInfoV1Size = RESHARD_CAPI_V1_SIZE(reshard_part_info_t, num_recv_pieces);
constexpr size_t kMessageV1Size = RESHARD_CAPI_V1_SIZE(reshard_message_t, bytes);
constexpr size_t kPieceV1Size = RESHARD_CAPI_V1_SIZE(reshard_piece_t, bytes);
constexpr size_t kScratchV1Size = sizeof(reshard_scratch_t);  // since 1.6
static_assert(RESHARD_SCRATCH_ENTRY == reshard::kScratchEntry);
static_assert(kPartInfoV1Size == offsetof(reshard_part_info_t, num_scratch));  // 1.6 appended it
static_assert(kMessageV1Size == offsetof(reshard_message_t, stage));           // 1.3 appended stage
static_assert(offsetof(reshard_message_t, sub) + sizeof(uint64_t) ==
              sizeof(reshard_message_t));                         // 1.14 appended sub
static_assert(kPieceV1Size == offsetof(reshard_piece_t, stage));  // 1.3 appended stage

const std::vector<Piece>& piece_list(const ProcessPart& part, reshard_piece_list_t list) {
  switch (list) {
    case RESHARD_PIECES_LOCAL:
      return part.local;
    case RESHARD_PIECES_SEND:
      return part.send_pieces;
    case RESHARD_PIECES_RECV:
      return part.recv_pieces;
    default:
      reshard::capi::bad_enum("list", list, "RESHARD_PIECES_LOCAL, _SEND or _RECV");
  }
}

}  // namespace

extern "C" {

// ------------------------------------------------------------------ tensors

reshard_error_t* reshard_plan_num_tensors(const reshard_plan_t* plan, size_t* out_count) {
  return guard([&] {
    require(plan, "plan");
    require(out_count, "out_count");
    *out_count = plan->plan.tensors().size();
  });
}

reshard_error_t* reshard_plan_tensor_name(const reshard_plan_t* plan, size_t tensor,
                                          const char** out_name) {
  return guard([&] {
    require(plan, "plan");
    require(out_name, "out_name");
    *out_name = plan_tensor(plan->plan, tensor).name.c_str();
  });
}

reshard_error_t* reshard_plan_tensor_dtype(const reshard_plan_t* plan, size_t tensor,
                                           reshard_dtype_t* out_dtype) {
  return guard([&] {
    require(plan, "plan");
    require(out_dtype, "out_dtype");
    *out_dtype = static_cast<reshard_dtype_t>(plan_tensor(plan->plan, tensor).dtype);
  });
}

reshard_error_t* reshard_plan_tensor_dst_dtype(const reshard_plan_t* plan, size_t tensor,
                                               reshard_dtype_t* out_dtype) {
  return guard([&] {
    require(plan, "plan");
    require(out_dtype, "out_dtype");
    *out_dtype = static_cast<reshard_dtype_t>(reshard::out_dtype(plan_tensor(plan->plan, tensor)));
  });
}

reshard_error_t* reshard_plan_tensor_scales(const reshard_plan_t* plan, size_t tensor,
                                            int64_t* out_scale_tensor, int64_t* out_block) {
  return guard([&] {
    require(plan, "plan");
    require(out_scale_tensor, "out_scale_tensor");
    const TensorSpec& t = plan_tensor(plan->plan, tensor);
    if (t.scale_tensor >= 0) {
      require(out_block, "out_block");
      std::copy(t.scale_block.begin(), t.scale_block.end(), out_block);
    }
    *out_scale_tensor = t.scale_tensor >= 0 ? t.scale_tensor : -1;
  });
}

reshard_error_t* reshard_plan_tensor_rank(const reshard_plan_t* plan, size_t tensor,
                                          size_t* out_rank) {
  return guard([&] {
    require(plan, "plan");
    require(out_rank, "out_rank");
    *out_rank = plan_tensor(plan->plan, tensor).shape.size();
  });
}

reshard_error_t* reshard_plan_tensor_shape(const reshard_plan_t* plan, size_t tensor,
                                           int64_t* out_shape) {
  return guard([&] {
    require(plan, "plan");
    const std::vector<int64_t>& shape = plan_tensor(plan->plan, tensor).shape;
    if (!shape.empty()) require(out_shape, "out_shape");
    std::copy(shape.begin(), shape.end(), out_shape);
  });
}

reshard_error_t* reshard_plan_tensor_num_entries(const reshard_plan_t* plan, size_t tensor,
                                                 reshard_side_t side, size_t* out_count) {
  return guard([&] {
    require(plan, "plan");
    require(out_count, "out_count");
    *out_count = tensor_side(plan_tensor(plan->plan, tensor), side).num_entries();
  });
}

reshard_error_t* reshard_plan_tensor_entry(const reshard_plan_t* plan, size_t tensor,
                                           reshard_side_t side, size_t entry, int64_t* out_device,
                                           int32_t* out_summand, int64_t* out_lo, int64_t* out_hi) {
  return guard([&] {
    require(plan, "plan");
    const Layout& layout = tensor_side(plan_tensor(plan->plan, tensor), side);
    check_index(entry, layout.num_entries(), "entry", "entries");
    const Box box = layout.box(entry);
    if (out_device != nullptr) *out_device = layout.device(entry);
    if (out_summand != nullptr) *out_summand = layout.summand(entry);
    write_box(box, out_lo, out_hi);
  });
}

reshard_error_t* reshard_plan_tensor_partial(const reshard_plan_t* plan, size_t tensor,
                                             reshard_side_t side, int32_t* out_num_summands,
                                             reshard_reduce_op_t* out_op) {
  return guard([&] {
    require(plan, "plan");
    const Layout& layout = tensor_side(plan_tensor(plan->plan, tensor), side);
    if (out_num_summands != nullptr) *out_num_summands = layout.num_summands();
    if (out_op != nullptr) *out_op = static_cast<reshard_reduce_op_t>(layout.reduce_op());
  });
}

reshard_error_t* reshard_plan_entry_of_device(const reshard_plan_t* plan, size_t tensor,
                                              reshard_side_t side, int64_t device,
                                              size_t* out_entry, int32_t* out_found) {
  return guard([&] {
    require(plan, "plan");
    require(out_found, "out_found");
    const std::optional<size_t> entry =
        tensor_side(plan_tensor(plan->plan, tensor), side).entry_of(device);
    if (entry && out_entry != nullptr) *out_entry = *entry;
    *out_found = entry ? 1 : 0;
  });
}

// ---------------------------------------------------------------- processes

reshard_error_t* reshard_plan_num_processes(const reshard_plan_t* plan, size_t* out_count) {
  return guard([&] {
    require(plan, "plan");
    require(out_count, "out_count");
    *out_count = plan->plan.processes().size();
  });
}

reshard_error_t* reshard_plan_process(const reshard_plan_t* plan, size_t index,
                                      int32_t* out_process) {
  return guard([&] {
    require(plan, "plan");
    require(out_process, "out_process");
    const std::vector<int32_t>& processes = plan->plan.processes();
    check_index(index, processes.size(), "index", "processes");
    *out_process = processes[index];
  });
}

reshard_error_t* reshard_plan_has_part(const reshard_plan_t* plan, int32_t process,
                                       int32_t* out_has) {
  return guard([&] {
    require(plan, "plan");
    require(out_has, "out_has");
    *out_has = plan->plan.parts().contains(process) ? 1 : 0;
  });
}

reshard_error_t* reshard_plan_device_location(const reshard_plan_t* plan, int64_t device,
                                              int32_t* out_process, int32_t* out_host,
                                              int32_t* out_ordinal) {
  return guard([&] {
    require(plan, "plan");
    if (device < 0) {
      reshard::fail(reshard::ErrorCode::kInvalidArgument,
                    "device: " + std::to_string(device) + " is negative");
    }
    const reshard::DeviceInfo info = plan->plan.topology().info(device);
    if (out_process != nullptr) *out_process = info.process;
    if (out_host != nullptr) *out_host = info.host;
    if (out_ordinal != nullptr) *out_ordinal = info.ordinal;
  });
}

reshard_error_t* reshard_plan_part_info(const reshard_plan_t* plan, int32_t process,
                                        reshard_part_info_t* out_info) {
  return guard([&] {
    require(plan, "plan");
    check_out_struct(out_info, kPartInfoV1Size, "out_info");
    const ProcessPart& part = plan->plan.part(process);
    reshard_part_info_t c = RESHARD_PART_INFO_INIT;
    c.num_local_pieces = part.local.size();
    c.num_sends = part.sends.size();
    c.num_send_pieces = part.send_pieces.size();
    c.num_recvs = part.recvs.size();
    c.num_recv_pieces = part.recv_pieces.size();
    c.num_scratch = part.scratch.size();
    write_struct(c, out_info);
  });
}

reshard_error_t* reshard_plan_part_message(const reshard_plan_t* plan, int32_t process,
                                           reshard_direction_t direction, size_t index,
                                           reshard_message_t* out_message) {
  return guard([&] {
    require(plan, "plan");
    check_out_struct(out_message, kMessageV1Size, "out_message");
    if (direction != RESHARD_DIRECTION_SEND && direction != RESHARD_DIRECTION_RECV) {
      reshard::capi::bad_enum("direction", direction,
                              "RESHARD_DIRECTION_SEND or RESHARD_DIRECTION_RECV");
    }
    const ProcessPart& part = plan->plan.part(process);
    const auto& messages = direction == RESHARD_DIRECTION_SEND ? part.sends : part.recvs;
    check_index(index, messages.size(), "index", "messages");
    const reshard::Message& m = messages[index];
    reshard_message_t c = RESHARD_MESSAGE_INIT;
    c.src_device = m.src_device;
    c.dst_device = m.dst_device;
    c.round = m.round;
    c.first_piece = m.first_piece;
    c.num_pieces = m.num_pieces;
    c.bytes = m.bytes;
    c.stage = m.stage;
    c.sub = m.sub;
    write_struct(c, out_message);
  });
}

reshard_error_t* reshard_plan_part_piece(const reshard_plan_t* plan, int32_t process,
                                         reshard_piece_list_t list, size_t index,
                                         reshard_piece_t* out_piece, int64_t* out_lo,
                                         int64_t* out_hi) {
  return guard([&] {
    require(plan, "plan");
    check_out_struct(out_piece, kPieceV1Size, "out_piece");
    const ProcessPart& part = plan->plan.part(process);
    const std::vector<Piece>& pieces = piece_list(part, list);
    check_index(index, pieces.size(), "index", "pieces");
    const Piece& p = pieces[index];
    const TensorSpec& tensor = plan->plan.tensors()[p.tensor];
    const Box region = plan->plan.region(part, p);
    // The stage of the message holding the piece (messages tile the list).
    uint32_t stage = 0;
    const reshard::Message* message = nullptr;
    if (list != RESHARD_PIECES_LOCAL) {
      const auto& msgs = list == RESHARD_PIECES_SEND ? part.sends : part.recvs;
      const auto it =
          std::upper_bound(msgs.begin(), msgs.end(), index,
                           [](size_t i, const reshard::Message& m) { return i < m.first_piece; });
      if (it != msgs.begin()) {
        message = &*std::prev(it);
        stage = message->stage;
      }
    }
    reshard_piece_t c = RESHARD_PIECE_INIT;
    c.tensor = p.tensor;
    c.src_entry = p.src_entry;
    c.dst_entry = p.dst_entry;
    c.stage = stage;
    // A scratch (kScratchEntry) is on the device that reads or writes it:
    // the message's, or a local piece's one device.
    const int64_t local_device =
        p.src_entry == reshard::kScratchEntry ? -1 : tensor.src.device(p.src_entry);
    c.src_device = p.src_entry == reshard::kScratchEntry ? (message ? message->src_device : -1)
                   : reshard::reads_source(p, stage)     ? tensor.src.device(p.src_entry)
                                                         : tensor.dst.device(p.src_entry);
    c.dst_device = p.dst_entry != reshard::kScratchEntry ? tensor.dst.device(p.dst_entry)
                   : message                             ? message->dst_device
                                                         : local_device;
    c.bytes = plan->plan.piece_bytes(part, p);
    write_struct(c, out_piece);
    write_box(region, out_lo, out_hi);
  });
}

reshard_error_t* reshard_plan_part_scratch(const reshard_plan_t* plan, int32_t process,
                                           size_t index, reshard_scratch_t* out_scratch,
                                           int64_t* out_lo, int64_t* out_hi) {
  return guard([&] {
    require(plan, "plan");
    check_out_struct(out_scratch, kScratchV1Size, "out_scratch");
    const ProcessPart& part = plan->plan.part(process);
    check_index(index, part.scratch.size(), "index", "scratch buffers");
    const reshard::Scratch& x = part.scratch[index];
    reshard_scratch_t c = RESHARD_SCRATCH_INIT;
    c.tensor = x.tensor;
    c.device = x.device;
    c.bytes = x.box.volume() *
              static_cast<int64_t>(reshard::dtype_size(plan->plan.tensors()[x.tensor].dtype));
    write_struct(c, out_scratch);
    write_box(x.box, out_lo, out_hi);
  });
}

}  // extern "C"
