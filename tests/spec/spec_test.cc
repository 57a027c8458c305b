// JSON spec files (reshard/spec.h): good files parse into the layouts they
// describe; every bad input is an Error with the right code whose message
// starts with the JSON path of the offending value.
#include "reshard/spec.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reshard/error.h"
#include "reshard/exec.h"
#include "reshard/oracle.h"

namespace reshard {
namespace {

const char* const kDesignExample = R"({
  "meshes": {
    "train": {"axis_names": ["dp", "tp"], "shape": [4, 2],
              "devices": [0,1,2,3,4,5,6,7], "processes": [0,0,0,0,1,1,1,1]},
    "infer": {"axis_names": ["tp"], "shape": [8], "devices": [8,9,10,11,12,13,14,15]}
  },
  "tensors": [
    {"name": "layers.0.mlp.w1", "shape": [4096, 11008], "dtype": "bf16",
     "src": {"mesh": "train", "spec": ["dp", "tp"]},
     "dst": {"mesh": "infer", "spec": [null, "tp"]}}
  ]
})";

// A minimal valid spec with `tensor` as its only tensor's body.
std::string with_tensor(const std::string& tensor) {
  return R"({"meshes": {"train": {"axis_names": ["dp", "tp"], "shape": [2, 2]},
                        "infer": {"axis_names": ["tp"], "shape": [4], "devices": [4, 5, 6, 7]}},
             "tensors": [)" +
         tensor + "]}";
}

// Expects parse_spec(text) to fail with `code` and a message starting with `prefix`.
void expect_error(const std::string& text, ErrorCode code, const std::string& prefix,
                  const std::string& also_contains = "") {
  try {
    parse_spec(text);
    ADD_FAILURE() << "no error; expected one starting with " << prefix;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_EQ(std::string(e.what()).substr(0, prefix.size()), prefix) << e.what();
    if (!also_contains.empty()) {
      EXPECT_NE(std::string(e.what()).find(also_contains), std::string::npos) << e.what();
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a reshard::Error: " << e.what();
  }
}

// ---------------------------------------------------------------- good files

TEST(SpecParse, DesignExampleBuildsMeshesTopologyAndLayouts) {
  const Spec spec = parse_spec(kDesignExample);
  ASSERT_EQ(spec.meshes.size(), 2u);
  const Mesh& train = *spec.meshes.at("train");
  EXPECT_EQ(train.axis_names, (std::vector<std::string>{"dp", "tp"}));
  EXPECT_EQ(train.shape, (std::vector<int64_t>{4, 2}));
  ASSERT_EQ(spec.input.tensors.size(), 1u);
  const TensorSpec& t = spec.input.tensors[0];
  EXPECT_EQ(t.name, "layers.0.mlp.w1");
  EXPECT_EQ(t.dtype, DType::kBF16);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{4096, 11008}));

  NamedSharding src{spec.meshes.at("train"), {{"dp"}, {"tp"}}, {}, ReduceOp::kSum};
  NamedSharding dst{spec.meshes.at("infer"), {{}, {"tp"}}, {}, ReduceOp::kSum};
  EXPECT_TRUE(t.src == Layout::from_named(src, t.shape, "src"));
  EXPECT_TRUE(t.dst == Layout::from_named(dst, t.shape, "dst"));

  // processes as given; hosts default to processes; unlisted processes are 0.
  const Topology& topo = spec.input.topology;
  EXPECT_EQ(topo.info(5).process, 1);
  EXPECT_EQ(topo.info(5).host, 1);
  EXPECT_EQ(topo.info(2).process, 0);
  EXPECT_EQ(topo.info(12).process, 0);
  EXPECT_EQ(topo.devices().size(), 16u);
  EXPECT_EQ(spec.input.options, PlanOptions{});
}

