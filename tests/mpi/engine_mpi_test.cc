// Multi-process tests of the distributed engine over the `mpi` transport.
// Run under mpirun (see tests/mpi/CMakeLists.txt); every rank runs the same
// cases and the ranks agree on the verdict, so a failure on one rank fails
// the test on all.
//
//   engine_mpi_test random --cases N --seed S
//     Random cases (tests/core/random_cases.h: uneven shapes, ranks 0-5,
//     cross-mesh, equal/overlapping/disjoint device sets, replication,
//     partial sources and destinations, explicit layouts), devices spread
//     over the ranks (several per rank), budgets down to a few hundred bytes
//     (many rounds). Invariants: every destination element on every rank
//     equals execute_host on the whole plan, bit for bit (partial sources
//     included), and non-partial destinations pass the oracle; staging
//     allocated per device never exceeds the plan's budget (instrumented
//     allocator); a second execution (agreement cached) gives the same bytes.
//   engine_mpi_test budget
//     One large tensor under a tight budget: many rounds, peak staging per
//     device <= budget, overlapped rounds, in-place and staged messages.
//   engine_mpi_test faults
//     Mismatched plan on the last rank, mismatched dtype on the last rank
//     (kMismatch on every rank, naming it); the last rank never calls
//     execute (the others return kTimeout naming it within timeout + slack);
//     a wrong buffer size on the last rank (kInvalidArgument there, before
//     any communication; the others time out naming it), on a fresh and on
//     a cached plan; a fresh transport then executes repeatedly from its
//     schedule cache.
//   engine_mpi_test agree
//     Agreement on the whole plan (docs/design.md §3.5): every rank executes
//     the same plan bytes (whole, or its worker part with the list of every
//     part's digest; with and without a MAC) and the data are exact; every
//     rank planning its own part also runs; then the last rank executes an
//     edited-but-decodable plan (its part edited, digests and list
//     recomputed: every check of the decoder passes), or its own part edited
//     without a list, or a plan of another staging budget: kMismatch on
//     every rank, naming the last rank, within the deadline.
//   engine_mpi_test flat --cases N --seed S
//     Flat layouts (reshard/flat.h; tests/core/flat_cases.h): random FSDP1 /
//     Megatron (concat), ZeRO-3 (per_tensor) and vLLM-style fused (buffer
//     views: each tensor its own sharding) flat layouts as the source or
//     the destination of every tensor, ranks' devices spread over the
//     processes; each process passes one flat buffer per rank it holds
//     ({null, 0} for the others) through flat_views. Invariants: a flat
//     destination holds, at every position of every local rank's buffer,
//     the element the framework rule puts there, and padding is never
//     written; a flat source's destinations pass the oracle element by
//     element.
//   engine_mpi_test subs
//     Sub-messages (several messages of one round and devices, Message::
//     sub): a relay plan's messages cut into subs, executed through its
//     bytes with staging and gathering, with and without a budget; every
//     rank's destinations equal execute_host's. Four ranks.
//   engine_mpi_test cache --cases N --seed S
//     The schedule cache (EngineOptions): groups of three random plans
//     executed A B A C B A A with room for two schedules hit exactly where
//     LRU says (also through a re-planned and a decoded copy of the plan),
//     into fresh buffers (new addresses) or the previous ones, and every
//     result is bit-identical to an uncached execution; every operation
//     carries its devices' topology ordinals; the same plan repeated with
//     alternating packings; a wrong buffer size on a cached plan is refused
//     and the plan still works; no cache (0 entries) and bad options.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/flat_cases.h"
#include "core/random_cases.h"
#include "core/sub_messages.h"
#include "mpi/counting_transport.h"
#include "plan/plan_builder.h"
#include "reshard/box_copy.h"
#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/flat.h"
#include "reshard/numeric.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/wire.h"

namespace reshard {
namespace {

using testing::CountingTransport;
using testing::StagingCounter;

struct World {
  int rank = 0;
  int size = 1;
};

int g_failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    ++g_failures;
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  }
}

// Every rank's flag, so that all ranks reach the same verdict.
bool all_ranks(Transport& t, bool ok) {
  const std::byte mine{static_cast<unsigned char>(ok ? 1 : 0)};
  const auto all = t.allgather(std::span(&mine, 1), 120);
  bool result = true;
  for (const auto& r : all) result = result && r[0] == std::byte{1};
  return result;
}

std::unique_ptr<Engine> make_engine(std::shared_ptr<StagingCounter> counter) {
  return std::make_unique<Engine>(
      std::make_unique<CountingTransport>(make_mpi_transport(), std::move(counter)));
}

// Views of `buffers` holding only the entries on `process` (others null), so
// that the engine cannot silently depend on remote entries.
std::vector<TensorBuffers> local_views(const Plan& plan, OracleBuffers& buffers, int32_t process) {
  std::vector<TensorBuffers> views = buffers.views();
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    const TensorSpec& spec = plan.tensors()[t];
    for (size_t e = 0; e < spec.src.num_entries(); ++e) {
      if (plan.topology().info(spec.src.device(e)).process != process) views[t].src[e] = {};
    }
    for (size_t e = 0; e < spec.dst.num_entries(); ++e) {
      if (plan.topology().info(spec.dst.device(e)).process != process) views[t].dst[e] = {};
    }
  }
  return views;
}

// Replaces the oracle's summands (small integers, whose sums are exact in
// any order) of float tensors with partial sources by random values of
// mixed magnitude, whose sums depend on the order of addition: comparing
// with execute_host bit for bit then checks the reduction order. Same values
// on every rank (seeded by tensor and entry). Returns the tensors changed.
std::vector<bool> scramble_partial_sources(const Plan& plan, std::vector<OracleBuffers*> buffers,
                                           uint64_t seed, double probability) {
  std::vector<bool> changed(plan.tensors().size(), false);
  std::mt19937_64 pick(seed);
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    const TensorSpec& spec = plan.tensors()[t];
    const bool is_float = spec.dtype == DType::kF32 || spec.dtype == DType::kF64 ||
                          spec.dtype == DType::kBF16 || spec.dtype == DType::kF16;
    if (!spec.src.partial() || !is_float || !std::bernoulli_distribution(probability)(pick)) {
      continue;
    }
    changed[t] = true;
    for (size_t e = 0; e < spec.src.num_entries(); ++e) {
      std::mt19937_64 rng(seed ^ (t * 0x9e3779b97f4a7c15ull) ^ (e * 0xbf58476d1ce4e5b9ull));
      std::uniform_real_distribution<double> mant(-1, 1);
      std::uniform_int_distribution<int> expo(-12, 12);
      const int64_t n = spec.src.box(e).volume();
      for (int64_t i = 0; i < n; ++i) {
        const double v = std::ldexp(mant(rng), expo(rng));
        for (OracleBuffers* b : buffers) {
          std::byte* out = b->src[t][e].data();
          switch (spec.dtype) {
            case DType::kF64:
              std::memcpy(out + i * 8, &v, 8);
              break;
            case DType::kF32: {
              const float f = static_cast<float>(v);
              std::memcpy(out + i * 4, &f, 4);
              break;
            }
            case DType::kBF16: {
              const uint16_t h = numeric::f32_to_bf16(static_cast<float>(v));
              std::memcpy(out + i * 2, &h, 2);
              break;
            }
            default: {
              const uint16_t h = numeric::f32_to_f16(static_cast<float>(v));
              std::memcpy(out + i * 2, &h, 2);
              break;
            }
          }
        }
      }
    }
  }
  return changed;
}

