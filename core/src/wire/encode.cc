// Plan → FlatBuffers bytes (schema/plan.fbs). Deterministic: the builder is
// fed in a fixed order (tensors in plan order, tilings by first use, parts by
// process), defaults are always written, padding is zero.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "reshard/error.h"
#include "reshard/plan_generated.h"
#include "reshard/wire.h"
#include "wire/digest.h"
#include "wire/encode_bound.h"

namespace reshard {
namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;
using flatbuffers::Vector;

// A scalar column of n values, written straight into the builder.
template <typename T, typename Get>
Offset<Vector<T>> column(FlatBufferBuilder& b, size_t n, Get&& get) {
  T* out = nullptr;
  // FlatBuffers 2.0.8 does not align the (absent) elements of an empty
  // vector; the Rust verifier requires it for 8-byte elements.
  if (n == 0 && sizeof(T) > sizeof(flatbuffers::uoffset_t)) b.Align(sizeof(T));
  auto offset = b.CreateUninitializedVector<T>(n, &out);
  for (size_t i = 0; i < n; ++i) flatbuffers::WriteScalar(out + i, static_cast<T>(get(i)));
  return offset;
}

// The parts encode_plan writes, in process order.
std::vector<const ProcessPart*> selected_parts(const Plan& plan, const EncodeOptions& options) {
  std::vector<const ProcessPart*> parts;
  if (options.all_parts) {
    for (const auto& [process, part] : plan.parts()) parts.push_back(&part);
  } else {
    parts.push_back(&plan.part(options.process));  // kOutOfRange if absent
  }
  return parts;
}

}  // namespace

uint64_t encode_size_bound(const Plan& plan, const EncodeOptions& options) {
  const std::vector<const ProcessPart*> parts = selected_parts(plan, options);
  const uint64_t kTable = 96;  // table + vtable + alignment, generously
  uint64_t s = 1024 + kTable * 8;
  // A tiled layout's entries are written once per tiling (find_or_add_tiling:
  // equal tilings share one, and a geometry has one tiling): device (8),
  // summand (4) and a shard index per dimension (8) per entry. Counting
  // them per layout put the 405B part at 16,384 devices (1,137 tensors, two
  // layouts of 16,384 entries each) 1.5 GB above what it encodes to.
  std::set<const Geometry*> tilings;
  for (const auto& t : plan.tensors()) {
    const uint64_t rank = t.shape.size();
    s += kTable * 4 + t.name.size() + 8 + 8 * rank;
    for (const Layout* l : {&t.src, &t.dst}) {
      s += kTable + 64;
      if (!l->tiled())
        s += l->num_entries() * (12 + 16 * rank);
      else if (tilings.insert(l->geometry().get()).second)
        s += kTable + 64 + 8 * rank + l->num_entries() * (12 + 8 * rank);
    }
  }
  s += plan.topology().devices().size() * (kTable + 24);
  s += plan.stats().per_device.size() * (kTable + 48) + plan.processes().size() * 4;
  for (const ProcessPart* p : parts) {
    s += kTable * 8 + 32 * 16;
    s += (p->local.size() + p->send_pieces.size() + p->recv_pieces.size()) * 16;
    // Two devices, first piece, count and bytes (8 each), round, stage and
    // sub (4 each).
    s += (p->sends.size() + p->recvs.size()) * 52;
    for (size_t i = 0; i < p->regions.size(); ++i)
      s += 1 + 16 * static_cast<uint64_t>(p->regions.rank(i));
    for (const Scratch& x : p->scratch) s += 12 + 16 * static_cast<uint64_t>(x.box.rank);
  }
  return s;
}

namespace {

// The builder's memory, allocated first as the std::vector encode_plan
// returns: the builder fills it from the end, and the finished buffer is
// moved to its front rather than copied into a second vector (the 405B part
// at 16,384 devices is 1.1 GB). Where the builder outgrows it (the size
// bound errs high, so never with encode_plan's first size) it falls back to
// new[] and a copy.
class VectorAllocator : public flatbuffers::Allocator {
 public:
  uint8_t* allocate(size_t size) override {
    if (first_) return new uint8_t[size];
    store_.resize(size);
    first_ = store_.data();
    return first_;
  }
  void deallocate(uint8_t* p, size_t) override {
    if (p != first_) {
      delete[] p;
    } else if (!released_) {
      store_ = {};
    }
  }
  // The finished buffer [data, data + size) as a vector.
  std::vector<uint8_t> release(const uint8_t* data, size_t size) {
    if (first_ && !released_ && !store_.empty() && data >= store_.data() &&
        data + size <= store_.data() + store_.size()) {
      std::memmove(store_.data(), data, size);
      store_.resize(size);
      released_ = true;
      return std::move(store_);
    }
    return std::vector<uint8_t>(data, data + size);
  }