TEST(SpecParse, DefaultsDevicesProcessesAndOrdinalsPerHost) {
  const Spec spec = parse_spec(R"({
    "meshes": {"m": {"axis_names": ["x"], "shape": [4], "hosts": [0, 0, 1, 1]}},
    "tensors": [{"name": "t", "shape": [8], "dtype": "f32",
                 "src": {"mesh": "m", "spec": ["x"]}, "dst": {"mesh": "m"}}]})");
  EXPECT_EQ(spec.meshes.at("m")->devices, (std::vector<int64_t>{0, 1, 2, 3}));
  const Topology& topo = spec.input.topology;
  EXPECT_EQ(topo.info(3).process, 0);
  EXPECT_EQ(topo.info(3).host, 1);
  // Ordinal: position among the devices of the same host.
  EXPECT_EQ(topo.info(0).ordinal, 0);
  EXPECT_EQ(topo.info(1).ordinal, 1);
  EXPECT_EQ(topo.info(2).ordinal, 0);
  EXPECT_EQ(topo.info(3).ordinal, 1);
  // No spec: replicated on every device.
  const Layout& dst = spec.input.tensors[0].dst;
  ASSERT_EQ(dst.num_entries(), 4u);
  for (size_t e = 0; e < 4; ++e) EXPECT_EQ(dst.box(e), dst.full_box());
}

TEST(SpecParse, ExplicitOrdinalsAndSharedDevicesInheritProcesses) {
  const Spec spec = parse_spec(R"({
    "meshes": {"a": {"axis_names": ["x"], "shape": [2], "devices": [0, 1], "processes": [3, 4],
                     "ordinals": [7, 7]},
               "b": {"axis_names": ["y"], "shape": [2], "devices": [1, 0]}},
    "tensors": [{"name": "t", "shape": [4], "dtype": "i8",
                 "src": {"mesh": "a", "spec": ["x"]}, "dst": {"mesh": "b", "spec": ["y"]}}]})");
  EXPECT_EQ(spec.input.topology.info(0).process, 3);
  EXPECT_EQ(spec.input.topology.info(1).process, 4);
  EXPECT_EQ(spec.input.topology.info(1).host, 4);
  EXPECT_EQ(spec.input.topology.info(1).ordinal, 7);
}

TEST(SpecParse, MultiAxisDimsPartialAndOptions) {
  const Spec spec = parse_spec(R"({
    "meshes": {"m": {"axis_names": ["dp", "tp", "pp"], "shape": [2, 2, 2]}},
    "options": {"split_min_bytes": 4096, "alpha_seconds": 1e-5, "intra_host_bytes_per_second": 2e11,
                "inter_host_bytes_per_second": 5e10, "staging_budget_bytes": 1048576},
    "tensors": [{"name": "g", "shape": [16, 6], "dtype": "f32",
                 "src": {"mesh": "m", "spec": [["tp", "dp"], null], "partial": {"axes": ["pp"], "op": "max"}},
                 "dst": {"mesh": "m", "spec": [null, "tp"], "partial": {"axes": "dp"}}}]})");
  const TensorSpec& t = spec.input.tensors[0];
  EXPECT_EQ(t.src.num_summands(), 2);
  EXPECT_EQ(t.src.reduce_op(), ReduceOp::kMax);
  EXPECT_EQ(t.src.split(0).k, 4);
  EXPECT_EQ(t.dst.num_summands(), 2);
  EXPECT_EQ(t.dst.reduce_op(), ReduceOp::kSum);
  EXPECT_EQ(spec.input.options.split_min_bytes, 4096);
  EXPECT_DOUBLE_EQ(spec.input.options.alpha_seconds, 1e-5);
  EXPECT_DOUBLE_EQ(spec.input.options.intra_host_bytes_per_second, 2e11);
  EXPECT_DOUBLE_EQ(spec.input.options.inter_host_bytes_per_second, 5e10);
  EXPECT_EQ(spec.input.options.staging_budget_bytes, 1048576);
}

TEST(SpecParse, BoxLayoutsWithDefaultsAndSummands) {
  const Spec spec = parse_spec(R"({
    "tensors": [{"name": "t", "shape": [4, 8], "dtype": "u16",
                 "src": {"summands": 2, "op": "min",
                         "boxes": [{"device": 3, "summand": 1}, {"device": 1, "lo": [0, 0], "hi": [4, 8]}]},
                 "dst": {"boxes": [{"device": 2, "lo": [1, 2], "hi": [3, 8]}]}}]})");
  EXPECT_TRUE(spec.meshes.empty());
  const TensorSpec& t = spec.input.tensors[0];
  ASSERT_EQ(t.src.num_entries(), 2u);
  EXPECT_EQ(t.src.device(0), 1);  // sorted by device
  EXPECT_EQ(t.src.summand(0), 0);
  EXPECT_EQ(t.src.device(1), 3);
  EXPECT_EQ(t.src.summand(1), 1);
  EXPECT_EQ(t.src.box(1), t.src.full_box());
  EXPECT_EQ(t.src.reduce_op(), ReduceOp::kMin);
  EXPECT_EQ(to_string(t.dst.box(0)), to_string(Box{2, {1, 2}, {3, 8}}));
}

