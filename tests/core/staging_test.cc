// Copy staging (plan.h, Scratch of a tensor whose source is not partial,
// required_features bit 64): hand-built plans (scratch_plans.h,
// staging_plan; the planner does not emit staging) round-trip through the
// wire format, execute on the host executor, the engine over the local
// transport and per-process engines on a transport of threads (late,
// shuffled deliveries; the host and the device copy paths) bit for bit
// (-0.0, NaN payloads, infinities) and against the oracle; every decoder
// refusal names its field.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "plan/plan_builder.h"
#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"
#include "reshard/plan.h"
#include "reshard/plan_generated.h"
#include "reshard/wire.h"
#include "scratch_plans.h"
#include "thread_transport.h"

namespace reshard {
namespace {

using namespace scratch_plans;     // NOLINT(google-build-using-namespace)
using namespace thread_transport;  // NOLINT(google-build-using-namespace)

std::vector<StagingCase> staging_cases() {
  std::vector<StagingCase> cases;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16})
    for (int rounds : {1, 2})
      for (bool host_process : {false, true})
        for (bool local_write : {false, true}) {
          StagingCase c;
          c.dtype = dtype;
          c.cols = dtype == DType::kF32 ? 4 : 6;
          c.rounds = rounds;
          c.host_process = host_process;
          c.local_write = local_write;
          cases.push_back(c);
        }
  return cases;
}

// The bits of global element `g` (tensor 0, 4 or 2 bytes): -0.0, NaN
// payloads (quiet and signalling, both signs), infinities, then a hash.
uint32_t bits_of(int64_t g, int64_t size) {
  static const uint32_t f32[] = {0x80000000u, 0x7fc00001u, 0x7f800001u, 0xffbfff01u,
                                 0x7f800000u, 0xff800000u, 0x00000001u};
  static const uint32_t b16[] = {0x8000u, 0x7fc1u, 0x7f81u, 0xff81u, 0x7c01u, 0xfe01u, 0x7f80u};
  const auto k = static_cast<uint64_t>(g);
  if (k % 3 != 2) return size == 4 ? f32[k % 7] : b16[k % 7];
  const uint64_t h = (k + 1) * 0x9e3779b97f4a7c15ull;
  return static_cast<uint32_t>(h >> 32) & (size == 4 ? 0xffffffffu : 0xffffu);
}

// Visits the elements of a rank-2 box of a [rows, cols] tensor in the
// buffer order of that box: (index in the box, global index).
template <typename F>
void for_box(const Box& b, int64_t cols, F f) {
  int64_t i = 0;
  for (int64_t r = b.lo[0]; r < b.hi[0]; ++r)
    for (int64_t c = b.lo[1]; c < b.hi[1]; ++c) f(i++, r * cols + c);
}

void fill_bits(const Plan& plan, OracleBuffers& buffers) {
  const TensorSpec& t = plan.tensors()[0];
  const int64_t size = dtype_size(t.dtype);
  for (size_t e = 0; e < t.src.num_entries(); ++e) {
    std::byte* out = buffers.src[0][e].data();
    for_box(t.src.box(e), t.shape[1], [&](int64_t i, int64_t g) {
      const uint32_t v = bits_of(g, size);
      std::memcpy(out + i * size, &v, static_cast<size_t>(size));  // little-endian
    });
  }
}

// Empty when every destination element holds its source's bits.
std::string check_bits(const Plan& plan, const OracleBuffers& buffers) {
  const TensorSpec& t = plan.tensors()[0];
  const int64_t size = dtype_size(t.dtype);
  std::string bad;
  for (size_t e = 0; e < t.dst.num_entries(); ++e) {
    const std::byte* in = buffers.dst[0][e].data();
    for_box(t.dst.box(e), t.shape[1], [&](int64_t i, int64_t g) {
      uint32_t v = 0;
      std::memcpy(&v, in + i * size, static_cast<size_t>(size));
      if (v != bits_of(g, size) && bad.size() < 200)
        bad += "entry " + std::to_string(e) + " element " + std::to_string(g) + "; ";
    });
  }
  return bad;
}

enum class Way { kHost, kLocal, kThreads, kThreadsGather, kThreadsDevice };

