// libFuzzer target with the attacker's model of issue 37 ("plans as
// untrusted input"): the attacker holds a real plan, edits its process
// parts at will (pieces, messages, regions, scratch; one part or the
// sender's and the receiver's alike) and re-encodes it, so that every
// digest (part digests, parts_digest) is recomputed and passes. The
// decoder must refuse the bytes (kCorrupt), or the host executor must
// fail with an error, or every destination element must equal the
// oracle's value. Anything else — wrong data, a crash, an exception that
// is not reshard::Error, a sanitizer report — is a finding.
//
// Input: byte 0 picks one of the seed plans built at start-up (random
// property-test cases, among them staged plans with relays, and reduction
// trees through scratch); the rest is a script of edits read with
// FuzzedDataProvider.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <type_traits>
#include <vector>

#include "core/random_cases.h"
#include "core/scratch_plans.h"
#include "plan/plan_builder.h"
#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/wire.h"

namespace {

using reshard::Box;
using reshard::Message;
using reshard::Piece;
using reshard::Plan;
using reshard::ProcessPart;

// Oracle buffers above this are not executed (keeps an input fast).
constexpr int64_t kMaxBytes = int64_t{1} << 22;

const std::vector<Plan>& seed_plans() {
  static const std::vector<Plan> plans = [] {
    std::vector<Plan> out;
    // Up to 16 devices in up to 4 processes (hosts): relays and trees too.
    const reshard::testing::CaseOptions options{3, 16, 2, 9, true, true};
    for (uint64_t c = 1; out.size() < 48 && c < 200; ++c) {
      reshard::testing::CaseGen gen(c, options);
      try {
        Plan p = reshard::make_plan(gen.input());
        if (reshard::oracle_buffer_bytes(p) <= kMaxBytes) out.push_back(std::move(p));
      } catch (const reshard::Error&) {
      }
    }
    for (const reshard::DType dtype : {reshard::DType::kF32, reshard::DType::kBF16}) {
      for (const bool host_process : {false, true}) {
        reshard::scratch_plans::TreeCase c;
        c.per_host = {2, 1};
        c.dtype = dtype;
        c.host_process = host_process;
        c.rounds = host_process ? 2 : 1;
        out.push_back(reshard::scratch_plans::tree_plan(c));
      }
    }
    return out;
  }();
  return plans;
}

// A new value for a field: near the old one, a boundary, or anything.
template <typename T>
T edit(FuzzedDataProvider& in, T old) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return static_cast<T>(old + static_cast<T>(in.ConsumeIntegralInRange<int>(-3, 3)));
    case 1:
      return static_cast<T>(in.ConsumeIntegralInRange<int>(0, 16));
    case 2:
      if constexpr (std::is_same_v<T, uint32_t>) {
        return in.ConsumeBool() ? reshard::kScratchEntry : reshard::kOverlapRegion;
      } else {
        return static_cast<T>(-in.ConsumeIntegralInRange<int>(1, 3));
      }
    default:
      return in.ConsumeIntegral<T>();
  }
}

void edit_piece(FuzzedDataProvider& in, Piece& p, int field) {
  switch (field) {
    case 0:
      p.tensor = edit(in, p.tensor);
      break;
    case 1:
      p.src_entry = edit(in, p.src_entry);
      break;
    case 2:
      p.dst_entry = edit(in, p.dst_entry);
      break;
    default:
      p.region = edit(in, p.region);
  }
}

void edit_message(FuzzedDataProvider& in, Message& m, int field) {
  switch (field) {
    case 0:
      m.src_device = edit(in, m.src_device);
      break;
    case 1:
      m.dst_device = edit(in, m.dst_device);
      break;
    case 2:
      m.round = edit(in, m.round);
      break;
    case 3:
      m.stage = edit(in, m.stage);
      break;
    case 4:
      m.first_piece = edit(in, m.first_piece);
      break;
    case 5:
      m.num_pieces = edit(in, m.num_pieces);
      break;
    default:
      m.bytes = edit(in, m.bytes);
  }
}