TEST(SpecParse, IntegralFloatsAreIntegersAndScalarsWork) {
  const Spec spec = parse_spec(R"({
    "meshes": {"m": {"axis_names": [], "shape": []}},
    "tensors": [{"name": "w", "shape": [4096.0, 1e1], "dtype": "float32",
                 "src": {"mesh": "m", "spec": [null, null]}, "dst": {"mesh": "m", "spec": [null, null]}},
                {"name": "s", "shape": [], "dtype": "bool", "src": {"mesh": "m", "spec": []},
                 "dst": {"boxes": [{"device": 0}]}}]})");
  EXPECT_EQ(spec.input.tensors[0].shape, (std::vector<int64_t>{4096, 10}));
  EXPECT_EQ(spec.meshes.at("m")->devices, (std::vector<int64_t>{0}));
  EXPECT_EQ(spec.input.tensors[1].src.num_entries(), 1u);
  EXPECT_EQ(spec.input.tensors[1].dst.box(0).rank, 0);
}

TEST(SpecParse, ExampleFilesParse) {
  for (const char* name :
       {"small_transformer", "partial_sums", "explicit_boxes", "flat_layouts", "fused_views"}) {
    const std::string path = std::string(RESHARD_SOURCE_DIR) + "/examples/specs/" + name + ".json";
    const Spec spec = load_spec(path);
    EXPECT_FALSE(spec.input.tensors.empty()) << path;
  }
  const Spec st =
      load_spec(std::string(RESHARD_SOURCE_DIR) + "/examples/specs/small_transformer.json");
  EXPECT_EQ(st.input.tensors.size(), 39u);
  EXPECT_EQ(st.input.topology.info(9).process, 2);
}

TEST(SpecParse, ShortSpecsLeaveTrailingDimsUnsharded) {
  // JAX: PartitionSpec("dp") on a rank-3 array; PartitionSpec() replicates.
  const Spec spec = parse_spec(with_tensor(R"({"name": "w", "shape": [8, 6, 4], "dtype": "f32",
      "src": {"mesh": "train", "spec": ["dp"]}, "dst": {"mesh": "train", "spec": []}},
      {"name": "v", "shape": [8, 6, 4], "dtype": "f32",
      "src": {"mesh": "train", "spec": [null, ["tp", "dp"]]}, "dst": {"mesh": "train"}})"));
  const auto& train = spec.meshes.at("train");
  const std::vector<int64_t> shape{8, 6, 4};
  const TensorSpec& w = spec.input.tensors[0];
  EXPECT_TRUE(
      w.src ==
      Layout::from_named(NamedSharding{train, {{"dp"}, {}, {}}, {}, ReduceOp::kSum}, shape, "src"));
  EXPECT_EQ(w.src.split(0).k, 2);
  EXPECT_EQ(w.src.split(1).k, 1);
  EXPECT_EQ(w.src.split(2).k, 1);
  const Layout replicated =
      Layout::from_named(NamedSharding{train, {{}, {}, {}}, {}, ReduceOp::kSum}, shape, "dst");
  EXPECT_TRUE(w.dst == replicated);
  EXPECT_TRUE(spec.input.tensors[1].dst == replicated);  // no "spec" at all
  EXPECT_TRUE(spec.input.tensors[1].src ==
              Layout::from_named(NamedSharding{train, {{}, {"tp", "dp"}, {}}, {}, ReduceOp::kSum},
                                 shape, "src"));
}