// Executes `plan` one way on the oracle's values (`bits`: on bit patterns
// instead) and returns what went wrong (empty: every element right).
std::string run(const Plan& plan, Way way, bool bits, uint64_t seed = 1) {
  OracleBuffers buffers = fill_sources(plan);
  if (bits) fill_bits(plan, buffers);
  const std::vector<TensorBuffers> views = buffers.views();
  std::string error;
  try {
    if (way == Way::kHost) {
      execute_host(plan, views);
    } else if (way == Way::kLocal) {
      Engine engine(make_local_transport());
      ExecuteOptions o;
      o.agreement = ExecuteOptions::Agreement::kSkip;
      engine.execute(plan, kAllProcesses, views, o);
    } else {
      int32_t n = 0;
      for (int32_t p : plan.processes()) n = std::max(n, p + 1);
      Hub hub(n, seed, 20);
      const bool gather = way == Way::kThreadsGather;
      std::vector<ExecuteStats> stats;
      error = run_ranks(
          hub, gather,
          [&](Engine& engine, int32_t r) {
            ExecuteOptions o;
            o.timeout_seconds = 60;
            o.packing = gather ? ExecuteOptions::Packing::kAuto : ExecuteOptions::Packing::kStaging;
            return engine.execute(plan, r, views, o);
          },
          stats, way == Way::kThreadsDevice);
      // The staging is counted where it lives.
      int64_t scratch = 0;
      for (const ExecuteStats& s : stats) scratch += s.scratch_bytes;
      if (error.empty() && scratch == 0) error = "no scratch bytes counted";
    }
  } catch (const Error& e) {
    error = e.what();
  }
  if (!error.empty()) return error;
  if (bits) return check_bits(plan, buffers);
  const OracleReport report = check_destinations(plan, buffers);
  return report.ok() ? "" : "oracle: " + std::to_string(report.mismatches) + " mismatches";
}

// Invariant: every staging case (f32, bf16, f16; 1-2 write rounds; one
// process per device or per host, so staging reads are messages or copies
// within a process; a local piece writing a staging) round-trips exactly
// with bits 1, 2 and 32, and executes on every path bit for bit and against
// the oracle; the threads transport delivers late and shuffled (8 seeds).
TEST(Staging, HandBuiltPlansExecuteBitForBitOnEveryPath) {
  for (const StagingCase& c : staging_cases()) {
    SCOPED_TRACE(c.label());
    const Plan plan = staging_plan(c);
    const std::vector<uint8_t> bytes = encode_plan(plan);
    ASSERT_EQ(fb::GetPlan(bytes.data())->required_features(),
              kPlanFeatureStages | kPlanFeatureScratch | kPlanFeatureStaging);
    const Plan back = decode_plan(bytes);
    ASSERT_EQ(back.parts(), plan.parts());
    EXPECT_EQ(encode_plan(back), bytes);
    // Each staging holds 2 rows; the plan's scratch is what one device needs.
    EXPECT_EQ(back.stats().max_scratch_bytes, 2 * c.cols * dtype_size(c.dtype));
    for (Way way :
         {Way::kHost, Way::kLocal, Way::kThreads, Way::kThreadsGather, Way::kThreadsDevice}) {
      SCOPED_TRACE(static_cast<int>(way));
      for (bool bits : {false, true}) EXPECT_EQ(run(back, way, bits), "");
    }
    for (uint64_t seed = 2; seed < 9; ++seed)
      EXPECT_EQ(run(back, seed % 2 ? Way::kThreads : Way::kThreadsDevice, true, seed), "");
  }
}

// The hand-computed acceptance case (docs/planner.md §11): per device, the
// bytes that enter its host over its own link. Without staging device 1
// takes rows 4-8 (4 rows x 4 f32 = 64 B) from host 1 and device 0 nothing;
// with it each device takes 32 B (2 rows x 4 f32), and one 32 B piece per
// host crosses inside it in stage 1.
TEST(Staging, CrossHostBytesPerDeviceHalve) {
  StagingCase c;
  const Plan plan = staging_plan(c);
  std::map<int64_t, int64_t> cross_in;  // device -> bytes from the other host
  int64_t inside_stage1 = 0;
  for (const auto& [p, part] : plan.parts())
    for (const Message& m : part.recvs) {
      if (m.src_device / 2 != m.dst_device / 2) cross_in[m.dst_device] += m.bytes;
      if (m.stage == 1 && m.src_device / 2 == m.dst_device / 2) inside_stage1 += m.bytes;
    }
  EXPECT_EQ(cross_in[0], 32);
  EXPECT_EQ(cross_in[1], 32);
  EXPECT_EQ(cross_in[2], 32);
  EXPECT_EQ(cross_in[3], 32);
  EXPECT_EQ(inside_stage1, 2 * 32);  // device 0 -> 1 and device 3 -> 2
}