 private:
  std::vector<uint8_t> store_;
  uint8_t* first_ = nullptr;
  bool released_ = false;
};

class Encoder {
 public:
  // `to_vector`: the builder's memory is the vector release() returns (zeroed
  // when allocated); else plain new[], never zeroed (view()).
  Encoder(const Plan& plan, size_t initial_size, bool to_vector)
      : plan_(plan), b_(initial_size, to_vector ? &allocator_ : nullptr, false) {
    b_.ForceDefaults(true);
  }

  std::vector<uint8_t> release() { return allocator_.release(b_.GetBufferPointer(), b_.GetSize()); }
  std::span<const uint8_t> view() const { return {b_.GetBufferPointer(), b_.GetSize()}; }

  void encode(const std::vector<const ProcessPart*>& parts) {
    const PlanOptions& o = plan_.options();
    auto options =
        fb::CreatePlanOptions(b_, o.split_min_bytes, o.alpha_seconds, o.intra_host_bytes_per_second,
                              o.inter_host_bytes_per_second, o.staging_budget_bytes, o.relays,
                              o.reduce_scatter, o.nics_per_host, o.single_hop_guard);
    auto topology = encode_topology();
    std::vector<Offset<fb::Tensor>> tensors;
    tensors.reserve(plan_.tensors().size());
    for (const TensorSpec& t : plan_.tensors()) tensors.push_back(encode_tensor(t));
    auto tilings = b_.CreateVector(tilings_);
    auto tensor_vector = b_.CreateVector(tensors);
    auto stats = encode_stats();
    auto processes = b_.CreateVector(plan_.processes());
    std::vector<Offset<fb::ProcessPart>> part_offsets;
    std::vector<std::pair<int32_t, uint64_t>> digests;
    for (const ProcessPart* p : parts) {
      const uint64_t digest = part_digest(plan_.fingerprint(), *p);
      digests.emplace_back(p->process, digest);
      part_offsets.push_back(encode_part(*p, digest));
    }
    auto part_vector = b_.CreateVector(part_offsets);
    uint64_t features = 0;
    for (const ProcessPart* p : parts) {
      for (const auto* list : {&p->sends, &p->recvs}) {
        const std::vector<Piece>& pieces = list == &p->sends ? p->send_pieces : p->recv_pieces;
        for (const Message& m : *list) {
          if (m.sub != 0) features |= kPlanFeatureSubMessages;
          if (m.stage == 0) continue;
          features |= kPlanFeatureStages;
          // Pieces out of range are the decoder's to report.
          for (uint64_t k = m.first_piece; k < m.first_piece + m.num_pieces && k < pieces.size();
               ++k)
            if (reads_source(pieces[k], m.stage)) features |= kPlanFeatureLateSummands;
        }
      }
    }
    // Scratch: a part holds some, or a piece names one (a holder sending
    // into its leader's scratch holds none itself). Staging: a scratch of a
    // tensor whose source is not partial. One pass over each piece list.
    const auto& specs = plan_.tensors();
    const auto scratch_of = [&](const std::vector<Piece>& pieces) {
      for (const Piece& x : pieces) {
        if (x.src_entry != kScratchEntry && x.dst_entry != kScratchEntry) continue;
        features |= kPlanFeatureScratch;
        if (x.tensor < specs.size() && !specs[x.tensor].src.partial()) {
          features |= kPlanFeatureStaging;
          return;
        }
      }
    };
    for (const ProcessPart* p : parts) {
      if (!p->scratch.empty()) features |= kPlanFeatureScratch;
      for (const Scratch& x : p->scratch)
        if (x.tensor < specs.size() && !specs[x.tensor].src.partial())
          features |= kPlanFeatureStaging;
      scratch_of(p->local);
      scratch_of(p->send_pieces);
      scratch_of(p->recv_pieces);
    }
    for (const TensorSpec& t : plan_.tensors())
      if (has_cast(t)) features |= kPlanFeatureCasts;
    for (const TensorSpec& t : plan_.tensors())
      if (has_block_scales(t)) features |= kPlanFeatureBlockScales;
    for (const TensorSpec& t : plan_.tensors())
      if (t.dtype == DType::kE8M0) features |= kPlanFeatureMxScales;
    // Every part's digest, listed even in a buffer of one part, so that the
    // ranks executing it agree on every part (docs/design.md §3.5).
    std::vector<uint64_t> listed;
    if (digests.size() == plan_.processes().size()) {
      for (const auto& [process, digest] : digests) listed.push_back(digest);
    } else {
      listed = listed_part_digests(plan_);
    }
    auto part_digests = listed.empty() ? 0 : b_.CreateVector(listed);
    auto root =
        fb::CreatePlan(b_, kPlanFormatVersion, features, plan_.fingerprint(), options, topology,
                       tilings, tensor_vector, plan_.has_stats(), stats, processes, part_vector,
                       parts_digest(plan_.fingerprint(), digests), part_digests);
    b_.Finish(root, fb::PlanIdentifier());
  }