TEST(SpecParse, RecordsWhichMeshesDefaultedTheirHosts) {
  // Neither mesh of the design example gives hosts: each process is a host.
  EXPECT_EQ(parse_spec(kDesignExample).hosts_defaulted,
            (std::vector<std::string>{"infer", "train"}));
  // "b" gives none but shares every device with "a", which does; "c" has a
  // device (4) no mesh gives a host for.
  const Spec spec = parse_spec(R"({
    "meshes": {"a": {"axis_names": ["x"], "shape": [4], "processes": [0, 1, 2, 3], "hosts": [0, 0, 1, 1]},
               "b": {"axis_names": ["y"], "shape": [2], "devices": [3, 1]},
               "c": {"axis_names": ["z"], "shape": [2], "devices": [0, 4], "processes": [0, 4]}},
    "tensors": [{"name": "t", "shape": [8], "dtype": "f32",
                 "src": {"mesh": "a", "spec": ["x"]}, "dst": {"mesh": "c", "spec": ["z"]}}]})");
  EXPECT_EQ(spec.hosts_defaulted, (std::vector<std::string>{"c"}));
  EXPECT_EQ(spec.input.topology.info(4).host, 4);  // its process
  EXPECT_EQ(spec.input.topology.info(3).host, 1);
  // Box layouts only: no mesh, nothing to report.
  EXPECT_TRUE(parse_spec(R"({"tensors": [{"name": "t", "shape": [2], "dtype": "f32",
      "src": {"boxes": [{"device": 0}]}, "dst": {"boxes": [{"device": 1}]}}]})")
                  .hosts_defaulted.empty());
}

TEST(SpecParse, SchemaKeyIsIgnored) {
  const Spec spec = parse_spec(R"({"$schema": "../schema/spec.schema.json",
      "tensors": [{"name": "t", "shape": [2], "dtype": "f32",
                   "src": {"boxes": [{"device": 0}]}, "dst": {"boxes": [{"device": 1}]}}]})");
  EXPECT_EQ(spec.input.tensors.size(), 1u);
  expect_error(R"({"$schema": 1, "tensors": []})", ErrorCode::kInvalidArgument,
               "[\"$schema\"]: expected a string");
}

TEST(SpecParse, DeterministicAcrossParses) {
  const Spec a = parse_spec(kDesignExample), b = parse_spec(kDesignExample);
  EXPECT_EQ(plan_fingerprint(a.input), plan_fingerprint(b.input));
}

// ---------------------------------------------------------------- shared cases

// tests/spec/spec_cases.json: good and bad specs that schema_test.py also
// feeds to schema/spec.schema.json.
struct SpecCase {
  std::string name, text, code, message, also;
};

std::vector<SpecCase> load_cases(const char* kind) {
  const std::string path = std::string(RESHARD_SOURCE_DIR) + "/tests/spec/spec_cases.json";
  std::ifstream in(path);
  std::vector<SpecCase> cases;
  if (!in) return {{"unreadable_case_file", "", "", path, ""}};
  const nlohmann::json doc = nlohmann::json::parse(in);
  for (const auto& c : doc.at(kind)) {
    SpecCase sc;
    sc.name = c.at("name").get<std::string>();
    if (c.contains("text")) {
      sc.text = c.at("text").get<std::string>();
    } else if (c.contains("spec")) {
      sc.text = c.at("spec").dump();
    } else {
      nlohmann::json spec = doc.at("base");
      spec.update(c.at("patch"));  // top-level keys replaced
      sc.text = spec.dump();
    }
    sc.code = c.value("code", "");
    sc.message = c.value("message", "");
    sc.also = c.value("also", "");
    cases.push_back(std::move(sc));
  }
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<SpecCase>& info) { return info.param.name; }
// What ctest shows next to a case (instead of the struct's bytes).
void PrintTo(const SpecCase& c, std::ostream* os) { *os << c.name; }

class GoodSpec : public ::testing::TestWithParam<SpecCase> {};
TEST_P(GoodSpec, Parses) {
  ASSERT_TRUE(GetParam().code.empty()) << GetParam().message;
  EXPECT_NO_THROW(parse_spec(GetParam().text)) << GetParam().text;
}
INSTANTIATE_TEST_SUITE_P(Cases, GoodSpec, ::testing::ValuesIn(load_cases("good")), case_name);