// Compares this process's destination entries with the reference, and
// checks the non-partial ones with the oracle (except tensors in
// `no_oracle`). Returns a description of the first difference, or "".
std::string compare_local(const Plan& plan, const OracleBuffers& got, const OracleBuffers& want,
                          int32_t process, const std::vector<bool>& no_oracle = {}) {
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    const TensorSpec& spec = plan.tensors()[t];
    for (size_t e = 0; e < spec.dst.num_entries(); ++e) {
      if (plan.topology().info(spec.dst.device(e)).process != process) continue;
      const auto& a = got.dst[t][e];
      const auto& b = want.dst[t][e];
      if (a.size() != b.size() || (!a.empty() && std::memcmp(a.data(), b.data(), a.size()) != 0)) {
        size_t i = 0;
        while (i < a.size() && a[i] == b[i]) ++i;
        return "tensor " + spec.name + " dst entry " + std::to_string(e) + " (device " +
               std::to_string(spec.dst.device(e)) + ") differs from execute_host at byte " +
               std::to_string(i) + " of " + std::to_string(a.size());
      }
      if (!spec.dst.partial() && (t >= no_oracle.size() || !no_oracle[t])) {
        OracleReport report;
        check_destination_shard(spec, static_cast<uint32_t>(t), e, a, report, 1);
        if (!report.ok()) {
          return "tensor " + spec.name + " dst entry " + std::to_string(e) +
                 " fails the oracle: expected " + report.first[0].expected + ", got " +
                 report.first[0].got;
        }
      }
    }
  }
  return "";
}

void poison_local(const Plan& plan, OracleBuffers& buffers, int32_t process) {
  for (size_t t = 0; t < plan.tensors().size(); ++t) {
    const TensorSpec& spec = plan.tensors()[t];
    for (size_t e = 0; e < spec.dst.num_entries(); ++e) {
      if (plan.topology().info(spec.dst.device(e)).process != process) continue;
      poison_destination_shard(spec, static_cast<uint32_t>(t), e, buffers.dst[t][e]);
    }
  }
}

// ------------------------------------------------------------------ random

// A random case (random_cases.h) with its devices spread over this
// communicator, ordinals that differ between a rank's devices, and budgets
// small enough to force many rounds on a third of the cases; planned whole
// (PlanScope::kAll). *input receives the inputs planned.
Plan random_plan(const World& w, testing::CaseGen& gen, PlanInput* input, bool casts = false) {
  PlanInput in = gen.input();
  if (casts) {
    // Casts in flight: every tensor whose layouts are not partial gets a
    // float dtype and a random destination dtype (sometimes its own).
    const DType floats[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2};
    for (TensorSpec& t : in.tensors) {
      if (t.src.partial() || t.dst.partial()) continue;
      t.dtype = floats[gen.uni(0, 4)];
      const DType to = floats[gen.uni(0, 4)];
      if (to != t.dtype) t.dst_dtype = to;
    }
  }
  // Spread devices over this communicator (random_cases.h assigns
  // (d*7+3) % nproc for nproc <= 4; remap to the real size).
  Topology topo;
  for (DeviceInfo info : in.topology.devices()) {
    info.process = static_cast<int32_t>((info.device * 7 + 3) % w.size);
    info.host = info.process / 2;
    info.ordinal = static_cast<int32_t>(info.device % 3);
    topo.add(info);
  }
  in.topology = topo;
  const int64_t budgets[] = {0, 512, 2048, 20000, int64_t{1} << 30};
  in.options.staging_budget_bytes = budgets[gen.uni(0, 4)];
  Plan full;
  try {
    full = make_plan(in, PlanRequest{PlanScope::kAll, 0, true});
  } catch (const Error& e) {
    // A budget below 16 bytes per peer is refused by the planner: retry
    // with a larger one (every rank takes the same branch).
    in.options.staging_budget_bytes = int64_t{1} << 16;
    full = make_plan(in, PlanRequest{PlanScope::kAll, 0, true});
  }
  *input = in;
  return full;
}

