// JSON spec files (reshard/spec.h): good files parse into the layouts they
// describe; every bad input is an Error with the right code whose message
// starts with the JSON path of the offending value.
#include "reshard/spec.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "reshard/error.h"

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
  for (const char* name : {"small_transformer", "partial_sums", "explicit_boxes"}) {
    const std::string path = std::string(RESHARD_SOURCE_DIR) + "/examples/specs/" + name + ".json";
    const Spec spec = load_spec(path);
    EXPECT_FALSE(spec.input.tensors.empty()) << path;
  }
  const Spec st =
      load_spec(std::string(RESHARD_SOURCE_DIR) + "/examples/specs/small_transformer.json");
  EXPECT_EQ(st.input.tensors.size(), 39u);
  EXPECT_EQ(st.input.topology.info(9).process, 2);
}

TEST(SpecParse, DeterministicAcrossParses) {
  const Spec a = parse_spec(kDesignExample), b = parse_spec(kDesignExample);
  EXPECT_EQ(plan_fingerprint(a.input), plan_fingerprint(b.input));
}

// ---------------------------------------------------------------- bad files

TEST(SpecErrors, MalformedJsonGivesLineAndColumn) {
  expect_error("{\n  \"meshes\": {,\n}", ErrorCode::kParse, "line 2, column 14: ");
  expect_error("", ErrorCode::kParse, "line 1, column 1: ");
  expect_error("{\"tensors\": []} extra", ErrorCode::kParse, "line 1, column ");
}

TEST(SpecErrors, RootMustBeAnObjectWithTensors) {
  expect_error("[]", ErrorCode::kInvalidArgument, "(root): expected an object");
  expect_error("{}", ErrorCode::kInvalidArgument, "(root): missing required key \"tensors\"");
  expect_error(R"({"tensors": {}})", ErrorCode::kInvalidArgument,
               "tensors: expected an array, got an object");
  expect_error(R"({"tensors": []})", ErrorCode::kInvalidArgument, "tensors: no tensors");
}

TEST(SpecErrors, UnknownKeysAreRejectedWithASuggestion) {
  expect_error(R"({"tensor": []})", ErrorCode::kInvalidArgument, "tensor: unknown key \"tensor\"",
               "did you mean \"tensors\"");
  expect_error(R"({"meshes": {"m": {"axis_name": ["x"], "shape": [2]}}, "tensors": []})",
               ErrorCode::kInvalidArgument, "meshes.m.axis_name: unknown key", "\"axis_names\"");
  expect_error(with_tensor(R"({"name": "t", "shape": [4], "dtype": "f32", "dtpe": "f32",
                              "src": {"mesh": "train"}, "dst": {"mesh": "train"}})"),
               ErrorCode::kInvalidArgument, "tensors[0].dtpe: unknown key");
  expect_error(with_tensor(R"({"name": "t", "shape": [4], "dtype": "f32",
                              "src": {"mesh": "train", "sepc": ["dp"]}, "dst": {"mesh": "train"}})"),
               ErrorCode::kInvalidArgument, "tensors[0].src.sepc: unknown key", "\"spec\"");
  expect_error(R"({"options": {"alpha": 1}, "tensors": []})", ErrorCode::kInvalidArgument,
               "options.alpha: unknown key");
}

TEST(SpecErrors, DuplicateKeysNameTheObject) {
  expect_error(
      R"({"meshes": {"m": {"axis_names": ["x"], "shape": [2], "shape": [3]}}, "tensors": []})",
      ErrorCode::kInvalidArgument, "meshes.m: duplicate key \"shape\"");
  expect_error(R"({"tensors": [{"name": "a"}, {"name": "b", "name": "c"}]})",
               ErrorCode::kInvalidArgument, "tensors[1]: duplicate key \"name\"");
}