class BadSpec : public ::testing::TestWithParam<SpecCase> {};
TEST_P(BadSpec, IsAnErrorNamingTheField) {
  const SpecCase& c = GetParam();
  try {
    parse_spec(c.text);
    ADD_FAILURE() << "no error; expected one starting with " << c.message;
  } catch (const Error& e) {
    EXPECT_EQ(error_code_name(e.code()), c.code) << e.what();
    EXPECT_EQ(std::string(e.what()).substr(0, c.message.size()), c.message) << e.what();
    // Past the JSON syntax, every error names its field as a structured
    // path too (Error::field()), the message's text before ": ".
    if (e.code() != ErrorCode::kParse) {
      EXPECT_FALSE(e.field().empty()) << e.what();
      EXPECT_EQ(std::string(e.field()) + ": " + std::string(e.detail()), e.what());
    }
    if (!c.also.empty()) {
      EXPECT_NE(std::string(e.what()).find(c.also), std::string::npos) << e.what();
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a reshard::Error: " << e.what();
  }
}
INSTANTIATE_TEST_SUITE_P(Cases, BadSpec, ::testing::ValuesIn(load_cases("bad")), case_name);

// ---------------------------------------------------------------- bad files

TEST(SpecErrors, LoadSpecNamesTheFile) {
  try {
    load_spec("/nonexistent/spec.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()).rfind("/nonexistent/spec.json: ", 0), 0u) << e.what();
  }
  const std::string path = ::testing::TempDir() + "reshard_bad_spec.json";
  {
    std::ofstream out(path);
    out << "{\"tensors\": [\n  {\"name\": }\n]}";
  }
  try {
    load_spec(path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kParse);
    EXPECT_EQ(std::string(e.what()).rfind(path + ": line 2, column ", 0), 0u) << e.what();
  }
  std::remove(path.c_str());
}

// ---------------------------------------------------------------- flat layouts

// A spec with flat layouts (docs/spec.md, Flat layouts) around `tensors`.
std::string with_flat(const std::string& flat, const std::string& tensors) {
  return R"({"meshes": {"fsdp": {"axis_names": ["dp"], "shape": [2], "processes": [0, 1]},
                        "tp": {"axis_names": ["tp"], "shape": [2], "devices": [4, 5],
                               "processes": [2, 2]}},
             "flat": )" +
         flat + R"(, "tensors": [)" + tensors + "]}";
}

TEST(SpecParse, FlatLayoutsLowerInTensorOrderWithSlotDevices) {
  const Spec spec = parse_spec(
      with_flat(R"({"unit": {"mesh": "fsdp", "align_elements": 4}})",
                R"({"name": "w", "shape": [3, 4], "dtype": "f32", "src": {"flat": "unit"},
          "dst": {"mesh": "tp", "spec": ["tp"]}},
         {"name": "x", "shape": [2], "dtype": "f32", "src": {"mesh": "tp"}, "dst": {"mesh": "tp"}},
         {"name": "b", "shape": [5], "dtype": "f32", "src": {"flat": "unit"},
          "dst": {"mesh": "tp"}})"));
  ASSERT_EQ(spec.flats.size(), 1u);
  const SpecFlat& f = spec.flats[0];
  EXPECT_EQ(f.name, "unit");
  EXPECT_TRUE(f.source);
  EXPECT_EQ(f.tensors, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(f.lowered.tensor_offsets, (std::vector<int64_t>{0, 12}));
  EXPECT_EQ(f.lowered.shard_elements, 9);
  EXPECT_TRUE(spec.input.tensors[0].src == f.lowered.layouts[0]);
  EXPECT_TRUE(spec.input.tensors[2].src == f.lowered.layouts[1]);
  // w[2, 0:1] is rank 0's second box: a slot device on device 0's process.
  EXPECT_EQ(spec.input.tensors[0].src.num_entries(), 3u);
  EXPECT_EQ(spec.input.topology.info(1 + kFlatSlotStride).device, 1 + kFlatSlotStride);
  EXPECT_FALSE(spec.input.topology.contains(1 + kFlatSlotStride));
  EXPECT_EQ(spec.input.topology.info(kFlatSlotStride).process, 0);
  EXPECT_TRUE(spec.input.topology.contains(kFlatSlotStride));
  // Plans and executes like any explicit layout.
  const Plan plan = make_plan(spec.input);
  OracleBuffers buffers = fill_sources(plan);
  const std::vector<TensorBuffers> views = buffers.views();
  execute_host(plan, views);
  EXPECT_TRUE(check_destinations(plan, buffers).ok());
}

// Buffer views: vLLM's QKVParallelLinear on tp = 2 as the destination of an
// FSDP1 flat source: q [4, 3] and k [2, 3] rows over tp, a norm replicated;
// each rank's buffer [q_r; k_r; norm], aligned to 2 elements.
TEST(SpecParse, FusedFlatLayoutMembersKeepTheirShardings) {
  const Spec spec = parse_spec(with_flat(
      R"({"unit": {"mesh": "fsdp"}, "qkv": {"mesh": "tp", "partition": "fused",
                                           "align_elements": 2}})",
      R"({"name": "q", "shape": [4, 3], "dtype": "f32", "src": {"flat": "unit"},
          "dst": {"flat": "qkv", "spec": ["tp", null]}},
         {"name": "k", "shape": [2, 3], "dtype": "f32", "src": {"flat": "unit"},
          "dst": {"flat": "qkv", "mesh": "tp", "spec": ["tp"]}},
         {"name": "norm", "shape": [3], "dtype": "f32", "src": {"flat": "unit"},
          "dst": {"flat": "qkv"}})"));
  ASSERT_EQ(spec.flats.size(), 2u);
  const SpecFlat& f = spec.flats[0];  // name order: qkv, unit
  EXPECT_EQ(f.name, "qkv");
  EXPECT_FALSE(f.source);
  EXPECT_EQ(f.layout.partition, FlatPartition::kFused);
  EXPECT_EQ(f.lowered.tensor_offsets, (std::vector<int64_t>{0, 6, 10}));
  EXPECT_EQ(f.lowered.shard_elements, 13);
  EXPECT_EQ(to_string(spec.input.tensors[1].dst.box(1)), "[1:2, 0:3]");
  EXPECT_EQ(spec.input.tensors[1].dst.device(1), 5);
  EXPECT_EQ(spec.input.tensors[2].dst.num_entries(), 2u);  // replicated
  // Plans and executes like any named layout.
  const Plan plan = make_plan(spec.input);
  OracleBuffers buffers = fill_sources(plan);
  execute_host(plan, buffers.views());
  EXPECT_TRUE(check_destinations(plan, buffers).ok());
  // Explicit boxes (vLLM's padded vocabulary) and explicit offsets.
  const Spec boxes = parse_spec(
      with_flat(R"({"v": {"devices": [4, 5], "partition": "fused"}})",
                R"({"name": "embed", "shape": [5, 2], "dtype": "f32", "src": {"mesh": "fsdp"},
          "dst": {"flat": "v", "offset": 2, "boxes": [{"device": 4, "hi": [4, 2]},
                                                      {"device": 5, "lo": [4, 0]}]}})"));
  EXPECT_EQ(boxes.flats[0].lowered.shard_elements, 10);
  EXPECT_EQ(boxes.flats[0].lowered.entry_offsets[0], (std::vector<int64_t>{8, 8}));
}

