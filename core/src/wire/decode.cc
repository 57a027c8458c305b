// FlatBuffers bytes → Plan. Untrusted input: the FlatBuffers Verifier runs
// first (every offset, vector and string inside the buffer), then semantic
// checks make the decoded Plan safe to execute (every index in range, every
// region inside both shard boxes, message sizes equal to their pieces, the
// fingerprint recomputed from the inputs). Any failure is kCorrupt.
//
// Memory: a verified buffer can still make a naive decoder allocate far more
// than its size (vectors of offsets that all point at one large table, a
// tiling shared by many tensors of distinct shapes). Every allocation is
// charged to a budget proportional to the buffer size before it is made.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "plan/plan_builder.h"
#include "plan/scratch_layout.h"
#include "reshard/block_scales.h"
#include "reshard/cast.h"
#include "reshard/error.h"
#include "reshard/plan_generated.h"
#include "reshard/wire.h"
#include "util/read_file.h"
#include "util/utf8.h"
#include "wire/digest.h"
#include "wire/exact.h"

namespace reshard {
namespace {

using flatbuffers::uoffset_t;

[[noreturn]] void corrupt(const std::string& what, const std::string& detail) {
  fail(ErrorCode::kCorrupt, what, detail);
}

std::string idx(const std::string& field, size_t i) {
  return field + "[" + std::to_string(i) + "]";
}

// "list[index]" + suffix, built only when an error needs it: the loops over
// millions of pieces must not format a string per piece.
struct Where {
  const std::string& list;
  size_t index;
  std::string operator()(const char* suffix = "") const { return idx(list, index) + suffix; }
};

// Read access to an optional scalar vector; absent reads as empty. The
// FlatBuffers 2.0 verifier checks that a vector lies inside the buffer but
// not that 8-byte elements are 8-byte aligned, so values are copied out
// rather than loaded through a typed pointer.
template <typename T>
class Column {
 public:
  explicit Column(const flatbuffers::Vector<T>* v) : v_(v) {}
  size_t size() const { return v_ ? v_->size() : 0; }
  bool present() const { return v_ != nullptr; }
  T operator[](size_t i) const {
    T value;
    std::memcpy(&value, v_->Data() + i * sizeof(T), sizeof(T));
    return flatbuffers::EndianScalar(value);
  }

 private:
  const flatbuffers::Vector<T>* v_;
};

template <typename T>
Column<T> col(const flatbuffers::Vector<T>* v) {
  return Column<T>(v);
}

void expect_size(size_t got, size_t want, const std::string& field) {
  if (got != want)
    corrupt(field, "has " + std::to_string(got) + " values, expected " + std::to_string(want));
}

int64_t non_negative(int64_t v, const std::string& field) {
  if (v < 0) corrupt(field, std::to_string(v) + " is negative");
  return v;
}

double finite_non_negative(double v, const std::string& field) {
  if (!std::isfinite(v) || v < 0) corrupt(field, std::to_string(v) + " is not a finite value >= 0");
  return v;
}

// Runs `f`, turning a validation error of the layout model into kCorrupt.
template <typename F>
auto rethrow_as_corrupt(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kCorrupt) throw;
    throw Error(ErrorCode::kCorrupt, e);
  }
}

class Decoder {
 public:
  Decoder(const uint8_t* base, size_t buffer_size)
      : base_(base),
        root_(*fb::GetPlan(base)),
        budget_(16 * static_cast<uint64_t>(buffer_size) + (uint64_t{128} << 20)),
        empty_cells_budget_(4 * static_cast<uint64_t>(buffer_size) + (uint64_t{1} << 16)) {}

  Plan decode() {
    if (root_.version() != kPlanFormatVersion)
      corrupt("version", "plan format version " + std::to_string(root_.version()) +
                             " is not supported (this reader reads version " +
                             std::to_string(kPlanFormatVersion) + ")");
    if ((root_.required_features() & ~kPlanKnownFeatures) != 0)
      corrupt("required_features",
              "unknown feature bits " +
                  std::to_string(root_.required_features() & ~kPlanKnownFeatures) +
                  " (this reader knows " + std::to_string(kPlanKnownFeatures) +
                  ": stages, scratch, late summands, casts, block scales, MXFP8 scales, staging, "
                  "sub-messages)");
    staged_ = (root_.required_features() & kPlanFeatureStages) != 0;
    scratch_bit_ = (root_.required_features() & kPlanFeatureScratch) != 0;
    late_summands_bit_ = (root_.required_features() & kPlanFeatureLateSummands) != 0;
    staging_bit_ = (root_.required_features() & kPlanFeatureStaging) != 0;
    sub_bit_ = (root_.required_features() & kPlanFeatureSubMessages) != 0;
    PlanInput input;
    input.options = decode_options();
    input.topology = decode_topology();
    check_tilings();
    input.tensors = decode_tensors();
    if ((root_.required_features() & kPlanFeatureCasts) != 0 && !any_cast_)
      corrupt("required_features", "has the casts bit (8) but no tensor has a dst_dtype");
    if ((root_.required_features() & kPlanFeatureBlockScales) != 0 && !any_scales_)
      corrupt("required_features",
              "has the block scales bit (16) but no tensor has a scale_tensor");
    if ((root_.required_features() & kPlanFeatureMxScales) != 0 && !any_e8m0_)
      corrupt("required_features", "has the MXFP8 scales bit (32) but no tensor has dtype e8m0");
    const uint64_t fingerprint = rethrow_as_corrupt([&] { return plan_fingerprint(input); });
    // The message names neither value: the computed one is what an editor
    // of the inputs would need to make the edit pass.
    if (fingerprint != root_.fingerprint())
      corrupt("fingerprint",
              "does not match the decoded inputs (tensors, layouts, topology or options were "
              "edited or damaged)");
    fingerprint_ = fingerprint;
    Plan plan;
    Plan::Builder::fingerprint(plan) = fingerprint;
    Plan::Builder::processes(plan) = decode_processes(input);
    Plan::Builder::has_stats(plan) = root_.has_stats();
    Plan::Builder::stats(plan) = decode_stats(input);
    tensors_ = &input.tensors;
    for (const TensorSpec& t : input.tensors)
      if (has_block_scales(t)) scale_targets_.insert(t.scale_tensor);
    topology_ = &input.topology;
    rounds_ = root_.has_stats() ? Plan::Builder::stats(plan).rounds : -1;
    stages_ = root_.has_stats() ? Plan::Builder::stats(plan).stages : -1;
    auto& parts = Plan::Builder::parts(plan);
    const auto& processes = Plan::Builder::processes(plan);
    const auto* fparts = root_.parts();
    // Digests are all there or all absent (a plan written before them): a
    // part whose digest vanished, or a part dropped or added, fails here.
    const bool digested = root_.parts_digest() != 0;
    std::vector<std::pair<int32_t, uint64_t>> digests;
    for (uoffset_t i = 0; fparts && i < fparts->size(); ++i) {
      const std::string f = idx("parts", i);
      const fb::ProcessPart& fp = *fparts->Get(i);
      const int32_t p = fp.process();
      if ((fp.digest() != 0) != digested)
        corrupt(f + ".digest", digested ? "missing, but the plan has parts_digest"
                                        : "present, but the plan lacks parts_digest");
      digests.emplace_back(p, fp.digest());
      if (!std::binary_search(processes.begin(), processes.end(), p))
        corrupt(f + ".process", "process " + std::to_string(p) + " owns no device of the plan");
      if (!parts.empty() && parts.rbegin()->first >= p)
        corrupt(f + ".process", "parts are not sorted by distinct process");
    }
    if (digested && parts_digest(fingerprint, digests) != root_.parts_digest())
      corrupt("parts_digest",
              "does not match the parts the plan holds (a part was dropped, added or edited)");
    // The list of every process's part digest: one per process, never 0,
    // and equal to the digest of each part the buffer carries (which
    // decode_part then recomputes from the part).
    // Empty reads as absent (the schema's rule for vectors).
    if (const auto* flisted = root_.part_digests(); flisted != nullptr && flisted->size() > 0) {
      const auto listed = col(flisted);
      expect_size(listed.size(), processes.size(), "part_digests");
      auto& out = Plan::Builder::part_digests(plan);
      charge(8 * static_cast<uint64_t>(listed.size()), "part_digests");
      for (size_t k = 0; k < listed.size(); ++k) {
        if (listed[k] == 0) corrupt(idx("part_digests", k), "is 0 (a digest is never 0)");
        out.push_back(listed[k]);
      }
      for (size_t i = 0; i < digests.size(); ++i) {
        const auto at = std::lower_bound(processes.begin(), processes.end(), digests[i].first);
        const size_t k = static_cast<size_t>(at - processes.begin());
        if (digests[i].second == 0)
          corrupt(idx("parts", i) + ".digest", "missing, but the plan lists part_digests");
        if (digests[i].second != out[k])
          corrupt(idx("parts", i) + ".digest",
                  "differs from part_digests[" + std::to_string(k) +
                      "], the plan's list of every part's digest (the part or the list was "
                      "edited)");
      }
    }
    for (uoffset_t i = 0; fparts && i < fparts->size(); ++i)
      parts.emplace(fparts->Get(i)->process(), decode_part(*fparts->Get(i), idx("parts", i)));
    const auto process_of = [this](int64_t device) { return topology_->info(device).process; };
    wire::check_parts_agree(parts, process_of, "parts");
    wire::check_scratch_reductions(
        parts, *tensors_, process_of,
        [this](uint32_t t, bool source, uint32_t e) -> const Box& {
          return boxes(source ? tensor_slots_[t].first : tensor_slots_[t].second)[e];
        },
        "parts");
    if (scratch_bit_ && !any_scratch_)
      corrupt("required_features",
              "has the scratch bit (2) but no part holds scratch and no piece names one");
    if (staging_bit_ && !any_staging_)
      corrupt("required_features",
              "has the staging bit (64) but no scratch belongs to a tensor whose source is not "
              "partial");
    if (sub_bit_ && !any_sub_)
      corrupt("required_features",
              "has the sub-messages bit (128) but no message has a sub above 0");
    if (late_summands_bit_ && !any_late_summand_)
      corrupt("required_features",
              "has the late-summands bit (4) but no piece of a stage above 0 writes a scratch "
              "from a source entry");
    if (root_.has_stats())
      check_scratch_bytes(parts, processes.size(), Plan::Builder::stats(plan).max_scratch_bytes);
    Plan::Builder::tensors(plan) = std::move(input.tensors);
    Plan::Builder::topology(plan) = std::move(input.topology);
    Plan::Builder::options(plan) = input.options;
    return plan;
  }