// casts: random_plan's casts in flight (mode "casts").
int run_random(const World& w, int cases, uint64_t seed, bool casts = false) {
  auto counter = std::make_shared<StagingCounter>();
  auto engine = make_engine(counter);
  Transport& transport = engine->transport();
  int executed = 0, multi_round = 0, max_rounds = 0, partial = 0, gathered = 0, overlapped = 0,
      deferred = 0, multi_device_ranks = 0, cast_tensors = 0;
  int64_t bytes_received = 0, bytes_checked = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int c = 0; c < cases; ++c) {
    const uint64_t case_seed = seed * 100003 + static_cast<uint64_t>(c);
    testing::CaseOptions co;
    co.max_devices = 24;
    testing::CaseGen gen(case_seed, co);
    PlanInput in;
    const Plan full = random_plan(w, gen, &in, casts);
    for (const TensorSpec& t : full.tensors()) cast_tensors += has_cast(t) ? 1 : 0;
    // Half the cases execute a plan holding only this process's part.
    const bool participates =
        std::binary_search(full.processes().begin(), full.processes().end(), w.rank);
    const bool whole = c % 2 == 0 || !participates;
    const Plan own = whole ? Plan() : make_plan(in, PlanRequest{PlanScope::kProcess, w.rank, true});
    const Plan& plan = whole ? full : own;
    OracleBuffers want = fill_sources(full);
    OracleBuffers got = fill_sources(full);
    const std::vector<bool> scrambled =
        scramble_partial_sources(full, {&want, &got}, case_seed, 0.5);
    {
      std::vector<TensorBuffers> views = want.views();
      execute_host(full, views);
    }
    std::vector<TensorBuffers> views = local_views(full, got, w.rank);
    ExecuteOptions options;
    options.timeout_seconds = 60;
    options.max_batches_in_flight = static_cast<int32_t>(1 + gen.uni(0, 7));
    options.overlap = gen.coin(0.8);
    options.packing =
        gen.coin() ? ExecuteOptions::Packing::kGather : ExecuteOptions::Packing::kStaging;
    std::string error;
    counter->reset_peaks();
    // On the heap: GCC 12 warns (wrongly) about fields assigned in the try.
    auto stats_ptr = std::make_unique<ExecuteStats>();
    ExecuteStats& stats = *stats_ptr;
    try {
      stats = engine->execute(plan, w.rank, views, options);
      error = compare_local(full, got, want, w.rank, scrambled);
      if (error.empty()) {
        // Again, agreement cached, destinations poisoned first.
        poison_local(full, got, w.rank);
        options.packing = ExecuteOptions::Packing::kStaging;
        const ExecuteStats again = engine->execute(plan, w.rank, views, options);
        if (again.agreed) error = "second execution ran the agreement again";
        if (error.empty()) error = compare_local(full, got, want, w.rank, scrambled);
        if (!error.empty()) error = "second execution: " + error;
      }
    } catch (const Error& e) {
      error = std::string("execute threw [") + error_code_name(e.code()) + "] " + e.what();
    }
    const int64_t budget = full.options().staging_budget_bytes;
    if (error.empty() && budget > 0) {
      for (const auto& [device, peak] : counter->peak) {
        if (peak > budget) {
          error = "device " + std::to_string(device) + " staged " + std::to_string(peak) +
                  " bytes, above the budget of " + std::to_string(budget);
        }
      }
      if (stats.staging_peak_bytes > budget) error = "stats.staging_peak_bytes above the budget";
    }
    for (const auto& [device, live] : counter->live) {
      if (live != 0) error = "staging of device " + std::to_string(device) + " not released";
    }
    if (w.rank == 0 && stats.seconds > 2.0) {
      std::printf("slow case %d (seed %llu): %.2f s, %d rounds, %lld batches, %lld messages\n", c,
                  static_cast<unsigned long long>(case_seed), stats.seconds, stats.rounds,
                  static_cast<long long>(stats.batches),
                  static_cast<long long>(stats.messages_sent + stats.messages_received));
    }
    const bool ok = all_ranks(transport, error.empty());
    if (!error.empty()) {
      std::fprintf(stderr, "rank %d case %d (seed %llu): %s\n", w.rank, c,
                   static_cast<unsigned long long>(case_seed), error.c_str());
    }
    check(ok, "random case " + std::to_string(c) + " (seed " + std::to_string(case_seed) + ")");
    ++executed;
    bytes_received += stats.bytes_received;
    for (size_t t = 0; t < full.tensors().size(); ++t) {
      for (size_t e = 0; e < full.tensors()[t].dst.num_entries(); ++e) {
        if (full.topology().info(full.tensors()[t].dst.device(e)).process == w.rank) {
          bytes_checked += static_cast<int64_t>(got.dst[t][e].size());
        }
      }
    }
    if (stats.rounds > 1) ++multi_round;
    max_rounds = std::max(max_rounds, stats.rounds);
    for (const TensorSpec& t : full.tensors()) partial += t.src.partial() ? 1 : 0;
    gathered += stats.gathered_messages > 0;
    overlapped += stats.overlapped_rounds > 0;
    deferred += stats.deferred_bytes > 0;
    if (std::binary_search(full.processes().begin(), full.processes().end(), w.rank)) {
      int local_devices = 0;
      for (const DeviceInfo& d : full.topology().devices()) local_devices += d.process == w.rank;
      multi_device_ranks += local_devices > 1;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (w.rank == 0) {
    std::printf(
        "%d ranks: %d random cases in %.1f s: %d with several rounds (max %d), %d partial-source "
        "tensors, %d gathered, %d overlapped, %d with deferred summands (rank 0), %d with several "
        "devices on rank 0; rank 0 received %lld bytes and compared %lld destination bytes\n",
        w.size, executed, seconds, multi_round, max_rounds, partial, gathered, overlapped, deferred,
        multi_device_ranks, static_cast<long long>(bytes_received),
        static_cast<long long>(bytes_checked));
  }
  // The cases must cover what they claim to.
  check(all_ranks(transport, multi_round > 0 && max_rounds >= 4),
        "some cases run several rounds (max " + std::to_string(max_rounds) + ")");
  check(all_ranks(transport, partial > 0), "some cases have partial sources");
  if (casts) {
    if (w.rank == 0) std::printf("%d tensors cast in flight\n", cast_tensors);
    check(all_ranks(transport, cast_tensors >= cases / 2), "some tensors are cast");
  }
  return g_failures;
}

// ------------------------------------------------------------------ flat

int run_flat(const World& w, int cases, uint64_t seed) {
  auto counter = std::make_shared<StagingCounter>();
  auto engine = make_engine(counter);
  Transport& transport = engine->transport();
  int64_t checked = 0, multi_slot = 0, fused = 0;
  for (int c = 0; c < cases; ++c) {
    const uint64_t case_seed = seed * 100003 + static_cast<uint64_t>(c);
    const bool flat_is_source = c % 2 == 0;
    const testing::FlatCase fc =
        testing::random_case(case_seed, flat_is_source, static_cast<int32_t>(w.size));
    fused += fc.flat.partition == FlatPartition::kFused;
    std::string error;
    try {
      const Plan plan = make_plan(fc.input);
      const std::vector<TensorSpec>& tensors = plan.tensors();
      const size_t nt = tensors.size();
      const int64_t es = fc.lowered.element_size;
      auto mine = [&](int64_t device) { return plan.topology().info(device).process == w.rank; };
      // One flat buffer per rank held here; {null, 0} for the others.
      std::vector<std::vector<std::byte>> flat_mem(static_cast<size_t>(fc.lowered.world_size));
      for (size_t r = 0; r < flat_mem.size(); ++r)
        if (mine(fc.flat.devices[r]))
          flat_mem[r] = flat_is_source
                            ? testing::reference_buffer(fc, tensors, r)
                            : std::vector<std::byte>(static_cast<size_t>(fc.lowered.shard_bytes),
                                                     testing::kPad);
      // The other side's shards: local entries only.
      std::vector<std::vector<std::vector<std::byte>>> other(nt);
      std::vector<TensorBuffers> views(nt);
      for (size_t t = 0; t < nt; ++t) {
        const Layout& l = flat_is_source ? tensors[t].dst : tensors[t].src;
        other[t].resize(l.num_entries());
        for (size_t e = 0; e < l.num_entries(); ++e) {
          if (!mine(l.device(e))) continue;
          other[t][e].resize(static_cast<size_t>(l.box(e).volume() * es));
          if (flat_is_source)
            poison_destination_shard(tensors[t], static_cast<uint32_t>(t), e, other[t][e]);
          else
            fill_source_shard(tensors[t], static_cast<uint32_t>(t), e, other[t][e]);
        }
        std::vector<ConstBuffer> cflat;
        std::vector<MutableBuffer> mflat;
        for (auto& m : flat_mem) {
          cflat.push_back(
              ConstBuffer{m.empty() ? nullptr : m.data(), static_cast<int64_t>(m.size())});
          mflat.push_back(
              MutableBuffer{m.empty() ? nullptr : m.data(), static_cast<int64_t>(m.size())});
        }
        if (flat_is_source) {
          views[t].src = flat_views(fc.lowered, t, cflat);
          for (auto& b : other[t])
            views[t].dst.push_back(
                MutableBuffer{b.empty() ? nullptr : b.data(), static_cast<int64_t>(b.size())});
        } else {
          views[t].dst = flat_views(fc.lowered, t, mflat);
          for (auto& b : other[t])
            views[t].src.push_back(
                ConstBuffer{b.empty() ? nullptr : b.data(), static_cast<int64_t>(b.size())});
        }
        for (size_t e = 0; e < fc.lowered.layouts[t].num_entries(); ++e)
          multi_slot += flat_slot(fc.lowered.layouts[t].device(e)) > 0;
      }
      ExecuteOptions options;
      options.timeout_seconds = 60;
      engine->execute(plan, w.rank, views, options);
      if (flat_is_source) {
        OracleReport report;
        for (size_t t = 0; t < nt; ++t)
          for (size_t e = 0; e < other[t].size(); ++e)
            if (mine(tensors[t].dst.device(e)))
              check_destination_shard(tensors[t], static_cast<uint32_t>(t), e, other[t][e], report);
        if (!report.ok()) error = std::to_string(report.mismatches) + " destination elements wrong";
        checked += report.elements;
      } else {
        for (size_t r = 0; r < flat_mem.size() && error.empty(); ++r) {
          if (flat_mem[r].empty() && fc.lowered.shard_bytes > 0) continue;
          const std::vector<std::byte> want = testing::reference_buffer(fc, tensors, r);
          if (want != flat_mem[r]) error = "flat buffer of rank " + std::to_string(r) + " differs";
          checked += static_cast<int64_t>(want.size()) / std::max<int64_t>(es, 1);
        }
      }
    } catch (const Error& e) {
      error = std::string("threw [") + error_code_name(e.code()) + "] " + e.what();
    }
    const bool ok = all_ranks(transport, error.empty());
    if (!error.empty())
      std::fprintf(stderr, "rank %d flat case %d (seed %llu): %s\n", w.rank, c,
                   static_cast<unsigned long long>(case_seed), error.c_str());
    check(ok, "flat case " + std::to_string(c) + " (seed " + std::to_string(case_seed) + ")");
  }
  if (w.rank == 0)
    std::printf(
        "%d ranks: %d flat cases (%lld fused), rank 0 checked %lld elements, %lld slot entries\n",
        w.size, cases, static_cast<long long>(fused), static_cast<long long>(checked),
        static_cast<long long>(multi_slot));
  check(all_ranks(transport, checked > 0 && multi_slot > 0 && (cases < 12 || fused > 0)),
        "the flat cases check elements, reach slot devices and fused layouts");
  return g_failures;
}

// ------------------------------------------------------------------ budget

std::shared_ptr<Mesh> mesh_1d(std::vector<int64_t> devices, const std::string& axis) {
  auto m = std::make_shared<Mesh>();
  m->axis_names = {axis};
  m->shape = {static_cast<int64_t>(devices.size())};
  m->devices = std::move(devices);
  return m;
}

NamedSharding named(std::shared_ptr<Mesh> mesh, std::vector<std::vector<std::string>> dims,
                    std::vector<std::string> partial = {}) {
  NamedSharding s;
  s.mesh = std::move(mesh);
  s.dims = std::move(dims);
  s.partial_axes = std::move(partial);
  return s;
}

// Row blocks on 2 devices per rank to column blocks on the same devices,
// plus a partial-sum tensor, f32 and bf16.
PlanInput budget_input(int size, int64_t budget, DType dtype) {
  PlanInput in;
  std::vector<int64_t> devices(static_cast<size_t>(2 * size));
  std::iota(devices.begin(), devices.end(), 0);
  for (int64_t d : devices) {
    DeviceInfo info;
    info.device = d;
    info.process = static_cast<int32_t>(d / 2);
    info.host = info.process;
    info.ordinal = static_cast<int32_t>(d % 2);
    in.topology.add(info);
  }
  auto m = mesh_1d(devices, "x");
  TensorSpec t;
  t.name = "w";
  t.shape = {192, 160};
  t.dtype = dtype;
  t.src = Layout::from_named(named(m, {{"x"}, {}}), t.shape, "w.src");
  t.dst = Layout::from_named(named(m, {{}, {"x"}}), t.shape, "w.dst");
  in.tensors.push_back(t);
  TensorSpec g;
  g.name = "g";
  g.shape = {96, 64};
  g.dtype = dtype;
  g.src = Layout::from_named(named(m, {{}, {}}, {"x"}), g.shape, "g.src");
  g.dst = Layout::from_named(named(m, {{"x"}, {}}), g.shape, "g.dst");
  in.tensors.push_back(g);
  // Row blocks to row blocks of the reversed device order: contiguous
  // pieces, sent and received in place.
  std::vector<int64_t> reversed(devices.rbegin(), devices.rend());
  TensorSpec r;
  r.name = "r";
  r.shape = {1000, 24};
  r.dtype = dtype;
  r.src = Layout::from_named(named(m, {{"x"}, {}}), r.shape, "r.src");
  r.dst = Layout::from_named(named(mesh_1d(reversed, "x"), {{"x"}, {}}), r.shape, "r.dst");
  in.tensors.push_back(r);
  in.options.staging_budget_bytes = budget;
  return in;
}

int run_budget(const World& w) {
  int64_t in_place = 0;
  auto counter = std::make_shared<StagingCounter>();
  auto engine = make_engine(counter);
  int overlapped = 0;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t budget : {int64_t{4096}, int64_t{32768}}) {
      for (auto packing : {ExecuteOptions::Packing::kStaging, ExecuteOptions::Packing::kGather}) {
        const PlanInput in = budget_input(w.size, budget, dtype);
        const Plan plan = make_plan(in, PlanRequest{PlanScope::kProcess, w.rank, true});
        const Plan full = make_plan(in);
        OracleBuffers want = fill_sources(full);
        {
          std::vector<TensorBuffers> v = want.views();
          execute_host(full, v);
        }
        OracleBuffers got = fill_sources(full);
        std::vector<TensorBuffers> views = local_views(full, got, w.rank);
        counter->reset_peaks();
        ExecuteOptions options;
        options.timeout_seconds = 60;
        options.packing = packing;
        const ExecuteStats stats = engine->execute(plan, w.rank, views, options);
        const std::string error = compare_local(full, got, want, w.rank);
        const std::string label =
            std::string(dtype_name(dtype)) + " budget " + std::to_string(budget) +
            (packing == ExecuteOptions::Packing::kGather ? " gather" : " staging");
        overlapped += stats.overlapped_rounds;
        check(error.empty(), label + ": " + error);
        check(counter->max_peak() <= budget,
              label + ": peak staging " + std::to_string(counter->max_peak()) + " > budget");
        check(stats.staging_peak_bytes <= budget, label + ": stats.staging_peak_bytes > budget");
        check(stats.rounds >= (budget < 8192 ? 8 : 2),
              label + ": only " + std::to_string(stats.rounds) + " rounds");
        in_place += stats.in_place_messages;
        if (w.rank == 0) {
          std::printf(
              "%s: %d rounds, peak staging %lld of %lld bytes per device, %d overlapped, "
              "%lld in place, %lld messages sent\n",
              label.c_str(), stats.rounds, static_cast<long long>(counter->max_peak()),
              static_cast<long long>(budget), stats.overlapped_rounds,
              static_cast<long long>(stats.in_place_messages),
              static_cast<long long>(stats.messages_sent));
        }
      }
    }
  }
  if (w.rank == 0) check(overlapped > 0, "no round was packed while the previous was in flight");
  if (w.rank == 0) check(in_place > 0, "no message went in place");
  // Summands arriving out of order. Device 0 (rank 0) reduces summand 0
  // from device 2 and summand 1 from device 3 (rank 1) and holds summand 2
  // itself. Device 2 also feeds devices 1 and 3, so its stream to device 0
  // is cut into smaller rounds (budget / 3 peers) than device 3's (budget /
  // 2 peers): summand 1 of an element arrives rounds before summand 0
  // and must wait, copied aside, to be added in summand order. Random float
  // values make any other order visible in the bits.
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    PlanInput in;
    for (int64_t d = 0; d < 4; ++d) {
      DeviceInfo info;
      info.device = d;
      info.process = static_cast<int32_t>(d / 2);
      info.host = info.process;
      in.topology.add(info);
    }
    const std::vector<int64_t> shape = {4096};
    Box full_box;
    full_box.rank = 1;
    full_box.hi[0] = 4096;
    TensorSpec p;
    p.name = "p";
    p.shape = shape;
    p.dtype = dtype;
    p.src = Layout::from_boxes(shape, {{2, 0, full_box}, {3, 1, full_box}, {0, 2, full_box}}, 3,
                               ReduceOp::kSum, "p.src");
    p.dst = Layout::from_boxes(shape, {{0, 0, full_box}}, 1, ReduceOp::kSum, "p.dst");
    TensorSpec q;
    q.name = "q";
    q.shape = shape;
    q.dtype = dtype;
    q.src = Layout::from_boxes(shape, {{2, 0, full_box}}, 1, ReduceOp::kSum, "q.src");
    q.dst =
        Layout::from_boxes(shape, {{1, 0, full_box}, {3, 0, full_box}}, 1, ReduceOp::kSum, "q.dst");
    in.tensors = {p, q};
    in.options.staging_budget_bytes = 4096;
    const Plan plan = make_plan(in);
    OracleBuffers want = fill_sources(plan);
    OracleBuffers got = fill_sources(plan);
    const std::vector<bool> scrambled = scramble_partial_sources(plan, {&want, &got}, 99, 1.0);
    {
      std::vector<TensorBuffers> v = want.views();
      execute_host(plan, v);
    }
    std::vector<TensorBuffers> views = local_views(plan, got, w.rank);
    ExecuteOptions options;
    options.timeout_seconds = 60;
    const ExecuteStats stats = engine->execute(plan, w.rank, views, options);
    const std::string label =
        std::string("out-of-order summands, ") + std::string(dtype_name(dtype));
    const bool same = compare_local(plan, got, want, w.rank, scrambled).empty();
    check(same, label + ": differs from execute_host");
    if (w.rank == 0) {
      check(stats.deferred_bytes > 0, label + ": no summand was deferred");
      std::printf("%s: %d rounds, %lld bytes deferred, %s execute_host\n", label.c_str(),
                  stats.rounds, static_cast<long long>(stats.deferred_bytes),
                  same ? "bit-identical to" : "DIFFERENT from");
    }
  }
  check(all_ranks(engine->transport(), g_failures == 0), "budget cases on every rank");
  return g_failures;
}