// examples/specs/fused_views.json: each vLLM rank's fused buffer has the
// size of vLLM's parameter on a tp rank of 2 (bf16): qkv_proj [48, 64]
// (q 32 rows, k and v 8), gate_up_proj [128, 64], embed_tokens [512, 64].
TEST(SpecParse, FusedExampleHasVllmParameterSizes) {
  const Spec spec = load_spec(std::string(RESHARD_SOURCE_DIR) + "/examples/specs/fused_views.json");
  std::map<std::string, const SpecFlat*> by_name;
  for (const SpecFlat& f : spec.flats) by_name[f.name] = &f;
  ASSERT_EQ(by_name.size(), 5u);
  EXPECT_EQ(by_name.at("qkv_proj")->lowered.shard_bytes, 48 * 64 * 2);
  EXPECT_EQ(by_name.at("qkv_proj")->lowered.tensor_offsets, (std::vector<int64_t>{0, 2048, 2560}));
  EXPECT_EQ(by_name.at("gate_up_proj")->lowered.shard_bytes, 128 * 64 * 2);
  EXPECT_EQ(by_name.at("embed_tokens")->lowered.shard_bytes, 512 * 64 * 2);
  EXPECT_FALSE(by_name.at("qkv_proj")->source);
  EXPECT_TRUE(by_name.at("block0")->source);
}