 private:
  // Accounts for `bytes` of decoded memory before they are allocated.
  void charge(uint64_t bytes, const std::string& field) {
    if (bytes > budget_)
      corrupt(field,
              "decoding would need more memory than a plan buffer of this size can "
              "describe (repeated or shared data)");
    budget_ -= bytes;
  }

  PlanOptions decode_options() {
    const fb::PlanOptions* o = root_.options();
    if (!o) corrupt("options", "missing");
    PlanOptions out;
    out.split_min_bytes = o->split_min_bytes();
    out.alpha_seconds = o->alpha_seconds();
    out.intra_host_bytes_per_second = o->intra_host_bytes_per_second();
    out.inter_host_bytes_per_second = o->inter_host_bytes_per_second();
    out.staging_budget_bytes = o->staging_budget_bytes();
    out.relays = o->relays();
    out.reduce_scatter = o->reduce_scatter();
    out.nics_per_host = o->nics_per_host();
    out.single_hop_guard = o->single_hop_guard();
    validate(out, "options.", ErrorCode::kCorrupt);
    return out;
  }

  Topology decode_topology() {
    Topology topology;
    const fb::Topology* t = root_.topology();
    if (!t) corrupt("topology", "missing");
    const auto* devices = t->devices();
    if (!devices) return topology;
    charge(uint64_t{devices->size()} * sizeof(DeviceInfo), "topology.devices");
    int64_t previous = -1;
    for (uoffset_t i = 0; i < devices->size(); ++i) {
      const std::string f = idx("topology.devices", i);
      const fb::Device& d = *devices->Get(i);
      if (d.device() <= previous)
        corrupt(f + ".device", "device " + std::to_string(d.device()) +
                                   " is negative or not after the previous device");
      previous = d.device();
      rethrow_as_corrupt([&] {
        topology.add(DeviceInfo{d.device(), d.process(), d.host(), d.ordinal()}, f);
        return 0;
      });
    }
    return topology;
  }

  // Tilings are checked once; tensors then only check that ranks agree.
  void check_tilings() {
    const auto* tilings = root_.tilings();
    if (!tilings) return;
    for (uoffset_t i = 0; i < tilings->size(); ++i) {
      const std::string f = idx("tilings", i);
      const fb::Tiling& t = *tilings->Get(i);
      auto counts = col(t.shard_counts());
      if (counts.size() > static_cast<size_t>(kMaxRank))
        corrupt(f + ".shard_counts",
                "rank " + std::to_string(counts.size()) + " exceeds " + std::to_string(kMaxRank));
      const size_t rank = counts.size();
      for (size_t d = 0; d < rank; ++d)
        if (counts[d] < 1 || counts[d] > (int64_t{1} << 31))
          corrupt(idx(f + ".shard_counts", d),
                  "shard count " + std::to_string(counts[d]) + " is not in [1, 2^31]");
      auto devices = col(t.devices());
      const size_t n = devices.size();
      for (size_t e = 0; e < n; ++e)
        if (devices[e] < 0 || (e > 0 && devices[e] <= devices[e - 1]))
          corrupt(idx(f + ".devices", e), "device " + std::to_string(devices[e]) +
                                              " is negative or not after the previous device");
      if (t.summands()) expect_size(t.summands()->size(), n, f + ".summands");
      auto shard = col(t.shard_index());
      expect_size(shard.size(), n * rank, f + ".shard_index");
      for (size_t i2 = 0; i2 < shard.size(); ++i2)
        if (shard[i2] < 0 || shard[i2] >= counts[i2 % rank])
          corrupt(idx(f + ".shard_index", i2), "shard " + std::to_string(shard[i2]) +
                                                   " is outside [0, " +
                                                   std::to_string(counts[i2 % rank]) + ")");
    }
  }

  std::vector<TensorSpec> decode_tensors() {
    std::vector<TensorSpec> tensors;
    const auto* ft = root_.tensors();
    if (!ft) return tensors;
    if (ft->size() >= 0xfffffff0u) corrupt("tensors", "too many tensors");
    charge(uint64_t{ft->size()} * sizeof(TensorSpec), "tensors");
    tensors.reserve(ft->size());
    std::unordered_set<std::string_view> names;
    for (uoffset_t i = 0; i < ft->size(); ++i) {
      const std::string f = idx("tensors", i);
      const fb::Tensor& t = *ft->Get(i);
      TensorSpec spec;
      if (!t.name()) corrupt(f + ".name", "missing");
      charge(t.name()->size(), f + ".name");
      spec.name = t.name()->str();
      if (!valid_utf8(spec.name)) corrupt(f + ".name", "not valid UTF-8");
      if (spec.name.find('\0') != std::string::npos)
        corrupt(f + ".name", "contains a NUL character");
      if (!names.insert(t.name()->string_view()).second)
        corrupt(f + ".name", "duplicate tensor name");
      const int32_t dtype = static_cast<int32_t>(t.dtype());
      if (!dtype_valid(dtype))
        corrupt(f + ".dtype", "invalid dtype value " + std::to_string(dtype));
      spec.dtype = static_cast<DType>(dtype);
      if (spec.dtype == DType::kE8M0) {
        if ((root_.required_features() & kPlanFeatureMxScales) == 0)
          corrupt(f + ".dtype", "e8m0 but required_features lacks the MXFP8 scales bit (32)");
        any_e8m0_ = true;
      }
      if (!t.shape()) corrupt(f + ".shape", "missing");
      if (t.shape()->size() > static_cast<uoffset_t>(kMaxRank))
        corrupt(f + ".shape", "rank " + std::to_string(t.shape()->size()) + " exceeds " +
                                  std::to_string(kMaxRank));
      auto shape = col(t.shape());
      for (size_t d = 0; d < shape.size(); ++d) spec.shape.push_back(shape[d]);
      rethrow_as_corrupt([&] {
        validate_shape(spec.shape, dtype_size(spec.dtype), f + ".shape");
        return 0;
      });
      const size_t src = decode_layout(t.src(), spec.shape, f + ".src");
      const size_t dst = decode_layout(t.dst(), spec.shape, f + ".dst");
      spec.src = slots_[src].layout;
      spec.dst = slots_[dst].layout;
      decode_cast(t, spec, f);
      decode_scales(t, spec, f);
      tensor_slots_.push_back({src, dst});
      tensors.push_back(std::move(spec));
    }
    rethrow_as_corrupt([&] {
      derive_scale_dtypes(tensors);
      validate_block_scales(tensors, ErrorCode::kCorrupt);
      return 0;
    });
    return tensors;
  }