// ------------------------------------------------------------------ faults

PlanInput fault_input(int size, DType dtype_of_b, int64_t rows) {
  PlanInput in = budget_input(size, 0, DType::kF32);
  in.tensors[1].dtype = dtype_of_b;
  in.tensors[0].shape[0] = rows;
  auto m = mesh_1d(
      [&] {
        std::vector<int64_t> d(static_cast<size_t>(2 * size));
        std::iota(d.begin(), d.end(), 0);
        return d;
      }(),
      "x");
  in.tensors[0].src = Layout::from_named(named(m, {{"x"}, {}}), in.tensors[0].shape, "w.src");
  in.tensors[0].dst = Layout::from_named(named(m, {{}, {"x"}}), in.tensors[0].shape, "w.dst");
  return in;
}

struct Outcome {
  ErrorCode code = ErrorCode::kOk;
  std::string message;
  double seconds = 0;
};

Outcome attempt(Engine& engine, const Plan& plan, int rank, std::vector<TensorBuffers>& views,
                double timeout) {
  Outcome o;
  ExecuteOptions options;
  options.timeout_seconds = timeout;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    engine.execute(plan, rank, views, options);
  } catch (const Error& e) {
    o.code = e.code();
    o.message = e.what();
  }
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return o;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

int run_faults(const World& w) {
  if (w.size < 2) {
    std::printf("faults: need at least 2 ranks\n");
    return 1;
  }
  const int last = w.size - 1;
  const std::string last_named = "rank(s) " + std::to_string(last);
  const double timeout = 2.0;
  const double slack = 3.0;
  const auto report = [&](const char* name, const Outcome& o) {
    std::printf("rank %d %s: [%s] %s (%.2f s)\n", w.rank, name, error_code_name(o.code),
                o.message.c_str(), o.seconds);
  };

  {  // A different plan on the last rank: kMismatch everywhere, naming it.
    auto engine = make_engine(std::make_shared<StagingCounter>());
    const PlanInput in = fault_input(w.size, DType::kF32, w.rank == last ? 190 : 192);
    const Plan plan = make_plan(in);
    OracleBuffers b = fill_sources(plan);
    std::vector<TensorBuffers> views = local_views(plan, b, w.rank);
    const Outcome o = attempt(*engine, plan, w.rank, views, 30);
    report("mismatched plan", o);
    check(o.code == ErrorCode::kMismatch, "mismatched plan: kMismatch");
    check(contains(o.message, last_named) && contains(o.message, "fingerprint"),
          "mismatched plan: the message names rank " + std::to_string(last));
    check(all_ranks(engine->transport(), true), "transport usable after a mismatch");
  }
  {  // A different dtype of tensor 1 on the last rank.
    auto engine = make_engine(std::make_shared<StagingCounter>());
    const PlanInput in = fault_input(w.size, w.rank == last ? DType::kBF16 : DType::kF32, 192);
    const Plan plan = make_plan(in);
    OracleBuffers b = fill_sources(plan);
    std::vector<TensorBuffers> views = local_views(plan, b, w.rank);
    const Outcome o = attempt(*engine, plan, w.rank, views, 30);
    report("mismatched dtype", o);
    check(o.code == ErrorCode::kMismatch, "mismatched dtype: kMismatch");
    check(contains(o.message, last_named) && contains(o.message, "tensors[1]") &&
              contains(o.message, "bf16") && contains(o.message, "f32"),
          "mismatched dtype: the message names rank, tensor and dtypes");
  }
  {  // The last rank never calls execute.
    auto engine = make_engine(std::make_shared<StagingCounter>());
    const Plan plan = make_plan(fault_input(w.size, DType::kF32, 192));
    OracleBuffers b = fill_sources(plan);
    std::vector<TensorBuffers> views = local_views(plan, b, w.rank);
    if (w.rank != last) {
      const Outcome o = attempt(*engine, plan, w.rank, views, timeout);
      report("absent rank", o);
      check(o.code == ErrorCode::kTimeout, "absent rank: kTimeout");
      check(contains(o.message, last_named), "absent rank: the message names it");
      check(o.seconds >= timeout && o.seconds <= timeout + slack,
            "absent rank: returned after " + std::to_string(o.seconds) + " s");
    }
  }
  {  // Agreed once, then the last rank skips an execution: the others time
     // out in a data round, naming it.
    auto engine = make_engine(std::make_shared<StagingCounter>());
    const Plan plan = make_plan(fault_input(w.size, DType::kF32, 192));
    OracleBuffers b = fill_sources(plan);
    std::vector<TensorBuffers> views = local_views(plan, b, w.rank);
    const Outcome first = attempt(*engine, plan, w.rank, views, 30);
    check(first.code == ErrorCode::kOk, "absent after agreement: first execution " + first.message);
    if (w.rank != last) {
      const Outcome o = attempt(*engine, plan, w.rank, views, timeout);
      report("absent after agreement", o);
      check(o.code == ErrorCode::kTimeout && contains(o.message, "round") &&
                contains(o.message, std::to_string(last)),
            "absent after agreement: kTimeout in a round naming rank " + std::to_string(last));
      check(o.seconds >= timeout && o.seconds <= timeout + slack,
            "absent after agreement: returned after " + std::to_string(o.seconds) + " s");
    }
  }
  {  // A wrong buffer size on the last rank.
    auto engine = make_engine(std::make_shared<StagingCounter>());
    const Plan plan = make_plan(fault_input(w.size, DType::kF32, 192));
    OracleBuffers b = fill_sources(plan);
    std::vector<TensorBuffers> views = local_views(plan, b, w.rank);
    if (w.rank == last) {
      size_t e = 0;
      while (plan.topology().info(plan.tensors()[0].src.device(e)).process != last) ++e;
      views[0].src[e].bytes -= 4;
    }
    const Outcome o = attempt(*engine, plan, w.rank, views, timeout);
    report("wrong buffer size", o);
    if (w.rank == last) {
      check(o.code == ErrorCode::kInvalidArgument && contains(o.message, "tensors[0].src["),
            "wrong size: kInvalidArgument naming the buffer");
      check(o.seconds < 1.0, "wrong size: fails before any communication");
    } else {
      check(o.code == ErrorCode::kTimeout && contains(o.message, last_named),
            "wrong size: the others time out naming the rank");
    }
  }
  {  // The same on a plan executed before (agreed, schedule cached): the
     // cache does not skip the buffer checks; the others time out in a round.
    auto engine = make_engine(std::make_shared<StagingCounter>());
    const Plan plan = make_plan(fault_input(w.size, DType::kF32, 192));
    OracleBuffers b = fill_sources(plan);
    std::vector<TensorBuffers> views = local_views(plan, b, w.rank);
    const Outcome first = attempt(*engine, plan, w.rank, views, 30);
    check(first.code == ErrorCode::kOk,
          "wrong size on a cached plan: first execution " + first.message);
    if (w.rank == last) {
      size_t e = 0;
      while (plan.topology().info(plan.tensors()[0].dst.device(e)).process != last) ++e;
      views[0].dst[e].bytes += 4;
    }
    const Outcome o = attempt(*engine, plan, w.rank, views, timeout);
    report("wrong buffer size, cached plan", o);
    if (w.rank == last) {
      check(o.code == ErrorCode::kInvalidArgument && contains(o.message, "tensors[0].dst["),
            "wrong size, cached plan: kInvalidArgument naming the buffer");
      check(o.seconds < 1.0, "wrong size, cached plan: fails before any communication");
    } else {
      check(o.code == ErrorCode::kTimeout && contains(o.message, "round") &&
                contains(o.message, last_named),
            "wrong size, cached plan: the others time out in a round naming the rank");
    }
  }
  {  // After all that, a fresh transport works.
    auto engine = make_engine(std::make_shared<StagingCounter>());
    const Plan plan = make_plan(fault_input(w.size, DType::kF32, 192));
    OracleBuffers b = fill_sources(plan);
    OracleBuffers want = fill_sources(plan);
    {
      std::vector<TensorBuffers> v = want.views();
      execute_host(plan, v);
    }
    std::vector<TensorBuffers> views = local_views(plan, b, w.rank);
    const Outcome o = attempt(*engine, plan, w.rank, views, 30);
    check(o.code == ErrorCode::kOk, "fresh transport after faults: " + o.message);
    check(compare_local(plan, b, want, w.rank).empty(), "fresh transport after faults: data");
    // Again and again, from the schedule cache.
    for (int i = 0; i < 3; ++i) {
      poison_local(plan, b, w.rank);
      ExecuteOptions options;
      options.timeout_seconds = 30;
      const ExecuteStats s = engine->execute(plan, w.rank, views, options);
      check(s.schedule_cached,
            "fresh transport after faults: repeat " + std::to_string(i) + " from the cache");
      check(compare_local(plan, b, want, w.rank).empty(),
            "fresh transport after faults: repeat " + std::to_string(i) + " data");
    }
    check(all_ranks(engine->transport(), g_failures == 0), "fault checks on every rank");
  }
  return g_failures;
}

