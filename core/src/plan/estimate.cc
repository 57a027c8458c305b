#include "plan/estimate.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "reshard/error.h"

namespace reshard::planning {

namespace {

// Sizes of what a part holds and what building it allocates on the way
// (build_part, plan/rounds.cc).
constexpr int64_t kPieceBytes = sizeof(Piece);
constexpr int64_t kMessageBytes = sizeof(Message);
// A region (Regions): a rank byte and lo/hi at the plan's highest rank.
double region_bytes(int max_rank) { return 1 + 16.0 * std::max(max_rank, 1); }
constexpr int64_t kSizeBytes = sizeof(int64_t);  // a piece's size, kept until rounds are cut
// On top of the structures: what the allocator keeps (freed buffers of
// earlier parts, partly used pages), measured at 0-10% of the plan's
// resident size, plus the rest of the process's planning state.
constexpr double kAllocatorMargin = 1.15;
constexpr double kFixedBytes = 16 << 20;
// A message's row in a plan buffer (wire/encode.cc).
constexpr double kMessageRowBytes = 48;

// Saturating arithmetic: an estimate of an absurd spec must not wrap.
int64_t sat(double v) {
  return v >= 9e18 ? int64_t{9'000'000'000'000'000'000} : static_cast<int64_t>(v);
}

std::string commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string size_str(int64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  return buf;
}

// A process part's figures: its devices' DeviceCounts summed.
struct PartSums {
  int64_t devices = 0, local = 0, send = 0, recv = 0, regions = 0, streams = 0, messages = 0,
          cuts = 0;
};

// Memory of one part as make_plan returns it, and the most memory building
// it holds on top of that (the extra of the busiest moment).
struct PartMemory {
  double pieces = 0, regions = 0, held = 0, extra = 0;
};

// What a round cut inside a piece adds at most, in tensors of rank at most
// `rank` (find_cuts, plan/rounds.cc). A piece cut n times becomes n + 1
// fragments, each the boxes of a range of its region's elements in
// row-major order (element_range_boxes): at most r boxes for the first and
// the last (a range that starts or ends at the region's start or end), at
// most 2r - 1 for the others, so at most n (2r - 1) + 1 boxes, one piece
// and one new region each (the piece's own region, where it had one, stays
// in the list). Per cut that is at most 2r - 1 more pieces and 2r more
// regions, reached when every cut falls mid-row in a piece of its own
// (rule 3 of rounds.h: a window narrower than a row). Rank 2: 3 pieces and
// 4 regions; rank 4: 7 and 8.
struct CutGrowth {
  double pieces = 0, regions = 0;
};
CutGrowth cut_growth(int rank) {
  const double r = std::max(rank, 1);
  return {2 * r - 1, 2 * r};
}

PartMemory part_memory(const PartSums& p, size_t ndev, int64_t chunks, bool budgeted,
                       CutGrowth grow, int max_rank) {
  PartMemory m;
  const double region_size = region_bytes(max_rank);
  const double net = static_cast<double>(p.send + p.recv);
  const double local = static_cast<double>(p.local);
  const double cuts = static_cast<double>(p.cuts);
  const double messages = static_cast<double>(p.messages);
  const double streams = static_cast<double>(p.streams);
  m.pieces = local + net + grow.pieces * cuts;
  m.regions = static_cast<double>(p.regions) + grow.regions * cuts;
  // Vectors filled by push_back may hold up to twice their size; `local`
  // keeps that capacity.
  m.held =
      kPieceBytes * (m.pieces + local) + kMessageBytes * messages + region_size * m.regions + 512;
  // Enumerating (build_part): per chunk a vector of pieces, one of their
  // buckets (4 bytes a piece) and one of sizes, all possibly doubled, then
  // the merged pieces and sizes; the
  // regions, growing by copying; per own device and direction a slot table
  // over all devices, in every chunk, dense up to kDenseBucketCells
  // cells and a hash map entry per stream beyond.
  const double sizes = budgeted ? kSizeBytes : 0;
  const double cells = static_cast<double>(ndev) * static_cast<double>(p.devices);
  const double dense_cells = std::min(cells, static_cast<double>(kDenseBucketCells));
  const double build = net * (2 * (kPieceBytes + 4 + sizes) + kPieceBytes + sizes) +
                       2 * kPieceBytes * local + 64 * streams +
                       2 * region_size * static_cast<double>(p.regions) +
                       8.0 * dense_cells * static_cast<double>(chunks) +
                       (cells > dense_cells ? 64.0 * streams : 0.0);
  // Cutting rounds (split_rounds): the part with the uncut pieces and their
  // sizes beside the cut ones, the cut bounds, the new message list, and
  // the regions reserved at two per cut, copied when they grow beyond.
  const double cut = budgeted ? m.held + net * (kPieceBytes + kSizeBytes) + 40 * cuts +
                                    (kMessageBytes + 4) * messages + 24 * streams +
                                    region_size * 2 * cuts
                              : 0;
  m.extra = std::max({0.0, build - m.held, cut - m.held});
  return m;
}

// Reads one integer from a cgroup file; 0 when absent or "max".
int64_t cgroup_limit(const char* path) {
  std::FILE* f = std::fopen(path, "r");
  if (!f) return 0;
  long long v = 0;
  const int n = std::fscanf(f, "%lld", &v);
  std::fclose(f);
  return n == 1 && v > 0 ? static_cast<int64_t>(v) : 0;
}

}  // namespace

PlanEstimate estimate_parts(const Context& ctx, const std::vector<DeviceCounts>& counts,
                            const PlanRequest& request, int threads, bool cut_rounds,
                            int64_t* largest) {
  const PlanInput& in = ctx.input;
  const size_t ndev = ctx.devices.size();
  const bool budgeted = cut_rounds;
  PlanEstimate e;
  std::map<int32_t, PartSums> parts;
  if (request.scope == PlanScope::kAll) {
    for (int32_t p : ctx.processes) parts[p];
  } else if (request.scope == PlanScope::kProcess &&
             std::binary_search(ctx.processes.begin(), ctx.processes.end(), request.process)) {
    parts[request.process];
  }
  for (size_t d = 0; d < ndev && !parts.empty(); ++d) {
    auto it = parts.find(in.topology.info(ctx.devices[d]).process);
    if (it == parts.end()) continue;
    const DeviceCounts& c = counts[d];
    PartSums& s = it->second;
    ++s.devices;
    s.local += c.local_pieces;
    s.send += c.send_pieces;
    s.recv += c.recv_pieces;
    s.regions += c.regions;
    s.streams += c.streams;
    s.messages += c.messages;
    s.cuts += c.cuts;
  }
  // make_plan's threading: whole parts per thread when there are enough of
  // them, else each part's tensors cut into 8 chunks per thread.
  const bool per_part = request.scope == PlanScope::kAll && threads > 1 &&
                        parts.size() >= static_cast<size_t>(threads);
  const int64_t chunks =
      per_part || threads <= 1
          ? 1
          : std::min<int64_t>(8 * int64_t{threads}, std::max<size_t>(in.tensors.size(), 1));
  const int64_t concurrent = per_part ? threads : 1;
  const int64_t alone_chunks =
      threads <= 1
          ? 1
          : std::min<int64_t>(8 * int64_t{threads}, std::max<size_t>(in.tensors.size(), 1));
  double largest_part = 0;
  int max_rank = 0, min_rank = kMaxRank;
  for (const TensorSpec& t : in.tensors) {
    max_rank = std::max(max_rank, t.src.rank());
    min_rank = std::min(min_rank, t.src.rank());
  }
  min_rank = std::min(min_rank, max_rank);
  const CutGrowth grow = cut_growth(max_rank);
  double held = 0, extra = 0, pieces = 0, messages = 0, regions = 0, encoded = 0;
  double own_encoded = -1, own_least = 0;  // request.process's part
  for (const auto& [p, sums] : parts) {
    const PartMemory m = part_memory(sums, ndev, chunks, budgeted, grow, max_rank);
    if (largest) {
      const PartMemory alone = part_memory(sums, ndev, alone_chunks, budgeted, grow, max_rank);
      largest_part = std::max(largest_part, alone.held + alone.extra);
    }
    held += m.held;
    extra = std::max(extra, m.extra);
    pieces += m.pieces;
    messages += static_cast<double>(sums.messages);
    regions += m.regions;
    // Columns of 4 (pieces: tensor, source, destination, region when any
    // piece has one) and 48 (messages: two devices, first piece, count and
    // bytes of 8, round and stage of 4) bytes per row; regions: rank byte
    // and lo / hi per dimension.
    const double part_encoded = (m.regions > 0 ? 16 : 12) * m.pieces +
                                kMessageRowBytes * static_cast<double>(sums.messages) +
                                (1 + 16.0 * max_rank) * m.regions + 1024;
    encoded += part_encoded;
    if (p == request.process) {
      const double uncut = static_cast<double>(sums.local + sums.send + sums.recv);
      e.process_pieces = sat(m.pieces);
      e.process_messages = sums.messages;
      e.process_regions = sat(m.regions);
      own_encoded = part_encoded;
      // The least: the part's own columns (no stage column: every message
      // in stage 0), its pieces and regions before rounds cut any.
      own_least = (sums.regions > 0 ? 16 : 12) * uncut +
                  (kMessageRowBytes - 4) * static_cast<double>(sums.messages) +
                  (1 + 16.0 * min_rank) * static_cast<double>(sums.regions);
    }
  }
  // The plan's copy of the inputs and the statistics, and the records of
  // like tensors (build_chunk) on every thread.
  double base = 4096 + 128.0 * static_cast<double>(ndev) +
                static_cast<double>(std::max(threads, 1)) * static_cast<double>(kReplayBytes);
  double encoded_base = 2048 + 120.0 * static_cast<double>(in.topology.devices().size()) +
                        144.0 * static_cast<double>(ndev);
  // Layouts as encode_plan writes them (wire/encode_bound.h): an explicit
  // layout's boxes per layout, a tiling's entries once per geometry.
  std::set<const Geometry*> tilings;
  for (const TensorSpec& t : in.tensors) {
    const double rank = static_cast<double>(t.shape.size());
    base += 256 + static_cast<double>(t.name.size());
    encoded_base += 512 + static_cast<double>(t.name.size()) + 8 * rank;
    for (const Layout* l : {&t.src, &t.dst}) {
      const double entries = static_cast<double>(l->num_entries());
      if (!l->tiled())
        encoded_base += entries * (12 + 16 * rank);
      else if (tilings.insert(l->geometry().get()).second)
        encoded_base += 256 + 8 * rank + entries * (12 + 8 * rank);
    }
  }
  e.parts = static_cast<int64_t>(parts.size());
  e.pieces = sat(pieces);
  e.messages = sat(messages);
  e.regions = sat(regions);
  e.memory_bytes =
      e.parts == 0 ? sat(base)
                   : sat(kFixedBytes + kAllocatorMargin *
                                           (base + held + static_cast<double>(concurrent) * extra));
  e.encoded_bytes = sat(encoded_base + encoded);
  if (own_encoded >= 0) {
    e.process_encoded_bytes = sat(encoded_base + own_encoded);
    e.process_least_encoded_bytes = sat(own_least);
  }
  if (largest) *largest = sat(kFixedBytes + kAllocatorMargin * (base + largest_part));
  return e;
}

int64_t available_memory() {
  static const int64_t bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    int64_t phys = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
    // A container's limit, when lower (cgroup v2, then v1; v1 reports
    // "unlimited" as a huge number, which the min ignores).
    for (const char* path :
         {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
      const int64_t limit = cgroup_limit(path);
      if (limit > 0 && (phys == 0 || limit < phys)) phys = limit;
    }
    // An address-space limit (ulimit -v, prlimit --as) caps what this
    // process can allocate whatever the machine has.
    rlimit as{};
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY &&
        (phys == 0 || as.rlim_cur < static_cast<rlim_t>(phys)))
      phys = static_cast<int64_t>(as.rlim_cur);
    return phys > 0 ? phys : int64_t{8} << 30;  // unknown: assume 8 GiB
  }();
  return bytes;
}

