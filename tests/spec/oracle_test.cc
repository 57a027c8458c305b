// The verification oracle (reshard/oracle.h): values encode their index, the
// check passes on a correct reshard of every dtype and partial op, and it
// catches a wrong, a missing or a misplaced element.
#include "reshard/oracle.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/spec.h"

namespace reshard {
namespace {

Spec one_tensor(const std::string& dtype, const std::string& src, const std::string& dst,
                const std::string& shape = "[7, 10]") {
  return parse_spec(R"({"meshes": {"m": {"axis_names": ["a", "b"], "shape": [2, 3]},
                                   "n": {"axis_names": ["c"], "shape": [4], "devices": [6, 7, 8, 9]}},
                        "tensors": [{"name": "t", "shape": )" +
                    shape + R"(, "dtype": ")" + dtype + R"(", "src": )" + src + R"(, "dst": )" +
                    dst + "}]}");
}

// Executed: verify_plan on the engine over the local transport; not
// executed: the poisoned destinations checked as they are.
OracleReport run(const Spec& spec, bool execute = true) {
  const Plan plan = make_plan(spec.input);
  if (execute) {
    Engine engine(make_local_transport());
    return verify_plan(engine, plan, kAllProcesses, ExecuteOptions{});
  }
  OracleBuffers buffers = fill_sources(plan);
  return check_destinations(plan, buffers);
}

TEST(Oracle, NonPartialValuesAreTheGlobalIndex) {
  // Tensor 0 has no salt: an i32 element holds its row-major global index.
  const Spec spec = one_tensor("i32", R"({"mesh": "m", "spec": ["a", "b"]})", R"({"mesh": "n"})");
  const TensorSpec& t = spec.input.tensors[0];
  for (size_t e = 0; e < t.src.num_entries(); ++e) {
    const Box box = t.src.box(e);
    std::vector<std::byte> buf(static_cast<size_t>(box.volume()) * 4);
    fill_source_shard(t, 0, e, buf);
    size_t k = 0;
    for (int64_t i = box.lo[0]; i < box.hi[0]; ++i)
      for (int64_t j = box.lo[1]; j < box.hi[1]; ++j, ++k) {
        int32_t v;
        std::memcpy(&v, buf.data() + 4 * k, 4);
        EXPECT_EQ(v, i * 10 + j) << "entry " << e;
      }
  }
}

TEST(Oracle, BoolValuesAreIndexParity) {
  const Spec spec = one_tensor("bool", R"({"mesh": "m"})", R"({"mesh": "n"})", "[5]");
  const TensorSpec& t = spec.input.tensors[0];
  std::vector<std::byte> buf(5);
  fill_source_shard(t, 0, 0, buf);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(static_cast<int>(buf[i]), static_cast<int>(i % 2));
}

// Every dtype, with and without partial sources of each op, verifies.
class OracleDTypes : public ::testing::TestWithParam<const char*> {};

TEST_P(OracleDTypes, CorrectReshardPassesForEveryPartialOp) {
  const std::string dtype = GetParam();
  const char* const sources[] = {
      R"({"mesh": "m", "spec": ["a", "b"]})",
      R"({"mesh": "m", "spec": [null, "b"], "partial": {"axes": ["a"], "op": "sum"}})",
      R"({"mesh": "m", "spec": ["a", null], "partial": {"axes": ["b"], "op": "sum"}})",
      R"({"mesh": "m", "spec": [null, null], "partial": {"axes": ["a", "b"], "op": "max"}})",
      R"({"mesh": "m", "spec": ["b", null], "partial": {"axes": ["a"], "op": "min"}})",
  };
  for (const char* src : sources) {
    for (const char* dst :
         {R"({"mesh": "n", "spec": [null, "c"]})", R"({"mesh": "m", "spec": ["b", "a"]})"}) {
      const OracleReport r = run(one_tensor(dtype, src, dst));
      EXPECT_TRUE(r.ok()) << dtype << " " << src << " -> " << dst << ": " << r.mismatches
                          << " wrong, e.g. "
                          << (r.first.empty() ? "" : r.first[0].expected + " vs " + r.first[0].got);
      EXPECT_EQ(r.tensors, 1);
      EXPECT_GT(r.elements, 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, OracleDTypes,
                         ::testing::Values("f64", "f32", "f16", "bf16", "f8e4m3", "f8e5m2", "i64",
                                           "i32", "i16", "i8", "u64", "u32", "u16", "u8", "bool"));

TEST(Oracle, UnexecutedDestinationsFailEverywhere) {
  // Poisoned destinations never pass, partial sources or not.
  for (const char* src : {R"({"mesh": "m", "spec": ["a", "b"]})",
                          R"({"mesh": "m", "spec": [null, "b"], "partial": {"axes": ["a"]}})"}) {
    const OracleReport r =
        run(one_tensor("bf16", src, R"({"mesh": "n", "spec": [null, "c"]})"), false);
    EXPECT_EQ(r.mismatches, 70) << src;
    EXPECT_EQ(r.first.size(), 10u);
  }
}

TEST(Oracle, ReportsOneCorruptedElementWithDeviceAndIndex) {
  const Spec spec = one_tensor("f32", R"({"mesh": "m", "spec": ["a", "b"]})",
                               R"({"mesh": "n", "spec": [null, "c"]})");
  const Plan plan = make_plan(spec.input);
  OracleBuffers buffers = fill_sources(plan);
  execute_host(plan, buffers.views());
  // Destination entry 1 is device 7, columns [3, 6): flip element (2, 4).
  ASSERT_EQ(plan.tensors()[0].dst.device(1), 7);
  buffers.dst[0][1][(2 * 3 + 1) * 4] ^= std::byte{1};
  const OracleReport r = check_destinations(plan, buffers);
  ASSERT_EQ(r.mismatches, 1);
  EXPECT_EQ(r.first[0].tensor, "t");
  EXPECT_EQ(r.first[0].device, 7);
  EXPECT_EQ(r.first[0].index, (std::vector<int64_t>{2, 4}));
  EXPECT_NE(r.first[0].expected, r.first[0].got);
}

TEST(Oracle, CatchesSwappedTensorsOfEqualShape) {
  // Two tensors with equal shapes and layouts get different values (salted),
  // so delivering one tensor's data for the other is caught.
  const Spec spec = parse_spec(R"({"meshes": {"m": {"axis_names": ["x"], "shape": [2]}},
    "tensors": [{"name": "a", "shape": [4], "dtype": "u8", "src": {"mesh": "m", "spec": ["x"]}, "dst": {"mesh": "m"}},
                {"name": "b", "shape": [4], "dtype": "u8", "src": {"mesh": "m", "spec": ["x"]}, "dst": {"mesh": "m"}}]})");
  const Plan plan = make_plan(spec.input);
  OracleBuffers buffers = fill_sources(plan);
  execute_host(plan, buffers.views());
  ASSERT_TRUE(check_destinations(plan, buffers).ok());
  std::swap(buffers.dst[0], buffers.dst[1]);
  EXPECT_EQ(check_destinations(plan, buffers).mismatches, 16);
}

TEST(Oracle, PartialDestinationIsCheckedOnTheReducedValue) {
  const Spec spec =
      one_tensor("i16", R"({"mesh": "m", "spec": [null, "b"], "partial": {"axes": ["a"]}})",
                 R"({"mesh": "m", "spec": ["a", null], "partial": {"axes": ["b"]}})");
  const Plan plan = make_plan(spec.input);
  OracleBuffers buffers = fill_sources(plan);
  execute_host(plan, buffers.views());
  ASSERT_TRUE(check_destinations(plan, buffers).ok());
  // Adding 1 to one summand changes the reduced value at that element.
  int16_t v;
  std::memcpy(&v, buffers.dst[0][0].data(), 2);
  ++v;
  std::memcpy(buffers.dst[0][0].data(), &v, 2);
  const OracleReport r = check_destinations(plan, buffers);
  ASSERT_EQ(r.mismatches, 1);
  EXPECT_EQ(r.first[0].device, -1);
  EXPECT_EQ(r.first[0].index, (std::vector<int64_t>{0, 0}));
}

TEST(Oracle, BufferSizesAreChecked) {
  const Spec spec = one_tensor("f32", R"({"mesh": "m", "spec": ["a", "b"]})", R"({"mesh": "n"})");
  const TensorSpec& t = spec.input.tensors[0];
  std::vector<std::byte> wrong(3);
  EXPECT_THROW(fill_source_shard(t, 0, 0, wrong), Error);
  EXPECT_THROW(fill_source_shard(t, 0, 99, wrong), Error);
  OracleReport report;
  const Spec partial =
      one_tensor("f32", R"({"mesh": "m"})", R"({"mesh": "m", "partial": {"axes": ["a"]}})");
  try {
    check_destination_shard(partial.input.tensors[0], 0, 0, wrong, report);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

// The shards are sized before anything is allocated: above the limit the
// oracle refuses (kResourceExhausted naming the sizes) instead of letting
// the kernel kill the process while it fills them.
TEST(Oracle, ShardsAboveTheLimitAreRefused) {
  const Spec spec = one_tensor("f32", R"({"mesh": "m", "spec": ["a", "b"]})", R"({"mesh": "n"})");
  const Plan plan = make_plan(spec.input);
  // 7 x 10 f32 elements, once as the source shards and four times (replicated) at the destination.
  const int64_t need = 7 * 10 * 4 * 5;
  EXPECT_EQ(oracle_buffer_bytes(plan), need);
  EXPECT_NO_THROW((void)fill_sources(plan, need));
  EXPECT_NO_THROW((void)fill_sources(plan, kUnlimitedPlanBytes));
  try {
    (void)fill_sources(plan, need - 1);
    ADD_FAILURE() << "allocated above the limit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("need " + std::to_string(need) +
                                         " bytes of memory, above the limit of " +
                                         std::to_string(need - 1) + " bytes"),
              std::string::npos)
        << e.what();
  }
  try {
    (void)fill_sources(plan, -2);
    ADD_FAILURE() << "accepted max_bytes = -2";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("max_bytes: -2"), std::string::npos) << e.what();
  }
  // A tensor of 2^50 bytes: refused under the default limit (half the memory).
  const Spec huge = one_tensor("u8", R"({"mesh": "m"})", R"({"mesh": "m"})", "[1125899906842624]");
  try {
    (void)fill_sources(make_plan(huge.input));
    ADD_FAILURE() << "allocated 2^50 bytes per device";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.what();
    EXPECT_NE(std::string(e.what()).find("(half the memory available)"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace reshard