// ------------------------------------------------------------------- cache

int run_cache(const World& w, int cases, uint64_t seed) {
  auto counter = std::make_shared<StagingCounter>();
  EngineOptions engine_options;
  engine_options.schedule_cache_entries = 2;
  Engine engine(std::make_unique<CountingTransport>(make_mpi_transport(), counter), engine_options);
  auto& counting = dynamic_cast<CountingTransport&>(engine.transport());
  Transport& transport = engine.transport();
  // Every operation names its devices' ordinals as the topology has them.
  const Plan* current = nullptr;
  int64_t ops_checked = 0;
  std::string op_error;
  counting.on_op = [&](const TransferOp& op) {
    const Topology& topo = current->topology();
    if (topo.info(op.remote_device).ordinal != op.remote_ordinal ||
        topo.info(op.local_device).ordinal != op.local_ordinal ||
        topo.info(op.remote_device).process != op.peer) {
      op_error = "operation with device " + std::to_string(op.remote_device) + " on rank " +
                 std::to_string(op.peer) + " has remote ordinal " +
                 std::to_string(op.remote_ordinal) + ", the topology says " +
                 std::to_string(topo.info(op.remote_device).ordinal);
    }
    ++ops_checked;
  };
  int hits = 0, misses = 0, groups = 0, gathered = 0;
  // Groups of three plans, executed A B A C B A A with room for two
  // schedules: hits exactly where the least recently used rule says (a
  // rank owning no device of a plan has no schedule for it: the model
  // below skips such plans).
  const int sequence[] = {0, 1, 0, 2, 1, 0, 0};
  for (int g = 0; g * 3 < cases; ++g, ++groups) {
    testing::CaseOptions co;
    co.max_devices = 16;
    std::vector<PlanInput> inputs(3);
    std::vector<Plan> plans;
    std::vector<OracleBuffers> reference;
    std::vector<std::vector<bool>> scrambled;
    ExecuteOptions options;
    options.timeout_seconds = 60;
    options.packing =
        g % 2 == 0 ? ExecuteOptions::Packing::kGather : ExecuteOptions::Packing::kStaging;
    options.max_batches_in_flight = 1 + g % 4;
    const auto fresh = [&](size_t k) {
      OracleBuffers b = fill_sources(plans[k]);
      scramble_partial_sources(plans[k], {&b}, seed * 7919 + static_cast<uint64_t>(3 * g) + k, 0.5);
      return b;
    };
    std::string error;
    bool threw = false;  // after an exception the ranks may be out of step
    for (size_t k = 0; k < 3 && !threw; ++k) {
      testing::CaseGen gen(seed * 100003 + static_cast<uint64_t>(3 * g) + k, co);
      plans.push_back(random_plan(w, gen, &inputs[k]));
      OracleBuffers ref = fill_sources(plans[k]);
      scrambled.push_back(scramble_partial_sources(
          plans[k], {&ref}, seed * 7919 + static_cast<uint64_t>(3 * g) + k, 0.5));
      std::vector<TensorBuffers> views = local_views(plans[k], ref, w.rank);
      ExecuteOptions uncached = options;
      uncached.cache_schedule = false;
      current = &plans[k];
      try {
        const ExecuteStats s = engine.execute(plans[k], w.rank, views, uncached);
        if (s.schedule_cached) error = "an uncached execution reports a cached schedule";
      } catch (const Error& e) {
        error = std::string("reference execution threw ") + e.what();
        threw = true;
      }
      reference.push_back(std::move(ref));
    }
    OracleBuffers kept;
    std::vector<size_t> lru;  // the model: plans cached, most recent first
    for (size_t i = 0; i < std::size(sequence) && !threw; ++i) {
      const size_t k = static_cast<size_t>(sequence[i]);
      // Hits through other Plan objects of the same inputs too: planned
      // again (sharing the layouts), and decoded from plan bytes (layouts
      // of their own, compared entry by entry).
      const Plan other = i == 2   ? make_plan(inputs[k])
                         : i == 6 ? decode_plan(encode_plan(plans[k]))
                                  : Plan();
      const Plan& plan = i == 2 || i == 6 ? other : plans[k];
      // The last execution reuses the previous one's buffers (the same
      // addresses: MPI datatypes reused as they are); the others get fresh
      // buffers (new addresses).
      OracleBuffers got = i == std::size(sequence) - 1 ? std::move(kept) : fresh(k);
      poison_local(plans[k], got, w.rank);
      std::vector<TensorBuffers> views = local_views(plans[k], got, w.rank);
      current = &plan;
      bool expect_hit = false;
      if (std::binary_search(plan.processes().begin(), plan.processes().end(), w.rank)) {
        const auto it = std::find(lru.begin(), lru.end(), k);
        expect_hit = it != lru.end();
        if (expect_hit) lru.erase(it);
        if (lru.size() == 2) lru.pop_back();
        lru.insert(lru.begin(), k);
      }
      try {
        const ExecuteStats s = engine.execute(plan, w.rank, views, options);
        if (s.schedule_cached != expect_hit && error.empty()) {
          error = "execution " + std::to_string(i) + " (plan " + std::to_string(k) +
                  "): " + (s.schedule_cached ? "hit" : "missed") + " the cache";
        }
        (s.schedule_cached ? hits : misses) += 1;
        gathered += s.gathered_messages > 0;
      } catch (const Error& e) {
        error = "execution " + std::to_string(i) + " threw " + e.what();
        threw = true;
      }
      if (error.empty()) {
        error = compare_local(plans[k], got, reference[k], w.rank, scrambled[k]);
        if (!error.empty()) error = "execution " + std::to_string(i) + ": " + error;
      }
      kept = std::move(got);
    }
    if (error.empty()) error = op_error;
    for (const auto& [device, live] : counter->live) {
      if (live != 0) error = "staging of device " + std::to_string(device) + " not released";
    }
    const bool ok = all_ranks(transport, error.empty());
    if (!error.empty()) {
      std::fprintf(stderr, "rank %d cache group %d (seed %llu): %s\n", w.rank, g,
                   static_cast<unsigned long long>(seed), error.c_str());
    }
    check(ok, "cache group " + std::to_string(g));
  }
  // The same plan many times, both packings in turn (two schedules), into
  // the same buffers: every result equals the uncached one.
  {
    const Plan plan = make_plan(fault_input(w.size, DType::kF32, 190));
    OracleBuffers ref = fill_sources(plan);
    std::vector<TensorBuffers> ref_views = local_views(plan, ref, w.rank);
    current = &plan;
    ExecuteOptions o;
    o.timeout_seconds = 60;
    o.cache_schedule = false;
    engine.execute(plan, w.rank, ref_views, o);
    OracleBuffers got = fill_sources(plan);
    std::vector<TensorBuffers> views = local_views(plan, got, w.rank);
    std::string error;
    for (int i = 0; i < 12; ++i) {
      poison_local(plan, got, w.rank);
      o.cache_schedule = true;
      o.packing = i % 2 ? ExecuteOptions::Packing::kStaging : ExecuteOptions::Packing::kGather;
      const ExecuteStats s = engine.execute(plan, w.rank, views, o);
      if (s.schedule_cached != (i >= 2)) error = "repeat " + std::to_string(i) + ": cache flag";
      if (error.empty()) error = compare_local(plan, got, ref, w.rank);
    }
    check(all_ranks(transport, error.empty()), "repeated cached executions: " + error);

    // A wrong buffer size on a cached plan, on every rank at once: each
    // rank refuses it before any communication (so nobody waits), and the
    // cached plan still works afterwards.
    size_t e = 0;
    while (plan.topology().info(plan.tensors()[0].src.device(e)).process != w.rank) ++e;
    views[0].src[e].bytes -= 4;
    o.packing = ExecuteOptions::Packing::kAuto;
    Outcome bad;
    try {
      engine.execute(plan, w.rank, views, o);
    } catch (const Error& x) {
      bad.code = x.code();
      bad.message = x.what();
    }
    check(bad.code == ErrorCode::kInvalidArgument &&
              contains(bad.message, "tensors[0].src[" + std::to_string(e) + "]"),
          "wrong size on a cached plan: kInvalidArgument naming the buffer, got [" +
              std::string(error_code_name(bad.code)) + "] " + bad.message);
    views[0].src[e].bytes += 4;
    poison_local(plan, got, w.rank);
    const ExecuteStats after = engine.execute(plan, w.rank, views, o);
    check(after.schedule_cached, "after a refused buffer: the schedule is still cached");
    check(all_ranks(transport, compare_local(plan, got, ref, w.rank).empty()),
          "after a refused buffer: data");
  }
  // Without a cache, and bad engine options.
  {
    EngineOptions none;
    none.schedule_cache_entries = 0;
    Engine plain(make_mpi_transport(), none);
    const Plan plan = make_plan(fault_input(w.size, DType::kF32, 64));
    OracleBuffers got = fill_sources(plan);
    std::vector<TensorBuffers> views = local_views(plan, got, w.rank);
    bool cached = false;
    for (int i = 0; i < 3; ++i)
      cached = cached || plain.execute(plan, w.rank, views).schedule_cached;
    check(!cached, "schedule_cache_entries = 0: nothing cached");
    check(all_ranks(plain.transport(), compare_local(plan, got, got, w.rank).empty()),
          "schedule_cache_entries = 0: data");
    EngineOptions negative;
    negative.schedule_cache_entries = -1;
    Outcome o;
    try {
      Engine bad(make_mpi_transport(), negative);
    } catch (const Error& x) {
      o.code = x.code();
      o.message = x.what();
    }
    check(o.code == ErrorCode::kInvalidArgument && contains(o.message, "schedule_cache_entries"),
          "negative schedule_cache_entries: kInvalidArgument naming it");
    // RESHARD_MPI_YIELD other than 0 or 1: refused when the transport is
    // created (before any communication, so every rank refuses alike).
    for (const char* value : {"yes", "2", ""}) {
      setenv("RESHARD_MPI_YIELD", value, 1);
      Outcome y;
      try {
        (void)make_mpi_transport();
      } catch (const Error& x) {
        y.code = x.code();
        y.message = x.what();
      }
      unsetenv("RESHARD_MPI_YIELD");
      check(y.code == ErrorCode::kInvalidArgument &&
                contains(y.message, std::string("RESHARD_MPI_YIELD: \"") + value + "\""),
            std::string("RESHARD_MPI_YIELD=") + value + ": kInvalidArgument naming it, got " +
                y.message);
    }
    setenv("RESHARD_MPI_YIELD", "1", 1);
    {
      Engine kept(make_mpi_transport());
      const Plan plan = make_plan(fault_input(w.size, DType::kF32, 64));
      OracleBuffers got = fill_sources(plan);
      std::vector<TensorBuffers> views = local_views(plan, got, w.rank);
      kept.execute(plan, w.rank, views);
      check(all_ranks(kept.transport(), compare_local(plan, got, got, w.rank).empty()),
            "RESHARD_MPI_YIELD=1: data");
    }
    unsetenv("RESHARD_MPI_YIELD");
  }
  if (w.rank == 0) {
    std::printf(
        "%d ranks: %d cache groups, %d hits and %d misses on rank 0, %d executions gathered, "
        "%lld operations' ordinals checked\n",
        w.size, groups, hits, misses, gathered, static_cast<long long>(ops_checked));
  }
  check(all_ranks(transport, ops_checked > 0 && hits > 0), "the cache cases moved data and hit");
  return g_failures;
}

