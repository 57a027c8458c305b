// Plans with sub-messages (Message::sub, required_features bit 128) for the
// tests: a planner plan whose messages are each cut into several messages of
// the same stage, round and devices.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "plan/plan_builder.h"
#include "reshard/plan.h"

namespace reshard::sub_messages {

// Three tensors of 48, 24 and 12 rows of 20 f32 from device 0 to every
// device of hosts 1-3 (two devices a host): messages of three pieces of
// unequal sizes, relayed by stages. One process a device, or
// (`process_per_host`) one a host.
inline PlanInput relay_input(bool process_per_host = false, int64_t budget = 0) {
  PlanInput in;
  int64_t rows = 48;
  for (const char* name : {"a", "b", "c"}) {
    Box whole;
    whole.rank = 2;
    whole.hi[0] = rows;
    whole.hi[1] = 20;
    TensorSpec t;
    t.name = name;
    t.shape = {rows, 20};
    rows /= 2;
    t.dtype = DType::kF32;
    t.src = Layout::from_boxes(t.shape, {{0, 0, whole}}, 1, ReduceOp::kSum, "src");
    std::vector<LayoutEntry> dst;
    for (int64_t d = 2; d < 8; ++d) dst.push_back({d, 0, whole});
    t.dst = Layout::from_boxes(t.shape, dst, 1, ReduceOp::kSum, "dst");
    in.tensors.push_back(std::move(t));
  }
  for (int64_t d = 0; d < 8; ++d) {
    const auto host = static_cast<int32_t>(d / 2);
    in.topology.add({d, process_per_host ? host : static_cast<int32_t>(d), host,
                     process_per_host ? static_cast<int32_t>(d % 2) : 0});
  }
  in.options.staging_budget_bytes = budget;
  return in;
}

// Cuts each message of `list` holding at least two pieces into
// min(n, pieces) messages of consecutive pieces, subs 0, 1, ...; each
// message's bytes are those of its pieces. The sending and the receiving
// part hold a message's pieces in the same order, so cutting both sides
// alike keeps them agreeing.
inline void cut_messages(const Plan& plan, const ProcessPart& part, std::vector<Message>& list,
                         const std::vector<Piece>& pieces, uint32_t n) {
  std::vector<Message> out;
  for (const Message& m : list) {
    const uint64_t k = std::min<uint64_t>(n, m.num_pieces);
    if (k < 2) {
      out.push_back(m);
      continue;
    }
    uint64_t first = m.first_piece;
    for (uint64_t j = 0; j < k; ++j) {
      // Sizes 1, 1, ..., the rest: unequal, small first.
      const uint64_t count = j + 1 < k ? 1 : m.num_pieces - (k - 1);
      Message s = m;
      s.sub = static_cast<uint32_t>(j);
      s.first_piece = first;
      s.num_pieces = count;
      s.bytes = 0;
      for (uint64_t i = first; i < first + count; ++i) s.bytes += plan.piece_bytes(part, pieces[i]);
      out.push_back(s);
      first += count;
    }
  }
  list = std::move(out);
}

// `plan` with every message of at least two pieces cut into up to `n` subs.
inline Plan with_subs(Plan plan, uint32_t n) {
  for (auto& [process, part] : Plan::Builder::parts(plan)) {
    cut_messages(plan, part, part.sends, part.send_pieces, n);
    cut_messages(plan, part, part.recvs, part.recv_pieces, n);
  }
  return plan;
}

// The number of messages of `plan` with sub above 0.
inline size_t count_subs(const Plan& plan) {
  size_t n = 0;
  for (const auto& [process, part] : plan.parts())
    for (const auto* list : {&part.sends, &part.recvs})
      n += static_cast<size_t>(
          std::count_if(list->begin(), list->end(), [](const Message& m) { return m.sub > 0; }));
  return n;
}

}  // namespace reshard::sub_messages
