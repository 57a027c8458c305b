// part_digest: the checksum a plan buffer stores beside each process part.
//
// Each step h <- rotl((h ^ v) * K1, 29) * K2 is a bijection of h for a fixed
// v and of v for a fixed h, so changing any one value of the sequence always
// changes the result (not just with high probability): an edit of a single
// field of a part can never go unnoticed. Values go in as 64-bit words, each
// list preceded by its length, so no two different parts hash the same
// sequence. About a nanosecond per word: decoding checks it in a small
// fraction of the time it spends on the pieces.
#include "wire/digest.h"

#include <algorithm>
#include <bit>
#include <cstdint>

#include "reshard/wire.h"

namespace reshard {
namespace {

class WordHash {
 public:
  explicit WordHash(uint64_t seed) : h_(seed ^ 0x52534850'61727431ull) {}  // "RSHPart1"
  void add(uint64_t v) {
    h_ = std::rotl((h_ ^ v) * 0x9E3779B97F4A7C15ull, 29) * 0xBF58476D1CE4E5B9ull;
  }
  uint64_t value() const {
    // A final avalanche (bijective too) so that nearby parts differ in every bit.
    uint64_t z = h_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z == 0 ? 1 : z;  // 0 means "no digest" on the wire
  }

 private:
  uint64_t h_;
};

void add_pieces(WordHash& h, const std::vector<Piece>& pieces) {
  h.add(pieces.size());
  for (const Piece& p : pieces) {
    h.add(uint64_t{p.tensor} << 32 | p.src_entry);
    h.add(uint64_t{p.dst_entry} << 32 | p.region);
  }
}

void add_messages(WordHash& h, const std::vector<Message>& messages) {
  h.add(messages.size());
  for (const Message& m : messages) {
    h.add(static_cast<uint64_t>(m.src_device));
    h.add(static_cast<uint64_t>(m.dst_device));
    h.add(uint64_t{m.stage} << 32 | m.round);
    h.add(m.first_piece);
    h.add(m.num_pieces);
    h.add(static_cast<uint64_t>(m.bytes));
  }
  // Subs only where some message has one: digests of parts without them
  // are those of plans written before them.
  if (std::any_of(messages.begin(), messages.end(), [](const Message& m) { return m.sub != 0; })) {
    h.add(messages.size());
    for (const Message& m : messages) h.add(m.sub);
  }
}

}  // namespace

uint64_t parts_digest(uint64_t fingerprint,
                      std::span<const std::pair<int32_t, uint64_t>> process_digests) {
  WordHash h(~fingerprint);
  h.add(process_digests.size());
  for (const auto& [process, digest] : process_digests) {
    h.add(static_cast<uint32_t>(process));
    h.add(digest);
  }
  return h.value();
}

uint64_t part_digest(uint64_t fingerprint, const ProcessPart& part) {
  WordHash h(fingerprint);
  h.add(static_cast<uint32_t>(part.process));
  add_pieces(h, part.local);
  add_messages(h, part.sends);
  add_pieces(h, part.send_pieces);
  add_messages(h, part.recvs);
  add_pieces(h, part.recv_pieces);
  h.add(part.regions.size());
  for (size_t i = 0; i < part.regions.size(); ++i) {
    const int rank = part.regions.rank(i);
    const int64_t *lo = part.regions.lo(i), *hi = part.regions.hi(i);
    h.add(static_cast<uint64_t>(rank));
    for (int d = 0; d < rank; ++d) {
      h.add(static_cast<uint64_t>(lo[d]));
      h.add(static_cast<uint64_t>(hi[d]));
    }
  }
  // Scratch only where there is some: digests of parts without scratch are
  // those of plans written before it existed.
  if (!part.scratch.empty()) {
    h.add(part.scratch.size());
    for (const Scratch& s : part.scratch) {
      h.add(s.tensor);
      h.add(static_cast<uint64_t>(s.device));
      h.add(static_cast<uint64_t>(s.box.rank));
      for (int d = 0; d < s.box.rank; ++d) {
        h.add(static_cast<uint64_t>(s.box.lo[d]));
        h.add(static_cast<uint64_t>(s.box.hi[d]));
      }
    }
  }
  return h.value();
}

std::vector<uint64_t> listed_part_digests(const Plan& plan) {
  const std::vector<int32_t>& processes = plan.processes();
  const bool all = !processes.empty() && plan.parts().size() == processes.size() &&
                   std::all_of(processes.begin(), processes.end(),
                               [&](int32_t p) { return plan.parts().contains(p); });
  if (!all) return plan.part_digests();
  std::vector<uint64_t> out;
  out.reserve(processes.size());
  for (int32_t p : processes) out.push_back(part_digest(plan.fingerprint(), plan.part(p)));
  return out;
}

uint64_t whole_plan_digest(const Plan& plan, std::span<const uint64_t> listed) {
  if (listed.empty() || listed.size() != plan.processes().size()) return 0;
  std::vector<std::pair<int32_t, uint64_t>> pairs;
  pairs.reserve(listed.size());
  for (size_t i = 0; i < listed.size(); ++i) pairs.emplace_back(plan.processes()[i], listed[i]);
  return parts_digest(plan.fingerprint(), pairs);
}

}  // namespace reshard