// ------------------------------------------------------------------ agree

// The last rank's part with its local pieces in reverse order: the same
// writes, so every check of the decoder passes once digests and the list of
// part digests are recomputed (as an editor can), yet not the part the
// others were given.
Plan edited_plan(const Plan& plan, int32_t process) {
  Plan edited = plan;
  ProcessPart& part = Plan::Builder::parts(edited).at(process);
  std::reverse(part.local.begin(), part.local.end());
  Plan::Builder::part_digests(edited).clear();
  return edited;
}

int run_agree(const World& w) {
  const int last = w.size - 1;
  const std::string last_named = "rank(s) " + std::to_string(last);
  const std::vector<uint8_t> key(32, 0x5a);
  auto engine = make_engine(std::make_shared<StagingCounter>());
  const PlanInput in = fault_input(w.size, DType::kF32, 192);
  const Plan full = make_plan(in);
  check(full.part(last).local.size() >= 2, "the last rank's part has two local pieces to edit");
  OracleBuffers want = fill_sources(full);
  {
    std::vector<TensorBuffers> v = want.views();
    execute_host(full, v);
  }
  const auto run = [&](const char* name, const Plan& plan, ExecuteOptions::Agreement agreement) {
    OracleBuffers got = fill_sources(full);
    std::vector<TensorBuffers> views = local_views(full, got, w.rank);
    ExecuteOptions options;
    options.timeout_seconds = 30;
    options.agreement = agreement;
    Outcome o;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      engine->execute(plan, w.rank, views, options);
      const std::string error = compare_local(full, got, want, w.rank);
      check(error.empty(), std::string(name) + ": " + error);
    } catch (const Error& e) {
      o.code = e.code();
      o.message = e.what();
    }
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("rank %d %s: [%s] %s (%.2f s)\n", w.rank, name, error_code_name(o.code),
                o.message.c_str(), o.seconds);
    return o;
  };
  const auto every = ExecuteOptions::Agreement::kEveryCall;
  // The normal paths: the same bytes everywhere.
  const std::vector<uint8_t> whole_bytes = encode_plan(full);
  EncodeOptions worker;
  worker.all_parts = false;
  worker.process = w.rank;
  worker.mac_key = key;
  const std::vector<uint8_t> worker_bytes = encode_plan(full, worker);
  DecodeOptions keyed;
  keyed.mac_key = key;
  const Plan decoded_whole = decode_plan(whole_bytes);
  const Plan decoded_worker = decode_plan(worker_bytes, keyed);
  check(decoded_worker.part_digests().size() == full.processes().size(),
        "a worker's bytes list every part's digest");
  const Plan own = make_plan(in, PlanRequest{PlanScope::kProcess, w.rank, false});
  check(own.part_digests().empty(), "a part planned alone lists no digests");
  for (const auto& [name, plan] : {std::pair<const char*, const Plan*>{"in memory", &full},
                                   {"decoded whole", &decoded_whole},
                                   {"decoded signed worker part", &decoded_worker},
                                   {"own part planned alone", &own}}) {
    const Outcome o = run(name, *plan, every);
    check(o.code == ErrorCode::kOk, std::string(name) + ": " + o.message);
  }
  // Mixed: the last rank planned its own part, the others hold the list.
  {
    const Outcome o = run("mixed lists", w.rank == last ? own : decoded_worker, every);
    check(o.code == ErrorCode::kOk, "mixed lists: " + o.message);
  }
  // An edited-but-decodable plan on the last rank.
  {
    Plan mine = decoded_whole;
    if (w.rank == last) {
      mine = decode_plan(encode_plan(edited_plan(full, last)));
      check(mine.part(last) != full.part(last), "the edit changed the last rank's part");
    }
    const Outcome o = run("edited part, digests recomputed", mine, every);
    check(o.code == ErrorCode::kMismatch, "edited part: kMismatch");
    check(contains(o.message, last_named) && contains(o.message, "other process parts"),
          "edited part: the message names rank " + std::to_string(last));
    check(o.seconds < 20, "edited part: returned within the deadline");
  }
  // The same edit on a part planned alone (no list on the last rank): the
  // ranks holding the list name it.
  {
    Plan mine = decoded_worker;
    if (w.rank == last) mine = edited_plan(own, last);
    const Outcome o = run("edited part without a list", mine, every);
    check(o.code == ErrorCode::kMismatch, "edited part without a list: kMismatch");
    check(
        contains(o.message, last_named) && contains(o.message, "other than the one the plan lists"),
        "edited part without a list: the message names rank " + std::to_string(last));
  }
  // A plan of another staging budget, same tensors: the fingerprint.
  {
    PlanInput other = in;
    other.options.staging_budget_bytes = 4096;
    const Plan mine = w.rank == last ? make_plan(other) : full;
    const Outcome o = run("other budget", mine, every);
    check(o.code == ErrorCode::kMismatch && contains(o.message, last_named),
          "other budget: kMismatch naming rank " + std::to_string(last));
  }
  check(all_ranks(engine->transport(), g_failures == 0), "agreement cases on every rank");
  return g_failures;
}