int64_t resolve_limit(int64_t max_plan_bytes) {
  if (max_plan_bytes < kUnlimitedPlanBytes)
    fail(ErrorCode::kInvalidArgument, "request.max_plan_bytes",
         std::to_string(max_plan_bytes) +
             " is invalid (0: the default, half the memory available; N > 0: N bytes; -1: no "
             "limit)");
  return max_plan_bytes == 0 ? default_max_plan_bytes() : max_plan_bytes;
}

[[noreturn]] void refuse(const PlanEstimate& e, const PlanRequest& request,
                         int64_t largest_part_bytes) {
  // Layers above rename "request.max_plan_bytes" and "PlanScope::kProcess"
  // to their own terms (the C ABI's field, the command line's flags).
  const bool all = request.scope == PlanScope::kAll;
  std::string m = !all           ? "process " + std::to_string(request.process) + "'s part needs"
                  : e.parts == 1 ? std::string("the only process part of this plan needs")
                                 : "the " + commas(e.parts) + " process parts of this plan need";
  m += " about " + size_str(e.memory_bytes) + " of memory to plan (" + commas(e.pieces) +
       " pieces, " + commas(e.messages) + " messages, " + commas(e.regions) + " regions; " +
       size_str(e.encoded_bytes) + " as plan bytes), above the limit of " +
       size_str(e.limit_bytes) + " (" + commas(e.limit_bytes) + " bytes";
  m += request.max_plan_bytes == 0
           ? ": the default, half of the " + size_str(e.available_bytes) + " of memory available)"
           : ")";
  if (all && e.parts > 1)
    m += "; plan one process's part at a time (PlanScope::kProcess: at most " +
         size_str(largest_part_bytes) + " each)";
  m += "; or raise request.max_plan_bytes (-1: no limit)";
  fail(ErrorCode::kResourceExhausted, "request.max_plan_bytes", m);
}

}  // namespace reshard::planning