TEST(SpecErrors, WrongJsonTypes) {
  expect_error(R"({"meshes": {"m": {"axis_names": ["x", 3], "shape": [2, 2]}}, "tensors": []})",
               ErrorCode::kInvalidArgument,
               "meshes.m.axis_names[1]: expected a string, got an integer");
  expect_error(R"({"meshes": {"m": {"axis_names": ["x"], "shape": ["2"]}}, "tensors": []})",
               ErrorCode::kInvalidArgument, "meshes.m.shape[0]: expected an integer, got a string");
  expect_error(R"({"meshes": {"m": {"axis_names": ["x"], "shape": [2.5]}}, "tensors": []})",
               ErrorCode::kInvalidArgument, "meshes.m.shape[0]: expected an integer, got 2.5");
  expect_error(R"({"meshes": [], "tensors": []})", ErrorCode::kInvalidArgument,
               "meshes: expected an object, got an array");
  expect_error(with_tensor(R"({"name": 5, "shape": [4], "dtype": "f32", "src": {"mesh": "train"},
                              "dst": {"mesh": "train"}})"),
               ErrorCode::kInvalidArgument, "tensors[0].name: expected a string, got an integer");
  expect_error(with_tensor(R"({"name": "t", "shape": 4, "dtype": "f32", "src": {"mesh": "train"},
                              "dst": {"mesh": "train"}})"),
               ErrorCode::kInvalidArgument, "tensors[0].shape: expected an array, got an integer");
  expect_error(with_tensor(R"({"name": "t", "shape": [4], "dtype": "f32", "src": "train",
                              "dst": {"mesh": "train"}})"),
               ErrorCode::kInvalidArgument, "tensors[0].src: expected an object, got a string");
  expect_error(with_tensor(R"({"name": "t", "shape": [4], "dtype": "f32",
                              "src": {"mesh": "train", "spec": [1]}, "dst": {"mesh": "train"}})"),
               ErrorCode::kInvalidArgument, "tensors[0].src.spec[0]: expected null, an axis name");
  expect_error(R"({"options": {"alpha_seconds": "fast"}, "tensors": []})",
               ErrorCode::kInvalidArgument,
               "options.alpha_seconds: expected a number, got a string");
  expect_error(
      R"({"meshes": {"m": {"axis_names": ["x"], "shape": [18446744073709551615]}}, "tensors": []})",
      ErrorCode::kOverflow, "meshes.m.shape[0]: ");
}

TEST(SpecErrors, BadMeshes) {
  expect_error(R"({"meshes": {"m": {"shape": [2]}}, "tensors": []})", ErrorCode::kInvalidArgument,
               "meshes.m: missing required key \"axis_names\"");
  expect_error(R"({"meshes": {"m": {"axis_names": ["x"], "shape": [0]}}, "tensors": []})",
               ErrorCode::kInvalidArgument, "meshes.m.shape[0]: ");
  expect_error(R"({"meshes": {"m": {"axis_names": ["x", "x"], "shape": [2, 2]}}, "tensors": []})",
               ErrorCode::kInvalidArgument, "meshes.m.axis_names[1]: ");
  expect_error(R"({"meshes": {"m": {"axis_names": ["x", "y"], "shape": [2]}}, "tensors": []})",
               ErrorCode::kInvalidArgument, "meshes.m.axis_names: ");
  expect_error(
      R"({"meshes": {"m": {"axis_names": ["x"], "shape": [2], "devices": [0, 1, 2]}}, "tensors": []})",
      ErrorCode::kInvalidArgument, "meshes.m.devices: ");
  expect_error(
      R"({"meshes": {"m": {"axis_names": ["x"], "shape": [3], "devices": [0, 1, 1]}}, "tensors": []})",
      ErrorCode::kInvalidArgument, "meshes.m.devices[2]: ");
  expect_error(
      R"({"meshes": {"m": {"axis_names": ["x"], "shape": [2], "devices": [0, -1]}}, "tensors": []})",
      ErrorCode::kInvalidArgument, "meshes.m.devices[1]: ");
  expect_error(
      R"({"meshes": {"m": {"axis_names": ["x"], "shape": [2], "processes": [0]}}, "tensors": []})",
      ErrorCode::kInvalidArgument, "meshes.m.processes: 1 entries for a mesh of 2 devices");
  expect_error(
      R"({"meshes": {"m": {"axis_names": ["x"], "shape": [2], "hosts": [0, -3]}}, "tensors": []})",
      ErrorCode::kInvalidArgument, "meshes.m.hosts[1]: ");
  expect_error(
      R"({"meshes": {"m": {"axis_names": ["x"], "shape": [2], "ordinals": [0, 5000000000]}}, "tensors": []})",
      ErrorCode::kOutOfRange, "meshes.m.ordinals[1]: ");
  expect_error(
      R"({"meshes": {"m": {"axis_names": ["x", "y"], "shape": [100000, 100000]}}, "tensors": []})",
      ErrorCode::kOutOfRange, "meshes.m.shape: more than 16777216 devices");
  expect_error(R"({"meshes": {"": {"axis_names": ["x"], "shape": [2]}}, "tensors": []})",
               ErrorCode::kInvalidArgument, "meshes[\"\"]: empty mesh name");
}