void edit_box(FuzzedDataProvider& in, Box& b) {
  if (b.rank == 0) return;
  const int d = in.ConsumeIntegralInRange<int>(0, b.rank - 1);
  int64_t& v = in.ConsumeBool() ? b.lo[static_cast<size_t>(d)] : b.hi[static_cast<size_t>(d)];
  v = edit(in, v);
}

template <typename T>
size_t pick(FuzzedDataProvider& in, const std::vector<T>& v) {
  return in.ConsumeIntegralInRange<size_t>(0, v.size() - 1);
}

// The message of `other` (the peer's part) that is `m` seen from there.
Message* mirror(ProcessPart& other, const Message& m, bool in_recvs) {
  auto& list = in_recvs ? other.recvs : other.sends;
  for (Message& x : list) {
    if (x.src_device == m.src_device && x.dst_device == m.dst_device && x.round == m.round &&
        x.stage == m.stage)
      return &x;
  }
  return nullptr;
}

// One edit of the plan's parts, read from `in`.
void mutate(FuzzedDataProvider& in, Plan& plan) {
  auto& parts = Plan::Builder::parts(plan);
  if (parts.empty()) return;
  auto it = parts.begin();
  std::advance(it, in.ConsumeIntegralInRange<size_t>(0, parts.size() - 1));
  ProcessPart& part = it->second;
  switch (in.ConsumeIntegralInRange<int>(0, 11)) {
    case 0: {  // a local piece's field
      if (part.local.empty()) return;
      edit_piece(in, part.local[pick(in, part.local)], in.ConsumeIntegralInRange<int>(0, 3));
      return;
    }
    case 1:    // a sent or received piece's field, in one part only
    case 2: {  // ... or in the sender's and the receiver's part alike
      const bool both = in.ConsumeBool();
      auto& messages = both ? part.sends : part.recvs;
      auto& pieces = both ? part.send_pieces : part.recv_pieces;
      if (pieces.empty()) return;
      const size_t k = pick(in, pieces);
      const int field = in.ConsumeIntegralInRange<int>(0, 3);
      edit_piece(in, pieces[k], field);
      if (!both) return;
      // The same edit on the receiving side: the piece at the same
      // position of the matching message.
      for (const Message& m : messages) {
        if (k < m.first_piece || k >= m.first_piece + m.num_pieces) continue;
        for (auto& [q, other] : parts) {
          Message* r = mirror(other, m, true);
          if (r == nullptr) continue;
          const uint64_t at = r->first_piece + (k - m.first_piece);
          if (at < other.recv_pieces.size()) {
            other.recv_pieces[at] = pieces[k];
            // A region index names the receiver's own list: copy the box.
            if (pieces[k].region < part.regions.size()) {
              other.regions.push_back(part.regions[pieces[k].region]);
              other.recv_pieces[at].region = static_cast<uint32_t>(other.regions.size() - 1);
            }
          }
        }
      }
      return;
    }
    case 3:
    case 4: {  // a message's field, one side or both
      const bool sends = in.ConsumeBool();
      auto& messages = sends ? part.sends : part.recvs;
      if (messages.empty()) return;
      Message& m = messages[pick(in, messages)];
      const Message before = m;
      edit_message(in, m, in.ConsumeIntegralInRange<int>(0, 6));
      if (in.ConsumeBool()) {
        for (auto& [q, other] : parts) {
          Message* r = mirror(other, before, sends);
          if (r == nullptr || r == &m) continue;
          r->src_device = m.src_device;
          r->dst_device = m.dst_device;
          r->round = m.round;
          r->stage = m.stage;
          r->bytes = m.bytes;
        }
      }
      return;
    }
    case 5: {  // a region's box
      if (part.regions.empty()) return;
      const size_t ri = in.ConsumeIntegralInRange<size_t>(0, part.regions.size() - 1);
      Box b = part.regions[ri];
      edit_box(in, b);
      part.regions.set(ri, b);
      return;
    }
    case 6: {  // a scratch buffer
      if (part.scratch.empty()) return;
      reshard::Scratch& s = part.scratch[pick(in, part.scratch)];
      switch (in.ConsumeIntegralInRange<int>(0, 2)) {
        case 0:
          s.tensor = edit(in, s.tensor);
          break;
        case 1:
          s.device = edit(in, s.device);
          break;
        default:
          edit_box(in, s.box);
      }
      return;
    }
    case 7: {  // a piece duplicated (its message grown to carry it)
      const int list = in.ConsumeIntegralInRange<int>(0, 2);
      auto& pieces = list == 0 ? part.local : list == 1 ? part.send_pieces : part.recv_pieces;
      if (pieces.empty()) return;
      const size_t k = pick(in, pieces);
      pieces.insert(pieces.begin() + static_cast<std::ptrdiff_t>(k), pieces[k]);
      if (list == 0) return;
      for (Message& m : list == 1 ? part.sends : part.recvs) {
        if (m.first_piece > k)
          ++m.first_piece;
        else if (k < m.first_piece + m.num_pieces && in.ConsumeBool())
          ++m.num_pieces;
      }
      return;
    }
    case 8: {  // a piece removed
      const int list = in.ConsumeIntegralInRange<int>(0, 2);
      auto& pieces = list == 0 ? part.local : list == 1 ? part.send_pieces : part.recv_pieces;
      if (pieces.empty()) return;
      const size_t k = pick(in, pieces);
      pieces.erase(pieces.begin() + static_cast<std::ptrdiff_t>(k));
      if (list == 0) return;
      for (Message& m : list == 1 ? part.sends : part.recvs) {
        if (m.first_piece > k)
          --m.first_piece;
        else if (k < m.first_piece + m.num_pieces && m.num_pieces > 0)
          --m.num_pieces;
      }
      return;
    }
    case 9: {  // two pieces swapped
      const int list = in.ConsumeIntegralInRange<int>(0, 2);
      auto& pieces = list == 0 ? part.local : list == 1 ? part.send_pieces : part.recv_pieces;
      if (pieces.size() < 2) return;
      std::swap(pieces[pick(in, pieces)], pieces[pick(in, pieces)]);
      return;
    }
    case 10: {  // a message duplicated or removed
      auto& messages = in.ConsumeBool() ? part.sends : part.recvs;
      if (messages.empty()) return;
      const size_t k = pick(in, messages);
      if (in.ConsumeBool())
        messages.insert(messages.begin() + static_cast<std::ptrdiff_t>(k), messages[k]);
      else
        messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(k));
      return;
    }
    default: {  // a new region, named by a piece
      Box b;
      const auto& tensors = plan.tensors();
      if (tensors.empty()) return;
      const auto& shape = tensors[pick(in, tensors)].shape;
      b.rank = static_cast<int32_t>(shape.size());
      for (size_t d = 0; d < shape.size(); ++d) {
        b.lo[d] = in.ConsumeIntegralInRange<int64_t>(-1, shape[d]);
        b.hi[d] = in.ConsumeIntegralInRange<int64_t>(b.lo[d], shape[d] + 1);
      }
      part.regions.push_back(b);
      const int list = in.ConsumeIntegralInRange<int>(0, 2);
      auto& pieces = list == 0 ? part.local : list == 1 ? part.send_pieces : part.recv_pieces;
      if (pieces.empty()) return;
      pieces[pick(in, pieces)].region = static_cast<uint32_t>(part.regions.size() - 1);
      return;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::vector<Plan>& seeds = seed_plans();
  FuzzedDataProvider in(data, size);
  const size_t seed_index = in.ConsumeIntegral<uint8_t>() % seeds.size();
  Plan plan = seeds[seed_index];
  const int edits = in.ConsumeIntegralInRange<int>(1, 8);
  for (int i = 0; i < edits && in.remaining_bytes() > 0; ++i) mutate(in, plan);
  // The attacker's encoder: every digest recomputed over the edited parts.
  std::vector<uint8_t> bytes;
  try {
    bytes = reshard::encode_plan(plan);
  } catch (const reshard::Error&) {
    return 0;  // not encodable by ours (an attacker's own encoder could; the decoder fuzzer covers
               // bytes)
  }
  Plan decoded;
  try {
    decoded = reshard::decode_plan(bytes);
  } catch (const reshard::Error& e) {
    if (e.code() != reshard::ErrorCode::kCorrupt) __builtin_trap();  // decode: kCorrupt only
    return 0;
  }
  reshard::OracleBuffers buffers = reshard::fill_sources(decoded, kMaxBytes);
  const std::vector<reshard::TensorBuffers> views = buffers.views();
  try {
    reshard::execute_host(decoded, views, {1});
  } catch (const reshard::Error&) {
    return 0;  // an error: allowed (destinations unspecified)
  }
  // Executed without error: every destination element must be exact.
  const reshard::OracleReport report = reshard::check_destinations(decoded, buffers, 3);
  if (!report.ok()) {
    // What the finding is, before the trap: the wrong elements, and which
    // part differs from the seed's.
    std::fprintf(stderr, "fuzz_plan_attack: %lld wrong element(s) after a successful execution\n",
                 static_cast<long long>(report.mismatches));
    for (const reshard::OracleMismatch& m : report.first) {
      std::string index;
      for (int64_t i : m.index) index += std::to_string(i) + ",";
      std::fprintf(stderr, "  %s device %lld [%s] expected %s got %s\n", m.tensor.c_str(),
                   static_cast<long long>(m.device), index.c_str(), m.expected.c_str(),
                   m.got.c_str());
    }
    for (const auto& [process, part] : decoded.parts()) {
      const ProcessPart& seed = seeds[seed_index].parts().at(process);
      if (part == seed) continue;
      std::fprintf(stderr,
                   "  part %d edited: local %zu/%zu sends %zu/%zu send_pieces %zu/%zu "
                   "recvs %zu/%zu recv_pieces %zu/%zu regions %zu/%zu scratch %zu/%zu\n",
                   process, part.local.size(), seed.local.size(), part.sends.size(),
                   seed.sends.size(), part.send_pieces.size(), seed.send_pieces.size(),
                   part.recvs.size(), seed.recvs.size(), part.recv_pieces.size(),
                   seed.recv_pieces.size(), part.regions.size(), seed.regions.size(),
                   part.scratch.size(), seed.scratch.size());
      const auto pieces = [&](const char* name, const std::vector<Piece>& a,
                              const std::vector<Piece>& b) {
        for (size_t i = 0; i < a.size(); ++i) {
          if (i < b.size() && a[i] == b[i]) continue;
          std::fprintf(stderr, "    %s[%zu] = {tensor %u, src %u, dst %u, region %u}\n", name, i,
                       a[i].tensor, a[i].src_entry, a[i].dst_entry, a[i].region);
        }
      };
      pieces("local", part.local, seed.local);
      pieces("send_pieces", part.send_pieces, seed.send_pieces);
      pieces("recv_pieces", part.recv_pieces, seed.recv_pieces);
      for (size_t i = 0; i < part.regions.size(); ++i) {
        if (i < seed.regions.size() && part.regions[i] == seed.regions[i]) continue;
        std::string box;
        for (int d = 0; d < part.regions[i].rank; ++d)
          box += std::to_string(part.regions[i].lo[static_cast<size_t>(d)]) + ":" +
                 std::to_string(part.regions[i].hi[static_cast<size_t>(d)]) + " ";
        std::fprintf(stderr, "    regions[%zu] = [%s]\n", i, box.c_str());
      }
      for (size_t i = 0; i < part.sends.size(); ++i) {
        if (i < seed.sends.size() && part.sends[i] == seed.sends[i]) continue;
        std::fprintf(stderr, "    sends[%zu] edited\n", i);
      }
      for (size_t i = 0; i < part.recvs.size(); ++i) {
        if (i < seed.recvs.size() && part.recvs[i] == seed.recvs[i]) continue;
        std::fprintf(stderr, "    recvs[%zu] edited\n", i);
      }
      for (size_t i = 0; i < part.scratch.size(); ++i) {
        if (i < seed.scratch.size() && part.scratch[i] == seed.scratch[i]) continue;
        std::fprintf(stderr, "    scratch[%zu] edited\n", i);
      }
    }
    // The edited plan's bytes, for a regression test.
    if (const char* dump = std::getenv("FUZZ_PLAN_ATTACK_DUMP")) {
      if (FILE* f = std::fopen(dump, "wb")) {
        std::fwrite(bytes.data(), 1, bytes.size(), f);
        std::fclose(f);
      }
    }
    __builtin_trap();
  }
  return 0;
}