// A staging plan whose parts are rebuilt from edited pieces (the encoder
// writes what it is given; the decoder judges).
struct Edited {
  StagingCase c;
  Plan plan;
  Edited() : plan(staging_plan(c)) {}
  // The pieces of every part as Xfers (scratch_plans.h), to edit and set
  // again.
  std::vector<Xfer> xfers() const {
    std::vector<Xfer> xs;
    for (const auto& [p, part] : plan.parts()) {
      for (const Piece& x : part.local) {
        const int64_t d = x.src_entry;  // entry d is on device d
        xs.push_back({d, d, 0, 0, x.src_entry, x.dst_entry, part.regions[x.region]});
      }
      for (const Message& m : part.recvs)
        for (uint64_t k = m.first_piece; k < m.first_piece + m.num_pieces; ++k) {
          const Piece& x = part.recv_pieces[k];
          xs.push_back({m.src_device, m.dst_device, m.stage, m.round, x.src_entry, x.dst_entry,
                        part.regions[x.region]});
        }
    }
    return xs;
  }
  std::vector<Scratch> scratch() const {
    std::vector<Scratch> out;
    for (const auto& [p, part] : plan.parts())
      out.insert(out.end(), part.scratch.begin(), part.scratch.end());
    return out;
  }
  std::vector<uint8_t> with(const std::vector<Xfer>& xs, const std::vector<Scratch>& s) {
    Plan q = plan;
    set_parts(q, xs, s);
    PlanStats& stats = Plan::Builder::stats(q);
    stats.rounds = std::max<int32_t>(stats.rounds, 2);
    stats.max_scratch_bytes =
        planning::most_scratch(planning::scratch_lives(q.parts(), q.tensors()));
    return encode_plan(q);
  }
};

// Each decoder check of a staging scratch, with its field and reason.
TEST(Staging, DecoderRefusesEveryMisuse) {
  Edited e;
  const std::vector<uint8_t> good = encode_plan(e.plan);
  ErrorCode code = ErrorCode::kOk;
  ASSERT_EQ(decode_error(good, &code), "");
  {
    // The bit required (an old reader would take it for a reduction).
    std::vector<uint8_t> b = good;
    fb::GetMutablePlan(b.data())->mutate_required_features(kPlanFeatureStages |
                                                           kPlanFeatureScratch);
    expect_corrupt(b, {"scratch_tensor", "lacks the staging bit (64)", "\"w\""});
  }
  {
    // The bit without staging.
    TreeCase t;
    std::vector<uint8_t> b = encode_plan(tree_plan(t));
    auto* root = fb::GetMutablePlan(b.data());
    root->mutate_required_features(root->required_features() | kPlanFeatureStaging);
    expect_corrupt(b, {"required_features", "has the staging bit (64) but no scratch"});
  }
  {
    // An unknown bit is named with the known ones.
    std::vector<uint8_t> b = good;
    auto* root = fb::GetMutablePlan(b.data());
    root->mutate_required_features(root->required_features() | 256);
    expect_corrupt(b, {"required_features", "unknown feature bits 256", "staging"});
  }
  const std::vector<Xfer> xs = e.xfers();
  const std::vector<Scratch> scratch = e.scratch();
  const auto find = [&](int64_t src, int64_t dst) {
    for (size_t i = 0; i < xs.size(); ++i)
      if (xs[i].src == src && xs[i].dst == dst) return i;
    ADD_FAILURE() << src << " -> " << dst;
    return size_t{0};
  };
  const size_t write0 = find(3, 0);  // device 3's rows 6-8 into device 0's staging
  const size_t read0 = find(0, 1);   // device 0's staging into device 1, stage 1
  {
    // Written in a later stage (after it is read, or with it).
    std::vector<Xfer> x = xs;
    x[write0].stage = 1;
    expect_corrupt(e.with(x, scratch),
                   {"recv_pieces", ".dst_entry", "staging is written in stage 0 only"});
  }
  {
    // Each element written exactly once: twice ...
    std::vector<Xfer> x = xs;
    x.push_back(x[write0]);
    x.back().round = 1;
    expect_corrupt(e.with(x, scratch), {"scratch 0", "written more than once",
                                        "a staging scratch takes a copy of each of its "
                                        "elements exactly once"});
    // ... and never.
    x = xs;
    x[write0].region = rows(6, 7, e.c.cols);
    expect_corrupt(e.with(x, scratch), {"are never written", "staging scratch"});
  }
  {
    // Read in stage 0 (with its writes).
    std::vector<Xfer> x = xs;
    x[read0].stage = 0;
    expect_corrupt(e.with(x, scratch), {".src_entry", "a piece of stage 0 reads a scratch"});
  }
  {
    // Read into another scratch.
    std::vector<Xfer> x = xs;
    x[read0].dst_entry = kScratchEntry;
    std::vector<Scratch> s = scratch;
    s.push_back({0, 1, rows(6, 8, e.c.cols)});
    expect_corrupt(e.with(x, s), {".dst_entry", "into a scratch"});
  }
  {
    // No cast: staging moves the source's dtype.
    StagingCase c;
    c.cols = 4;
    Plan p = staging_plan(c);
    PlanInput in;
    in.tensors = p.tensors();
    in.tensors[0].dst_dtype = DType::kBF16;
    in.topology = p.topology();
    in.options = p.options();
    Plan q = make_plan(in);
    set_parts(q, Edited().xfers(), Edited().scratch());
    // Messages carry bf16: halve their bytes.
    for (auto& [pr, part] : Plan::Builder::parts(q)) {
      for (Message& m : part.sends) m.bytes /= 2;
      for (Message& m : part.recvs) m.bytes /= 2;
    }
    Plan::Builder::stats(q).max_scratch_bytes =
        planning::most_scratch(planning::scratch_lives(q.parts(), q.tensors()));
    expect_corrupt(encode_plan(q), {"scratch_tensor", "which has a cast"});
  }
}