TEST(SpecErrors, ConflictingDeviceFactsNameBothPaths) {
  expect_error(R"({"meshes": {
      "a": {"axis_names": ["x"], "shape": [2], "devices": [0, 1], "processes": [0, 1]},
      "b": {"axis_names": ["y"], "shape": [2], "devices": [1, 2], "processes": [0, 0]}}, "tensors": []})",
               ErrorCode::kInvalidArgument, "meshes.b.processes[0]: device 1 is on process 0 here",
               "meshes.a.processes[1]");
  expect_error(R"({"meshes": {
      "a": {"axis_names": ["x"], "shape": [2], "hosts": [0, 1]},
      "b": {"axis_names": ["y"], "shape": [2], "hosts": [0, 0]}}, "tensors": []})",
               ErrorCode::kInvalidArgument, "meshes.b.hosts[1]: device 1 is on host 0 here",
               "meshes.a.hosts[1]");
}

TEST(SpecErrors, BadTensors) {
  expect_error(
      with_tensor(
          R"({"shape": [4], "dtype": "f32", "src": {"mesh": "train"}, "dst": {"mesh": "train"}})"),
      ErrorCode::kInvalidArgument, "tensors[0]: missing required key \"name\"");
  expect_error(
      with_tensor(
          R"({"name": "t", "shape": [4], "dtype": "f32", "src": {"mesh": "train"}, "dst": {"mesh": "train"}},
                             {"name": "t", "shape": [4], "dtype": "f32", "src": {"mesh": "train"}, "dst": {"mesh": "train"}})"),
      ErrorCode::kInvalidArgument, "tensors[1].name: duplicate tensor name \"t\"",
      "tensors[0].name");
  expect_error(
      with_tensor(
          R"({"name": "t", "shape": [4], "dtype": "f31", "src": {"mesh": "train"}, "dst": {"mesh": "train"}})"),
      ErrorCode::kInvalidArgument, "tensors[0].dtype: ");
  expect_error(
      with_tensor(
          R"({"name": "t", "shape": [4, -2], "dtype": "f32", "src": {"mesh": "train"}, "dst": {"mesh": "train"}})"),
      ErrorCode::kInvalidArgument, "tensors[0].shape[1]: ");
  expect_error(
      with_tensor(
          R"({"name": "t", "shape": [1,1,1,1,1,1,1,1,1], "dtype": "f32", "src": {"mesh": "train"}, "dst": {"mesh": "train"}})"),
      ErrorCode::kOutOfRange, "tensors[0].shape: ");
  expect_error(
      with_tensor(
          R"({"name": "t", "shape": [4611686018427387904, 4], "dtype": "f32", "src": {"mesh": "train"}, "dst": {"mesh": "train"}})"),
      ErrorCode::kOverflow, "tensors[0].shape: ");
  expect_error(
      with_tensor(R"({"name": "t", "shape": [4], "dtype": "f32", "src": {"mesh": "train"}})"),
      ErrorCode::kInvalidArgument, "tensors[0]: missing required key \"dst\"");
}

TEST(SpecErrors, BadNamedLayouts) {
  auto t = [](const std::string& src) {
    return with_tensor(R"({"name": "w", "shape": [8, 8], "dtype": "f32", "src": )" + src +
                       R"(, "dst": {"mesh": "infer", "spec": [null, "tp"]}})");
  };
  expect_error(t(R"({"mesh": "trian", "spec": ["dp", "tp"]})"), ErrorCode::kInvalidArgument,
               "tensors[0].src.mesh: unknown mesh \"trian\"", "infer, train");
  expect_error(t(R"({"mesh": "train", "spec": ["dp", "tq"]})"), ErrorCode::kInvalidArgument,
               "tensors[0].src.spec[1]: unknown axis \"tq\" of mesh \"train\"");
  expect_error(t(R"({"mesh": "train", "spec": [["dp", "tq"], null]})"), ErrorCode::kInvalidArgument,
               "tensors[0].src.spec[0][1]: unknown axis \"tq\"");
  expect_error(t(R"({"mesh": "train", "spec": ["dp", "dp"]})"), ErrorCode::kInvalidArgument,
               "tensors[0].src.spec[1]: axis \"dp\" is used twice", "tensors[0].src.spec[0]");
  expect_error(t(R"({"mesh": "train", "spec": ["dp"]})"), ErrorCode::kInvalidArgument,
               "tensors[0].src.spec: 1 entries for a tensor of rank 2");
  expect_error(t(R"({"mesh": "train", "spec": ["dp", null], "partial": {"axes": ["pp"]}})"),
               ErrorCode::kInvalidArgument, "tensors[0].src.partial.axes[0]: unknown axis \"pp\"");
  expect_error(t(R"({"mesh": "train", "spec": ["dp", null], "partial": {"axes": ["dp"]}})"),
               ErrorCode::kInvalidArgument,
               "tensors[0].src.partial.axes[0]: axis \"dp\" is used twice");
  expect_error(
      t(R"({"mesh": "train", "spec": ["dp", null], "partial": {"axes": ["tp"], "op": "avg"}})"),
      ErrorCode::kInvalidArgument, "tensors[0].src.partial.op: ");
  expect_error(t(R"({"mesh": "train", "spec": ["dp", null], "partial": {"op": "sum"}})"),
               ErrorCode::kInvalidArgument,
               "tensors[0].src.partial: missing required key \"axes\"");
  expect_error(t(R"({"spec": ["dp", null]})"), ErrorCode::kInvalidArgument,
               "tensors[0].src: missing \"mesh\" (with \"spec\") or \"boxes\"");
  expect_error(t(R"({"mesh": "train", "boxes": []})"), ErrorCode::kInvalidArgument,
               "tensors[0].src: give either \"mesh\"");
}