 private:
  Offset<fb::Topology> encode_topology() {
    std::vector<Offset<fb::Device>> devices;
    for (const DeviceInfo& d : plan_.topology().devices())
      devices.push_back(fb::CreateDevice(b_, d.device, d.process, d.host, d.ordinal));
    return fb::CreateTopology(b_, b_.CreateVector(devices));
  }

  Offset<fb::Tensor> encode_tensor(const TensorSpec& t) {
    auto name = b_.CreateString(t.name);
    auto shape = column<int64_t>(b_, t.shape.size(), [&](size_t d) { return t.shape[d]; });
    auto src = encode_layout(t.src);
    auto dst = encode_layout(t.dst);
    flatbuffers::Offset<flatbuffers::Vector<int64_t>> block;
    if (has_block_scales(t))
      block = column<int64_t>(b_, t.scale_block.size(), [&](size_t d) { return t.scale_block[d]; });
    // CreateTensor's order; dst_dtype only with a cast, the scale fields only
    // with block scales (defaults are forced: a plan without them keeps its
    // bytes).
    fb::TensorBuilder tb(b_);
    if (has_block_scales(t)) {
      tb.add_scale_block(block);
      tb.add_scale_tensor(t.scale_tensor);
    }
    if (has_cast(t)) tb.add_dst_dtype(static_cast<fb::DType>(t.dst_dtype));
    tb.add_dst(dst);
    tb.add_src(src);
    tb.add_dtype(static_cast<fb::DType>(t.dtype));
    tb.add_shape(shape);
    tb.add_name(name);
    return tb.Finish();
  }

  Offset<Vector<int32_t>> summands(const Layout& l) {
    if (!l.partial()) return 0;  // absent: all 0
    return column<int32_t>(b_, l.num_entries(), [&](size_t e) { return l.summand(e); });
  }

  Offset<fb::Layout> encode_layout(const Layout& l) {
    const int32_t tiling = find_or_add_tiling(l);
    Offset<fb::Boxes> boxes = 0;
    if (tiling < 0) {
      const size_t n = l.num_entries();
      const size_t rank = l.shape().size();
      std::vector<Box> all(n);
      for (size_t e = 0; e < n; ++e) all[e] = l.box(e);
      auto devices = column<int64_t>(b_, n, [&](size_t e) { return l.device(e); });
      auto sums = summands(l);
      auto lo = column<int64_t>(b_, n * rank, [&](size_t i) { return all[i / rank].lo[i % rank]; });
      auto hi = column<int64_t>(b_, n * rank, [&](size_t i) { return all[i / rank].hi[i % rank]; });
      boxes = fb::CreateBoxes(b_, devices, sums, lo, hi);
    }
    return fb::CreateLayout(b_, l.num_summands(), static_cast<fb::ReduceOp>(l.reduce_op()), tiling,
                            boxes);
  }