// ------------------------------------------------------------------- subs

// Sub-messages (Message::sub): a relay plan of 4 processes (tests/core/
// sub_messages.h) whose messages are cut into up to 3 subs of one round and
// devices, unbudgeted and under a budget (several rounds), staged and
// gathered: every rank's destinations equal execute_host's.
int run_subs(const World& w) {
  auto engine = make_engine(std::make_shared<StagingCounter>());
  check(w.size == 4, "subs: needs 4 ranks, has " + std::to_string(w.size));
  for (const int64_t budget : {int64_t{0}, int64_t{2048}}) {
    for (auto packing : {ExecuteOptions::Packing::kStaging, ExecuteOptions::Packing::kGather}) {
      const Plan full =
          sub_messages::with_subs(make_plan(sub_messages::relay_input(true, budget)), 3);
      const std::string label =
          "subs budget " + std::to_string(budget) +
          (packing == ExecuteOptions::Packing::kGather ? " gather" : " staging");
      check(sub_messages::count_subs(full) > 0, label + ": no sub above 0");
      OracleBuffers want = fill_sources(full);
      {
        std::vector<TensorBuffers> v = want.views();
        execute_host(full, v);
      }
      OracleBuffers got = fill_sources(full);
      std::vector<TensorBuffers> views = local_views(full, got, w.rank);
      ExecuteOptions options;
      options.timeout_seconds = 60;
      options.packing = packing;
      // Through the bytes, as a worker executes them.
      const ExecuteStats stats =
          engine->execute(decode_plan(encode_plan(full)), w.rank, views, options);
      const std::string error = compare_local(full, got, want, w.rank);
      check(error.empty(), label + ": " + error);
      if (w.rank == 0)
        std::printf("%s: %d rounds, %lld messages sent\n", label.c_str(), stats.rounds,
                    static_cast<long long>(stats.messages_sent));
    }
  }
  check(all_ranks(engine->transport(), g_failures == 0), "subs cases on every rank");
  return g_failures;
}

}  // namespace
}  // namespace reshard

