// make_plan: validation, per-process parts, global statistics, fingerprint.
#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "plan/enumerate.h"
#include "plan/plan_builder.h"
#include "reshard/error.h"
#include "util/hash.h"

namespace reshard {

using planning::Emitted;
using planning::Enumerator;
using planning::GeoTopo;
using planning::TensorCtx;

namespace {

constexpr uint64_t kPlannerVersion = 1;  // bump when any planning rule changes

void validate_options(const PlanOptions& o) {
  if (o.split_min_bytes < 0)
    fail(ErrorCode::kInvalidArgument, "options.split_min_bytes: must be non-negative");
  if (!(o.alpha_seconds >= 0))
    fail(ErrorCode::kInvalidArgument, "options.alpha_seconds: must be non-negative");
  if (!(o.intra_host_bytes_per_second > 0))
    fail(ErrorCode::kInvalidArgument, "options.intra_host_bytes_per_second: must be positive");
  if (!(o.inter_host_bytes_per_second > 0))
    fail(ErrorCode::kInvalidArgument, "options.inter_host_bytes_per_second: must be positive");
  if (o.staging_budget_bytes < 0)
    fail(ErrorCode::kInvalidArgument, "options.staging_budget_bytes: must be non-negative");
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

void validate_tensor(const TensorSpec& t, size_t i) {
  const std::string f = "tensors[" + std::to_string(i) + "]";
  if (!dtype_valid(static_cast<int32_t>(t.dtype)))
    fail(ErrorCode::kInvalidArgument,
         f + ".dtype: invalid dtype value " + std::to_string(static_cast<int32_t>(t.dtype)));
  validate_shape(t.shape, dtype_size(t.dtype), f + ".shape");
  if (t.src.shape() != t.shape)
    fail(ErrorCode::kMismatch, f + ".src: layout shape " + shape_str(t.src.shape()) +
                                   " does not match tensor shape " + shape_str(t.shape));
  if (t.dst.shape() != t.shape)
    fail(ErrorCode::kMismatch, f + ".dst: layout shape " + shape_str(t.dst.shape()) +
                                   " does not match tensor shape " + shape_str(t.shape));
  if (t.src.partial() && t.dst.partial() && t.src.reduce_op() != t.dst.reduce_op())
    fail(ErrorCode::kMismatch, f + ".dst.partial.op: \"" + std::string(reduce_op_name(t.dst.reduce_op())) +
                                   "\" differs from the source's \"" +
                                   std::string(reduce_op_name(t.src.reduce_op())) + "\"");
  if (t.src.num_entries() == 0 && t.dst.num_entries() > 0 && t.src.num_elements() > 0)
    fail(ErrorCode::kInvalidArgument, f + ".src: layout has no devices");
}

// Shared state of one make_plan call.
struct Context {
  const PlanInput& input;
  std::vector<TensorCtx> tensors;
  std::vector<int64_t> devices;  // sorted unique devices of all layouts
  std::map<const Geometry*, GeoTopo> topo;
  std::vector<int32_t> processes;

  explicit Context(const PlanInput& in) : input(in) {}

  uint32_t dense(int64_t device) const {
    return static_cast<uint32_t>(std::lower_bound(devices.begin(), devices.end(), device) -
                                 devices.begin());
  }

  void build() {
    std::set<const Geometry*> geos;
    for (const auto& t : input.tensors) {
      geos.insert(t.src.geometry().get());
      geos.insert(t.dst.geometry().get());
    }
    {
      std::vector<int64_t> all;
      for (const Geometry* g : geos) all.insert(all.end(), g->devices.begin(), g->devices.end());
      std::sort(all.begin(), all.end());
      all.erase(std::unique(all.begin(), all.end()), all.end());
      devices = std::move(all);
    }
    std::set<int32_t> procs;
    for (const Geometry* g : geos) {
      GeoTopo& gt = topo[g];
      const size_t n = g->devices.size();
      gt.process.resize(n);
      gt.host.resize(n);
      gt.dense.resize(n);
      for (size_t e = 0; e < n; ++e) {
        DeviceInfo info = input.topology.info(g->devices[e]);
        gt.process[e] = info.process;
        gt.host[e] = info.host;
        gt.dense[e] = dense(g->devices[e]);
      }
      std::vector<uint32_t> order(n);
      for (uint32_t e = 0; e < n; ++e) order[e] = e;
      std::stable_sort(order.begin(), order.end(),
                       [&](uint32_t a, uint32_t b) { return gt.process[a] < gt.process[b]; });
      for (size_t i = 0; i < n; ++i) {
        const int32_t p = gt.process[order[i]];
        if (gt.procs.empty() || gt.procs.back() != p) {
          gt.procs.push_back(p);
          gt.proc_offsets.push_back(static_cast<uint32_t>(i));
          procs.insert(p);
        }
      }
      gt.proc_offsets.push_back(static_cast<uint32_t>(n));
      gt.proc_entries = std::move(order);
    }
    processes.assign(procs.begin(), procs.end());
    tensors.resize(input.tensors.size());
    for (size_t i = 0; i < input.tensors.size(); ++i) {
      const TensorSpec& s = input.tensors[i];
      TensorCtx& t = tensors[i];
      t.index = static_cast<uint32_t>(i);
      t.spec = &s;
      t.src = &s.src;
      t.dst = &s.dst;
      t.sg = s.src.geometry().get();
      t.dg = s.dst.geometry().get();
      t.st = &topo.at(t.sg);
      t.dt = &topo.at(t.dg);
      t.esize = dtype_size(s.dtype);
      t.S = s.src.num_summands();
      t.T = s.dst.num_summands();
      t.field = "tensors[" + std::to_string(i) + "]";
    }
  }
};

// Entries of geometry topo `gt` on process p.
std::pair<const uint32_t*, const uint32_t*> entries_on(const GeoTopo& gt, int32_t p) {
  auto it = std::lower_bound(gt.procs.begin(), gt.procs.end(), p);
  if (it == gt.procs.end() || *it != p) return {nullptr, nullptr};
  const size_t k = static_cast<size_t>(it - gt.procs.begin());
  return {gt.proc_entries.data() + gt.proc_offsets[k], gt.proc_entries.data() + gt.proc_offsets[k + 1]};
}

uint64_t fingerprint_of(const PlanInput& in) {
  Hasher h;
  h.str("reshard-plan");
  h.u64(kPlannerVersion);
  h.u64(in.tensors.size());
  for (const auto& t : in.tensors) {
    h.str(t.name);
    h.u64(t.shape.size());
    for (int64_t s : t.shape) h.i64(s);
    h.i64(static_cast<int64_t>(t.dtype));
    h.u64(t.src.fingerprint_hash());
    h.u64(t.dst.fingerprint_hash());
  }
  h.u64(in.topology.devices().size());
  for (const auto& d : in.topology.devices()) {
    h.i64(d.device);
    h.i64(d.process);
    h.i64(d.host);
    h.i64(d.ordinal);
  }
  const auto& o = in.options;
  h.i64(o.split_min_bytes);
  h.f64(o.alpha_seconds);
  h.f64(o.intra_host_bytes_per_second);
  h.f64(o.inter_host_bytes_per_second);
  h.i64(o.staging_budget_bytes);
  return h.value();
}

// ------------------------------------------------------------- process part

struct TmpPiece {
  Piece piece;
  uint64_t key;
  int64_t bytes;
};

void group_messages(std::vector<TmpPiece>& tmp, std::vector<Piece>& pieces,
                    std::vector<Message>& msgs, bool send, const std::vector<int64_t>& devices) {
  // Stable counting sort by key (dense pair index), keeping generation order
  // (tensor-major, canonical within a tensor) inside each message.
  std::vector<uint64_t> keys;
  keys.reserve(tmp.size());
  for (const auto& t : tmp) keys.push_back(t.key);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::unordered_map<uint64_t, uint32_t> slot;
  slot.reserve(keys.size() * 2);
  for (uint32_t i = 0; i < keys.size(); ++i) slot.emplace(keys[i], i);
  std::vector<uint64_t> offset(keys.size() + 1, 0);
  std::vector<uint32_t> slot_of(tmp.size());
  for (size_t i = 0; i < tmp.size(); ++i) {
    slot_of[i] = slot.at(tmp[i].key);
    ++offset[slot_of[i] + 1];
  }
  for (size_t i = 1; i < offset.size(); ++i) offset[i] += offset[i - 1];
  pieces.assign(tmp.size(), Piece{});
  msgs.assign(keys.size(), Message{});
  for (size_t k = 0; k < keys.size(); ++k) {
    // key = (round << 40) | (peer dense << 20) | own dense; both < 2^20.
    Message& m = msgs[k];
    m.round = static_cast<uint32_t>(keys[k] >> 40);
    const int64_t peer = devices[(keys[k] >> 20) & 0xfffff];
    const int64_t own = devices[keys[k] & 0xfffff];
    m.src_device = send ? own : peer;
    m.dst_device = send ? peer : own;
    m.first_piece = offset[k];
    m.num_pieces = offset[k + 1] - offset[k];
  }
  std::vector<uint64_t> cursor(offset.begin(), offset.end() - 1);
  for (size_t i = 0; i < tmp.size(); ++i) {
    const uint32_t k = slot_of[i];
    pieces[cursor[k]++] = tmp[i].piece;
    msgs[k].bytes += tmp[i].bytes;
  }
}

ProcessPart build_part(Context& ctx, int32_t p, const PlanOptions& options) {
  if (ctx.devices.size() >= (1u << 20))
    fail(ErrorCode::kOutOfRange, "plan: more than 2^20 distinct devices");
  ProcessPart part;
  part.process = p;
  Enumerator en(options);
  std::vector<TmpPiece> sends, recvs;
  auto add_region = [&](const TensorCtx& t, const Emitted& x, Piece& piece) {
    if (!x.own_region) return;
    if (x.region == intersect(t.src->box(x.src_entry), t.dst->box(x.dst_entry))) return;
    piece.region = static_cast<uint32_t>(part.regions.size());
    part.regions.push_back(x.region);
  };
  for (auto& t : ctx.tensors) {
    // Receiver side: every piece whose destination is on p.
    auto [db, de] = entries_on(*t.dt, p);
    for (const uint32_t* it = db; it != de; ++it) {
      const uint64_t own = t.dt->dense[*it];
      en.recv(t, *it, [&](const Emitted& x) {
        Piece piece{t.index, x.src_entry, x.dst_entry, kOverlapRegion};
        add_region(t, x, piece);
        if (x.local) {
          part.local.push_back(piece);
        } else {
          const uint64_t key = (uint64_t{t.st->dense[x.src_entry]} << 20) | own;
          recvs.push_back({piece, key, x.region.volume() * t.esize});
        }
      });
    }
    // Sender side: network pieces whose source is on p.
    auto [sb, se] = entries_on(*t.st, p);
    for (const uint32_t* it = sb; it != se; ++it) {
      const uint64_t own = t.st->dense[*it];
      en.send(t, *it, [&](const Emitted& x) {
        Piece piece{t.index, x.src_entry, x.dst_entry, kOverlapRegion};
        add_region(t, x, piece);
        const uint64_t key = (uint64_t{t.dt->dense[x.dst_entry]} << 20) | own;
        sends.push_back({piece, key, x.region.volume() * t.esize});
      });
    }
  }
  group_messages(sends, part.send_pieces, part.sends, true, ctx.devices);
  group_messages(recvs, part.recv_pieces, part.recvs, false, ctx.devices);
  return part;
}

// ------------------------------------------------------------- statistics

void compute_stats(Context& ctx, PlanStats& st, const PlanOptions& o) {
  const size_t ndev = ctx.devices.size();
  struct Acc {
    int64_t send = 0, recv = 0, local = 0, send_inter = 0, recv_inter = 0;
    int64_t missing = 0, forced = 0, forced_inter = 0;
  };
  std::vector<Acc> acc(ndev);
  // Tensors with the same shape and layout geometries have proportional
  // statistics: enumerate one of them and scale by the group's bytes/element.
  std::map<std::tuple<std::vector<int64_t>, const Geometry*, const Geometry*>, std::vector<size_t>> groups;
  for (size_t i = 0; i < ctx.tensors.size(); ++i) {
    const TensorCtx& t = ctx.tensors[i];
    groups[{t.spec->shape, t.sg, t.dg}].push_back(i);
  }
  const bool dense_pairs = ndev <= 16384;
  std::vector<uint64_t> bits(dense_pairs ? (ndev * ndev + 63) / 64 : 0);
  std::unordered_set<uint64_t> pair_set;
  std::set<uint32_t> holders;
  Enumerator en(o);
  int64_t pieces = 0;
  for (auto& [key, members] : groups) {
    int64_t esum = 0;
    for (size_t i : members) esum += ctx.tensors[i].esize;
    const TensorCtx& t = ctx.tensors[members.front()];
    int64_t group_pieces = 0;
    for (uint32_t e = 0; e < t.dst->num_entries(); ++e) {
      const uint32_t dd = t.dt->dense[e];
      const Box B = t.dst->box(e);
      if (B.empty()) continue;
      // Lower bound: every needed summand element the device lacks.
      int64_t need = 0;
      for (int32_t s = 0; s < t.S; ++s)
        if (t.T == 1 || s % t.T == t.dg->summands[e]) need += B.volume();
      if (auto own = t.src->entry_of(t.dg->devices[e])) {
        const int32_t s = t.sg->summands[*own];
        if (t.T == 1 || s % t.T == t.dg->summands[e]) need -= intersect(t.src->box(*own), B).volume();
      }
      acc[dd].missing += need * esum;
      en.recv(t, e, [&](const Emitted& x) {
        ++group_pieces;
        const int64_t bytes = x.region.volume() * esum;
        if (x.local) {
          acc[dd].local += bytes;
          return;
        }
        const uint32_t sd = t.st->dense[x.src_entry];
        const bool inter = t.st->host[x.src_entry] != t.dt->host[e];
        acc[sd].send += bytes;
        acc[dd].recv += bytes;
        if (inter) {
          acc[sd].send_inter += bytes;
          acc[dd].recv_inter += bytes;
          st.cross_host_bytes += bytes;
        }
        if (t.st->process[x.src_entry] != t.dt->process[e]) st.cross_process_bytes += bytes;
        if (x.forced) {
          acc[sd].forced += bytes;
          if (inter) acc[sd].forced_inter += bytes;
        }
        if (dense_pairs) {
          const uint64_t bit = uint64_t{sd} * ndev + dd;
          bits[bit >> 6] |= uint64_t{1} << (bit & 63);
        } else {
          pair_set.insert((uint64_t{sd} << 32) | dd);
        }
      });
    }
    for (uint32_t r = 0; r < t.src->num_entries(); ++r)
      if (!t.src->box(r).empty()) holders.insert(t.st->dense[r]);
    pieces += group_pieces * static_cast<int64_t>(members.size());
  }
  std::vector<int64_t> send_msgs(ndev, 0), recv_msgs(ndev, 0);
  if (dense_pairs) {
    for (size_t w = 0; w < bits.size(); ++w) {
      uint64_t v = bits[w];
      while (v) {
        const uint64_t bit = w * 64 + static_cast<uint64_t>(__builtin_ctzll(v));
        v &= v - 1;
        ++send_msgs[bit / ndev];
        ++recv_msgs[bit % ndev];
      }
    }
  } else {
    for (uint64_t pr : pair_set) {
      ++send_msgs[pr >> 32];
      ++recv_msgs[pr & 0xffffffffu];
    }
  }
  const double a = o.alpha_seconds, bi = 1.0 / o.intra_host_bytes_per_second,
               bx = 1.0 / o.inter_host_bytes_per_second;
  int64_t lb_total = 0;
  st.per_device.resize(ndev);
  for (size_t d = 0; d < ndev; ++d) {
    const Acc& x = acc[d];
    DeviceTraffic& dt = st.per_device[d];
    dt.device = ctx.devices[d];
    dt.send_bytes = x.send;
    dt.recv_bytes = x.recv;
    dt.local_bytes = x.local;
    dt.send_messages = send_msgs[d];
    dt.recv_messages = recv_msgs[d];
    st.network_bytes += x.recv;
    st.local_bytes += x.local;
    st.messages += recv_msgs[d];
    st.max_send_bytes = std::max(st.max_send_bytes, x.send);
    st.max_recv_bytes = std::max(st.max_recv_bytes, x.recv);
    st.peak_staging_bytes = std::max(st.peak_staging_bytes, x.send + x.recv);
    lb_total += x.missing;
    st.lower_bound_max_recv_bytes = std::max(st.lower_bound_max_recv_bytes, x.missing);
    st.lower_bound_max_send_bytes = std::max(st.lower_bound_max_send_bytes, x.forced);
    const double send_t = a * static_cast<double>(send_msgs[d]) +
                          bi * static_cast<double>(x.send - x.send_inter) + bx * static_cast<double>(x.send_inter);
    const double recv_t = a * static_cast<double>(recv_msgs[d]) +
                          bi * static_cast<double>(x.recv - x.recv_inter) + bx * static_cast<double>(x.recv_inter);
    st.cost_seconds = std::max({st.cost_seconds, send_t, recv_t});
    const double recv_lb = (x.missing > 0 ? a : 0.0) +
                           bi * static_cast<double>(x.missing - std::min(x.missing, x.recv_inter)) +
                           bx * static_cast<double>(std::min(x.missing, x.recv_inter));
    const double send_lb = (x.forced > 0 ? a : 0.0) + bi * static_cast<double>(x.forced - x.forced_inter) +
                           bx * static_cast<double>(x.forced_inter);
    st.lower_bound_cost_seconds = std::max({st.lower_bound_cost_seconds, recv_lb, send_lb});
  }
  st.lower_bound_network_bytes = lb_total;
  if (!holders.empty()) {
    const int64_t n = static_cast<int64_t>(holders.size());
    const int64_t even = (lb_total + n - 1) / n;
    st.lower_bound_max_send_bytes = std::max(st.lower_bound_max_send_bytes, even);
    st.lower_bound_cost_seconds = std::max(st.lower_bound_cost_seconds, bi * static_cast<double>(even));
  }
  st.pieces = pieces;
  st.rounds = st.network_bytes > 0 ? 1 : 0;
}

}  // namespace

// ------------------------------------------------------------- public

uint64_t plan_fingerprint(const PlanInput& input) { return fingerprint_of(input); }

Plan make_plan(const PlanInput& input, const PlanRequest& request) {
  const auto t0 = std::chrono::steady_clock::now();
  validate_options(input.options);
  if (input.tensors.size() >= 0xfffffff0u)
    fail(ErrorCode::kOutOfRange, "tensors: too many tensors");
  {
    std::unordered_map<std::string_view, size_t> names;
    for (size_t i = 0; i < input.tensors.size(); ++i) {
      validate_tensor(input.tensors[i], i);
      auto [it, fresh] = names.emplace(input.tensors[i].name, i);
      if (!fresh)
        fail(ErrorCode::kInvalidArgument, "tensors[" + std::to_string(i) + "].name: duplicate name \"" +
                                              input.tensors[i].name + "\" (also tensors[" +
                                              std::to_string(it->second) + "])");
    }
  }
  if (request.scope != PlanScope::kAll && request.scope != PlanScope::kGlobal &&
      request.scope != PlanScope::kProcess)
    fail(ErrorCode::kInvalidArgument, "request.scope: invalid value");
  Context ctx(input);
  ctx.build();
  Plan plan;
  Plan::Builder::tensors(plan) = input.tensors;
  Plan::Builder::topology(plan) = input.topology;
  Plan::Builder::options(plan) = input.options;
  Plan::Builder::fingerprint(plan) = fingerprint_of(input);
  Plan::Builder::processes(plan) = ctx.processes;
  auto& parts = Plan::Builder::parts(plan);
  if (request.scope == PlanScope::kAll) {
    for (int32_t p : ctx.processes) parts.emplace(p, build_part(ctx, p, input.options));
  } else if (request.scope == PlanScope::kProcess) {
    if (!std::binary_search(ctx.processes.begin(), ctx.processes.end(), request.process))
      fail(ErrorCode::kOutOfRange, "request.process: process " + std::to_string(request.process) +
                                       " owns no device of this plan");
    parts.emplace(request.process, build_part(ctx, request.process, input.options));
  }
  if (request.scope != PlanScope::kProcess || request.global_stats) {
    compute_stats(ctx, Plan::Builder::stats(plan), input.options);
    Plan::Builder::has_stats(plan) = true;
  }
  Plan::Builder::stats(plan).plan_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return plan;
}

const ProcessPart& Plan::part(int32_t process) const {
  auto it = parts_.find(process);
  if (it == parts_.end())
    fail(ErrorCode::kOutOfRange, "process: this plan holds no part for process " + std::to_string(process));
  return it->second;
}

Box Plan::region(const ProcessPart& part, const Piece& piece) const {
  if (piece.region != kOverlapRegion) return part.regions.at(piece.region);
  const TensorSpec& t = tensors_.at(piece.tensor);
  return intersect(t.src.box(piece.src_entry), t.dst.box(piece.dst_entry));
}

int64_t Plan::piece_bytes(const ProcessPart& part, const Piece& piece) const {
  return region(part, piece).volume() * dtype_size(tensors_.at(piece.tensor).dtype);
}

NaivePlanResult naive_plan(const PlanInput& input) {
  validate_options(input.options);
  for (size_t i = 0; i < input.tensors.size(); ++i) validate_tensor(input.tensors[i], i);
  Context ctx(input);
  ctx.build();
  Enumerator en(input.options);
  NaivePlanResult r;
  for (auto& t : ctx.tensors)
    for (uint32_t e = 0; e < t.dst->num_entries(); ++e)
      en.recv_naive(t, e, [&](const Emitted& x) {
        ++r.pieces;
        if (!x.local) r.network_bytes += x.region.volume() * t.esize;
      });
  return r;
}

}  // namespace reshard