  // The index of `l`'s tiling in Plan.tilings (added on first use), or -1
  // for an explicit layout. Tensors with equal tilings (same mesh and spec)
  // share one entry.
  int32_t find_or_add_tiling(const Layout& l) {
    if (!l.tiled()) return -1;
    // A tiling is a function of the geometry alone; most tensors share one.
    if (auto seen = by_geometry_.find(l.geometry().get()); seen != by_geometry_.end())
      return seen->second;
    const int rank = l.rank();
    const size_t n = l.num_entries();
    // Key: rank, shard counts, then per entry device, summand, shard indices.
    std::vector<int64_t> key;
    key.reserve(1 + rank + n * (2 + rank));
    key.push_back(rank);
    for (int d = 0; d < rank; ++d) key.push_back(l.shard_count(d));
    for (size_t e = 0; e < n; ++e) {
      key.push_back(l.device(e));
      key.push_back(l.summand(e));
      for (int d = 0; d < rank; ++d) key.push_back(l.shard_index(e, d));
    }
    auto [it, added] =
        tiling_index_.try_emplace(std::move(key), static_cast<int32_t>(tilings_.size()));
    if (added) {
      auto counts =
          column<int64_t>(b_, rank, [&](size_t d) { return l.shard_count(static_cast<int>(d)); });
      auto devices = column<int64_t>(b_, n, [&](size_t e) { return l.device(e); });
      auto sums = summands(l);
      auto index = column<int64_t>(b_, n * rank, [&](size_t i) {
        return l.shard_index(i / rank, static_cast<int>(i % rank));
      });
      tilings_.push_back(fb::CreateTiling(b_, counts, devices, sums, index));
    }
    by_geometry_.emplace(l.geometry().get(), it->second);
    return it->second;
  }

  Offset<fb::PlanStats> encode_stats() {
    const PlanStats& s = plan_.stats();
    std::vector<Offset<fb::DeviceTraffic>> per_device;
    for (const DeviceTraffic& d : s.per_device)
      per_device.push_back(fb::CreateDeviceTraffic(b_, d.device, d.send_bytes, d.recv_bytes,
                                                   d.local_bytes, d.send_messages,
                                                   d.recv_messages));
    auto per_device_vector = b_.CreateVector(per_device);
    return fb::CreatePlanStats(
        b_, s.network_bytes, s.local_bytes, s.cross_host_bytes, s.cross_process_bytes,
        s.max_send_bytes, s.max_recv_bytes, s.messages, s.pieces, s.rounds, s.peak_staging_bytes,
        s.lower_bound_network_bytes, s.lower_bound_max_send_bytes, s.lower_bound_max_recv_bytes,
        s.cost_seconds, s.lower_bound_cost_seconds,
        // plan_seconds is how long this process took to plan, not part of the
        // plan: writing it would make equal plans encode to different bytes.
        0.0, per_device_vector, s.stages, s.max_host_send_bytes, s.max_host_recv_bytes,
        s.lower_bound_cross_host_bytes, s.lower_bound_max_host_send_bytes,
        s.lower_bound_max_host_recv_bytes, static_cast<fb::BoundKind>(s.lower_bound_binding),
        s.lower_bound_binding_id, s.forwarded_bytes, s.max_scratch_bytes);
  }

  // The elements of vector `offset`, made since the last change of the
  // builder's buffer (taken once every column of a table exists: making
  // one may move the buffer).
  template <typename T>
  T* elements(Offset<Vector<T>> offset) {
    uint8_t* const end = b_.GetCurrentBufferPointer() + b_.GetSize();
    return reinterpret_cast<T*>(end - offset.o + sizeof(flatbuffers::uoffset_t));
  }

  // Columns laid out as column() lays them out, then filled in one pass
  // over the pieces (the 405B part at 16,384 devices has 18.8 M, read once
  // rather than once per column).
  Offset<fb::Pieces> encode_pieces(const std::vector<Piece>& pieces) {
    const size_t n = pieces.size();
    const bool regions = std::any_of(pieces.begin(), pieces.end(),
                                     [](const Piece& p) { return p.region != kOverlapRegion; });
    uint32_t* unused = nullptr;
    auto tensor = b_.CreateUninitializedVector<uint32_t>(n, &unused);
    auto src = b_.CreateUninitializedVector<uint32_t>(n, &unused);
    auto dst = b_.CreateUninitializedVector<uint32_t>(n, &unused);
    Offset<Vector<uint32_t>> region = 0;  // absent: all kOverlapRegion
    if (regions) region = b_.CreateUninitializedVector<uint32_t>(n, &unused);
    uint32_t *t = elements(tensor), *s = elements(src), *d = elements(dst);
    uint32_t* r = regions ? elements(region) : nullptr;
    for (size_t i = 0; i < n; ++i) {
      const Piece& p = pieces[i];
      flatbuffers::WriteScalar(t + i, p.tensor);
      flatbuffers::WriteScalar(s + i, p.src_entry);
      flatbuffers::WriteScalar(d + i, p.dst_entry);
      if (r) flatbuffers::WriteScalar(r + i, p.region);
    }
    return fb::CreatePieces(b_, tensor, src, dst, region);
  }