  // Returns the index in slots_ of the decoded layout.
  size_t decode_layout(const fb::Layout* l, const std::vector<int64_t>& shape,
                       const std::string& f) {
    if (!l) corrupt(f, "missing");
    const int32_t op = static_cast<int32_t>(l->reduce_op());
    if (!reduce_op_valid(op)) corrupt(f + ".reduce_op", "invalid reduce op " + std::to_string(op));
    if (l->num_summands() < 1)
      corrupt(f + ".num_summands", std::to_string(l->num_summands()) + " must be at least 1");
    const size_t rank = shape.size();
    // Layouts with the same description and shape decode once and share
    // their geometry.
    int64_t source;
    if (l->tiling() >= 0) {
      const auto* tilings = root_.tilings();
      if (!tilings || static_cast<uoffset_t>(l->tiling()) >= tilings->size())
        corrupt(f + ".tiling", "index " + std::to_string(l->tiling()) + " is out of range (" +
                                   std::to_string(tilings ? tilings->size() : 0) + " tilings)");
      source = l->tiling();
    } else {
      if (l->tiling() != -1) corrupt(f + ".tiling", "invalid index " + std::to_string(l->tiling()));
      if (!l->boxes()) corrupt(f + ".boxes", "missing (and no tiling)");
      source = -1 - (reinterpret_cast<const uint8_t*>(l->boxes()) - base_);
    }
    auto key = std::make_tuple(source, shape, l->num_summands(), op);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;

    const ReduceOp reduce_op = static_cast<ReduceOp>(op);
    Layout layout;
    if (l->tiling() >= 0) {
      const fb::Tiling& t = *root_.tilings()->Get(static_cast<uoffset_t>(l->tiling()));
      auto counts = col(t.shard_counts());
      if (counts.size() != rank)
        corrupt(f + ".tiling", "tiling " + std::to_string(l->tiling()) + " has rank " +
                                   std::to_string(counts.size()) + ", the tensor has rank " +
                                   std::to_string(rank));
      auto devices = col(t.devices());
      auto summands = col(t.summands());
      auto shard = col(t.shard_index());
      const size_t n = devices.size();
      // The layout indexes its cells (the product of the shard counts, each
      // <= 2^31). A lowered NamedSharding has at most one cell per entry;
      // cells beyond that come from a tiling that leaves cells empty, and are
      // charged to a budget of their own that a few bytes cannot exhaust.
      uint64_t cells = 1;
      for (size_t d = 0; d < rank; ++d)
        cells = std::min<uint64_t>(cells * static_cast<uint64_t>(counts[d]), uint64_t{1} << 40);
      // What the layout keeps per entry (device, summand, shard indices,
      // cell); the TileEntry list below is transient and at most a few
      // times the tiling's own bytes.
      charge(n * (32 + 8 * rank), f);
      if (cells > n) {
        if (cells - n > empty_cells_budget_)
          corrupt(f + ".tiling", "tiling " + std::to_string(l->tiling()) + " has " +
                                     std::to_string(cells) + " cells for " + std::to_string(n) +
                                     " entries, more than a buffer of this size can describe");
        empty_cells_budget_ -= cells - n;
        charge((cells - n) * 4, f + ".tiling");
      }
      std::vector<Layout::TileEntry> entries(n);
      for (size_t e = 0; e < n; ++e) {
        entries[e].device = devices[e];
        entries[e].summand = summands.present() ? summands[e] : 0;
        for (size_t d = 0; d < rank; ++d) entries[e].shard[d] = shard[e * rank + d];
      }
      std::vector<int64_t> count_values(counts.size());
      for (size_t d = 0; d < rank; ++d) count_values[d] = counts[d];
      layout = rethrow_as_corrupt([&] {
        return Layout::from_tiles(shape, count_values, std::move(entries), l->num_summands(),
                                  reduce_op, f);
      });
    } else {
      const fb::Boxes& b = *l->boxes();
      auto devices = col(b.devices());
      auto summands = col(b.summands());
      auto lo = col(b.lo());
      auto hi = col(b.hi());
      const size_t n = devices.size();
      if (summands.present()) expect_size(summands.size(), n, f + ".boxes.summands");
      expect_size(lo.size(), n * rank, f + ".boxes.lo");
      expect_size(hi.size(), n * rank, f + ".boxes.hi");
      charge(n * (sizeof(Box) + 24), f + ".boxes");  // box, device, summand, index
      std::vector<LayoutEntry> entries(n);
      for (size_t e = 0; e < n; ++e) {
        if (devices[e] < 0 || (e > 0 && devices[e] <= devices[e - 1]))
          corrupt(idx(f + ".boxes.devices", e),
                  "device " + std::to_string(devices[e]) +
                      " is negative or not after the previous device");
        entries[e].device = devices[e];
        entries[e].summand = summands.present() ? summands[e] : 0;
        entries[e].box.rank = static_cast<int32_t>(rank);
        for (size_t d = 0; d < rank; ++d) {
          entries[e].box.lo[d] = lo[e * rank + d];
          entries[e].box.hi[d] = hi[e * rank + d];
        }
      }
      layout = rethrow_as_corrupt([&] {
        return Layout::from_boxes(shape, std::move(entries), l->num_summands(), reduce_op, f);
      });
    }
    cache_.emplace(std::move(key), slots_.size());
    slots_.push_back({std::move(layout), {}});
    return slots_.size() - 1;
  }