// Older plans decode as they did: a reduction tree's scratch keeps its
// bits (no staging), and a plan without scratch has none.
TEST(Staging, OlderPlansDecodeUnchanged) {
  std::ifstream f(std::string(RESHARD_SOURCE_DIR) + "/tests/data/scratch_tree.rsplan",
                  std::ios::binary);
  const std::vector<uint8_t> old((std::istreambuf_iterator<char>(f)),
                                 std::istreambuf_iterator<char>());
  ASSERT_FALSE(old.empty());
  EXPECT_EQ(fb::GetPlan(old.data())->required_features() & kPlanFeatureStaging, 0u);
  EXPECT_EQ(encode_plan(decode_plan(old)), old);
}

// The staging plan of tests/data/staging.rsplan (tests/data/README.md):
// process per device, two write rounds, a local piece writing a staging.
StagingCase golden_case() {
  StagingCase c;
  c.rounds = 2;
  c.local_write = true;
  return c;
}

// tests/data/staging.rsplan (read by `reshard run` under MPI, the CLI
// tests and the Go and Rust views) decodes, holds the hand-built plan's
// parts and executes bit for bit. RESHARD_WRITE_STAGING_PLAN=PATH writes
// the plan there first (to regenerate the file).
TEST(Staging, GoldenFileIsTheHandBuiltPlan) {
  const Plan plan = staging_plan(golden_case());
  if (const char* out = std::getenv("RESHARD_WRITE_STAGING_PLAN")) {
    const std::vector<uint8_t> bytes = encode_plan(plan);
    std::ofstream f(out, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  }
  std::ifstream f(std::string(RESHARD_SOURCE_DIR) + "/tests/data/staging.rsplan", std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)),
                                   std::istreambuf_iterator<char>());
  ASSERT_FALSE(bytes.empty());
  const Plan back = decode_plan(bytes);
  EXPECT_EQ(back.parts(), plan.parts());
  EXPECT_EQ(fb::GetPlan(bytes.data())->required_features(),
            kPlanFeatureStages | kPlanFeatureScratch | kPlanFeatureStaging);
  EXPECT_EQ(run(back, Way::kThreads, true), "");
}

// The engine refuses a staging misuse in a plan it is handed directly
// (not decoded): written in stage 1.
TEST(Staging, EngineRefusesAStagingWrittenLate) {
  Edited e;
  std::vector<Xfer> x = e.xfers();
  for (Xfer& v : x)
    if (v.src == 3 && v.dst == 0) v.stage = 1;
  Plan q = e.plan;
  set_parts(q, x, e.scratch());
  OracleBuffers buffers = fill_sources(q);
  const std::vector<TensorBuffers> views = buffers.views();
  try {
    execute_host(q, views);
    ADD_FAILURE() << "executed";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kInvalidArgument) << err.what();
    EXPECT_NE(std::string(err.what()).find("staging scratch"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace reshard