TEST(SpecErrors, BadBoxLayouts) {
  auto t = [](const std::string& dst) {
    return with_tensor(R"({"name": "w", "shape": [8, 6], "dtype": "f32",
                           "src": {"mesh": "train", "spec": ["dp", "tp"]}, "dst": )" +
                       dst + "}");
  };
  expect_error(t(R"({"boxes": [{"device": 0}, {"device": 1, "lo": [0, 0], "hi": [9, 6]}]})"),
               ErrorCode::kInvalidArgument, "tensors[0].dst.boxes[1].hi[0]: 9 is outside");
  expect_error(t(R"({"boxes": [{"device": 1, "lo": [4, 5], "hi": [8, 2]}]})"),
               ErrorCode::kInvalidArgument,
               "tensors[0].dst.boxes[0].hi[1]: 2 is outside [lo=5, 6]");
  expect_error(t(R"({"boxes": [{"device": 1, "lo": [-1, 0]}]})"), ErrorCode::kInvalidArgument,
               "tensors[0].dst.boxes[0].lo[0]: -1 is outside");
  expect_error(t(R"({"boxes": [{"device": 1, "lo": [0]}]})"), ErrorCode::kInvalidArgument,
               "tensors[0].dst.boxes[0].lo: 1 entries for a tensor of rank 2");
  expect_error(t(R"({"boxes": [{"device": 1}, {"device": 1}]})"), ErrorCode::kInvalidArgument,
               "tensors[0].dst.boxes[1].device: device 1 already holds tensors[0].dst.boxes[0]");
  expect_error(t(R"({"boxes": [{"device": -4}]})"), ErrorCode::kInvalidArgument,
               "tensors[0].dst.boxes[0].device: ");
  expect_error(t(R"({"boxes": [{"lo": [0, 0]}]})"), ErrorCode::kInvalidArgument,
               "tensors[0].dst.boxes[0]: missing required key \"device\"");
  expect_error(t(R"({"boxes": [{"device": 0, "summand": 1}]})"), ErrorCode::kInvalidArgument,
               "tensors[0].dst.boxes[0].summand: 1 is outside [0, 1)");
  expect_error(t(R"({"summands": 0, "boxes": [{"device": 0}]})"), ErrorCode::kInvalidArgument,
               "tensors[0].dst.summands: 0 must be at least 1");
  expect_error(t(R"({"op": "prod", "boxes": [{"device": 0}]})"), ErrorCode::kInvalidArgument,
               "tensors[0].dst.op: ");
  expect_error(t(R"({"boxes": [{"devcie": 0}]})"), ErrorCode::kInvalidArgument,
               "tensors[0].dst.boxes[0].devcie: unknown key", "did you mean \"device\"");
  expect_error(t(R"({"boxes": {"device": 0}})"), ErrorCode::kInvalidArgument,
               "tensors[0].dst.boxes: expected an array");
}

TEST(SpecErrors, BadOptions) {
  expect_error(R"({"options": {"split_min_bytes": -1}, "tensors": []})",
               ErrorCode::kInvalidArgument, "options.split_min_bytes: -1 is negative");
  expect_error(R"({"options": {"inter_host_bytes_per_second": 0}, "tensors": []})",
               ErrorCode::kInvalidArgument,
               "options.inter_host_bytes_per_second: 0 must be positive");
  expect_error(R"({"options": {"alpha_seconds": -1e-6}, "tensors": []})",
               ErrorCode::kInvalidArgument, "options.alpha_seconds: ");
  expect_error(R"({"options": [], "tensors": []})", ErrorCode::kInvalidArgument,
               "options: expected an object");
}

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

}  // namespace
}  // namespace reshard