  // Processes owning a device of some layout, as make_plan computes them.
  std::vector<int32_t> decode_processes(const PlanInput& input) {
    std::vector<int32_t> expected;
    {
      std::unordered_set<const Geometry*> seen;
      std::vector<int32_t> all;
      for (const TensorSpec& t : input.tensors)
        for (const Layout* l : {&t.src, &t.dst})
          if (seen.insert(l->geometry().get()).second)
            for (size_t e = 0; e < l->num_entries(); ++e)
              all.push_back(input.topology.info(l->device(e)).process);
      std::sort(all.begin(), all.end());
      all.erase(std::unique(all.begin(), all.end()), all.end());
      expected = std::move(all);
    }
    auto stored = col(root_.processes());
    bool equal = stored.size() == expected.size();
    for (size_t i = 0; equal && i < stored.size(); ++i) equal = stored[i] == expected[i];
    if (!equal) {
      auto list = [](auto&& v, size_t n) {
        std::string s = "[";
        for (size_t i = 0; i < n && i < 16; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
        return s + (n > 16 ? ", ...]" : "]");
      };
      corrupt("processes", list(stored, stored.size()) +
                               " differ from the processes owning the plan's devices " +
                               list(expected, expected.size()));
    }
    return expected;
  }

  PlanStats decode_stats(const PlanInput& input) {
    PlanStats s;
    const fb::PlanStats* fs = root_.stats();
    if (!fs) {
      if (root_.has_stats()) corrupt("stats", "missing although has_stats is set");
      return s;
    }
    s.network_bytes = non_negative(fs->network_bytes(), "stats.network_bytes");
    s.local_bytes = non_negative(fs->local_bytes(), "stats.local_bytes");
    s.cross_host_bytes = non_negative(fs->cross_host_bytes(), "stats.cross_host_bytes");
    s.cross_process_bytes = non_negative(fs->cross_process_bytes(), "stats.cross_process_bytes");
    s.max_send_bytes = non_negative(fs->max_send_bytes(), "stats.max_send_bytes");
    s.max_recv_bytes = non_negative(fs->max_recv_bytes(), "stats.max_recv_bytes");
    s.messages = non_negative(fs->messages(), "stats.messages");
    s.pieces = non_negative(fs->pieces(), "stats.pieces");
    s.rounds = static_cast<int32_t>(non_negative(fs->rounds(), "stats.rounds"));
    s.peak_staging_bytes = non_negative(fs->peak_staging_bytes(), "stats.peak_staging_bytes");
    s.lower_bound_network_bytes =
        non_negative(fs->lower_bound_network_bytes(), "stats.lower_bound_network_bytes");
    s.lower_bound_max_send_bytes =
        non_negative(fs->lower_bound_max_send_bytes(), "stats.lower_bound_max_send_bytes");
    s.lower_bound_max_recv_bytes =
        non_negative(fs->lower_bound_max_recv_bytes(), "stats.lower_bound_max_recv_bytes");
    s.cost_seconds = finite_non_negative(fs->cost_seconds(), "stats.cost_seconds");
    s.lower_bound_cost_seconds =
        finite_non_negative(fs->lower_bound_cost_seconds(), "stats.lower_bound_cost_seconds");
    s.plan_seconds = finite_non_negative(fs->plan_seconds(), "stats.plan_seconds");
    s.stages = static_cast<int32_t>(non_negative(fs->stages(), "stats.stages"));
    s.max_host_send_bytes = non_negative(fs->max_host_send_bytes(), "stats.max_host_send_bytes");
    s.max_host_recv_bytes = non_negative(fs->max_host_recv_bytes(), "stats.max_host_recv_bytes");
    s.lower_bound_cross_host_bytes =
        non_negative(fs->lower_bound_cross_host_bytes(), "stats.lower_bound_cross_host_bytes");
    s.lower_bound_max_host_send_bytes = non_negative(fs->lower_bound_max_host_send_bytes(),
                                                     "stats.lower_bound_max_host_send_bytes");
    s.lower_bound_max_host_recv_bytes = non_negative(fs->lower_bound_max_host_recv_bytes(),
                                                     "stats.lower_bound_max_host_recv_bytes");
    const auto binding = static_cast<int32_t>(fs->lower_bound_binding());
    if (binding < 0 || binding > static_cast<int32_t>(BoundKind::kHostSend))
      corrupt("stats.lower_bound_binding", "unknown value " + std::to_string(binding));
    s.lower_bound_binding = static_cast<BoundKind>(binding);
    s.lower_bound_binding_id = fs->lower_bound_binding_id();
    if (s.lower_bound_binding_id < -1) corrupt("stats.lower_bound_binding_id", "below -1");
    s.forwarded_bytes = non_negative(fs->forwarded_bytes(), "stats.forwarded_bytes");
    s.max_scratch_bytes = non_negative(fs->max_scratch_bytes(), "stats.max_scratch_bytes");
    if (const auto* pd = fs->per_device()) {
      charge(uint64_t{pd->size()} * sizeof(DeviceTraffic), "stats.per_device");
      s.per_device.reserve(pd->size());
      for (uoffset_t i = 0; i < pd->size(); ++i) {
        const std::string f = idx("stats.per_device", i);
        const fb::DeviceTraffic& d = *pd->Get(i);
        DeviceTraffic t;
        t.device = non_negative(d.device(), f + ".device");
        if (i > 0 && t.device <= s.per_device.back().device)
          corrupt(f + ".device", "not after the previous device");
        t.send_bytes = non_negative(d.send_bytes(), f + ".send_bytes");
        t.recv_bytes = non_negative(d.recv_bytes(), f + ".recv_bytes");
        t.local_bytes = non_negative(d.local_bytes(), f + ".local_bytes");
        t.send_messages = non_negative(d.send_messages(), f + ".send_messages");
        t.recv_messages = non_negative(d.recv_messages(), f + ".recv_messages");
        s.per_device.push_back(t);
      }
    }
    if (root_.has_stats()) check_totals(s, input);
    return s;
  }

  // The global byte figures are sums and maxima of the per-device ones, over
  // exactly the plan's devices. (stats.messages counts messages per round,
  // per_device counts peers, so they are not compared.)
  static void check_totals(const PlanStats& s, const PlanInput& input) {
    std::vector<int64_t> devices;
    {
      std::unordered_set<const Geometry*> seen;
      for (const TensorSpec& t : input.tensors)
        for (const Layout* l : {&t.src, &t.dst})
          if (seen.insert(l->geometry().get()).second)
            for (size_t e = 0; e < l->num_entries(); ++e) devices.push_back(l->device(e));
      std::sort(devices.begin(), devices.end());
      devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
    }
    bool same = devices.size() == s.per_device.size();
    for (size_t i = 0; same && i < devices.size(); ++i) same = devices[i] == s.per_device[i].device;
    if (!same) corrupt("stats.per_device", "devices do not match the devices of the layouts");
    int64_t send = 0, recv = 0, local = 0, send_msgs = 0, recv_msgs = 0, max_send = 0, max_recv = 0;
    for (const DeviceTraffic& d : s.per_device) {
      if (__builtin_add_overflow(send, d.send_bytes, &send) ||
          __builtin_add_overflow(recv, d.recv_bytes, &recv) ||
          __builtin_add_overflow(local, d.local_bytes, &local) ||
          __builtin_add_overflow(send_msgs, d.send_messages, &send_msgs) ||
          __builtin_add_overflow(recv_msgs, d.recv_messages, &recv_msgs))
        corrupt("stats.per_device", "totals overflow 64 bits");
      max_send = std::max(max_send, d.send_bytes);
      max_recv = std::max(max_recv, d.recv_bytes);
    }
    auto expect = [](int64_t stored, int64_t want, const char* field) {
      if (stored != want)
        corrupt(field, std::to_string(stored) + " differs from " + std::to_string(want) +
                           " computed from stats.per_device");
    };
    expect(s.network_bytes, recv, "stats.network_bytes");
    expect(send, recv, "stats.per_device.send_bytes (total)");
    expect(s.local_bytes, local, "stats.local_bytes");
    expect(send_msgs, recv_msgs, "stats.per_device.send_messages (total)");
    expect(s.max_send_bytes, max_send, "stats.max_send_bytes");
    expect(s.max_recv_bytes, max_recv, "stats.max_recv_bytes");
  }

  Regions decode_regions(const fb::Regions* r, const std::string& f) {
    Regions regions;
    if (!r) return regions;
    auto rank = col(r->rank());
    auto lo = col(r->lo());
    auto hi = col(r->hi());
    charge(rank.size() * sizeof(Box), f);
    regions.reserve(rank.size());
    size_t at = 0;
    for (size_t i = 0; i < rank.size(); ++i) {
      const Where fi{f, i};
      if (rank[i] > kMaxRank)
        corrupt(fi(".rank"), std::to_string(rank[i]) + " exceeds " + std::to_string(kMaxRank));
      if (lo.size() - at < rank[i] || hi.size() - at < rank[i])
        corrupt(fi(), "lo/hi hold fewer values than the ranks need");
      Box b;
      b.rank = rank[i];
      for (int d = 0; d < b.rank; ++d, ++at) {
        b.lo[d] = lo[at];
        b.hi[d] = hi[at];
      }
      for (int d = 0; d < b.rank; ++d)
        if (b.lo[d] < 0 || b.hi[d] < b.lo[d]) corrupt(fi(), "invalid bounds " + to_string(b));
      regions.push_back(b);
    }
    if (at != lo.size() || at != hi.size())
      corrupt(f, "lo/hi hold more values than the ranks need");
    return regions;
  }

  const std::vector<Box>& boxes(size_t slot) {
    Slot& s = slots_[slot];
    if (s.boxes.empty() && s.layout.num_entries() > 0) {
      charge(s.layout.num_entries() * sizeof(Box), "plan");
      s.boxes.reserve(s.layout.num_entries());
      for (size_t e = 0; e < s.layout.num_entries(); ++e) s.boxes.push_back(s.layout.box(e));
    }
    return s.boxes;
  }

  // Checks one piece and returns its packed size: indices in range, the
  // moved region inside both the source and the destination shard. In a
  // stage above 0 the source is a destination entry and the region explicit.
  //
  // Scratch (kScratchEntry): the part being checked (part_) holds the
  // scratch its local and received pieces write and its sent pieces read,
  // on `src_device` / `dst_device`; the other side's scratch belongs to the
  // peer's part and is not checked here (`side`: 0 local, 1 sent, 2
  // received).
  int64_t check_piece(const Piece& p, const Regions& regions, const Where& f, uint32_t stage = 0,
                      int side = 0, int64_t src_device = -1, int64_t dst_device = -1) {
    const auto& tensors = *tensors_;
    if (p.tensor >= tensors.size())
      corrupt(f(".tensor"), std::to_string(p.tensor) + " is out of range (" +
                                std::to_string(tensors.size()) + " tensors)");
    const TensorSpec& t = tensors[p.tensor];
    const bool src_scratch = p.src_entry == kScratchEntry;
    const bool dst_scratch = p.dst_entry == kScratchEntry;
    if (src_scratch || dst_scratch) {
      const char* field = dst_scratch ? ".dst_entry" : ".src_entry";
      if (!scratch_bit_)
        corrupt(f(field), "names a scratch but required_features lacks the scratch bit (2)");
      any_scratch_ = true;
      if (!t.src.partial()) {
        // A copy-staging buffer (plan.h, Scratch): written in stage 0 from
        // source entries, read in later stages into destination entries.
        check_staging_tensor(t, f(field));
        if (src_scratch && dst_scratch)
          corrupt(f(".dst_entry"), "copies a staging scratch of tensor \"" + t.name +
                                       "\" into a scratch (staging is read into destination "
                                       "entries only)");
        if (dst_scratch && stage > 0)
          corrupt(f(".dst_entry"), "a piece of stage " + std::to_string(stage) +
                                       " writes a staging scratch of tensor \"" + t.name +
                                       "\" (staging is written in stage 0 only)");
      }
      if (p.region == kOverlapRegion)
        corrupt(f(".region"), "a piece naming a scratch names no region");
      if (src_scratch && stage == 0)
        corrupt(f(".src_entry"), "a piece of stage 0 reads a scratch (" +
                                     std::string(side == 0 ? "a local piece" : "a message") +
                                     " of stage 0 reads source entries)");
      if (p.region >= regions.size())
        corrupt(f(".region"), std::to_string(p.region) + " is out of range (" +
                                  std::to_string(regions.size()) + " regions)");
      const Box& region = regions[p.region];
      if (region.rank != t.src.rank())
        corrupt(f(".region"), "region " + std::to_string(p.region) + " has rank " +
                                  std::to_string(region.rank) + ", tensor \"" + t.name +
                                  "\" has rank " + std::to_string(t.src.rank()));
      Box src = region;
      Box dst = region;
      if (src_scratch && side == 1) src = held_scratch(p.tensor, src_device, region, f(field));
      if (!src_scratch) {
        // Into a scratch (dst_scratch here): a summand, a source entry, in
        // any stage (reads_source); in a later stage only under bit 4.
        if (stage > 0 && !late_summands_bit_)
          corrupt(f(".src_entry"), "a piece of stage " + std::to_string(stage) +
                                       " writes a scratch from a source entry but "
                                       "required_features lacks the late-summands bit (4)");
        any_late_summand_ |= stage > 0;
        if (p.src_entry >= t.src.num_entries())
          corrupt(f(".src_entry"), std::to_string(p.src_entry) + " is out of range");
        src = boxes(tensor_slots_[p.tensor].first)[p.src_entry];
      }
      if (dst_scratch && side != 1) dst = held_scratch(p.tensor, dst_device, region, f(field));
      if (!dst_scratch) {
        if (p.dst_entry >= t.dst.num_entries())
          corrupt(f(".dst_entry"), std::to_string(p.dst_entry) + " is out of range");
        dst = boxes(tensor_slots_[p.tensor].second)[p.dst_entry];
      }
      if (!src.contains(region) || !dst.contains(region))
        corrupt(f(".region"), "region " + to_string(region) +
                                  " is not inside both the source box " + to_string(src) +
                                  " and the destination box " + to_string(dst));
      return region.volume() * wire_size(t);
    }
    const Layout& from = stage == 0 ? t.src : t.dst;
    if (p.src_entry >= from.num_entries())
      corrupt(f(".src_entry"), std::to_string(p.src_entry) + " is out of range (tensor \"" +
                                   t.name + "\" has " + std::to_string(from.num_entries()) +
                                   (stage == 0 ? " source" : " destination") + " entries)");
    if (stage > 0 && p.region == kOverlapRegion)
      corrupt(f(".region"), "a piece of stage " + std::to_string(stage) + " names no region");
    if (p.dst_entry >= t.dst.num_entries())
      corrupt(f(".dst_entry"), std::to_string(p.dst_entry) + " is out of range (tensor \"" +
                                   t.name + "\" has " + std::to_string(t.dst.num_entries()) +
                                   " destination entries)");
    const Box& src = stage == 0 ? boxes(tensor_slots_[p.tensor].first)[p.src_entry]
                                : boxes(tensor_slots_[p.tensor].second)[p.src_entry];
    const Box& dst = boxes(tensor_slots_[p.tensor].second)[p.dst_entry];
    Box region;
    if (p.region == kOverlapRegion) {
      region = intersect(src, dst);
    } else {
      if (p.region >= regions.size())
        corrupt(f(".region"), std::to_string(p.region) + " is out of range (" +
                                  std::to_string(regions.size()) + " regions)");
      region = regions[p.region];
      if (region.rank != t.src.rank())
        corrupt(f(".region"), "region " + std::to_string(p.region) + " has rank " +
                                  std::to_string(region.rank) + ", tensor \"" + t.name +
                                  "\" has rank " + std::to_string(t.src.rank()));
      if (!src.contains(region) || !dst.contains(region))
        corrupt(f(".region"), "region " + to_string(region) +
                                  " is not inside both the source box " + to_string(src) +
                                  " and the destination box " + to_string(dst));
    }
    return region.volume() * wire_size(t);
  }

  // Tensor.dst_dtype: a cast in flight, present exactly with the casts bit.
  void decode_cast(const fb::Tensor& t, TensorSpec& spec, const std::string& f) {
    const int32_t d = static_cast<int32_t>(t.dst_dtype());
    const bool bit = (root_.required_features() & kPlanFeatureCasts) != 0;
    if (d == 0) return;
    if (!dtype_valid(d)) corrupt(f + ".dst_dtype", "invalid dtype value " + std::to_string(d));
    spec.dst_dtype = static_cast<DType>(d);
    if (spec.dst_dtype == spec.dtype)
      corrupt(f + ".dst_dtype", "equals the tensor's dtype (absent when there is no cast)");
    if (!cast_supported(spec.dtype, spec.dst_dtype))
      corrupt(f + ".dst_dtype", "no cast from " + std::string(dtype_name(spec.dtype)) + " to " +
                                    std::string(dtype_name(spec.dst_dtype)));
    if (spec.src.partial() || spec.dst.partial())
      corrupt(f + ".dst_dtype", "a cast with a partial source or destination");
    if (!bit) corrupt(f + ".dst_dtype", "present but required_features lacks the casts bit (8)");
    any_cast_ = true;
  }

  // Tensor.scale_tensor and scale_block: block scales, present exactly with
  // their bit (checked against the other tensors by validate_block_scales).
  void decode_scales(const fb::Tensor& t, TensorSpec& spec, const std::string& f) {
    const bool bit = (root_.required_features() & kPlanFeatureBlockScales) != 0;
    if (t.scale_tensor() == -1) {
      if (t.scale_block()) corrupt(f + ".scale_block", "present without a scale tensor");
      return;
    }
    if (!bit)
      corrupt(f + ".scale_tensor", "present but required_features lacks the block scales bit (16)");
    spec.scale_tensor = t.scale_tensor();
    if (!t.scale_block()) corrupt(f + ".scale_block", "missing");
    if (t.scale_block()->size() != spec.shape.size())
      corrupt(f + ".scale_block", "has " + std::to_string(t.scale_block()->size()) +
                                      " extents, the tensor has rank " +
                                      std::to_string(spec.shape.size()));
    auto block = col(t.scale_block());
    for (size_t d = 0; d < block.size(); ++d) spec.scale_block.push_back(block[d]);
    any_scales_ = true;
  }

  std::vector<Piece> decode_pieces(const fb::Pieces* fp, const std::string& f) {
    std::vector<Piece> pieces;
    if (!fp) return pieces;
    auto tensor = col(fp->tensor());
    auto src = col(fp->src_entry());
    auto dst = col(fp->dst_entry());
    auto region = col(fp->region());
    const size_t n = tensor.size();
    expect_size(src.size(), n, f + ".src_entry");
    expect_size(dst.size(), n, f + ".dst_entry");
    if (region.present()) expect_size(region.size(), n, f + ".region");
    charge(n * sizeof(Piece), f);
    pieces.resize(n);
    for (size_t i = 0; i < n; ++i)
      pieces[i] = Piece{tensor[i], src[i], dst[i], region.present() ? region[i] : kOverlapRegion};
    return pieces;
  }

  // Messages of one direction, as stored; check_messages checks them.
  std::vector<Message> decode_messages(const fb::Messages* fm, const std::string& f) {
    std::vector<Message> msgs;
    const size_t n = fm ? col(fm->src_device()).size() : 0;
    if (fm) {
      expect_size(col(fm->dst_device()).size(), n, f + ".dst_device");
      expect_size(col(fm->round()).size(), n, f + ".round");
      expect_size(col(fm->first_piece()).size(), n, f + ".first_piece");
      expect_size(col(fm->num_pieces()).size(), n, f + ".num_pieces");
      expect_size(col(fm->bytes()).size(), n, f + ".bytes");
      if (col(fm->stage()).present()) expect_size(col(fm->stage()).size(), n, f + ".stage");
      if (col(fm->sub()).present()) expect_size(col(fm->sub()).size(), n, f + ".sub");
    }
    charge(n * sizeof(Message), f);
    msgs.resize(n);
    for (size_t i = 0; i < n; ++i) {
      Message& m = msgs[i];
      m.src_device = col(fm->src_device())[i];
      m.dst_device = col(fm->dst_device())[i];
      m.round = col(fm->round())[i];
      m.first_piece = col(fm->first_piece())[i];
      m.num_pieces = col(fm->num_pieces())[i];
      m.bytes = col(fm->bytes())[i];
      m.stage = col(fm->stage()).present() ? col(fm->stage())[i] : 0;
      m.sub = col(fm->sub()).present() ? col(fm->sub())[i] : 0;
    }
    return msgs;
  }

  // Checks the messages of one direction. `send`: this process sends them
  // (ordered by stage, round, destination, source, sub); otherwise it
  // receives them (stage, round, source, destination, sub). Their pieces
  // tile `pieces` in order.
  void check_messages(const std::vector<Message>& msgs, const std::vector<Piece>& pieces,
                      const Regions& regions, int32_t process, bool send, const std::string& f,
                      const std::string& fpieces) {
    uint64_t next = 0;
    for (size_t i = 0; i < msgs.size(); ++i) {
      const Where fi{f, i};
      const Message& m = msgs[i];
      if (m.stage > 0 && !staged_)
        corrupt(fi(".stage"),
                std::to_string(m.stage) + " but required_features lacks the stages bit (1)");
      if (m.sub > 0 && !sub_bit_)
        corrupt(fi(".sub"),
                std::to_string(m.sub) + " but required_features lacks the sub-messages bit (128)");
      any_sub_ |= m.sub > 0;
      if (stages_ >= 0 && m.stage >= static_cast<uint32_t>(std::max<int64_t>(stages_, 1)))
        corrupt(fi(".stage"),
                std::to_string(m.stage) + " is not below stats.stages " + std::to_string(stages_));
      if (m.src_device < 0)
        corrupt(fi(".src_device"), std::to_string(m.src_device) + " is negative");
      if (m.dst_device < 0)
        corrupt(fi(".dst_device"), std::to_string(m.dst_device) + " is negative");
      if (m.src_device == m.dst_device)
        corrupt(fi(), "sends device " + std::to_string(m.src_device) + " to itself");
      const int64_t own = send ? m.src_device : m.dst_device;
      if (topology_->info(own).process != process)
        corrupt(fi(send ? ".src_device" : ".dst_device"),
                "device " + std::to_string(own) + " is not on process " + std::to_string(process));
      if (rounds_ >= 0 && m.round >= static_cast<uint32_t>(rounds_))
        corrupt(fi(".round"),
                std::to_string(m.round) + " is not below stats.rounds " + std::to_string(rounds_));
      if (i > 0) {
        const Message& q = msgs[i - 1];
        const auto key = [send](const Message& x) {
          return send ? std::make_tuple(x.stage, x.round, x.dst_device, x.src_device)
                      : std::make_tuple(x.stage, x.round, x.src_device, x.dst_device);
        };
        // Same stage, round and devices: the sub must grow.
        if (key(q) == key(m) && q.sub >= m.sub)
          corrupt(fi(".sub"), std::to_string(m.sub) + " is not above the previous message's sub " +
                                  std::to_string(q.sub) +
                                  " (messages of one stage, round, destination and source are "
                                  "ordered by strictly increasing sub)");
        if (key(m) < key(q))
          corrupt(fi(), std::string("not after the previous message in (stage, round, ") +
                            (send ? "destination, source" : "source, destination") +
                            ", sub) order");
      }
      if (m.first_piece != next)
        corrupt(fi(".first_piece"), std::to_string(m.first_piece) + " should be " +
                                        std::to_string(next) + " (messages tile " + fpieces + ")");
      if (m.num_pieces > pieces.size() - next)
        corrupt(fi(".num_pieces"), std::to_string(m.num_pieces) + " runs past the end of " +
                                       fpieces + " (" + std::to_string(pieces.size()) + ")");
      int64_t bytes = 0;
      for (uint64_t k = next; k < next + m.num_pieces; ++k) {
        const Piece& p = pieces[k];
        const Where fk{fpieces, k};
        const int64_t b =
            check_piece(p, regions, fk, m.stage, send ? 1 : 2, m.src_device, m.dst_device);
        const TensorSpec& t = (*tensors_)[p.tensor];
        // A scratch is on the device that reads or writes it.
        const int64_t from = p.src_entry == kScratchEntry ? m.src_device
                             : reads_source(p, m.stage)   ? t.src.device(p.src_entry)
                                                          : t.dst.device(p.src_entry);
        const int64_t to = p.dst_entry == kScratchEntry ? m.dst_device : t.dst.device(p.dst_entry);
        if (from != m.src_device || to != m.dst_device)
          corrupt(fk(), "moves from device " + std::to_string(from) + " to device " +
                            std::to_string(to) + " but its message " + fi() + " goes from " +
                            std::to_string(m.src_device) + " to " + std::to_string(m.dst_device));
        if (__builtin_add_overflow(bytes, b, &bytes)) corrupt(fi(".bytes"), "overflows 64 bits");
      }
      if (m.bytes != bytes)
        corrupt(fi(".bytes"), std::to_string(m.bytes) + " differs from the " +
                                  std::to_string(bytes) + " bytes of its pieces");
      next += m.num_pieces;
    }
    if (next != pieces.size())
      corrupt(fpieces, std::to_string(pieces.size() - next) + " pieces belong to no message");
  }

  ProcessPart decode_part(const fb::ProcessPart& fp, const std::string& f) {
    ProcessPart part;
    part.process = fp.process();
    part.regions = decode_regions(fp.regions(), f + ".regions");
    const std::string local = f + ".local";
    part.local = decode_pieces(fp.local(), local);
    part.send_pieces = decode_pieces(fp.send_pieces(), f + ".send_pieces");
    part.sends = decode_messages(fp.sends(), f + ".sends");
    part.recv_pieces = decode_pieces(fp.recv_pieces(), f + ".recv_pieces");
    part.recvs = decode_messages(fp.recvs(), f + ".recvs");
    part.scratch = decode_scratch(fp, f);
    // The digest first: an edited part is reported as edited, and the checks
    // below never tell an editor which value would have passed them.
    if (fp.digest() != 0 && fp.digest() != part_digest(fingerprint_, part))
      corrupt(f + ".digest", "does not match the part's contents (the part was edited or damaged)");
    check_scratch(part, f);
    part_ = &part;
    for (size_t i = 0; i < part.local.size(); ++i) {
      const Piece& p = part.local[i];
      const Where fi{local, i};
      const bool in_range = p.tensor < tensors_->size() && p.src_entry != kScratchEntry &&
                            p.src_entry < (*tensors_)[p.tensor].src.num_entries();
      const int64_t src_device = in_range ? (*tensors_)[p.tensor].src.device(p.src_entry) : -1;
      check_piece(p, part.regions, fi, 0, 0, src_device, src_device);
      const TensorSpec& t = (*tensors_)[p.tensor];
      const int64_t device = t.src.device(p.src_entry);
      if (p.dst_entry != kScratchEntry && device != t.dst.device(p.dst_entry))
        corrupt(fi(), "a local piece moves from device " + std::to_string(device) + " to device " +
                          std::to_string(t.dst.device(p.dst_entry)));
      if (topology_->info(device).process != part.process)
        corrupt(fi(), "device " + std::to_string(device) + " is not on process " +
                          std::to_string(part.process));
    }
    check_messages(part.sends, part.send_pieces, part.regions, part.process, true, f + ".sends",
                   f + ".send_pieces");
    check_messages(part.recvs, part.recv_pieces, part.regions, part.process, false, f + ".recvs",
                   f + ".recv_pieces");
    // Indices are sound: now what the part does (issue 37: every
    // destination element written exactly once per summand, no piece twice,
    // nothing read before it is written).
    wire::check_part_exact(
        part, *tensors_, entries_on(part.process),
        [this](uint32_t t, bool source, uint32_t e) -> const Box& {
          return boxes(source ? tensor_slots_[t].first : tensor_slots_[t].second)[e];
        },
        f);
    part_ = nullptr;
    any_scratch_ |= !part.scratch.empty();
    return part;
  }

  // The scratch columns of a part, as stored (check_scratch checks them).
  std::vector<Scratch> decode_scratch(const fb::ProcessPart& fp, const std::string& f) {
    std::vector<Scratch> out;
    auto tensor = col(fp.scratch_tensor());
    auto device = col(fp.scratch_device());
    auto lo = col(fp.scratch_lo());
    auto hi = col(fp.scratch_hi());
    const size_t n = tensor.size();
    expect_size(device.size(), n, f + ".scratch_device");
    charge(n * sizeof(Scratch), f + ".scratch_tensor");
    out.resize(n);
    size_t at = 0;
    for (size_t k = 0; k < n; ++k) {
      const Where fk{f + ".scratch_tensor", k};
      Scratch& s = out[k];
      s.tensor = tensor[k];
      s.device = device[k];
      if (s.tensor >= tensors_->size())
        corrupt(fk(), std::to_string(s.tensor) + " is out of range (" +
                          std::to_string(tensors_->size()) + " tensors)");
      const int rank = (*tensors_)[s.tensor].src.rank();
      if (lo.size() - at < static_cast<size_t>(rank) || hi.size() - at < static_cast<size_t>(rank))
        corrupt(f + ".scratch_lo", "holds fewer values than the scratch tensors' ranks need");
      s.box.rank = rank;
      for (int d = 0; d < rank; ++d, ++at) {
        s.box.lo[d] = lo[at];
        s.box.hi[d] = hi[at];
      }
    }
    if (at != lo.size() || at != hi.size())
      corrupt(f + ".scratch_lo", "lo/hi hold other counts than the scratch tensors' ranks need");
    return out;
  }

  // Scratch of a partial source, non-empty boxes inside the shape, on this
  // process, sorted by (tensor, device, lo), disjoint per (tensor, device).
  void check_scratch(const ProcessPart& part, const std::string& f) {
    const auto& x = part.scratch;
    if (!x.empty() && !scratch_bit_)
      corrupt(f + ".scratch_tensor", "present but required_features lacks the scratch bit (2)");
    uint64_t compared = 0;
    for (size_t k = 0; k < x.size(); ++k) {
      const Scratch& s = x[k];
      const TensorSpec& t = (*tensors_)[s.tensor];
      const Where ft{f + ".scratch_tensor", k};
      if (!t.src.partial()) check_staging_tensor(t, ft());
      const Where fb{f + ".scratch_lo", k};
      for (int d = 0; d < s.box.rank; ++d) {
        if (s.box.lo[d] < 0 || s.box.hi[d] > t.shape[static_cast<size_t>(d)] ||
            s.box.hi[d] <= s.box.lo[d])
          corrupt(fb(), "box " + to_string(s.box) + " is empty or outside the shape of tensor \"" +
                            t.name + "\"");
      }
      if (s.device < 0 || topology_->info(s.device).process != part.process)
        corrupt(Where{f + ".scratch_device", k}(), "device " + std::to_string(s.device) +
                                                       " is not on process " +
                                                       std::to_string(part.process));
      if (k == 0) continue;
      const Scratch& q = x[k - 1];
      const auto key = [](const Scratch& v) {
        return std::make_tuple(
            v.tensor, v.device,
            std::vector<int64_t>(v.box.lo.begin(), v.box.lo.begin() + v.box.rank));
      };
      if (!(key(q) < key(s)))
        corrupt(ft(), "not after the previous scratch in (tensor, device, lo) order");
      // Disjoint from the earlier boxes of its (tensor, device) that reach
      // it in the first dimension (boxes are sorted by lo there).
      for (size_t j = k; j-- > 0;) {
        const Scratch& o = x[j];
        if (o.tensor != s.tensor || o.device != s.device) break;
        if (++compared > (uint64_t{1} << 24))
          corrupt(f + ".scratch_tensor", "too many overlapping scratch boxes to check");
        if (!intersect(o.box, s.box).empty())
          corrupt(fb(), "box " + to_string(s.box) + " overlaps scratch " + std::to_string(j) +
                            " of the same tensor and device");
      }
    }
  }

  // stats.max_scratch_bytes against the parts' scratch, placed by the
  // stages that write and read it (plan/scratch_layout.h, as the planner
  // and the engine place it): no device needs more, and a plan holding
  // every process's part has a device needing exactly that much (sizes
  // saturate).
  void check_scratch_bytes(const std::map<int32_t, ProcessPart>& parts, size_t processes,
                           int64_t max_scratch_bytes) {
    const std::vector<planning::ScratchLife> lives = planning::scratch_lives(parts, *tensors_);
    int64_t most = 0;
    for (const auto& [d, b] : planning::place_scratch(lives).peak) {
      if (b > max_scratch_bytes)
        corrupt("stats.max_scratch_bytes",
                std::to_string(max_scratch_bytes) + " bytes, but device " + std::to_string(d) +
                    " needs " + std::to_string(b) + " bytes of scratch in the plan's parts");
      most = std::max(most, b);
    }
    if (parts.size() == processes && most != max_scratch_bytes)
      corrupt("stats.max_scratch_bytes",
              std::to_string(max_scratch_bytes) +
                  " bytes, but the plan holds every process's part and the most scratch one "
                  "device needs is " +
                  std::to_string(most) + " bytes");
  }

  // The (tensor, destination entry) pairs on the devices of `process`,
  // computed for every process at the first call.
  const std::vector<std::pair<uint32_t, uint32_t>>& entries_on(int32_t process) {
    // Per destination geometry (tensors share them), its entries by
    // process, computed once; then per part one lookup per tensor.
    entries_.clear();
    static const std::vector<uint32_t> kNone;
    for (size_t i = 0; i < tensors_->size(); ++i) {
      const Layout& dst = (*tensors_)[i].dst;
      auto [it, fresh] = entries_by_geometry_.try_emplace(dst.geometry().get());
      if (fresh) {
        charge(dst.num_entries() * 8, "plan");
        for (size_t e = 0; e < dst.num_entries(); ++e)
          it->second[topology_->info(dst.device(e)).process].push_back(static_cast<uint32_t>(e));
      }
      auto on = it->second.find(process);
      for (uint32_t e : on == it->second.end() ? kNone : on->second)
        entries_.emplace_back(static_cast<uint32_t>(i), e);
    }
    return entries_;
  }

  // A scratch of `t`, whose source is not partial: a copy-staging buffer,
  // allowed under the staging bit, for a tensor without a cast or block
  // scales (a staged copy is moved in the source's dtype, bit for bit).
  void check_staging_tensor(const TensorSpec& t, const std::string& field) {
    if (!staging_bit_)
      corrupt(field, "names a scratch of tensor \"" + t.name +
                         "\", whose source is not partial (a staging scratch), but "
                         "required_features lacks the staging bit (64)");
    if (has_cast(t))
      corrupt(field, "names a staging scratch of tensor \"" + t.name +
                         "\", which has a cast (staging holds tensors without a dst_dtype)");
    if (has_block_scales(t) || scale_targets_.count(&t - tensors_->data()) != 0)
      corrupt(field, "names a staging scratch of tensor \"" + t.name +
                         "\", which has or is a block scale tensor (staging holds tensors "
                         "without block scales)");
    any_staging_ = true;
  }

  // The box of the scratch of the part being checked that contains
  // `region`, or kCorrupt naming `field`.
  Box held_scratch(uint32_t tensor, int64_t device, const Box& region, const std::string& field) {
    const int64_t k = part_ == nullptr ? -1 : find_scratch(*part_, tensor, device, region);
    if (k < 0)
      corrupt(field, "names a scratch of tensor " + std::to_string(tensor) + " on device " +
                         std::to_string(device) + " containing region " + to_string(region) +
                         ", which the part does not hold");
    return part_->scratch[static_cast<size_t>(k)].box;
  }

  const uint8_t* base_;
  const fb::Plan& root_;
  uint64_t budget_;              // bytes the decoded plan may still allocate
  uint64_t empty_cells_budget_;  // cells beyond one per entry, over all tiled layouts
  // Distinct decoded layouts, and their boxes once a piece needs them:
  // computing a tiled box per piece would dominate decoding.
  struct Slot {
    Layout layout;
    std::vector<Box> boxes;
  };
  std::vector<Slot> slots_;
  std::map<std::tuple<int64_t, std::vector<int64_t>, int32_t, int32_t>, size_t> cache_;
  std::vector<std::pair<size_t, size_t>> tensor_slots_;  // per tensor: src, dst slot
  const std::vector<TensorSpec>* tensors_ = nullptr;
  const Topology* topology_ = nullptr;
  uint64_t fingerprint_ = 0;
  int64_t rounds_ = -1;                // stats.rounds, or -1 without statistics
  int64_t stages_ = -1;                // stats.stages, or -1 without statistics
  bool staged_ = false;                // required_features has the stages bit
  bool scratch_bit_ = false;           // required_features has the scratch bit
  bool late_summands_bit_ = false;     // required_features has the late-summands bit
  bool any_cast_ = false;              // some tensor has a dst_dtype
  bool any_scales_ = false;            // some tensor has a scale_tensor
  bool any_e8m0_ = false;              // some tensor has dtype e8m0
  bool any_late_summand_ = false;      // a piece of stage > 0 writes a scratch from a summand
  bool any_scratch_ = false;           // a decoded part holds scratch
  bool staging_bit_ = false;           // required_features has the staging bit
  bool any_staging_ = false;           // a scratch of a tensor whose source is not partial
  bool sub_bit_ = false;               // required_features has the sub-messages bit
  bool any_sub_ = false;               // a decoded message has a sub above 0
  std::set<ptrdiff_t> scale_targets_;  // tensors some tensor names as its scale tensor
  const ProcessPart* part_ = nullptr;  // the part whose pieces are being checked
  // entries_on: each destination geometry's entries by process, and the
  // (tensor, entry) pairs of the part being checked.
  std::map<const Geometry*, std::map<int32_t, std::vector<uint32_t>>> entries_by_geometry_;
  std::vector<std::pair<uint32_t, uint32_t>> entries_;
};

}  // namespace