TEST(SpecParse, FusedFlatLayoutErrorsNameTheirField) {
  const std::string fused = R"({"u": {"mesh": "tp", "partition": "fused"}})";
  auto member = [](const std::string& dst) {
    return R"({"name": "q", "shape": [4, 3], "dtype": "f32", "src": {"mesh": "fsdp"}, "dst": )" +
           dst + "}";
  };
  expect_error(with_flat(fused, member(R"({"flat": "u", "mesh": "fsdp", "spec": ["dp"]})")),
               ErrorCode::kInvalidArgument,
               "tensors[0].dst.mesh: mesh \"fsdp\" is not fused flat layout \"u\"'s mesh \"tp\"");
  expect_error(
      with_flat(fused, member(R"({"flat": "u", "spec": ["tp"], "partial": {"axes": "tp"}})")),
      ErrorCode::kInvalidArgument, "tensors[0].dst.partial: a member of fused flat layout",
      "partial sums are not supported");
  expect_error(with_flat(fused, member(R"({"flat": "u", "boxes": [{"device": 4}],
                                           "summands": 2})")),
               ErrorCode::kInvalidArgument, "tensors[0].dst.summands: a member of fused");
  expect_error(with_flat(fused, member(R"({"flat": "u", "spec": ["dp"]})")),
               ErrorCode::kInvalidArgument, "tensors[0].dst.spec[0]: unknown axis \"dp\"");
  expect_error(with_flat(fused, member(R"({"flat": "u", "spec": ["tp"], "boxes": []})")),
               ErrorCode::kInvalidArgument, "tensors[0].dst: give either");
  expect_error(with_flat(fused, member(R"({"flat": "u", "sepc": ["tp"]})")),
               ErrorCode::kInvalidArgument, "tensors[0].dst.sepc: unknown key");
  expect_error(with_flat(fused, member(R"({"flat": "u", "boxes": [{"device": 0}]})")),
               ErrorCode::kInvalidArgument,
               "tensors[0].dst: device 0 is not one of flat.u's devices");
  expect_error(with_flat(R"({"u": {"devices": [4, 5], "partition": "fused"}})",
                         member(R"({"flat": "u", "spec": ["tp"]})")),
               ErrorCode::kInvalidArgument, "tensors[0].dst: fused flat layout \"u\" gives");
  expect_error(with_flat(R"({"u": {"mesh": "tp"}})", member(R"({"flat": "u", "spec": ["tp"]})")),
               ErrorCode::kInvalidArgument,
               "tensors[0].dst.spec: only a member of a fused flat layout has its own layout "
               "(flat layout \"u\" is concat)");
  expect_error(with_flat(R"({"u": {"mesh": "tp", "partition": "fused", "total_elements": 8}})",
                         member(R"({"flat": "u"})")),
               ErrorCode::kInvalidArgument,
               "flat.u.total_elements: an explicit total is for the concat");
  // Offsets: aligned, past the previous member's largest box; one dtype.
  const std::string k_at = R"(, {"name": "k", "shape": [2, 3], "dtype": "f32",
                               "src": {"mesh": "fsdp"}, "dst": {"flat": "u", "spec": ["tp"],
                               "offset": )";
  expect_error(
      with_flat(fused, member(R"({"flat": "u", "spec": ["tp"], "offset": 0})") + k_at + "4}}"),
      ErrorCode::kInvalidArgument,
      "tensors[1].dst.offset: tensor 1 at 4 overlaps tensor 0, whose largest box ends at 6");
  expect_error(with_flat(R"({"u": {"mesh": "tp", "partition": "fused", "align_elements": 4}})",
                         member(R"({"flat": "u", "spec": ["tp"], "offset": 0})") + k_at + "6}}"),
               ErrorCode::kInvalidArgument,
               "tensors[1].dst.offset: 6 is not a multiple of align_elements (4)");
  expect_error(with_flat(fused, member(R"({"flat": "u", "spec": ["tp"]})") +
                                    R"(, {"name": "k", "shape": [2, 3], "dtype": "bf16",
                                         "src": {"mesh": "fsdp"}, "dst": {"flat": "u"}})"),
               ErrorCode::kInvalidArgument, "tensors[1].dtype: bf16 in flat layout \"u\" of f32");
}