  // As encode_pieces: the columns, then one pass over the messages.
  Offset<fb::Messages> encode_messages(const std::vector<Message>& m) {
    const size_t n = m.size();
    bool staged = false, subs = false;  // absent: all in stage 0, all sub 0
    for (const Message& x : m) {
      staged |= x.stage != 0;
      subs |= x.sub != 0;
    }
    const auto wide = [&](auto* type) {
      using T = std::remove_pointer_t<decltype(type)>;
      // FlatBuffers 2.0.8 does not align the (absent) elements of an empty
      // vector; the Rust verifier requires it for 8-byte elements (column()).
      if (n == 0) b_.Align(sizeof(T));
      T* unused = nullptr;
      return b_.CreateUninitializedVector<T>(n, &unused);
    };
    uint32_t* unused = nullptr;
    auto src = wide(static_cast<int64_t*>(nullptr));
    auto dst = wide(static_cast<int64_t*>(nullptr));
    auto round = b_.CreateUninitializedVector<uint32_t>(n, &unused);
    auto first = wide(static_cast<uint64_t*>(nullptr));
    auto count = wide(static_cast<uint64_t*>(nullptr));
    auto bytes = wide(static_cast<int64_t*>(nullptr));
    Offset<Vector<uint32_t>> stage = 0, sub = 0;
    if (staged) stage = b_.CreateUninitializedVector<uint32_t>(n, &unused);
    if (subs) sub = b_.CreateUninitializedVector<uint32_t>(n, &unused);
    int64_t *s = elements(src), *d = elements(dst), *by = elements(bytes);
    uint64_t *f = elements(first), *c = elements(count);
    uint32_t* r = elements(round);
    uint32_t* st = staged ? elements(stage) : nullptr;
    uint32_t* sb = subs ? elements(sub) : nullptr;
    for (size_t i = 0; i < n; ++i) {
      const Message& x = m[i];
      flatbuffers::WriteScalar(s + i, x.src_device);
      flatbuffers::WriteScalar(d + i, x.dst_device);
      flatbuffers::WriteScalar(r + i, x.round);
      flatbuffers::WriteScalar(f + i, x.first_piece);
      flatbuffers::WriteScalar(c + i, x.num_pieces);
      flatbuffers::WriteScalar(by + i, x.bytes);
      if (st) flatbuffers::WriteScalar(st + i, x.stage);
      if (sb) flatbuffers::WriteScalar(sb + i, x.sub);
    }
    return fb::CreateMessages(b_, src, dst, round, first, count, bytes, stage, sub);
  }

  Offset<fb::Regions> encode_regions(const Regions& regions) {
    const size_t n = regions.size();
    size_t coords = 0;
    for (size_t i = 0; i < n; ++i) coords += static_cast<size_t>(regions.rank(i));
    // The rank, lo and hi columns laid out as column() lays them out, then
    // filled in one pass over the boxes (the 405B part at 16,384 devices
    // has 13.2 M regions, read once rather than once per column). Their addresses are taken once
    // all three exist: making one may move the builder's buffer.
    uint8_t* unused = nullptr;
    auto rank_vector = b_.CreateUninitializedVector<uint8_t>(n, &unused);
    const auto coordinate_column = [&] {
      int64_t* out = nullptr;
      if (coords == 0) b_.Align(sizeof(int64_t));  // as column() does
      return b_.CreateUninitializedVector<int64_t>(coords, &out);
    };
    auto lo_vector = coordinate_column();
    auto hi_vector = coordinate_column();
    uint8_t* rank = elements(rank_vector);
    int64_t* lo = elements(lo_vector);
    int64_t* hi = elements(hi_vector);
    for (size_t i = 0; i < n; ++i) {
      const int r = regions.rank(i);
      *rank++ = static_cast<uint8_t>(r);
      const int64_t *rlo = regions.lo(i), *rhi = regions.hi(i);
      for (int d = 0; d < r; ++d) {
        flatbuffers::WriteScalar(lo++, rlo[d]);
        flatbuffers::WriteScalar(hi++, rhi[d]);
      }
    }
    return fb::CreateRegions(b_, rank_vector, lo_vector, hi_vector);
  }