int main(int argc, char** argv) {
  using namespace reshard;
  std::string mode = argc > 1 ? argv[1] : "random";
  int cases = 40;
  uint64_t seed = 1;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--cases") cases = std::stoi(argv[i + 1]);
    if (flag == "--seed") seed = std::stoull(argv[i + 1]);
  }
  try {
    World w;
    {
      auto probe = make_mpi_transport();
      w.rank = probe->info().rank;
      w.size = probe->info().size;
    }
    int failures = 0;
    if (mode == "random") {
      failures = run_random(w, cases, seed);
    } else if (mode == "casts") {
      failures = run_random(w, cases, seed, true);
    } else if (mode == "budget") {
      failures = run_budget(w);
    } else if (mode == "faults") {
      failures = run_faults(w);
    } else if (mode == "flat") {
      failures = run_flat(w, cases, seed);
    } else if (mode == "cache") {
      failures = run_cache(w, cases, seed);
    } else if (mode == "agree") {
      failures = run_agree(w);
    } else if (mode == "subs") {
      failures = run_subs(w);
    } else {
      std::fprintf(
          stderr,
          "usage: engine_mpi_test random|casts|budget|faults|flat|cache|agree|subs [--cases N] "
          "[--seed S]\n");
      return 2;
    }
    if (failures == 0 && w.rank == 0) std::printf("%s: OK\n", mode.c_str());
    return failures == 0 ? 0 : 1;
  } catch (const Error& e) {
    // Leave without MPI_Finalize: mpirun then ends the other ranks at once
    // instead of letting them wait for this one until their deadlines.
    std::fprintf(stderr, "error [%s]: %s\n", error_code_name(e.code()), e.what());
    std::fflush(stderr);
    std::_Exit(1);
  }
}