TEST(SpecParse, FlatLayoutErrorsNameTheirField) {
  const std::string w = R"({"name": "w", "shape": [3, 4], "dtype": "f32", "src": {"flat": "u"},
                           "dst": {"mesh": "tp"}})";
  expect_error(with_flat(R"({"u": {"mesh": "fsdp", "align_elements": 0}})", w),
               ErrorCode::kInvalidArgument, "flat.u.align_elements: 0 must be at least 1");
  expect_error(with_flat(R"({"u": {"mesh": "fsdp", "pad_multiple": 0}})", w),
               ErrorCode::kInvalidArgument, "flat.u.pad_multiple:");
  expect_error(with_flat(R"({"u": {"mesh": "nope"}})", w), ErrorCode::kInvalidArgument,
               "flat.u.mesh: unknown mesh \"nope\"");
  expect_error(with_flat(R"({"u": {"mesh": "fsdp", "devices": [0]}})", w),
               ErrorCode::kInvalidArgument, "flat.u: give either");
  expect_error(with_flat(R"({"u": {"devices": [3, 3]}})", w), ErrorCode::kInvalidArgument,
               "flat.u.devices[1]: device 3 appears twice");
  expect_error(with_flat(R"({"u": {"mesh": "fsdp", "partition": "zero3"}})", w),
               ErrorCode::kInvalidArgument, "flat.u.partition: unknown partition \"zero3\"");
  expect_error(with_flat(R"({"u": {"mesh": "fsdp", "algin_elements": 2}})", w),
               ErrorCode::kInvalidArgument, "flat.u.algin_elements: unknown key",
               "did you mean \"align_elements\"");
  expect_error(with_flat(R"({"v": {"mesh": "fsdp"}})", w), ErrorCode::kInvalidArgument,
               "tensors[0].src.flat: unknown flat layout \"u\"");
  // One side only; one dtype; offsets for all or none, aligned, not overlapping.
  expect_error(
      with_flat(R"({"u": {"mesh": "fsdp"}})", w + R"(, {"name": "b", "shape": [5], "dtype": "f32",
                                   "src": {"mesh": "tp"}, "dst": {"flat": "u"}})"),
      ErrorCode::kInvalidArgument, "tensors[1].dst.flat: flat layout \"u\" is the source");
  expect_error(
      with_flat(R"({"u": {"mesh": "fsdp"}})", w + R"(, {"name": "b", "shape": [5], "dtype": "bf16",
                                   "src": {"flat": "u"}, "dst": {"mesh": "tp"}})"),
      ErrorCode::kInvalidArgument, "tensors[1].dtype: bf16 in flat layout \"u\" of f32");
  const std::string w_at = R"({"name": "w", "shape": [3, 4], "dtype": "f32",
                              "src": {"flat": "u", "offset": 0}, "dst": {"mesh": "tp"}})";
  expect_error(with_flat(R"({"u": {"mesh": "fsdp"}})",
                         w_at + R"(, {"name": "b", "shape": [5], "dtype": "f32",
                                      "src": {"flat": "u"}, "dst": {"mesh": "tp"}})"),
               ErrorCode::kInvalidArgument, "tensors[1].src: give \"offset\" for every tensor");
  expect_error(with_flat(R"({"u": {"mesh": "fsdp"}})",
                         w_at + R"(, {"name": "b", "shape": [5], "dtype": "f32",
                                      "src": {"flat": "u", "offset": 10}, "dst": {"mesh": "tp"}})"),
               ErrorCode::kInvalidArgument, "tensors[1].src.offset: tensor 1 at 10 overlaps");
  expect_error(with_flat(R"({"u": {"mesh": "fsdp", "align_elements": 8}})",
                         w_at + R"(, {"name": "b", "shape": [5], "dtype": "f32",
                                      "src": {"flat": "u", "offset": 12}, "dst": {"mesh": "tp"}})"),
               ErrorCode::kInvalidArgument,
               "tensors[1].src.offset: 12 is not a multiple of align_elements (8)");
  expect_error(with_flat(R"({"u": {"mesh": "fsdp", "total_elements": 10}})", w),
               ErrorCode::kOutOfRange, "flat.u.total_elements: 10 is below the end");
  expect_error(with_flat(R"({"u": {"mesh": "fsdp", "total_elements": 13}})", w),
               ErrorCode::kInvalidArgument,
               "flat.u.total_elements: 13 is not a multiple of the world size 2");
  expect_error(with_flat(R"({"u": {"devices": [0, 1099511627776]}})", w), ErrorCode::kOutOfRange,
               "flat.u.devices[1]: device id 1099511627776 is at or above 2^40");
  expect_error(
      with_flat(R"({"u": {"mesh": "fsdp"}})", w + R"(, {"name": "b", "shape": [5], "dtype": "f32",
                                   "src": {"boxes": [{"device": 1099511627777}]},
                                   "dst": {"mesh": "tp"}})"),
      ErrorCode::kOutOfRange, "tensors[1].src: device id 1099511627777 is at or above");
  expect_error(with_flat(R"({"u": {"mesh": "fsdp"}})",
                         R"({"name": "w", "shape": [3], "dtype": "f32",
                             "src": {"flat": "u", "ofset": 1}, "dst": {"mesh": "tp"}})"),
               ErrorCode::kInvalidArgument, "tensors[0].src.ofset: unknown key");
}

}  // namespace
}  // namespace reshard