Plan decode_plan(std::span<const uint8_t> bytes) {
  const size_t n = bytes.size();
  if (n < 2 * sizeof(uoffset_t) + 4)
    corrupt("plan", "buffer of " + std::to_string(n) + " bytes is too small to be a plan");
  if (n >= FLATBUFFERS_MAX_BUFFER_SIZE)
    corrupt("plan", "buffer of " + std::to_string(n) + " bytes exceeds the 2 GiB format limit");
  if (!fb::PlanBufferHasIdentifier(bytes.data()))
    corrupt("plan", "not a reshard plan (file identifier is not \"" +
                        std::string(fb::PlanIdentifier()) + "\")");
  // Scalars are read in place: give them the alignment the verifier assumes.
  std::vector<uint64_t> aligned;
  const uint8_t* data = bytes.data();
  if (reinterpret_cast<uintptr_t>(data) % alignof(uint64_t) != 0) {
    aligned.resize((n + 7) / 8);
    std::memcpy(aligned.data(), data, n);
    data = reinterpret_cast<const uint8_t*>(aligned.data());
  }
  flatbuffers::Verifier::Options options;
  options.max_depth = 16;  // the schema nests 4 deep
  // Each table takes at least 4 bytes, and the encoder never shares tables:
  // more verifications than that means offsets pointing at one table again
  // and again (a cheap way to make verification quadratic).
  options.max_tables = static_cast<uoffset_t>(n / 4 + 1);
  flatbuffers::Verifier verifier(data, n, options);
  if (!verifier.VerifyBuffer<fb::Plan>(fb::PlanIdentifier()))
    corrupt("plan", "FlatBuffers verification failed (truncated or malformed buffer)");
  return Decoder(data, n).decode();
}

Plan decode_plan(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  return decode_plan(open_plan_bytes(bytes, options.mac_key));
}

Plan load_plan(const std::string& path, int64_t max_bytes) {
  return load_plan(path, max_bytes, DecodeOptions{});
}

Plan load_plan(const std::string& path, int64_t max_bytes, const DecodeOptions& options) {
  if (max_bytes < 1)
    fail(ErrorCode::kInvalidArgument, "max_bytes", std::to_string(max_bytes) + " is not positive");
  const std::vector<char> bytes = read_file_capped(
      path, max_bytes, "plan file",
      "write one process part per file (reshard plan --process P), or raise the limit "
      "(--max-input-bytes on the command line)",
      [&](std::string_view head) {
        if (head.size() >= 8 && !fb::PlanBufferHasIdentifier(head.data()))
          fail(ErrorCode::kCorrupt, path,
               std::string("not a reshard plan (file identifier is not \"") + fb::PlanIdentifier() +
                   "\")");
      });
  try {
    return decode_plan(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
                       options);
  } catch (const Error& e) {
    throw Error(e.code(), path, e.what());
  }
}

}  // namespace reshard