  Offset<fb::ProcessPart> encode_part(const ProcessPart& p, uint64_t digest) {
    auto local = encode_pieces(p.local);
    auto sends = encode_messages(p.sends);
    auto send_pieces = encode_pieces(p.send_pieces);
    auto recvs = encode_messages(p.recvs);
    auto recv_pieces = encode_pieces(p.recv_pieces);
    auto regions = encode_regions(p.regions);
    // Scratch columns only where the part has scratch: parts without keep
    // the bytes of plans written before scratch existed.
    Offset<Vector<uint32_t>> scratch_tensor = 0;
    Offset<Vector<int64_t>> scratch_device = 0, scratch_lo = 0, scratch_hi = 0;
    if (!p.scratch.empty()) {
      const auto& x = p.scratch;
      std::vector<int64_t> lo, hi;
      for (const Scratch& s : x) {
        for (int d = 0; d < s.box.rank; ++d) {
          lo.push_back(s.box.lo[d]);
          hi.push_back(s.box.hi[d]);
        }
      }
      scratch_tensor = column<uint32_t>(b_, x.size(), [&](size_t i) { return x[i].tensor; });
      scratch_device = column<int64_t>(b_, x.size(), [&](size_t i) { return x[i].device; });
      scratch_lo = column<int64_t>(b_, lo.size(), [&](size_t i) { return lo[i]; });
      scratch_hi = column<int64_t>(b_, hi.size(), [&](size_t i) { return hi[i]; });
    }
    return fb::CreateProcessPart(b_, p.process, local, sends, send_pieces, recvs, recv_pieces,
                                 regions, digest, scratch_tensor, scratch_device, scratch_lo,
                                 scratch_hi);
  }

  const Plan& plan_;
  VectorAllocator allocator_;  // before b_, which uses it until destroyed
  FlatBufferBuilder b_;
  std::vector<Offset<fb::Tiling>> tilings_;
  std::map<std::vector<int64_t>, int32_t> tiling_index_;
  std::map<const Geometry*, int32_t> by_geometry_;
};

}  // namespace

namespace {

// encode_size_bound, checked against what one buffer holds.
size_t checked_bound(const Plan& plan, const EncodeOptions& options, const char* what) {
  if (options.mac_key) check_plan_mac_key(*options.mac_key, "mac_key");
  const uint64_t bound = encode_size_bound(plan, options);
  if (bound >= FLATBUFFERS_MAX_BUFFER_SIZE)
    fail(ErrorCode::kOutOfRange,
         std::string(what) + ": the plan needs up to " + std::to_string(bound) +
             " bytes, more than one plan buffer can hold (2 GiB); encode one process part at a "
             "time (EncodeOptions::all_parts = false)");
  return static_cast<size_t>(bound);
}

}  // namespace

std::vector<uint8_t> encode_plan(const Plan& plan, const EncodeOptions& options) {
  // The bound errs high by little (a tiling counted once, every piece with
  // its region column): start from it, so that the builder never grows
  // (each doubling copies what it holds) and its memory becomes the result.
  const size_t bound = checked_bound(plan, options, "encode_plan");
  std::vector<uint8_t> bytes = encode_plan_unsigned(plan, options, bound);
  if (options.mac_key) return sign_plan_bytes(bytes, *options.mac_key);
  return bytes;
}

void encode_plan_to(const Plan& plan, const EncodeOptions& options,
                    const std::function<void(std::span<const uint8_t>)>& write) {
  // The builder starts at the bound in memory that is never zeroed (the
  // builder writes every byte it keeps, padding included), and the bytes
  // are handed over where they lie: pages past the finished buffer are
  // never touched.
  const size_t bound = checked_bound(plan, options, "encode_plan_to");
  Encoder encoder(plan, bound, false);
  encoder.encode(selected_parts(plan, options));
  if (options.mac_key) {
    write(sign_plan_bytes(encoder.view(), *options.mac_key));
  } else {
    write(encoder.view());
  }
}

std::vector<uint8_t> encode_plan_unsigned(const Plan& plan, const EncodeOptions& options,
                                          size_t initial_size) {
  Encoder encoder(plan, initial_size, true);
  encoder.encode(selected_parts(plan, options));
  return encoder.release();
}

}  // namespace reshard
