/* The C ABI test suite (docs/design.md §5). Plain C11, compiled with -Wall
 * -Wextra -Werror -pedantic against reshard.h only. It calls every exported
 * function, including each error path: for each it checks the error code,
 * that the message names the bad argument, and that outputs stay untouched.
 *
 * The groups transports, mpi_options and nccl_options cover the ABI 1.1
 * executors up to what one process without MPI or a GPU can check; real
 * executions run in tests/mpi (capi_mpi_test.c under mpirun) and tests/gpu
 * (capi_nccl_test.c).
 *
 * Usage: capi_test [group]   (no argument: every group). ctest runs one
 * process per group (capi.<group>). */
/* POSIX for setrlimit only (the out_of_memory group). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <threads.h>
#include <time.h>

#include "check.h"
#include "reshard/reshard.h"
#include "reshard/reshard_mpi.h"
#include "reshard/reshard_nccl.h"

/* The one knob for test sizes (tests/test_scale.h, a C++ header): the
 * percentage of its cases a test runs, set by CMake; the sanitizer presets
 * set less than 100. */
#ifndef RESHARD_TEST_SCALE
#define RESHARD_TEST_SCALE 100
#endif

/* ------------------------------------------------------------------------ */
/* Fixture: a training -> inference reshard of two tensors.                 */
/*   train: 2x2 mesh (dp, tp), devices 0..3, processes 0,0,1,1              */
/*   infer: 1-d mesh (tp) of 4, devices 4..7, process 2                     */
/*   "w" f32 [8, 6]: [dp, tp] -> [-, tp] (6 split 4 ways: an empty shard)   */
/*   "b" i32 [5]:    [dp]     -> replicated                                 */
/* ------------------------------------------------------------------------ */

static const char* const kTrainAxes[] = {"dp", "tp"};
static const int64_t kTrainShape[] = {2, 2};
static const char* const kInferAxes[] = {"tp"};
static const int64_t kInferShape[] = {4};
static const int64_t kInferDevices[] = {4, 5, 6, 7};
static const int64_t kW[] = {8, 6};
static const int64_t kB[] = {5};

typedef struct fixture {
  reshard_mesh_t* train;
  reshard_mesh_t* infer;
  reshard_layout_t* w_src;
  reshard_layout_t* w_dst;
  reshard_layout_t* b_src;
  reshard_layout_t* b_dst;
  reshard_topology_t* topology;
  reshard_plan_input_t* input;
} fixture;

static void fixture_destroy(fixture* f) {
  reshard_plan_input_destroy(f->input);
  reshard_topology_destroy(f->topology);
  reshard_layout_destroy(f->b_dst);
  reshard_layout_destroy(f->b_src);
  reshard_layout_destroy(f->w_dst);
  reshard_layout_destroy(f->w_src);
  reshard_mesh_destroy(f->infer);
  reshard_mesh_destroy(f->train);
  memset(f, 0, sizeof *f);
}

/* Returns 1 on success. */
static int fixture_create(fixture* f) {
  const char* dp[] = {"dp"};
  const char* tp[] = {"tp"};
  reshard_axes_t w_src_dims[2], w_dst_dims[2], b_src_dims[1], b_dst_dims[1];
  int64_t d;
  memset(f, 0, sizeof *f);
  w_src_dims[0].names = dp;
  w_src_dims[0].count = 1;
  w_src_dims[1].names = tp;
  w_src_dims[1].count = 1;
  w_dst_dims[0].names = NULL;
  w_dst_dims[0].count = 0;
  w_dst_dims[1].names = tp;
  w_dst_dims[1].count = 1;
  b_src_dims[0] = w_src_dims[0];
  b_dst_dims[0] = w_dst_dims[0];
  if (!ok_(reshard_mesh_create(2, kTrainAxes, kTrainShape, NULL, &f->train), __FILE__, __LINE__,
           "train") ||
      !ok_(reshard_mesh_create(1, kInferAxes, kInferShape, kInferDevices, &f->infer), __FILE__,
           __LINE__, "infer") ||
      !ok_(reshard_layout_create_named(f->train, 2, kW, w_src_dims, NULL, RESHARD_REDUCE_SUM,
                                       &f->w_src),
           __FILE__, __LINE__, "w_src") ||
      !ok_(reshard_layout_create_named(f->infer, 2, kW, w_dst_dims, NULL, RESHARD_REDUCE_SUM,
                                       &f->w_dst),
           __FILE__, __LINE__, "w_dst") ||
      !ok_(reshard_layout_create_named(f->train, 1, kB, b_src_dims, NULL, RESHARD_REDUCE_SUM,
                                       &f->b_src),
           __FILE__, __LINE__, "b_src") ||
      !ok_(reshard_layout_create_named(f->infer, 1, kB, b_dst_dims, NULL, RESHARD_REDUCE_SUM,
                                       &f->b_dst),
           __FILE__, __LINE__, "b_dst") ||
      !ok_(reshard_topology_create(&f->topology), __FILE__, __LINE__, "topology")) {
    fixture_destroy(f);
    return 0;
  }
  for (d = 0; d < 8; ++d) {
    const int32_t process = d < 2 ? 0 : d < 4 ? 1 : 2;
    if (!ok_(reshard_topology_add_device(f->topology, d, process, process, (int32_t)(d % 4)),
             __FILE__, __LINE__, "add_device")) {
      fixture_destroy(f);
      return 0;
    }
  }
  if (!ok_(reshard_plan_input_create(&f->input), __FILE__, __LINE__, "input") ||
      !ok_(reshard_plan_input_add_tensor(f->input, "w", 2, kW, RESHARD_DTYPE_F32, f->w_src,
                                         f->w_dst),
           __FILE__, __LINE__, "add w") ||
      !ok_(reshard_plan_input_add_tensor(f->input, "b", 1, kB, RESHARD_DTYPE_I32, f->b_src,
                                         f->b_dst),
           __FILE__, __LINE__, "add b") ||
      !ok_(reshard_plan_input_set_topology(f->input, f->topology), __FILE__, __LINE__,
           "set_topology")) {
    fixture_destroy(f);
    return 0;
  }
  {
    /* The fixture's tensors are tiny: the single-hop guard (1.8) would drop
     * the relays the tests below check; test_relays checks the guard. */
    reshard_plan_options_t routes = RESHARD_PLAN_OPTIONS_INIT;
    routes.single_hop_guard = 0;
    if (!ok_(reshard_plan_input_set_options(f->input, &routes), __FILE__, __LINE__, "options")) {
      fixture_destroy(f);
      return 0;
    }
  }
  return 1;
}

static reshard_plan_t* fixture_plan(const fixture* f) {
  reshard_plan_t* plan = NULL;
  if (!ok_(reshard_plan_create(f->input, NULL, &plan), __FILE__, __LINE__, "plan_create")) {
    return NULL;
  }
  return plan;
}

/* Row-major global flat index of the `local`-th element of box [lo, hi). */
static int64_t global_index(size_t rank, const int64_t* shape, const int64_t* lo, const int64_t* hi,
                            int64_t local) {
  int64_t coord[RESHARD_MAX_RANK];
  int64_t g = 0;
  size_t d;
  for (d = rank; d-- > 0;) {
    const int64_t extent = hi[d] - lo[d];
    coord[d] = lo[d] + local % extent;
    local /= extent;
  }
  for (d = 0; d < rank; ++d) g = g * shape[d] + coord[d];
  return g;
}

static int64_t box_volume(size_t rank, const int64_t* lo, const int64_t* hi) {
  int64_t v = 1;
  size_t d;
  for (d = 0; d < rank; ++d) v *= hi[d] - lo[d];
  return v;
}

/* Shard buffers of every tensor of a plan: sources hold value = global
 * index (as f32 for tensor "w", i32 for "b"), destinations hold -1. */
typedef struct host_buffers {
  size_t num_tensors;
  reshard_tensor_buffers_t* tensors;
} host_buffers;

static void host_buffers_free(host_buffers* h) {
  size_t t, e;
  for (t = 0; t < h->num_tensors; ++t) {
    reshard_tensor_buffers_t* tb = &h->tensors[t];
    for (e = 0; e < tb->num_src; ++e) free((void*)tb->src[e].data);
    for (e = 0; e < tb->num_dst; ++e) free(tb->dst[e].data);
    free((void*)tb->src);
    free((void*)tb->dst);
  }
  free(h->tensors);
  memset(h, 0, sizeof *h);
}

static void store_value(reshard_dtype_t dtype, void* base, int64_t i, int64_t value) {
  if (dtype == RESHARD_DTYPE_F32) {
    ((float*)base)[i] = (float)value;
  } else {
    ((int32_t*)base)[i] = (int32_t)value;
  }
}

static int64_t load_value(reshard_dtype_t dtype, const void* base, int64_t i) {
  if (dtype == RESHARD_DTYPE_F32) return (int64_t)((const float*)base)[i];
  return ((const int32_t*)base)[i];
}

/* Allocates and fills; returns 1 on success. Only f32 / i32 tensors. */
static int host_buffers_make(const reshard_plan_t* plan, host_buffers* h) {
  size_t t, e, n;
  memset(h, 0, sizeof *h);
  if (!ok_(reshard_plan_num_tensors(plan, &n), __FILE__, __LINE__, "num_tensors")) return 0;
  h->num_tensors = n;
  h->tensors = (reshard_tensor_buffers_t*)calloc(n, sizeof *h->tensors);
  for (t = 0; t < n; ++t) {
    reshard_tensor_buffers_t* tb = &h->tensors[t];
    reshard_dtype_t dtype;
    size_t rank, ns, nd;
    int64_t shape[RESHARD_MAX_RANK], lo[RESHARD_MAX_RANK], hi[RESHARD_MAX_RANK];
    reshard_src_buffer_t* src;
    reshard_dst_buffer_t* dst;
    CHECK_OK(reshard_plan_tensor_dtype(plan, t, &dtype));
    CHECK_OK(reshard_plan_tensor_rank(plan, t, &rank));
    CHECK_OK(reshard_plan_tensor_shape(plan, t, shape));
    CHECK_OK(reshard_plan_tensor_num_entries(plan, t, RESHARD_SIDE_SRC, &ns));
    CHECK_OK(reshard_plan_tensor_num_entries(plan, t, RESHARD_SIDE_DST, &nd));
    src = (reshard_src_buffer_t*)calloc(ns, sizeof *src);
    dst = (reshard_dst_buffer_t*)calloc(nd, sizeof *dst);
    tb->src = src;
    tb->num_src = ns;
    tb->dst = dst;
    tb->num_dst = nd;
    for (e = 0; e < ns; ++e) {
      int64_t i, volume;
      void* data;
      CHECK_OK(reshard_plan_tensor_entry(plan, t, RESHARD_SIDE_SRC, e, NULL, NULL, lo, hi));
      volume = box_volume(rank, lo, hi);
      data = malloc((size_t)volume * 4 + 1);
      for (i = 0; i < volume; ++i) {
        store_value(dtype, data, i, global_index(rank, shape, lo, hi, i));
      }
      src[e].data = data;
      src[e].bytes = (size_t)volume * reshard_dtype_size(dtype);
    }
    for (e = 0; e < nd; ++e) {
      int64_t i, volume;
      void* data;
      CHECK_OK(reshard_plan_tensor_entry(plan, t, RESHARD_SIDE_DST, e, NULL, NULL, lo, hi));
      volume = box_volume(rank, lo, hi);
      data = malloc((size_t)volume * 4 + 1);
      for (i = 0; i < volume; ++i) store_value(dtype, data, i, -1);
      dst[e].data = data;
      dst[e].bytes = (size_t)volume * reshard_dtype_size(dtype);
    }
  }
  return 1;
}

/* Number of destination elements that differ from their global index. */
static int64_t host_buffers_mismatches(const reshard_plan_t* plan, const host_buffers* h) {
  int64_t bad = 0;
  size_t t, e;
  for (t = 0; t < h->num_tensors; ++t) {
    const reshard_tensor_buffers_t* tb = &h->tensors[t];
    reshard_dtype_t dtype;
    size_t rank;
    int64_t shape[RESHARD_MAX_RANK], lo[RESHARD_MAX_RANK], hi[RESHARD_MAX_RANK];
    CHECK_OK(reshard_plan_tensor_dtype(plan, t, &dtype));
    CHECK_OK(reshard_plan_tensor_rank(plan, t, &rank));
    CHECK_OK(reshard_plan_tensor_shape(plan, t, shape));
    for (e = 0; e < tb->num_dst; ++e) {
      int64_t i, volume;
      CHECK_OK(reshard_plan_tensor_entry(plan, t, RESHARD_SIDE_DST, e, NULL, NULL, lo, hi));
      volume = box_volume(rank, lo, hi);
      for (i = 0; i < volume; ++i) {
        if (load_value(dtype, tb->dst[e].data, i) != global_index(rank, shape, lo, hi, i)) ++bad;
      }
    }
  }
  return bad;
}

/* ------------------------------------------------------------------------ */
/* version, function table                                                  */
/* ------------------------------------------------------------------------ */

static void test_version(void) {
  const reshard_api_t* api = reshard_get_api(RESHARD_ABI_MAJOR);
  CHECK(strcmp(reshard_version(), RESHARD_VERSION_STRING) == 0);
  CHECK(reshard_version_number() == RESHARD_VERSION_NUMBER);
  CHECK(RESHARD_VERSION_NUMBER ==
        RESHARD_VERSION_MAJOR * 10000 + RESHARD_VERSION_MINOR * 100 + RESHARD_VERSION_PATCH);
  CHECK(reshard_get_api(0) == NULL);
  CHECK(reshard_get_api(2) == NULL);
  CHECK(reshard_get_api(UINT32_MAX) == NULL);
  REQUIRE(api != NULL);
  CHECK(reshard_get_api(1) == api); /* static: the same table every time */
  CHECK(api->struct_size == sizeof(reshard_api_t));
  CHECK(api->abi_major == RESHARD_ABI_MAJOR);
  CHECK(api->abi_minor == RESHARD_ABI_MINOR);
  /* Every entry is the exported function of the same name. */
  CHECK(api->version == reshard_version);
  CHECK(api->version_number == reshard_version_number);
  CHECK(api->error_code == reshard_error_code);
  CHECK(api->error_message == reshard_error_message);
  CHECK(api->error_destroy == reshard_error_destroy);
  CHECK(api->error_code_name == reshard_error_code_name);
  CHECK(api->dtype_size == reshard_dtype_size);
  CHECK(api->dtype_name == reshard_dtype_name);
  CHECK(api->dtype_from_name == reshard_dtype_from_name);
  CHECK(api->mesh_create == reshard_mesh_create);
  CHECK(api->mesh_destroy == reshard_mesh_destroy);
  CHECK(api->mesh_rank == reshard_mesh_rank);
  CHECK(api->mesh_size == reshard_mesh_size);
  CHECK(api->layout_create_named == reshard_layout_create_named);
  CHECK(api->layout_create_boxes == reshard_layout_create_boxes);
  CHECK(api->layout_destroy == reshard_layout_destroy);
  CHECK(api->layout_rank == reshard_layout_rank);
  CHECK(api->layout_shape == reshard_layout_shape);
  CHECK(api->layout_num_entries == reshard_layout_num_entries);
  CHECK(api->layout_entry == reshard_layout_entry);
  CHECK(api->topology_create == reshard_topology_create);
  CHECK(api->topology_destroy == reshard_topology_destroy);
  CHECK(api->topology_add_device == reshard_topology_add_device);
  CHECK(api->topology_num_devices == reshard_topology_num_devices);
  CHECK(api->plan_input_create == reshard_plan_input_create);
  CHECK(api->plan_input_from_spec == reshard_plan_input_from_spec);
  CHECK(api->plan_input_destroy == reshard_plan_input_destroy);
  CHECK(api->plan_input_add_tensor == reshard_plan_input_add_tensor);
  CHECK(api->plan_input_set_topology == reshard_plan_input_set_topology);
  CHECK(api->plan_input_set_options == reshard_plan_input_set_options);
  CHECK(api->plan_input_num_tensors == reshard_plan_input_num_tensors);
  CHECK(api->plan_input_fingerprint == reshard_plan_input_fingerprint);
  CHECK(api->plan_create == reshard_plan_create);
  CHECK(api->plan_destroy == reshard_plan_destroy);
  CHECK(api->plan_fingerprint == reshard_plan_fingerprint);
  CHECK(api->plan_stats == reshard_plan_stats);
  CHECK(api->plan_device_traffic == reshard_plan_device_traffic);
  CHECK(api->plan_num_tensors == reshard_plan_num_tensors);
  CHECK(api->plan_tensor_name == reshard_plan_tensor_name);
  CHECK(api->plan_tensor_dtype == reshard_plan_tensor_dtype);
  CHECK(api->plan_tensor_dst_dtype == reshard_plan_tensor_dst_dtype);
  CHECK(api->plan_tensor_rank == reshard_plan_tensor_rank);
  CHECK(api->plan_tensor_shape == reshard_plan_tensor_shape);
  CHECK(api->plan_tensor_num_entries == reshard_plan_tensor_num_entries);
  CHECK(api->plan_tensor_entry == reshard_plan_tensor_entry);
  CHECK(api->plan_tensor_partial == reshard_plan_tensor_partial);
  CHECK(api->plan_entry_of_device == reshard_plan_entry_of_device);
  CHECK(api->plan_num_processes == reshard_plan_num_processes);
  CHECK(api->plan_process == reshard_plan_process);
  CHECK(api->plan_has_part == reshard_plan_has_part);
  CHECK(api->plan_part_info == reshard_plan_part_info);
  CHECK(api->plan_part_message == reshard_plan_part_message);
  CHECK(api->plan_part_piece == reshard_plan_part_piece);
  CHECK(api->buffer_data == reshard_buffer_data);
  CHECK(api->buffer_size == reshard_buffer_size);
  CHECK(api->buffer_destroy == reshard_buffer_destroy);
  CHECK(api->plan_serialize == reshard_plan_serialize);
  CHECK(api->plan_deserialize == reshard_plan_deserialize);
  CHECK(api->plan_verify_bytes == reshard_plan_verify_bytes);
  CHECK(api->executor_create == reshard_executor_create);
  CHECK(api->executor_destroy == reshard_executor_destroy);
  CHECK(api->executor_execute == reshard_executor_execute);
  CHECK(api->oracle_fill_source == reshard_oracle_fill_source);
  CHECK(api->oracle_check_destination == reshard_oracle_check_destination);
  CHECK(api->executor_verify == reshard_executor_verify);
}

/* ------------------------------------------------------------------------ */
/* errors and dtypes                                                        */
/* ------------------------------------------------------------------------ */

static void test_errors(void) {
  static const char* const kNames[] = {"ok",
                                       "invalid_argument",
                                       "out_of_range",
                                       "overflow",
                                       "mismatch",
                                       "parse_error",
                                       "corrupt",
                                       "unsupported",
                                       "timeout",
                                       "transport",
                                       "out_of_memory",
                                       "internal",
                                       "resource_exhausted"};
  reshard_error_code_t code;
  reshard_error_t* error;
  /* NULL is success. */
  CHECK(reshard_error_code(NULL) == RESHARD_OK);
  CHECK(strcmp(reshard_error_message(NULL), "") == 0);
  reshard_error_destroy(NULL);
  for (code = RESHARD_OK; code <= RESHARD_ERROR_RESOURCE_EXHAUSTED; ++code) {
    CHECK(strcmp(reshard_error_code_name(code), kNames[code]) == 0);
  }
  CHECK(strcmp(reshard_error_code_name(-1), "unknown") == 0);
  CHECK(RESHARD_ERROR_RESOURCE_EXHAUSTED == 12); /* appended in 1.2 */
  CHECK(strcmp(reshard_error_code_name(13), "unknown") == 0);
  CHECK(strcmp(reshard_error_code_name(INT32_MAX), "unknown") == 0);
  /* An error object owns its message and keeps its code. */
  error = reshard_mesh_create(0, NULL, NULL, NULL, NULL);
  REQUIRE(error != NULL);
  CHECK(reshard_error_code(error) == RESHARD_ERROR_INVALID_ARGUMENT);
  CHECK(strcmp(reshard_error_message(error), "out_mesh: must not be NULL") == 0);
  reshard_error_destroy(error);
}

static void test_dtypes(void) {
  static const struct {
    reshard_dtype_t dtype;
    size_t size;
    const char* name;
  } kTypes[] = {{RESHARD_DTYPE_F64, 8, "f64"},       {RESHARD_DTYPE_F32, 4, "f32"},
                {RESHARD_DTYPE_F16, 2, "f16"},       {RESHARD_DTYPE_BF16, 2, "bf16"},
                {RESHARD_DTYPE_F8E4M3, 1, "f8e4m3"}, {RESHARD_DTYPE_F8E5M2, 1, "f8e5m2"},
                {RESHARD_DTYPE_I64, 8, "i64"},       {RESHARD_DTYPE_I32, 4, "i32"},
                {RESHARD_DTYPE_I16, 2, "i16"},       {RESHARD_DTYPE_I8, 1, "i8"},
                {RESHARD_DTYPE_U64, 8, "u64"},       {RESHARD_DTYPE_U32, 4, "u32"},
                {RESHARD_DTYPE_U16, 2, "u16"},       {RESHARD_DTYPE_U8, 1, "u8"},
                {RESHARD_DTYPE_BOOL, 1, "bool"}};
  size_t i;
  reshard_dtype_t dtype = -7;
  for (i = 0; i < sizeof kTypes / sizeof kTypes[0]; ++i) {
    reshard_dtype_t parsed = 0;
    CHECK(reshard_dtype_size(kTypes[i].dtype) == kTypes[i].size);
    REQUIRE(reshard_dtype_name(kTypes[i].dtype) != NULL);
    CHECK(strcmp(reshard_dtype_name(kTypes[i].dtype), kTypes[i].name) == 0);
    CHECK_OK(reshard_dtype_from_name(kTypes[i].name, &parsed));
    CHECK(parsed == kTypes[i].dtype);
  }
  CHECK(reshard_dtype_size(0) == 0);
  CHECK(reshard_dtype_size(16) == 0);
  CHECK(reshard_dtype_size(-1) == 0);
  CHECK(reshard_dtype_name(0) == NULL);
  CHECK(reshard_dtype_name(16) == NULL);
  CHECK_OK(reshard_dtype_from_name("bfloat16", &dtype));
  CHECK(dtype == RESHARD_DTYPE_BF16);
  dtype = -7;
  CHECK_ERR(reshard_dtype_from_name("f33", &dtype), RESHARD_ERROR_INVALID_ARGUMENT,
            "name: unknown dtype \"f33\"");
  CHECK_ERR(reshard_dtype_from_name(NULL, &dtype), RESHARD_ERROR_INVALID_ARGUMENT,
            "name: must not be NULL");
  CHECK_ERR(reshard_dtype_from_name("f32", NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_dtype: must not be NULL");
  CHECK(dtype == -7); /* untouched on error */
}

/* ------------------------------------------------------------------------ */
/* meshes                                                                   */
/* ------------------------------------------------------------------------ */

static void test_mesh(void) {
  reshard_mesh_t* mesh = NULL;
  reshard_mesh_t* const kSentinel = (reshard_mesh_t*)&g_failures;
  reshard_mesh_t* untouched = kSentinel;
  size_t rank = 99;
  int64_t size = -1;
  const char* null_name[] = {"dp", NULL};
  const char* empty_name[] = {"dp", ""};
  const char* same_names[] = {"dp", "dp"};
  const int64_t zero_shape[] = {2, 0};
  const int64_t dup_devices[] = {0, 1, 2, 1};
  const int64_t neg_devices[] = {0, 1, -2, 3};
  const int64_t huge_shape[] = {INT64_C(1) << 20, INT64_C(1) << 20};

  REQUIRE_OK(reshard_mesh_create(2, kTrainAxes, kTrainShape, NULL, &mesh));
  CHECK_OK(reshard_mesh_rank(mesh, &rank));
  CHECK(rank == 2);
  CHECK_OK(reshard_mesh_size(mesh, &size));
  CHECK(size == 4);
  reshard_mesh_destroy(mesh);
  mesh = NULL;
  /* A rank-0 mesh is one device. */
  REQUIRE_OK(reshard_mesh_create(0, NULL, NULL, NULL, &mesh));
  CHECK_OK(reshard_mesh_size(mesh, &size));
  CHECK(size == 1);
  CHECK_OK(reshard_mesh_rank(mesh, &rank));
  CHECK(rank == 0);
  reshard_mesh_destroy(mesh);
  reshard_mesh_destroy(NULL);

  CHECK_ERR(reshard_mesh_create(2, kTrainAxes, kTrainShape, NULL, NULL),
            RESHARD_ERROR_INVALID_ARGUMENT, "out_mesh: must not be NULL");
  CHECK_ERR(reshard_mesh_create(2, NULL, kTrainShape, NULL, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "axis_names: must not be NULL");
  CHECK_ERR(reshard_mesh_create(2, kTrainAxes, NULL, NULL, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "shape: must not be NULL");
  CHECK_ERR(reshard_mesh_create(2, null_name, kTrainShape, NULL, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "axis_names[1]: must not be NULL");
  CHECK_ERR(reshard_mesh_create(2, empty_name, kTrainShape, NULL, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "axis_names[1]: empty axis name");
  CHECK_ERR(reshard_mesh_create(2, same_names, kTrainShape, NULL, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "axis_names[1]: duplicate axis name");
  CHECK_ERR(reshard_mesh_create(2, kTrainAxes, zero_shape, NULL, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "shape[1]");
  CHECK_ERR(reshard_mesh_create(2, kTrainAxes, zero_shape, dup_devices, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "shape[1]");
  CHECK_ERR(reshard_mesh_create(2, kTrainAxes, kTrainShape, dup_devices, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "devices[3]: device 1 appears twice");
  CHECK_ERR(reshard_mesh_create(2, kTrainAxes, kTrainShape, neg_devices, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "devices[2]");
  /* One device limit across layers (issue 15): 2^20 - 1, the planner's. */
  CHECK_ERR(reshard_mesh_create(2, kTrainAxes, huge_shape, NULL, &untouched),
            RESHARD_ERROR_OUT_OF_RANGE, "shape: mesh has more than 1048575 devices");
  CHECK(untouched == kSentinel);

  REQUIRE_OK(reshard_mesh_create(2, kTrainAxes, kTrainShape, NULL, &mesh));
  CHECK_ERR(reshard_mesh_rank(NULL, &rank), RESHARD_ERROR_INVALID_ARGUMENT,
            "mesh: must not be NULL");
  CHECK_ERR(reshard_mesh_rank(mesh, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_rank: must not be NULL");
  CHECK_ERR(reshard_mesh_size(NULL, &size), RESHARD_ERROR_INVALID_ARGUMENT,
            "mesh: must not be NULL");
  CHECK_ERR(reshard_mesh_size(mesh, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_size: must not be NULL");
  reshard_mesh_destroy(mesh);
}

/* ------------------------------------------------------------------------ */
/* layouts                                                                  */
/* ------------------------------------------------------------------------ */

static void test_layout_named(void) {
  reshard_mesh_t* mesh = NULL;
  reshard_layout_t* layout = NULL;
  reshard_layout_t* const kSentinel = (reshard_layout_t*)&g_failures;
  reshard_layout_t* untouched = kSentinel;
  const char* dp[] = {"dp"};
  const char* tp[] = {"tp"};
  const char* tq[] = {"tq"};
  const char* dp_tp[] = {"dp", "tp"};
  const char* null_axis[] = {NULL};
  reshard_axes_t dims[2];
  reshard_axes_t partial;
  const int64_t shape[] = {7, 6};
  const int64_t neg_shape[] = {7, -6};
  const int64_t big_shape[] = {INT64_C(1) << 40, INT64_C(1) << 40};
  const int64_t rank9[] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  reshard_axes_t dims9[9];
  size_t n = 0, rank = 0, i;
  int64_t device = -1, lo[RESHARD_MAX_RANK], hi[RESHARD_MAX_RANK], got_shape[2];
  int32_t summand = -1;

  REQUIRE_OK(reshard_mesh_create(2, kTrainAxes, kTrainShape, NULL, &mesh));
  /* dim 0 split over dp (7 -> chunks of 4: [0,4), [4,7)), dim 1 over tp. */
  dims[0].names = dp;
  dims[0].count = 1;
  dims[1].names = tp;
  dims[1].count = 1;
  REQUIRE_OK(reshard_layout_create_named(mesh, 2, shape, dims, NULL, RESHARD_REDUCE_SUM, &layout));
  CHECK_OK(reshard_layout_rank(layout, &rank));
  CHECK(rank == 2);
  CHECK_OK(reshard_layout_shape(layout, got_shape));
  CHECK(got_shape[0] == 7 && got_shape[1] == 6);
  CHECK_OK(reshard_layout_num_entries(layout, &n));
  CHECK(n == 4);
  CHECK_OK(reshard_layout_entry(layout, 3, &device, &summand, lo, hi));
  CHECK(device == 3 && summand == 0);
  CHECK(lo[0] == 4 && hi[0] == 7 && lo[1] == 3 && hi[1] == 6);
  CHECK_OK(reshard_layout_entry(layout, 0, NULL, NULL, NULL, NULL)); /* outputs optional */
  device = -1;
  CHECK_ERR(reshard_layout_entry(layout, 4, &device, NULL, lo, hi), RESHARD_ERROR_OUT_OF_RANGE,
            "entry: 4 >= 4");
  CHECK(device == -1);
  CHECK_ERR(reshard_layout_entry(NULL, 0, &device, NULL, lo, hi), RESHARD_ERROR_INVALID_ARGUMENT,
            "layout: must not be NULL");
  CHECK_ERR(reshard_layout_rank(NULL, &rank), RESHARD_ERROR_INVALID_ARGUMENT, "layout");
  CHECK_ERR(reshard_layout_rank(layout, NULL), RESHARD_ERROR_INVALID_ARGUMENT, "out_rank");
  CHECK_ERR(reshard_layout_shape(NULL, got_shape), RESHARD_ERROR_INVALID_ARGUMENT, "layout");
  CHECK_ERR(reshard_layout_shape(layout, NULL), RESHARD_ERROR_INVALID_ARGUMENT, "out_shape");
  CHECK_ERR(reshard_layout_num_entries(NULL, &n), RESHARD_ERROR_INVALID_ARGUMENT, "layout");
  CHECK_ERR(reshard_layout_num_entries(layout, NULL), RESHARD_ERROR_INVALID_ARGUMENT, "out_count");
  reshard_layout_destroy(layout);
  layout = NULL;

  /* Both axes on dim 0 (dp major), partial over nothing: 7 split 4 ways. */
  dims[0].names = dp_tp;
  dims[0].count = 2;
  dims[1].names = NULL;
  dims[1].count = 0;
  REQUIRE_OK(reshard_layout_create_named(mesh, 2, shape, dims, NULL, RESHARD_REDUCE_SUM, &layout));
  CHECK_OK(reshard_layout_entry(layout, 3, &device, NULL, lo, hi));
  CHECK(device == 3 && lo[0] == 6 && hi[0] == 7 && lo[1] == 0 && hi[1] == 6);
  reshard_layout_destroy(layout);
  layout = NULL;

  /* Partial over dp, split over tp: two summands. */
  dims[0].names = NULL;
  dims[0].count = 0;
  dims[1].names = tp;
  dims[1].count = 1;
  partial.names = dp;
  partial.count = 1;
  REQUIRE_OK(
      reshard_layout_create_named(mesh, 2, shape, dims, &partial, RESHARD_REDUCE_MAX, &layout));
  CHECK_OK(reshard_layout_entry(layout, 2, &device, &summand, lo, hi));
  CHECK(device == 2 && summand == 1);
  reshard_layout_destroy(layout);
  reshard_layout_destroy(NULL);

  /* Errors. */
  dims[0].names = dp;
  dims[0].count = 1;
  dims[1].names = tp;
  dims[1].count = 1;
  CHECK_ERR(reshard_layout_create_named(NULL, 2, shape, dims, NULL, RESHARD_REDUCE_SUM, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "mesh: must not be NULL");
  CHECK_ERR(reshard_layout_create_named(mesh, 2, shape, dims, NULL, RESHARD_REDUCE_SUM, NULL),
            RESHARD_ERROR_INVALID_ARGUMENT, "out_layout: must not be NULL");
  CHECK_ERR(reshard_layout_create_named(mesh, 2, NULL, dims, NULL, RESHARD_REDUCE_SUM, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "shape: must not be NULL");
  CHECK_ERR(reshard_layout_create_named(mesh, 2, shape, NULL, NULL, RESHARD_REDUCE_SUM, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "dims: must not be NULL");
  CHECK_ERR(
      reshard_layout_create_named(mesh, 2, neg_shape, dims, NULL, RESHARD_REDUCE_SUM, &untouched),
      RESHARD_ERROR_INVALID_ARGUMENT, "shape[1]: size -6 is negative");
  CHECK_ERR(
      reshard_layout_create_named(mesh, 2, big_shape, dims, NULL, RESHARD_REDUCE_SUM, &untouched),
      RESHARD_ERROR_OVERFLOW, "shape");
  for (i = 0; i < 9; ++i) {
    dims9[i].names = NULL;
    dims9[i].count = 0;
  }
  CHECK_ERR(
      reshard_layout_create_named(mesh, 9, rank9, dims9, NULL, RESHARD_REDUCE_SUM, &untouched),
      RESHARD_ERROR_OUT_OF_RANGE, "shape: rank 9");
  dims[1].names = NULL;
  CHECK_ERR(reshard_layout_create_named(mesh, 2, shape, dims, NULL, RESHARD_REDUCE_SUM, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "dims[1].names: must not be NULL");
  dims[1].names = null_axis;
  CHECK_ERR(reshard_layout_create_named(mesh, 2, shape, dims, NULL, RESHARD_REDUCE_SUM, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "dims[1].names[0]: must not be NULL");
  dims[1].names = tq;
  CHECK_ERR(reshard_layout_create_named(mesh, 2, shape, dims, NULL, RESHARD_REDUCE_SUM, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "dims[1]: unknown mesh axis \"tq\"");
  dims[1].names = dp;
  CHECK_ERR(reshard_layout_create_named(mesh, 2, shape, dims, NULL, RESHARD_REDUCE_SUM, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "dims[1]: mesh axis \"dp\" used twice");
  dims[1].names = NULL;
  dims[1].count = 0;
  partial.names = dp; /* also used by dims[0] */
  CHECK_ERR(
      reshard_layout_create_named(mesh, 2, shape, dims, &partial, RESHARD_REDUCE_SUM, &untouched),
      RESHARD_ERROR_INVALID_ARGUMENT, "partial.names[0]: mesh axis \"dp\" used twice");
  partial.names = tq;
  CHECK_ERR(
      reshard_layout_create_named(mesh, 2, shape, dims, &partial, RESHARD_REDUCE_SUM, &untouched),
      RESHARD_ERROR_INVALID_ARGUMENT, "partial.names[0]: unknown mesh axis \"tq\"");
  partial.names = tp;
  CHECK_ERR(reshard_layout_create_named(mesh, 2, shape, dims, &partial, 0, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "partial_op: invalid value 0");
  partial.names = NULL;
  CHECK_ERR(
      reshard_layout_create_named(mesh, 2, shape, dims, &partial, RESHARD_REDUCE_SUM, &untouched),
      RESHARD_ERROR_INVALID_ARGUMENT, "partial.names: must not be NULL");
  CHECK(untouched == kSentinel);
  reshard_mesh_destroy(mesh);
}

static void test_layout_boxes(void) {
  reshard_layout_t* layout = NULL;
  reshard_layout_t* const kSentinel = (reshard_layout_t*)&g_failures;
  reshard_layout_t* untouched = kSentinel;
  const int64_t shape[] = {4, 4};
  /* Listed out of device order; entries 0 and 1 overlap (replicas). */
  const int64_t devices[] = {9, 3, 5};
  const int32_t summands[] = {0, 1, 0};
  const int64_t lo[] = {0, 0, 0, 0, 2, 0};
  const int64_t hi[] = {4, 4, 2, 4, 4, 4};
  const int64_t bad_hi[] = {4, 4, 2, 5, 4, 4};
  const int64_t dup_devices[] = {9, 3, 9};
  const int32_t bad_summands[] = {0, 2, 0};
  int64_t device = -1, blo[2], bhi[2];
  int32_t summand = -1;
  size_t n = 0;

  REQUIRE_OK(reshard_layout_create_boxes(2, shape, 3, devices, summands, lo, hi, 2,
                                         RESHARD_REDUCE_SUM, &layout));
  CHECK_OK(reshard_layout_num_entries(layout, &n));
  CHECK(n == 3);
  /* Sorted by device: 3, 5, 9. */
  CHECK_OK(reshard_layout_entry(layout, 0, &device, &summand, blo, bhi));
  CHECK(device == 3 && summand == 1 && blo[0] == 0 && bhi[0] == 2 && blo[1] == 0 && bhi[1] == 4);
  CHECK_OK(reshard_layout_entry(layout, 2, &device, &summand, blo, bhi));
  CHECK(device == 9 && summand == 0 && blo[0] == 0 && bhi[0] == 4);
  reshard_layout_destroy(layout);
  layout = NULL;
  /* summands may be NULL (one summand; op ignored). */
  REQUIRE_OK(reshard_layout_create_boxes(2, shape, 3, devices, NULL, lo, hi, 1, 0, &layout));
  reshard_layout_destroy(layout);
  layout = NULL;
  /* A rank-0 tensor, and a layout with no entries. */
  REQUIRE_OK(reshard_layout_create_boxes(0, NULL, 1, devices, NULL, NULL, NULL, 1, 0, &layout));
  reshard_layout_destroy(layout);
  layout = NULL;
  REQUIRE_OK(reshard_layout_create_boxes(2, shape, 0, NULL, NULL, NULL, NULL, 1, 0, &layout));
  CHECK_OK(reshard_layout_num_entries(layout, &n));
  CHECK(n == 0);
  reshard_layout_destroy(layout);

  CHECK_ERR(reshard_layout_create_boxes(2, shape, 3, devices, summands, lo, hi, 2,
                                        RESHARD_REDUCE_SUM, NULL),
            RESHARD_ERROR_INVALID_ARGUMENT, "out_layout: must not be NULL");
  CHECK_ERR(reshard_layout_create_boxes(2, NULL, 3, devices, summands, lo, hi, 2,
                                        RESHARD_REDUCE_SUM, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "shape: must not be NULL");
  CHECK_ERR(reshard_layout_create_boxes(2, shape, 3, NULL, summands, lo, hi, 2, RESHARD_REDUCE_SUM,
                                        &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "devices: must not be NULL");
  CHECK_ERR(reshard_layout_create_boxes(2, shape, 3, devices, summands, NULL, hi, 2,
                                        RESHARD_REDUCE_SUM, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "lo: must not be NULL");
  CHECK_ERR(reshard_layout_create_boxes(2, shape, 3, devices, summands, lo, NULL, 2,
                                        RESHARD_REDUCE_SUM, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "hi: must not be NULL");
  CHECK_ERR(reshard_layout_create_boxes(2, shape, 3, devices, summands, lo, bad_hi, 2,
                                        RESHARD_REDUCE_SUM, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "entries[1].box: [0:2, 0:5] is not inside");
  CHECK_ERR(reshard_layout_create_boxes(2, shape, 3, dup_devices, summands, lo, hi, 2,
                                        RESHARD_REDUCE_SUM, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "entries[2].device: device 9");
  CHECK_ERR(reshard_layout_create_boxes(2, shape, 3, devices, bad_summands, lo, hi, 2,
                                        RESHARD_REDUCE_SUM, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "entries[1].summand: 2 is outside [0, 2)");
  CHECK_ERR(reshard_layout_create_boxes(2, shape, 3, devices, NULL, lo, hi, 0, RESHARD_REDUCE_SUM,
                                        &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "num_summands: 0");
  CHECK_ERR(reshard_layout_create_boxes(2, shape, 3, devices, summands, lo, hi, 2, 5, &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "op: invalid value 5");
  CHECK(untouched == kSentinel);
  /* 1.4: means are layouts like any other (planning checks where they may
   * appear). */
  reshard_layout_t* mean = NULL;
  CHECK_OK(reshard_layout_create_boxes(2, shape, 3, devices, summands, lo, hi, 2,
                                       RESHARD_REDUCE_MEAN, &mean));
  CHECK(mean != NULL);
  reshard_layout_destroy(mean);
}

/* ------------------------------------------------------------------------ */
/* topology and plan inputs                                                 */
/* ------------------------------------------------------------------------ */

static void test_topology(void) {
  reshard_topology_t* topology = NULL;
  reshard_topology_t* const kSentinel = (reshard_topology_t*)&g_failures;
  reshard_topology_t* untouched = kSentinel;
  size_t n = 99;
  REQUIRE_OK(reshard_topology_create(&topology));
  CHECK_OK(reshard_topology_num_devices(topology, &n));
  CHECK(n == 0);
  CHECK_OK(reshard_topology_add_device(topology, 5, 1, 0, 1));
  CHECK_OK(reshard_topology_add_device(topology, 2, 0, 0, 0));
  CHECK_OK(reshard_topology_add_device(topology, 5, 1, 0, 1)); /* same again: no-op */
  CHECK_OK(reshard_topology_num_devices(topology, &n));
  CHECK(n == 2);
  CHECK_ERR(reshard_topology_add_device(topology, 5, 2, 0, 1), RESHARD_ERROR_INVALID_ARGUMENT,
            "device: device 5 given as process 2");
  CHECK_ERR(reshard_topology_add_device(topology, -1, 0, 0, 0), RESHARD_ERROR_INVALID_ARGUMENT,
            "device: device id -1 is negative");
  CHECK_ERR(reshard_topology_add_device(topology, 7, -1, 0, 0), RESHARD_ERROR_INVALID_ARGUMENT,
            "must be non-negative");
  CHECK_ERR(reshard_topology_add_device(NULL, 7, 0, 0, 0), RESHARD_ERROR_INVALID_ARGUMENT,
            "topology: must not be NULL");
  CHECK_OK(reshard_topology_num_devices(topology, &n));
  CHECK(n == 2); /* unchanged by the failed calls */
  CHECK_ERR(reshard_topology_num_devices(NULL, &n), RESHARD_ERROR_INVALID_ARGUMENT, "topology");
  CHECK_ERR(reshard_topology_num_devices(topology, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_count");
  CHECK_ERR(reshard_topology_create(NULL), RESHARD_ERROR_INVALID_ARGUMENT, "out_topology");
  CHECK(untouched == kSentinel);
  reshard_topology_destroy(topology);
  reshard_topology_destroy(NULL);
}

/* A reshard_plan_options_t as a newer header might define it. */
typedef struct plan_options_v2 {
  reshard_plan_options_t v1;
  int64_t future_field;
} plan_options_v2;

static void test_plan_input(void) {
  fixture f;
  reshard_plan_input_t* input = NULL;
  reshard_plan_input_t* const kSentinel = (reshard_plan_input_t*)&g_failures;
  reshard_plan_input_t* untouched = kSentinel;
  reshard_plan_options_t options = RESHARD_PLAN_OPTIONS_INIT;
  plan_options_v2 bigger;
  reshard_plan_t* plan = NULL;
  size_t n = 0;
  uint64_t fp1 = 0, fp2 = 0;
  const int64_t other_shape[] = {8, 7};
  const int64_t neg_shape[] = {8, -1};

  REQUIRE(fixture_create(&f));
  CHECK_OK(reshard_plan_input_num_tensors(f.input, &n));
  CHECK(n == 2);
  CHECK_OK(reshard_plan_input_fingerprint(f.input, &fp1));
  REQUIRE_OK(reshard_plan_create(f.input, NULL, &plan));
  CHECK_OK(reshard_plan_fingerprint(plan, &fp2));
  CHECK(fp1 == fp2 && fp1 != 0);
  reshard_plan_destroy(plan);
  plan = NULL;

  /* add_tensor errors; the input keeps its two tensors. */
  CHECK_ERR(reshard_plan_input_add_tensor(NULL, "x", 2, kW, RESHARD_DTYPE_F32, f.w_src, f.w_dst),
            RESHARD_ERROR_INVALID_ARGUMENT, "input: must not be NULL");
  CHECK_ERR(
      reshard_plan_input_add_tensor(f.input, NULL, 2, kW, RESHARD_DTYPE_F32, f.w_src, f.w_dst),
      RESHARD_ERROR_INVALID_ARGUMENT, "name: must not be NULL");
  CHECK_ERR(reshard_plan_input_add_tensor(f.input, "", 2, kW, RESHARD_DTYPE_F32, f.w_src, f.w_dst),
            RESHARD_ERROR_INVALID_ARGUMENT, "name: must not be empty");
  CHECK_ERR(
      reshard_plan_input_add_tensor(f.input, "x", 2, NULL, RESHARD_DTYPE_F32, f.w_src, f.w_dst),
      RESHARD_ERROR_INVALID_ARGUMENT, "shape: must not be NULL");
  CHECK_ERR(reshard_plan_input_add_tensor(f.input, "x", 2, kW, 0, f.w_src, f.w_dst),
            RESHARD_ERROR_INVALID_ARGUMENT, "dtype: invalid value 0");
  CHECK_ERR(reshard_plan_input_add_tensor(f.input, "x", 2, kW, 99, f.w_src, f.w_dst),
            RESHARD_ERROR_INVALID_ARGUMENT, "dtype: invalid value 99");
  CHECK_ERR(reshard_plan_input_add_tensor(f.input, "x", 2, kW, RESHARD_DTYPE_F32, NULL, f.w_dst),
            RESHARD_ERROR_INVALID_ARGUMENT, "src: must not be NULL");
  CHECK_ERR(reshard_plan_input_add_tensor(f.input, "x", 2, kW, RESHARD_DTYPE_F32, f.w_src, NULL),
            RESHARD_ERROR_INVALID_ARGUMENT, "dst: must not be NULL");
  CHECK_ERR(reshard_plan_input_add_tensor(f.input, "x", 2, other_shape, RESHARD_DTYPE_F32, f.w_src,
                                          f.w_dst),
            RESHARD_ERROR_MISMATCH, "src: layout shape [8, 6] differs from shape [8, 7]");
  CHECK_ERR(reshard_plan_input_add_tensor(f.input, "x", 2, kW, RESHARD_DTYPE_F32, f.w_src, f.b_dst),
            RESHARD_ERROR_MISMATCH, "dst: layout shape [5]");
  CHECK_ERR(reshard_plan_input_add_tensor(f.input, "x", 2, neg_shape, RESHARD_DTYPE_F32, f.w_src,
                                          f.w_dst),
            RESHARD_ERROR_INVALID_ARGUMENT, "shape[1]: size -1 is negative");
  CHECK_OK(reshard_plan_input_num_tensors(f.input, &n));
  CHECK(n == 2);

  /* Options: the _INIT defaults, a newer (larger) struct, bad sizes. */
  CHECK_OK(reshard_plan_input_set_options(f.input, &options));
  memset(&bigger, 0x7f, sizeof bigger);
  bigger.v1 = options;
  bigger.v1.struct_size = sizeof bigger;
  bigger.v1.split_min_bytes = 4096;
  CHECK_OK(reshard_plan_input_set_options(f.input, &bigger.v1));
  CHECK_OK(reshard_plan_input_fingerprint(f.input, &fp2));
  CHECK(fp2 != fp1); /* the option took effect */
  options.struct_size = 0;
  CHECK_ERR(reshard_plan_input_set_options(f.input, &options), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->struct_size: 0 is smaller");
  options.struct_size = sizeof(size_t) + sizeof(int64_t);
  CHECK_ERR(reshard_plan_input_set_options(f.input, &options), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->struct_size: 16 is smaller");
  CHECK_ERR(reshard_plan_input_set_options(f.input, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "options: must not be NULL");
  CHECK_ERR(reshard_plan_input_set_options(NULL, &bigger.v1), RESHARD_ERROR_INVALID_ARGUMENT,
            "input: must not be NULL");
  options.struct_size = sizeof options;
  options.single_hop_guard = 0; /* the fixture's */
  CHECK_OK(reshard_plan_input_set_options(f.input, &options));
  CHECK_OK(reshard_plan_input_fingerprint(f.input, &fp2));
  CHECK(fp2 == fp1); /* back to the fixture's options */

  CHECK_ERR(reshard_plan_input_set_topology(f.input, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "topology: must not be NULL");
  CHECK_ERR(reshard_plan_input_set_topology(NULL, f.topology), RESHARD_ERROR_INVALID_ARGUMENT,
            "input: must not be NULL");
  CHECK_ERR(reshard_plan_input_num_tensors(NULL, &n), RESHARD_ERROR_INVALID_ARGUMENT, "input");
  CHECK_ERR(reshard_plan_input_num_tensors(f.input, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_count");
  CHECK_ERR(reshard_plan_input_fingerprint(NULL, &fp2), RESHARD_ERROR_INVALID_ARGUMENT, "input");
  CHECK_ERR(reshard_plan_input_fingerprint(f.input, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_fingerprint");
  CHECK_ERR(reshard_plan_input_create(NULL), RESHARD_ERROR_INVALID_ARGUMENT, "out_input");

  /* An empty input plans to an empty plan. */
  REQUIRE_OK(reshard_plan_input_create(&input));
  REQUIRE_OK(reshard_plan_create(input, NULL, &plan));
  CHECK_OK(reshard_plan_num_tensors(plan, &n));
  CHECK(n == 0);
  reshard_plan_destroy(plan);
  reshard_plan_input_destroy(input);
  reshard_plan_input_destroy(NULL);
  CHECK(untouched == kSentinel);
  fixture_destroy(&f);
}

static const char kSpec[] =
    "{\"meshes\": {\"train\": {\"axis_names\": [\"dp\", \"tp\"], \"shape\": [2, 2],"
    " \"processes\": [0, 0, 1, 1]},"
    " \"infer\": {\"axis_names\": [\"tp\"], \"shape\": [4], \"devices\": [4, 5, 6, 7]}},"
    " \"tensors\": ["
    "  {\"name\": \"w\", \"shape\": [8, 6], \"dtype\": \"f32\","
    "   \"src\": {\"mesh\": \"train\", \"spec\": [\"dp\", \"tp\"]},"
    "   \"dst\": {\"mesh\": \"infer\", \"spec\": [null, \"tp\"]}},"
    "  {\"name\": \"b\", \"shape\": [5], \"dtype\": \"i32\","
    "   \"src\": {\"mesh\": \"train\", \"spec\": [\"dp\"]},"
    "   \"dst\": {\"mesh\": \"infer\", \"spec\": [null]}}]}";

static void test_spec(void) {
  reshard_plan_input_t* input = NULL;
  reshard_plan_input_t* const kSentinel = (reshard_plan_input_t*)&g_failures;
  reshard_plan_input_t* untouched = kSentinel;
  reshard_plan_t* plan = NULL;
  size_t n = 0;
  const char* name = NULL;
  static const char kShortSpec[] =
      "{\"meshes\": {\"m\": {\"axis_names\": [\"dp\", \"tp\"], \"shape\": [2, 2]}}, \"tensors\": ["
      "{\"name\": \"t\", \"shape\": [8, 6], \"dtype\": \"f32\","
      " \"src\": {\"mesh\": \"m\", \"spec\": [\"dp\"]}, \"dst\": {\"mesh\": \"m\", \"spec\": "
      "[]}}]}";
  static const char kLongSpec[] =
      "{\"meshes\": {\"m\": {\"axis_names\": [\"x\"], \"shape\": [2]}}, \"tensors\": ["
      "{\"name\": \"t\", \"shape\": [4], \"dtype\": \"f32\","
      " \"src\": {\"mesh\": \"m\", \"spec\": [\"x\", null]}, \"dst\": {\"mesh\": \"m\"}}]}";
  static const char kBadAxis[] =
      "{\"meshes\": {\"m\": {\"axis_names\": [\"x\"], \"shape\": [2]}}, \"tensors\": ["
      "{\"name\": \"t\", \"shape\": [4], \"dtype\": \"f32\","
      " \"src\": {\"mesh\": \"m\", \"spec\": [\"tq\"]}, \"dst\": {\"mesh\": \"m\", \"spec\": "
      "[null]}}]}";

  REQUIRE_OK(reshard_plan_input_from_spec(kSpec, strlen(kSpec), &input));
  CHECK_OK(reshard_plan_input_num_tensors(input, &n));
  CHECK(n == 2);
  REQUIRE_OK(reshard_plan_create(input, NULL, &plan));
  CHECK_OK(reshard_plan_tensor_name(plan, 1, &name));
  CHECK(name != NULL && strcmp(name, "b") == 0);
  CHECK_OK(reshard_plan_num_processes(plan, &n));
  CHECK(n == 2); /* train on processes 0 and 1; infer defaults to process 0 */
  reshard_plan_destroy(plan);
  reshard_plan_input_destroy(input);

  /* A short spec (JAX P("dp") on a rank-2 tensor) leaves dim 1 unsharded. */
  REQUIRE_OK(reshard_plan_input_from_spec(kShortSpec, strlen(kShortSpec), &input));
  REQUIRE_OK(reshard_plan_create(input, NULL, &plan));
  {
    int64_t device = -1, lo[2] = {-1, -1}, hi[2] = {-1, -1};
    CHECK_OK(reshard_plan_tensor_entry(plan, 0, RESHARD_SIDE_SRC, 3, &device, NULL, lo, hi));
    CHECK(device == 3 && lo[0] == 4 && lo[1] == 0 && hi[0] == 8 && hi[1] == 6);
    CHECK_OK(reshard_plan_tensor_entry(plan, 0, RESHARD_SIDE_DST, 1, &device, NULL, lo, hi));
    CHECK(device == 1 && lo[0] == 0 && lo[1] == 0 && hi[0] == 8 && hi[1] == 6); /* [] */
  }
  reshard_plan_destroy(plan);
  reshard_plan_input_destroy(input);

  /* The length bounds the text: a prefix is malformed JSON. */
  CHECK_ERR(reshard_plan_input_from_spec(kSpec, 40, &untouched), RESHARD_ERROR_PARSE, "line");
  CHECK_ERR(reshard_plan_input_from_spec("", 0, &untouched), RESHARD_ERROR_PARSE, "");
  CHECK_ERR(reshard_plan_input_from_spec(NULL, 0, &untouched), RESHARD_ERROR_PARSE, "");
  CHECK_ERR(reshard_plan_input_from_spec(kBadAxis, strlen(kBadAxis), &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "tensors[0].src.spec[0]: unknown axis \"tq\"");
  CHECK_ERR(reshard_plan_input_from_spec(kLongSpec, strlen(kLongSpec), &untouched),
            RESHARD_ERROR_INVALID_ARGUMENT,
            "tensors[0].src.spec: 2 entries for a tensor of rank 1");
  CHECK_ERR(reshard_plan_input_from_spec(NULL, 5, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "json: must not be NULL");
  CHECK_ERR(reshard_plan_input_from_spec(kSpec, strlen(kSpec), NULL),
            RESHARD_ERROR_INVALID_ARGUMENT, "out_input: must not be NULL");
  /* Issue 37 finding 7: the whole length counts. A NUL inside it (here
   * after a complete spec, then text) is an error, as the CLI gives for the
   * same bytes, never a silent truncation to the text before it. */
  {
    char with_nul[sizeof kShortSpec + 16];
    const size_t n_spec = strlen(kShortSpec);
    memcpy(with_nul, kShortSpec, n_spec);
    memcpy(with_nul + n_spec, "\0{\"junk\": 1}", 13);
    CHECK_ERR(reshard_plan_input_from_spec(with_nul, n_spec + 13, &untouched), RESHARD_ERROR_PARSE,
              "line 1, column 198: NUL character at byte 197 of 210 (not valid JSON)");
    /* A NUL inside a string value, and the spec alone still parses. */
    memcpy(with_nul, kShortSpec, n_spec);
    with_nul[strstr(kShortSpec, "\"t\"") - kShortSpec + 1] = '\0';
    CHECK_ERR(reshard_plan_input_from_spec(with_nul, n_spec, &untouched), RESHARD_ERROR_PARSE,
              "NUL character at byte");
    REQUIRE_OK(reshard_plan_input_from_spec(kShortSpec, n_spec, &input));
    reshard_plan_input_destroy(input);
  }
  /* Issue 37 finding 8: a number past a double's range names its path and
   * position. */
  {
    static const char kHuge[] =
        "{\"meshes\": {\"m\": {\"axis_names\": [\"x\"], \"shape\": [2]}},\n"
        " \"options\": {\"alpha_seconds\": 1e309}, \"tensors\": []}";
    CHECK_ERR(reshard_plan_input_from_spec(kHuge, strlen(kHuge), &untouched), RESHARD_ERROR_PARSE,
              "options.alpha_seconds: line 2, column 31: number 1e309 is too large for a double");
  }
  CHECK(untouched == kSentinel);
}

/* ------------------------------------------------------------------------ */
/* planning and statistics                                                  */
/* ------------------------------------------------------------------------ */

typedef struct plan_request_v2 {
  reshard_plan_request_t v1;
  int64_t future_field;
} plan_request_v2;

typedef struct plan_stats_v2 {
  reshard_plan_stats_t v1;
  int64_t future_field;
} plan_stats_v2;

/* The serialized bytes of a whole plan made with `threads` (1.1), or with
 * a 1.0-sized request when threads is INT32_MIN. */
static reshard_buffer_t* plan_bytes_with_threads(const fixture* f, int32_t threads) {
  reshard_plan_request_t request = RESHARD_PLAN_REQUEST_INIT;
  reshard_plan_t* plan = NULL;
  reshard_buffer_t* bytes = NULL;
  if (threads == INT32_MIN) {
    request.struct_size = offsetof(reshard_plan_request_t, threads);
  } else {
    request.threads = threads;
  }
  CHECK_OK(reshard_plan_create(f->input, &request, &plan));
  if (plan == NULL) return NULL;
  CHECK_OK(reshard_plan_serialize(plan, NULL, &bytes));
  reshard_plan_destroy(plan);
  return bytes;
}

/* Invariant (ABI 1.1 request.threads): the plan's bytes are the same for a
 * 1.0-sized request and for every thread count; below -1 is an error. */
static void test_plan_threads(const fixture* f) {
  static const int32_t kThreads[] = {0, 1, 2, 3, 8, RESHARD_PLAN_THREADS_ALL, 1 << 30};
  reshard_buffer_t* reference = plan_bytes_with_threads(f, INT32_MIN);
  reshard_plan_request_t request = RESHARD_PLAN_REQUEST_INIT;
  reshard_plan_t* untouched = NULL;
  size_t i;
  REQUIRE(reference != NULL);
  for (i = 0; i < sizeof kThreads / sizeof kThreads[0]; ++i) {
    reshard_buffer_t* bytes = plan_bytes_with_threads(f, kThreads[i]);
    CHECK(bytes != NULL && reshard_buffer_size(bytes) == reshard_buffer_size(reference) &&
          memcmp(reshard_buffer_data(bytes), reshard_buffer_data(reference),
                 reshard_buffer_size(reference)) == 0);
    reshard_buffer_destroy(bytes);
  }
  reshard_buffer_destroy(reference);
  request.threads = -2;
  CHECK_ERR(reshard_plan_create(f->input, &request, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "request->threads: -2 is invalid");
  CHECK(untouched == NULL);
}

/* One bad value per case; the message every entry point gives for it. */
static const struct {
  size_t offset;
  int is_int;
  double value;
  const char* message;
} kBadOptions[] = {
    {offsetof(reshard_plan_options_t, split_min_bytes), 1, -1,
     "options.split_min_bytes: must be non-negative, got -1"},
    {offsetof(reshard_plan_options_t, alpha_seconds), 0, HUGE_VAL,
     "options.alpha_seconds: must be non-negative and finite, got inf"},
    {offsetof(reshard_plan_options_t, intra_host_bytes_per_second), 0, 0,
     "options.intra_host_bytes_per_second: must be positive and finite, got 0"},
    {offsetof(reshard_plan_options_t, inter_host_bytes_per_second), 0, -HUGE_VAL,
     "options.inter_host_bytes_per_second: must be positive and finite, got -inf"},
    {offsetof(reshard_plan_options_t, staging_budget_bytes), 1, -5,
     "options.staging_budget_bytes: must be non-negative, got -5"},
    /* Issue 37 finding 4: finite values whose estimate is not finite (the
     * plan wrote but never read back). */
    {offsetof(reshard_plan_options_t, alpha_seconds), 0, 1e308,
     "options.alpha_seconds: must be at most 1e+09 seconds (the cost estimate must stay finite), "
     "got 1e+308"},
    {offsetof(reshard_plan_options_t, intra_host_bytes_per_second), 0, 5e-324,
     "options.intra_host_bytes_per_second: must be at least 1 byte per second (the cost estimate "
     "must stay finite), got 5e-324"},
};

static void test_plan_create(void) {
  fixture f;
  reshard_plan_t* plan = NULL;
  reshard_plan_t* const kSentinel = (reshard_plan_t*)&g_failures;
  reshard_plan_t* untouched = kSentinel;
  reshard_plan_request_t request = RESHARD_PLAN_REQUEST_INIT;
  plan_request_v2 bigger;
  reshard_plan_options_t options = RESHARD_PLAN_OPTIONS_INIT;
  reshard_plan_input_t* dup = NULL;
  reshard_plan_stats_t stats = RESHARD_PLAN_STATS_INIT;
  int32_t has = -1;

  REQUIRE(fixture_create(&f));
  /* Scope GLOBAL: statistics, no parts. */
  request.scope = RESHARD_PLAN_SCOPE_GLOBAL;
  REQUIRE_OK(reshard_plan_create(f.input, &request, &plan));
  CHECK_OK(reshard_plan_has_part(plan, 0, &has));
  CHECK(has == 0);
  CHECK_OK(reshard_plan_stats(plan, &stats));
  CHECK(stats.network_bytes > 0);
  reshard_plan_destroy(plan);
  plan = NULL;
  /* Scope PROCESS without global statistics: one part. */
  request.scope = RESHARD_PLAN_SCOPE_PROCESS;
  request.process = 1;
  request.global_stats = 0;
  REQUIRE_OK(reshard_plan_create(f.input, &request, &plan));
  CHECK_OK(reshard_plan_has_part(plan, 1, &has));
  CHECK(has == 1);
  CHECK_OK(reshard_plan_has_part(plan, 2, &has));
  CHECK(has == 0);
  CHECK_ERR(reshard_plan_stats(plan, &stats), RESHARD_ERROR_UNSUPPORTED, "plan: has no statistics");
  reshard_plan_destroy(plan);
  plan = NULL;
  /* A newer, larger request struct. */
  memset(&bigger, 0x7f, sizeof bigger);
  bigger.v1.struct_size = sizeof bigger;
  bigger.v1.scope = RESHARD_PLAN_SCOPE_ALL;
  bigger.v1.process = 0;
  bigger.v1.global_stats = 1;
  bigger.v1.reserved0 = 0;
  /* bigger.v1.threads stays 0x7f7f7f7f: capped, never billions of threads;
   * bigger.v1.max_plan_bytes stays 0x7f7f7f7f7f7f7f7f: a limit of 9 EB. */
  bigger.v1.reserved1 = 0;
  REQUIRE_OK(reshard_plan_create(f.input, &bigger.v1, &plan));
  CHECK_OK(reshard_plan_has_part(plan, 2, &has));
  CHECK(has == 1);
  reshard_plan_destroy(plan);
  reshard_plan_destroy(NULL);
  test_plan_threads(&f);

  /* Errors. */
  CHECK_ERR(reshard_plan_create(NULL, NULL, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "input: must not be NULL");
  CHECK_ERR(reshard_plan_create(f.input, NULL, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_plan: must not be NULL");
  request.struct_size = 0;
  CHECK_ERR(reshard_plan_create(f.input, &request, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "request->struct_size: 0");
  request.struct_size = sizeof(size_t) + sizeof(int32_t);
  CHECK_ERR(reshard_plan_create(f.input, &request, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "request->struct_size: 12");
  request.struct_size = sizeof request;
  request.scope = 7;
  CHECK_ERR(reshard_plan_create(f.input, &request, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "request->scope: invalid value 7");
  request.scope = RESHARD_PLAN_SCOPE_PROCESS;
  request.process = 9;
  CHECK_ERR(reshard_plan_create(f.input, &request, &untouched), RESHARD_ERROR_OUT_OF_RANGE,
            "request.process");
  options.alpha_seconds = -1;
  CHECK_OK(reshard_plan_input_set_options(f.input, &options));
  CHECK_ERR(reshard_plan_create(f.input, NULL, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options.alpha_seconds: must be non-negative");
  /* The one rule for option values (reshard::validate): the messages the
   * spec parser and the plan decoder give for the same values. */
  for (size_t i = 0; i < sizeof kBadOptions / sizeof kBadOptions[0]; ++i) {
    options = (reshard_plan_options_t)RESHARD_PLAN_OPTIONS_INIT;
    char* const field = (char*)&options + kBadOptions[i].offset;
    const int64_t as_int = (int64_t)kBadOptions[i].value;
    if (kBadOptions[i].is_int)
      memcpy(field, &as_int, sizeof as_int);
    else
      memcpy(field, &kBadOptions[i].value, sizeof(double));
    CHECK_OK(reshard_plan_input_set_options(f.input, &options));
    CHECK_ERR(reshard_plan_create(f.input, NULL, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
              kBadOptions[i].message);
  }
  /* Duplicate tensor names are found when planning. */
  REQUIRE_OK(reshard_plan_input_create(&dup));
  CHECK_OK(reshard_plan_input_add_tensor(dup, "w", 2, kW, RESHARD_DTYPE_F32, f.w_src, f.w_dst));
  CHECK_OK(reshard_plan_input_add_tensor(dup, "w", 2, kW, RESHARD_DTYPE_F32, f.w_src, f.w_dst));
  CHECK_ERR(reshard_plan_create(dup, NULL, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "tensors[1].name: duplicate name \"w\"");
  reshard_plan_input_destroy(dup);
  CHECK(untouched == kSentinel);
  fixture_destroy(&f);
}

static void test_stats(void) {
  fixture f;
  reshard_plan_t* plan = NULL;
  reshard_plan_stats_t stats = RESHARD_PLAN_STATS_INIT;
  plan_stats_v2 bigger;
  reshard_device_traffic_t traffic = RESHARD_DEVICE_TRAFFIC_INIT;
  int64_t send = 0, recv = 0, local = 0;
  uint64_t i;
  uint64_t fp = 0;

  REQUIRE(fixture_create(&f));
  plan = fixture_plan(&f);
  REQUIRE(plan != NULL);
  REQUIRE_OK(reshard_plan_stats(plan, &stats));
  CHECK(stats.struct_size == sizeof stats);
  /* w: each infer device needs 8x2 f32 = 64 bytes, holds nothing; b: 5 i32
   * = 20 bytes on each of 4 devices. Devices are disjoint: all is network. */
  CHECK(stats.network_bytes == 4 * 64 - 64 + 4 * 20); /* the empty shard needs nothing */
  CHECK(stats.network_bytes == stats.lower_bound_network_bytes);
  CHECK(stats.local_bytes == 0);
  CHECK(stats.messages > 0 && stats.pieces > 0 && stats.rounds >= 1);
  CHECK(stats.max_send_bytes >= stats.lower_bound_max_send_bytes);
  CHECK(stats.max_recv_bytes >= stats.lower_bound_max_recv_bytes);
  CHECK(stats.cost_seconds >= stats.lower_bound_cost_seconds && stats.cost_seconds > 0);
  /* train on 0/1, infer on 2 (hosts = processes): what crosses is what
   * reaches process 2 once; relays forward the rest inside it (1.3). */
  CHECK(stats.forwarded_bytes > 0 && stats.forwarded_bytes < stats.network_bytes);
  CHECK(stats.cross_process_bytes == stats.network_bytes - stats.forwarded_bytes);
  CHECK(stats.cross_host_bytes == stats.network_bytes - stats.forwarded_bytes);
  CHECK(stats.plan_seconds >= 0);
  CHECK(stats.num_devices == 8);
  /* 1.2: host figures and bounds over all plans. Every device is on its own
   * process and so its own host here: host bounds equal device ones. */
  CHECK(stats.stages == 2);
  CHECK(stats.lower_bound_cross_host_bytes <= stats.cross_host_bytes);
  CHECK(stats.lower_bound_cross_host_bytes > 0);
  CHECK(stats.max_host_send_bytes >= stats.lower_bound_max_host_send_bytes);
  CHECK(stats.max_host_recv_bytes >= stats.lower_bound_max_host_recv_bytes);
  CHECK(stats.lower_bound_max_host_recv_bytes > 0);
  CHECK(stats.lower_bound_binding >= RESHARD_BOUND_DEVICE_RECV &&
        stats.lower_bound_binding <= RESHARD_BOUND_HOST_SEND);
  CHECK(stats.lower_bound_binding_id >= 0);
  {
    /* A 1.1-sized struct gets the 1.1 fields and nothing past them. */
    reshard_plan_stats_t old;
    memset(&old, 0x55, sizeof old);
    old.struct_size = offsetof(reshard_plan_stats_t, stages);
    CHECK_OK(reshard_plan_stats(plan, &old));
    CHECK(old.num_devices == 8 && old.network_bytes == stats.network_bytes);
    CHECK(old.stages == 0x5555555555555555);
  }
  {
    /* A 1.4-sized struct gets everything but max_scratch_bytes (1.5); the
     * whole struct gets it: 0, the plan has no scratch. */
    reshard_plan_stats_t old;
    memset(&old, 0x55, sizeof old);
    old.struct_size = offsetof(reshard_plan_stats_t, max_scratch_bytes);
    CHECK_OK(reshard_plan_stats(plan, &old));
    CHECK(old.forwarded_bytes == stats.forwarded_bytes);
    CHECK(old.max_scratch_bytes == 0x5555555555555555);
    CHECK(stats.max_scratch_bytes == 0);
  }
  for (i = 0; i < stats.num_devices; ++i) {
    traffic.device = -1;
    CHECK_OK(reshard_plan_device_traffic(plan, (size_t)i, &traffic));
    CHECK(traffic.device == (int64_t)i);
    send += traffic.send_bytes;
    recv += traffic.recv_bytes;
    local += traffic.local_bytes;
  }
  CHECK(send == stats.network_bytes && recv == stats.network_bytes && local == 0);
  CHECK_ERR(reshard_plan_device_traffic(plan, 8, &traffic), RESHARD_ERROR_OUT_OF_RANGE,
            "index: 8 >= 8 devices");

  /* A newer, larger result struct: only the known part is written. */
  memset(&bigger, 0x7f, sizeof bigger);
  bigger.v1.struct_size = sizeof bigger;
  CHECK_OK(reshard_plan_stats(plan, &bigger.v1));
  CHECK(bigger.v1.struct_size == sizeof bigger);
  CHECK(bigger.v1.network_bytes == stats.network_bytes);
  CHECK(bigger.future_field == 0x7f7f7f7f7f7f7f7f);
  /* Too small. */
  stats.struct_size = 0;
  stats.network_bytes = -5;
  CHECK_ERR(reshard_plan_stats(plan, &stats), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_stats->struct_size: 0 is smaller");
  stats.struct_size = offsetof(reshard_plan_stats_t, num_devices);
  CHECK_ERR(reshard_plan_stats(plan, &stats), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_stats->struct_size");
  CHECK(stats.network_bytes == -5);
  traffic.struct_size = 8;
  CHECK_ERR(reshard_plan_device_traffic(plan, 0, &traffic), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_traffic->struct_size: 8");
  CHECK_ERR(reshard_plan_stats(NULL, &stats), RESHARD_ERROR_INVALID_ARGUMENT, "plan: must not");
  CHECK_ERR(reshard_plan_stats(plan, NULL), RESHARD_ERROR_INVALID_ARGUMENT, "out_stats: must not");
  CHECK_ERR(reshard_plan_device_traffic(NULL, 0, &traffic), RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK_ERR(reshard_plan_device_traffic(plan, 0, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_traffic: must not be NULL");
  CHECK_ERR(reshard_plan_fingerprint(NULL, &fp), RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK_ERR(reshard_plan_fingerprint(plan, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_fingerprint");
  reshard_plan_destroy(plan);
  fixture_destroy(&f);
}

/* ------------------------------------------------------------------------ */
/* inspection                                                               */
/* ------------------------------------------------------------------------ */

static void test_inspect_tensors(void) {
  fixture f;
  reshard_plan_t* plan;
  size_t n = 0, rank = 0, entry = 99;
  const char* name = NULL;
  reshard_dtype_t dtype = 0;
  int64_t shape[2] = {0, 0}, device = -1, lo[2], hi[2];
  int32_t summand = -1, num_summands = 0, found = -1;
  reshard_reduce_op_t op = 0;

  REQUIRE(fixture_create(&f));
  plan = fixture_plan(&f);
  REQUIRE(plan != NULL);
  CHECK_OK(reshard_plan_num_tensors(plan, &n));
  CHECK(n == 2);
  CHECK_OK(reshard_plan_tensor_name(plan, 0, &name));
  CHECK(name != NULL && strcmp(name, "w") == 0);
  CHECK_OK(reshard_plan_tensor_dtype(plan, 1, &dtype));
  CHECK(dtype == RESHARD_DTYPE_I32);
  CHECK_OK(reshard_plan_tensor_rank(plan, 0, &rank));
  CHECK(rank == 2);
  CHECK_OK(reshard_plan_tensor_shape(plan, 0, shape));
  CHECK(shape[0] == 8 && shape[1] == 6);
  CHECK_OK(reshard_plan_tensor_num_entries(plan, 0, RESHARD_SIDE_SRC, &n));
  CHECK(n == 4);
  CHECK_OK(reshard_plan_tensor_num_entries(plan, 0, RESHARD_SIDE_DST, &n));
  CHECK(n == 4);
  /* Destination entry 3 (device 7) is the empty shard [6:6] of dim 1. */
  CHECK_OK(reshard_plan_tensor_entry(plan, 0, RESHARD_SIDE_DST, 3, &device, &summand, lo, hi));
  CHECK(device == 7 && summand == 0 && lo[0] == 0 && hi[0] == 8 && lo[1] == 6 && hi[1] == 6);
  CHECK_OK(reshard_plan_tensor_entry(plan, 0, RESHARD_SIDE_SRC, 1, &device, NULL, lo, hi));
  CHECK(device == 1 && lo[0] == 0 && hi[0] == 4 && lo[1] == 3 && hi[1] == 6);
  CHECK_OK(reshard_plan_tensor_partial(plan, 0, RESHARD_SIDE_SRC, &num_summands, &op));
  CHECK(num_summands == 1 && op == RESHARD_REDUCE_SUM);
  CHECK_OK(reshard_plan_tensor_partial(plan, 0, RESHARD_SIDE_DST, NULL, NULL));
  CHECK_OK(reshard_plan_entry_of_device(plan, 0, RESHARD_SIDE_DST, 6, &entry, &found));
  CHECK(found == 1 && entry == 2);
  entry = 99;
  CHECK_OK(reshard_plan_entry_of_device(plan, 0, RESHARD_SIDE_DST, 2, &entry, &found));
  CHECK(found == 0 && entry == 99);
  CHECK_OK(reshard_plan_entry_of_device(plan, 0, RESHARD_SIDE_SRC, 2, NULL, &found));
  CHECK(found == 1);

  /* Errors: NULLs, bad tensor / side / entry; outputs untouched. */
  name = NULL;
  CHECK_ERR(reshard_plan_num_tensors(NULL, &n), RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK_ERR(reshard_plan_num_tensors(plan, NULL), RESHARD_ERROR_INVALID_ARGUMENT, "out_count");
  CHECK_ERR(reshard_plan_tensor_name(plan, 2, &name), RESHARD_ERROR_OUT_OF_RANGE,
            "tensor: 2 >= 2 tensors");
  CHECK(name == NULL);
  CHECK_ERR(reshard_plan_tensor_name(NULL, 0, &name), RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK_ERR(reshard_plan_tensor_name(plan, 0, NULL), RESHARD_ERROR_INVALID_ARGUMENT, "out_name");
  CHECK_ERR(reshard_plan_tensor_dtype(plan, 5, &dtype), RESHARD_ERROR_OUT_OF_RANGE, "tensor: 5");
  CHECK_ERR(reshard_plan_tensor_dtype(NULL, 0, &dtype), RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK_ERR(reshard_plan_tensor_dtype(plan, 0, NULL), RESHARD_ERROR_INVALID_ARGUMENT, "out_dtype");
  dtype = -7;
  CHECK_ERR(reshard_plan_tensor_dst_dtype(plan, 2, &dtype), RESHARD_ERROR_OUT_OF_RANGE,
            "tensor: 2 >= 2 tensors");
  CHECK(dtype == -7);
  CHECK_ERR(reshard_plan_tensor_dst_dtype(NULL, 0, &dtype), RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK_ERR(reshard_plan_tensor_dst_dtype(plan, 0, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_dtype");
  /* Without casts, the destination holds the tensor's dtype. */
  CHECK_OK(reshard_plan_tensor_dst_dtype(plan, 1, &dtype));
  CHECK(dtype == RESHARD_DTYPE_I32);
  CHECK_ERR(reshard_plan_tensor_rank(plan, 5, &rank), RESHARD_ERROR_OUT_OF_RANGE, "tensor: 5");
  CHECK_ERR(reshard_plan_tensor_rank(NULL, 0, &rank), RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK_ERR(reshard_plan_tensor_rank(plan, 0, NULL), RESHARD_ERROR_INVALID_ARGUMENT, "out_rank");
  CHECK_ERR(reshard_plan_tensor_shape(plan, 5, shape), RESHARD_ERROR_OUT_OF_RANGE, "tensor: 5");
  CHECK_ERR(reshard_plan_tensor_shape(NULL, 0, shape), RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK_ERR(reshard_plan_tensor_shape(plan, 0, NULL), RESHARD_ERROR_INVALID_ARGUMENT, "out_shape");
  CHECK_ERR(reshard_plan_tensor_num_entries(plan, 0, 0, &n), RESHARD_ERROR_INVALID_ARGUMENT,
            "side: invalid value 0");
  CHECK_ERR(reshard_plan_tensor_num_entries(plan, 0, 3, &n), RESHARD_ERROR_INVALID_ARGUMENT,
            "side: invalid value 3");
  CHECK_ERR(reshard_plan_tensor_num_entries(plan, 2, RESHARD_SIDE_SRC, &n),
            RESHARD_ERROR_OUT_OF_RANGE, "tensor: 2");
  CHECK_ERR(reshard_plan_tensor_num_entries(NULL, 0, RESHARD_SIDE_SRC, &n),
            RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK_ERR(reshard_plan_tensor_num_entries(plan, 0, RESHARD_SIDE_SRC, NULL),
            RESHARD_ERROR_INVALID_ARGUMENT, "out_count");
  device = -1;
  CHECK_ERR(reshard_plan_tensor_entry(plan, 0, RESHARD_SIDE_SRC, 4, &device, NULL, lo, hi),
            RESHARD_ERROR_OUT_OF_RANGE, "entry: 4 >= 4 entries");
  CHECK_ERR(reshard_plan_tensor_entry(plan, 0, 9, 0, &device, NULL, lo, hi),
            RESHARD_ERROR_INVALID_ARGUMENT, "side: invalid value 9");
  CHECK_ERR(reshard_plan_tensor_entry(plan, 3, RESHARD_SIDE_SRC, 0, &device, NULL, lo, hi),
            RESHARD_ERROR_OUT_OF_RANGE, "tensor: 3");
  CHECK_ERR(reshard_plan_tensor_entry(NULL, 0, RESHARD_SIDE_SRC, 0, &device, NULL, lo, hi),
            RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK(device == -1);
  CHECK_ERR(reshard_plan_tensor_partial(plan, 0, 0, &num_summands, &op),
            RESHARD_ERROR_INVALID_ARGUMENT, "side");
  CHECK_ERR(reshard_plan_tensor_partial(plan, 2, RESHARD_SIDE_SRC, &num_summands, &op),
            RESHARD_ERROR_OUT_OF_RANGE, "tensor");
  CHECK_ERR(reshard_plan_tensor_partial(NULL, 0, RESHARD_SIDE_SRC, &num_summands, &op),
            RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK_ERR(reshard_plan_entry_of_device(plan, 0, RESHARD_SIDE_SRC, 2, &entry, NULL),
            RESHARD_ERROR_INVALID_ARGUMENT, "out_found: must not be NULL");
  CHECK_ERR(reshard_plan_entry_of_device(plan, 0, 5, 2, &entry, &found),
            RESHARD_ERROR_INVALID_ARGUMENT, "side");
  CHECK_ERR(reshard_plan_entry_of_device(plan, 4, RESHARD_SIDE_SRC, 2, &entry, &found),
            RESHARD_ERROR_OUT_OF_RANGE, "tensor");
  CHECK_ERR(reshard_plan_entry_of_device(NULL, 0, RESHARD_SIDE_SRC, 2, &entry, &found),
            RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  reshard_plan_destroy(plan);
  fixture_destroy(&f);
}

static void test_inspect_parts(void) {
  fixture f;
  reshard_plan_t* plan;
  size_t n = 0, i, p;
  int32_t process = -1, has = -1;
  int64_t total_send = 0, total_recv = 0, network = 0;
  reshard_plan_stats_t stats = RESHARD_PLAN_STATS_INIT;
  reshard_part_info_t info = RESHARD_PART_INFO_INIT;
  reshard_message_t message = RESHARD_MESSAGE_INIT;
  reshard_piece_t piece = RESHARD_PIECE_INIT;
  int64_t lo[2], hi[2], elo[2], ehi[2];

  REQUIRE(fixture_create(&f));
  plan = fixture_plan(&f);
  REQUIRE(plan != NULL);
  CHECK_OK(reshard_plan_stats(plan, &stats));
  network = stats.network_bytes;
  CHECK_OK(reshard_plan_num_processes(plan, &n));
  CHECK(n == 3);
  for (p = 0; p < n; ++p) {
    uint64_t m, k;
    CHECK_OK(reshard_plan_process(plan, p, &process));
    CHECK(process == (int32_t)p);
    CHECK_OK(reshard_plan_has_part(plan, process, &has));
    CHECK(has == 1);
    CHECK_OK(reshard_plan_part_info(plan, process, &info));
    CHECK(info.struct_size == sizeof info);
    CHECK(info.num_local_pieces == 0);
    for (m = 0; m < info.num_sends; ++m) {
      int64_t bytes = 0;
      CHECK_OK(
          reshard_plan_part_message(plan, process, RESHARD_DIRECTION_SEND, (size_t)m, &message));
      /* Stage 0 from the trainers; stage 1 relays between inference devices. */
      CHECK(message.stage <= 1);
      CHECK(message.stage == 0 ? message.src_device < 4 && message.dst_device >= 4
                               : message.src_device >= 4 && message.dst_device >= 4);
      CHECK(message.first_piece + message.num_pieces <= info.num_send_pieces);
      /* A message packs its pieces back to back. */
      for (k = message.first_piece; k < message.first_piece + message.num_pieces; ++k) {
        CHECK_OK(
            reshard_plan_part_piece(plan, process, RESHARD_PIECES_SEND, (size_t)k, &piece, lo, hi));
        CHECK(piece.src_device == message.src_device && piece.dst_device == message.dst_device);
        CHECK(piece.stage == message.stage);
        bytes += piece.bytes;
        /* The region lies in both shard boxes (a relay reads a destination
         * entry). */
        CHECK_OK(reshard_plan_tensor_entry(plan, (size_t)piece.tensor,
                                           piece.stage == 0 ? RESHARD_SIDE_SRC : RESHARD_SIDE_DST,
                                           (size_t)piece.src_entry, NULL, NULL, elo, ehi));
        for (i = 0; i < (piece.tensor == 0 ? 2u : 1u); ++i) {
          CHECK(elo[i] <= lo[i] && hi[i] <= ehi[i] && lo[i] < hi[i]);
        }
        CHECK_OK(reshard_plan_tensor_entry(plan, (size_t)piece.tensor, RESHARD_SIDE_DST,
                                           (size_t)piece.dst_entry, NULL, NULL, elo, ehi));
        for (i = 0; i < (piece.tensor == 0 ? 2u : 1u); ++i) {
          CHECK(elo[i] <= lo[i] && hi[i] <= ehi[i]);
        }
      }
      CHECK(bytes == message.bytes);
      total_send += message.bytes;
    }
    for (m = 0; m < info.num_recvs; ++m) {
      CHECK_OK(
          reshard_plan_part_message(plan, process, RESHARD_DIRECTION_RECV, (size_t)m, &message));
      total_recv += message.bytes;
    }
    if (info.num_recv_pieces > 0) {
      CHECK_OK(reshard_plan_part_piece(plan, process, RESHARD_PIECES_RECV, 0, &piece, NULL, NULL));
    }
  }
  CHECK(total_send == network && total_recv == network);
  CHECK_OK(reshard_plan_has_part(plan, 3, &has));
  CHECK(has == 0);

  /* Errors. */
  process = -1;
  CHECK_ERR(reshard_plan_process(plan, 3, &process), RESHARD_ERROR_OUT_OF_RANGE,
            "index: 3 >= 3 processes");
  CHECK(process == -1);
  CHECK_ERR(reshard_plan_process(NULL, 0, &process), RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK_ERR(reshard_plan_process(plan, 0, NULL), RESHARD_ERROR_INVALID_ARGUMENT, "out_process");
  CHECK_ERR(reshard_plan_num_processes(NULL, &n), RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK_ERR(reshard_plan_num_processes(plan, NULL), RESHARD_ERROR_INVALID_ARGUMENT, "out_count");
  CHECK_ERR(reshard_plan_has_part(NULL, 0, &has), RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK_ERR(reshard_plan_has_part(plan, 0, NULL), RESHARD_ERROR_INVALID_ARGUMENT, "out_has");
  CHECK_ERR(reshard_plan_part_info(plan, 3, &info), RESHARD_ERROR_OUT_OF_RANGE,
            "process: this plan holds no part for process 3");
  CHECK_ERR(reshard_plan_part_info(NULL, 0, &info), RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK_ERR(reshard_plan_part_info(plan, 0, NULL), RESHARD_ERROR_INVALID_ARGUMENT, "out_info");
  info.struct_size = 0;
  CHECK_ERR(reshard_plan_part_info(plan, 0, &info), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_info->struct_size: 0");
  CHECK_ERR(reshard_plan_part_message(plan, 0, 0, 0, &message), RESHARD_ERROR_INVALID_ARGUMENT,
            "direction: invalid value 0");
  CHECK_ERR(reshard_plan_part_message(plan, 0, RESHARD_DIRECTION_RECV, 0, &message),
            RESHARD_ERROR_OUT_OF_RANGE, "index: 0 >= 0 messages");
  CHECK_ERR(reshard_plan_part_message(plan, 3, RESHARD_DIRECTION_SEND, 0, &message),
            RESHARD_ERROR_OUT_OF_RANGE, "process");
  CHECK_ERR(reshard_plan_part_message(NULL, 0, RESHARD_DIRECTION_SEND, 0, &message),
            RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK_ERR(reshard_plan_part_message(plan, 0, RESHARD_DIRECTION_SEND, 0, NULL),
            RESHARD_ERROR_INVALID_ARGUMENT, "out_message");
  message.struct_size = 1;
  CHECK_ERR(reshard_plan_part_message(plan, 0, RESHARD_DIRECTION_SEND, 0, &message),
            RESHARD_ERROR_INVALID_ARGUMENT, "out_message->struct_size: 1");
  CHECK_ERR(reshard_plan_part_piece(plan, 0, 4, 0, &piece, lo, hi), RESHARD_ERROR_INVALID_ARGUMENT,
            "list: invalid value 4");
  CHECK_ERR(reshard_plan_part_piece(plan, 0, RESHARD_PIECES_LOCAL, 0, &piece, lo, hi),
            RESHARD_ERROR_OUT_OF_RANGE, "index: 0 >= 0 pieces");
  CHECK_ERR(reshard_plan_part_piece(plan, 7, RESHARD_PIECES_SEND, 0, &piece, lo, hi),
            RESHARD_ERROR_OUT_OF_RANGE, "process");
  CHECK_ERR(reshard_plan_part_piece(NULL, 0, RESHARD_PIECES_SEND, 0, &piece, lo, hi),
            RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK_ERR(reshard_plan_part_piece(plan, 0, RESHARD_PIECES_SEND, 0, NULL, lo, hi),
            RESHARD_ERROR_INVALID_ARGUMENT, "out_piece");
  piece.struct_size = 0;
  CHECK_ERR(reshard_plan_part_piece(plan, 0, RESHARD_PIECES_SEND, 0, &piece, lo, hi),
            RESHARD_ERROR_INVALID_ARGUMENT, "out_piece->struct_size: 0");
  reshard_plan_destroy(plan);
  fixture_destroy(&f);
}

/* A plan whose pieces are local copies: same devices on both sides. */
static void test_local_pieces(void) {
  reshard_mesh_t* mesh = NULL;
  reshard_layout_t *src = NULL, *dst = NULL;
  reshard_plan_input_t* input = NULL;
  reshard_plan_t* plan = NULL;
  reshard_part_info_t info = RESHARD_PART_INFO_INIT;
  reshard_piece_t piece = RESHARD_PIECE_INIT;
  reshard_plan_stats_t stats = RESHARD_PLAN_STATS_INIT;
  const char* x[] = {"x"};
  const char* names[] = {"x"};
  const int64_t mesh_shape[] = {2};
  const int64_t shape[] = {4, 4};
  reshard_axes_t rows[2], cols[2];
  int64_t lo[2], hi[2];

  rows[0].names = x;
  rows[0].count = 1;
  rows[1].names = NULL;
  rows[1].count = 0;
  cols[0] = rows[1];
  cols[1] = rows[0];
  REQUIRE_OK(reshard_mesh_create(1, names, mesh_shape, NULL, &mesh));
  REQUIRE_OK(reshard_layout_create_named(mesh, 2, shape, rows, NULL, RESHARD_REDUCE_SUM, &src));
  REQUIRE_OK(reshard_layout_create_named(mesh, 2, shape, cols, NULL, RESHARD_REDUCE_SUM, &dst));
  REQUIRE_OK(reshard_plan_input_create(&input));
  REQUIRE_OK(reshard_plan_input_add_tensor(input, "t", 2, shape, RESHARD_DTYPE_F64, src, dst));
  REQUIRE_OK(reshard_plan_create(input, NULL, &plan));
  CHECK_OK(reshard_plan_stats(plan, &stats));
  CHECK(stats.local_bytes == 2 * 4 * 8 && stats.network_bytes == 2 * 4 * 8);
  CHECK_OK(reshard_plan_part_info(plan, 0, &info));
  CHECK(info.num_local_pieces == 2 && info.num_sends == 2 && info.num_recvs == 2);
  CHECK_OK(reshard_plan_part_piece(plan, 0, RESHARD_PIECES_LOCAL, 1, &piece, lo, hi));
  CHECK(piece.src_device == 1 && piece.dst_device == 1 && piece.bytes == 4 * 8);
  CHECK(lo[0] == 2 && hi[0] == 4 && lo[1] == 2 && hi[1] == 4);
  reshard_plan_destroy(plan);
  reshard_plan_input_destroy(input);
  reshard_layout_destroy(dst);
  reshard_layout_destroy(src);
  reshard_mesh_destroy(mesh);
}

/* ------------------------------------------------------------------------ */
/* serialization                                                            */
/* ------------------------------------------------------------------------ */

typedef struct serialize_options_v2 {
  reshard_serialize_options_t v1;
  int64_t future_field;
} serialize_options_v2;

static void test_serialize(void) {
  fixture f;
  reshard_plan_t *plan = NULL, *back = NULL, *worker = NULL;
  reshard_plan_t* const kSentinel = (reshard_plan_t*)&g_failures;
  reshard_plan_t* untouched = kSentinel;
  reshard_buffer_t *bytes = NULL, *again = NULL, *part = NULL;
  reshard_buffer_t* const kBufferSentinel = (reshard_buffer_t*)&g_failures;
  reshard_buffer_t* buffer_untouched = kBufferSentinel;
  reshard_serialize_options_t options = RESHARD_SERIALIZE_OPTIONS_INIT;
  serialize_options_v2 bigger;
  uint64_t fp1 = 0, fp2 = 0;
  int32_t has = -1;
  reshard_plan_stats_t s1 = RESHARD_PLAN_STATS_INIT, s2 = RESHARD_PLAN_STATS_INIT;

  REQUIRE(fixture_create(&f));
  plan = fixture_plan(&f);
  REQUIRE(plan != NULL);
  REQUIRE_OK(reshard_plan_serialize(plan, NULL, &bytes));
  CHECK(reshard_buffer_size(bytes) > 8);
  CHECK(reshard_buffer_data(bytes) != NULL);
  CHECK(reshard_buffer_data(NULL) == NULL);
  CHECK(reshard_buffer_size(NULL) == 0);
  /* The file identifier sits at bytes 4..7. */
  CHECK(memcmp((const char*)reshard_buffer_data(bytes) + 4, "RSHP", 4) == 0);
  CHECK_OK(reshard_plan_verify_bytes(reshard_buffer_data(bytes), reshard_buffer_size(bytes)));
  REQUIRE_OK(
      reshard_plan_deserialize(reshard_buffer_data(bytes), reshard_buffer_size(bytes), &back));
  CHECK_OK(reshard_plan_fingerprint(plan, &fp1));
  CHECK_OK(reshard_plan_fingerprint(back, &fp2));
  CHECK(fp1 == fp2);
  CHECK_OK(reshard_plan_stats(plan, &s1));
  CHECK_OK(reshard_plan_stats(back, &s2));
  CHECK(s1.network_bytes == s2.network_bytes && s1.messages == s2.messages);
  /* Deterministic: the decoded plan serializes to the same bytes. */
  REQUIRE_OK(reshard_plan_serialize(back, &options, &again));
  CHECK(reshard_buffer_size(again) == reshard_buffer_size(bytes));
  CHECK(memcmp(reshard_buffer_data(again), reshard_buffer_data(bytes),
               reshard_buffer_size(bytes)) == 0);
  /* A worker's bytes: one part. A newer, larger options struct. */
  memset(&bigger, 0x7f, sizeof bigger);
  bigger.v1.struct_size = sizeof bigger;
  bigger.v1.all_parts = 0;
  bigger.v1.process = 1;
  bigger.v1.key = NULL;
  bigger.v1.key_size = 0;
  REQUIRE_OK(reshard_plan_serialize(plan, &bigger.v1, &part));
  CHECK(reshard_buffer_size(part) < reshard_buffer_size(bytes));
  REQUIRE_OK(
      reshard_plan_deserialize(reshard_buffer_data(part), reshard_buffer_size(part), &worker));
  CHECK_OK(reshard_plan_has_part(worker, 1, &has));
  CHECK(has == 1);
  CHECK_OK(reshard_plan_has_part(worker, 0, &has));
  CHECK(has == 0);

  /* Errors. */
  CHECK_ERR(reshard_plan_serialize(NULL, NULL, &buffer_untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "plan: must not be NULL");
  CHECK_ERR(reshard_plan_serialize(plan, NULL, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_buffer: must not be NULL");
  options.struct_size = 0;
  CHECK_ERR(reshard_plan_serialize(plan, &options, &buffer_untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "options->struct_size: 0");
  options.struct_size = sizeof(size_t);
  CHECK_ERR(reshard_plan_serialize(plan, &options, &buffer_untouched),
            RESHARD_ERROR_INVALID_ARGUMENT, "options->struct_size");
  options.struct_size = sizeof options;
  options.all_parts = 0;
  options.process = 0; /* the worker's plan holds only the part of process 1 */
  CHECK_ERR(reshard_plan_serialize(worker, &options, &buffer_untouched), RESHARD_ERROR_OUT_OF_RANGE,
            "process");
  CHECK(buffer_untouched == kBufferSentinel);
  CHECK_ERR(reshard_plan_deserialize(NULL, 10, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "data: must not be NULL");
  CHECK_ERR(reshard_plan_deserialize(reshard_buffer_data(bytes), reshard_buffer_size(bytes), NULL),
            RESHARD_ERROR_INVALID_ARGUMENT, "out_plan: must not be NULL");
  CHECK_ERR(reshard_plan_deserialize(NULL, 0, &untouched), RESHARD_ERROR_CORRUPT, "plan");
  CHECK_ERR(reshard_plan_verify_bytes(NULL, 3), RESHARD_ERROR_INVALID_ARGUMENT, "data");
  CHECK(untouched == kSentinel);

  reshard_plan_destroy(worker);
  reshard_buffer_destroy(part);
  reshard_buffer_destroy(again);
  reshard_buffer_destroy(bytes);
  reshard_buffer_destroy(NULL);
  reshard_plan_destroy(back);
  reshard_plan_destroy(plan);
  fixture_destroy(&f);
}

/* Deserializes `data`; returns 1 when rejected with CORRUPT (outputs
 * untouched), 0 when accepted, -1 (and reports) on any other outcome. */
static int decode_outcome(const unsigned char* data, size_t size) {
  reshard_plan_t* const kSentinel = (reshard_plan_t*)&g_failures;
  reshard_plan_t* plan = kSentinel;
  reshard_error_t* error = reshard_plan_deserialize(data, size, &plan);
  reshard_error_t* verify = reshard_plan_verify_bytes(data, size);
  int outcome;
  if (error == NULL) {
    outcome = plan != kSentinel && plan != NULL ? 0 : -1;
    if (plan != kSentinel) reshard_plan_destroy(plan);
  } else {
    outcome = reshard_error_code(error) == RESHARD_ERROR_CORRUPT && plan == kSentinel &&
                      strlen(reshard_error_message(error)) > 0
                  ? 1
                  : -1;
    if (outcome < 0) {
      fprintf(stderr, "corrupt bytes gave [%s] %s\n",
              reshard_error_code_name(reshard_error_code(error)), reshard_error_message(error));
    }
  }
  /* reshard_plan_verify_bytes agrees with deserialize. */
  if ((verify == NULL) != (error == NULL)) outcome = -1;
  reshard_error_destroy(verify);
  reshard_error_destroy(error);
  if (outcome < 0) ++g_failures;
  return outcome;
}

/* Authenticated plans (ABI 1.9): the MAC trailer, each bad key and each bad
 * MAC an error naming its field. */
static void test_mac(void) {
  fixture f;
  reshard_plan_t* plan = NULL;
  reshard_plan_t* back = NULL;
  reshard_plan_t* const kSentinel = (reshard_plan_t*)&g_failures;
  reshard_plan_t* untouched = kSentinel;
  reshard_buffer_t *plain = NULL, *signed_bytes = NULL, *worker = NULL;
  reshard_buffer_t* const kBufferSentinel = (reshard_buffer_t*)&g_failures;
  reshard_buffer_t* buffer_untouched = kBufferSentinel;
  reshard_serialize_options_t so = RESHARD_SERIALIZE_OPTIONS_INIT;
  reshard_deserialize_options_t dopt = RESHARD_DESERIALIZE_OPTIONS_INIT;
  unsigned char key[32], other[32], longkey[RESHARD_MAC_KEY_MAX_BYTES + 1];
  unsigned char* edited = NULL;
  size_t n = 0;
  uint64_t fp1 = 0, fp2 = 0;
  const reshard_api_t* api = reshard_get_api(RESHARD_ABI_MAJOR);

  memset(key, 0x11, sizeof key);
  memset(other, 0x22, sizeof other);
  memset(longkey, 0x33, sizeof longkey);
  REQUIRE(fixture_create(&f));
  plan = fixture_plan(&f);
  REQUIRE(plan != NULL);
  REQUIRE(api != NULL);
  CHECK(api->abi_minor >= 9);
  CHECK(api->plan_deserialize_with_options == reshard_plan_deserialize_with_options);
  CHECK(api->plan_verify_bytes_with_options == reshard_plan_verify_bytes_with_options);
  REQUIRE_OK(reshard_plan_serialize(plan, NULL, &plain));
  so.key = key;
  so.key_size = sizeof key;
  REQUIRE_OK(reshard_plan_serialize(plan, &so, &signed_bytes));
  /* The trailer: the plan bytes unchanged, then "RSHPMAC1", their length, the tag. */
  n = reshard_buffer_size(plain);
  REQUIRE(reshard_buffer_size(signed_bytes) == n + 48);
  CHECK(memcmp(reshard_buffer_data(signed_bytes), reshard_buffer_data(plain), n) == 0);
  CHECK(memcmp((const char*)reshard_buffer_data(signed_bytes) + n, "RSHPMAC1", 8) == 0);
  /* With the key: accepted, the same plan. */
  dopt.key = key;
  dopt.key_size = sizeof key;
  CHECK_OK(reshard_plan_verify_bytes_with_options(reshard_buffer_data(signed_bytes),
                                                  reshard_buffer_size(signed_bytes), &dopt));
  REQUIRE_OK(reshard_plan_deserialize_with_options(
      reshard_buffer_data(signed_bytes), reshard_buffer_size(signed_bytes), &dopt, &back));
  CHECK_OK(reshard_plan_fingerprint(plan, &fp1));
  CHECK_OK(reshard_plan_fingerprint(back, &fp2));
  CHECK(fp1 == fp2);
  reshard_plan_destroy(back);
  back = NULL;
  /* Without a key: signed and unsigned bytes both decode (NULL options too). */
  CHECK_OK(reshard_plan_verify_bytes(reshard_buffer_data(signed_bytes),
                                     reshard_buffer_size(signed_bytes)));
  CHECK_OK(reshard_plan_verify_bytes_with_options(reshard_buffer_data(plain),
                                                  reshard_buffer_size(plain), NULL));
  /* A worker's part, signed. */
  so.all_parts = 0;
  so.process = 1;
  REQUIRE_OK(reshard_plan_serialize(plan, &so, &worker));
  CHECK_OK(reshard_plan_verify_bytes_with_options(reshard_buffer_data(worker),
                                                  reshard_buffer_size(worker), &dopt));
  so.all_parts = 1;
  so.process = 0;

  /* The MAC missing (unsigned bytes, a key required) or wrong. */
  CHECK_ERR(reshard_plan_deserialize_with_options(reshard_buffer_data(plain),
                                                  reshard_buffer_size(plain), &dopt, &untouched),
            RESHARD_ERROR_CORRUPT, "mac: missing");
  dopt.key = other;
  CHECK_ERR(reshard_plan_verify_bytes_with_options(reshard_buffer_data(signed_bytes),
                                                   reshard_buffer_size(signed_bytes), &dopt),
            RESHARD_ERROR_CORRUPT, "mac: does not match");
  dopt.key = key;
  edited = (unsigned char*)malloc(reshard_buffer_size(signed_bytes));
  REQUIRE(edited != NULL);
  memcpy(edited, reshard_buffer_data(signed_bytes), reshard_buffer_size(signed_bytes));
  edited[n / 2] ^= 1; /* a byte of the plan */
  CHECK_ERR(
      reshard_plan_verify_bytes_with_options(edited, reshard_buffer_size(signed_bytes), &dopt),
      RESHARD_ERROR_CORRUPT, "mac: does not match");
  edited[n / 2] ^= 1;
  edited[reshard_buffer_size(signed_bytes) - 1] ^= 1; /* a byte of the tag */
  CHECK_ERR(
      reshard_plan_verify_bytes_with_options(edited, reshard_buffer_size(signed_bytes), &dopt),
      RESHARD_ERROR_CORRUPT, "mac: does not match");
  /* The trailer cut off: missing. */
  CHECK_ERR(reshard_plan_verify_bytes_with_options(edited, n, &dopt), RESHARD_ERROR_CORRUPT,
            "mac: missing");
  free(edited);

  /* Bad keys, on both sides. */
  dopt.key = NULL;
  dopt.key_size = 16;
  CHECK_ERR(reshard_plan_verify_bytes_with_options(reshard_buffer_data(signed_bytes),
                                                   reshard_buffer_size(signed_bytes), &dopt),
            RESHARD_ERROR_INVALID_ARGUMENT, "options->key: is NULL");
  dopt.key = key;
  dopt.key_size = 0;
  CHECK_ERR(
      reshard_plan_deserialize_with_options(reshard_buffer_data(signed_bytes),
                                            reshard_buffer_size(signed_bytes), &dopt, &untouched),
      RESHARD_ERROR_INVALID_ARGUMENT, "options->key_size: is 0");
  dopt.key_size = RESHARD_MAC_KEY_MIN_BYTES - 1;
  CHECK_ERR(reshard_plan_verify_bytes_with_options(reshard_buffer_data(signed_bytes),
                                                   reshard_buffer_size(signed_bytes), &dopt),
            RESHARD_ERROR_INVALID_ARGUMENT, "options->key_size: 15 bytes is shorter");
  dopt.key = longkey;
  dopt.key_size = sizeof longkey;
  CHECK_ERR(reshard_plan_verify_bytes_with_options(reshard_buffer_data(signed_bytes),
                                                   reshard_buffer_size(signed_bytes), &dopt),
            RESHARD_ERROR_INVALID_ARGUMENT, "options->key_size: 1025 bytes exceeds");
  dopt.struct_size = 0;
  CHECK_ERR(reshard_plan_verify_bytes_with_options(reshard_buffer_data(signed_bytes),
                                                   reshard_buffer_size(signed_bytes), &dopt),
            RESHARD_ERROR_INVALID_ARGUMENT, "options->struct_size");
  so.key = NULL;
  so.key_size = 32;
  CHECK_ERR(reshard_plan_serialize(plan, &so, &buffer_untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->key: is NULL");
  so.key = key;
  so.key_size = 0;
  CHECK_ERR(reshard_plan_serialize(plan, &so, &buffer_untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->key_size: is 0");
  so.key_size = 8;
  CHECK_ERR(reshard_plan_serialize(plan, &so, &buffer_untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->key_size: 8 bytes is shorter");
  so.key = longkey;
  so.key_size = sizeof longkey;
  CHECK_ERR(reshard_plan_serialize(plan, &so, &buffer_untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->key_size: 1025 bytes exceeds");
  CHECK(untouched == kSentinel);
  CHECK(buffer_untouched == kBufferSentinel);

  reshard_buffer_destroy(plain);
  reshard_buffer_destroy(signed_bytes);
  reshard_buffer_destroy(worker);
  reshard_plan_destroy(plan);
  fixture_destroy(&f);
}

static void test_corrupt_bytes(void) {
  fixture f;
  reshard_plan_t* plan;
  reshard_buffer_t* bytes = NULL;
  unsigned char* copy;
  size_t size, i;
  int bit;
  int64_t rejected = 0, flips = 0;
  uint32_t rng = 12345;
  /* 1, 2, 4 or 8: a divisor of 8, so each byte has 8 / every of its bits flipped. */
  const size_t every = RESHARD_TEST_SCALE >= 100  ? 1
                       : RESHARD_TEST_SCALE >= 50 ? 2
                       : RESHARD_TEST_SCALE >= 25 ? 4
                                                  : 8;

  REQUIRE(fixture_create(&f));
  plan = fixture_plan(&f);
  REQUIRE(plan != NULL);
  REQUIRE_OK(reshard_plan_serialize(plan, NULL, &bytes));
  size = reshard_buffer_size(bytes);
  copy = (unsigned char*)malloc(size);
  REQUIRE(copy != NULL);
  memcpy(copy, reshard_buffer_data(bytes), size);
  CHECK(decode_outcome(copy, size) == 0);

  /* Truncated: every prefix is rejected. */
  for (i = 0; i < size; ++i) CHECK(decode_outcome(copy, i) == 1);
  /* Wrong file identifier. */
  copy[4] ^= 0x20;
  CHECK_ERR(reshard_plan_deserialize(copy, size, &plan), RESHARD_ERROR_CORRUPT,
            "not a reshard plan");
  memcpy(copy, reshard_buffer_data(bytes), size);
  /* Every single-bit flip is rejected or decodes to a plan (a flip in
   * padding changes nothing); never a crash. Most are rejected. Below full
   * scale (the sanitizer builds; all of them took about 100 s under ASan)
   * the bits b of byte i with (i + b) % every == 0: every byte, every bit
   * position. */
  for (i = 0; i < size; ++i) {
    for (bit = 0; bit < 8; ++bit) {
      if ((i + (size_t)bit) % every != 0) continue;
      copy[i] ^= (unsigned char)(1u << bit);
      if (decode_outcome(copy, size) == 1) ++rejected;
      ++flips;
      copy[i] ^= (unsigned char)(1u << bit);
    }
  }
  fprintf(stderr, "bit flips: %lld of %lld rejected\n", (long long)rejected, (long long)flips);
  CHECK(rejected * 2 > flips);
  CHECK(flips == (int64_t)(size * 8 / every));
  /* Random bytes, zeros, and random runs over valid bytes. */
  for (i = 0; i < size; ++i) {
    rng = rng * 1103515245u + 12345u;
    copy[i] = (unsigned char)(rng >> 24);
  }
  CHECK(decode_outcome(copy, size) == 1);
  memset(copy, 0, size);
  CHECK(decode_outcome(copy, size) == 1);
  for (i = 0; i < 200; ++i) {
    size_t at, len, k;
    memcpy(copy, reshard_buffer_data(bytes), size);
    rng = rng * 1103515245u + 12345u;
    at = (rng >> 8) % size;
    rng = rng * 1103515245u + 12345u;
    len = 1 + (rng >> 8) % 16;
    for (k = at; k < at + len && k < size; ++k) {
      rng = rng * 1103515245u + 12345u;
      copy[k] = (unsigned char)(rng >> 24);
    }
    CHECK(decode_outcome(copy, size) >= 0);
  }
  free(copy);
  reshard_buffer_destroy(bytes);
  reshard_plan_destroy(plan);
  fixture_destroy(&f);
}

/* ------------------------------------------------------------------------ */
/* execution and the oracle                                                 */
/* ------------------------------------------------------------------------ */

typedef struct executor_options_v2 {
  reshard_executor_options_t v1;
  int64_t future_field;
} executor_options_v2;

static void test_executor(void) {
  fixture f;
  reshard_plan_t *plan = NULL, *global = NULL;
  reshard_executor_t* executor = NULL;
  reshard_executor_t* const kSentinel = (reshard_executor_t*)&g_failures;
  reshard_executor_t* untouched = kSentinel;
  reshard_executor_options_t options = RESHARD_EXECUTOR_OPTIONS_INIT;
  executor_options_v2 bigger;
  reshard_plan_request_t request = RESHARD_PLAN_REQUEST_INIT;
  host_buffers h;
  reshard_dst_buffer_t saved;
  const reshard_src_buffer_t* saved_src;
  float* w_dst0;

  REQUIRE(fixture_create(&f));
  plan = fixture_plan(&f);
  REQUIRE(plan != NULL);
  REQUIRE(host_buffers_make(plan, &h));
  /* Executors: defaults, explicit threads, a newer struct. */
  REQUIRE_OK(reshard_executor_create(NULL, &executor));
  CHECK_OK(reshard_executor_execute(executor, plan, h.tensors, h.num_tensors));
  CHECK(host_buffers_mismatches(plan, &h) == 0);
  reshard_executor_destroy(executor);
  executor = NULL;
  options.threads = 3;
  REQUIRE_OK(reshard_executor_create(&options, &executor));
  reshard_executor_destroy(executor);
  executor = NULL;
  memset(&bigger, 0x7f, sizeof bigger);
  bigger.v1.struct_size = sizeof bigger;
  bigger.v1.transport = RESHARD_TRANSPORT_HOST;
  bigger.v1.threads = 1;
  REQUIRE_OK(reshard_executor_create(&bigger.v1, &executor));
  host_buffers_free(&h);
  REQUIRE(host_buffers_make(plan, &h));
  CHECK_OK(reshard_executor_execute(executor, plan, h.tensors, h.num_tensors));
  CHECK(host_buffers_mismatches(plan, &h) == 0);
  /* Spot check: w[0][2] = 2 lands at dst entry 1 (device 5, cols [2:4]). */
  CHECK(((const float*)h.tensors[0].dst[1].data)[0] == 2.0f);
  /* w[7][1] = 43 lands at dst entry 0, row 7, col 1. */
  CHECK(((const float*)h.tensors[0].dst[0].data)[7 * 2 + 1] == 43.0f);
  reshard_executor_destroy(NULL);

  /* Executor options errors. */
  CHECK_ERR(reshard_executor_create(NULL, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_executor: must not be NULL");
  options.struct_size = 0;
  CHECK_ERR(reshard_executor_create(&options, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->struct_size: 0");
  options.struct_size = sizeof(size_t) + 4;
  CHECK_ERR(reshard_executor_create(&options, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->struct_size: 12");
  options.struct_size = sizeof options;
  options.threads = -1;
  CHECK_ERR(reshard_executor_create(&options, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->threads: -1 is negative");
  options.threads = 0;
  options.transport = 0;
  CHECK_ERR(reshard_executor_create(&options, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->transport: invalid value 0");
  options.transport = 42;
  CHECK_ERR(reshard_executor_create(&options, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->transport: invalid value 42");
  /* MPI and NCCL executors need a communicator: their own create functions. */
  options.transport = RESHARD_TRANSPORT_MPI;
  CHECK_ERR(reshard_executor_create(&options, &untouched), RESHARD_ERROR_UNSUPPORTED,
            "options->transport: RESHARD_TRANSPORT_MPI (2) executors run on a communicator: "
            "create them with reshard_mpi_executor_create");
  options.transport = RESHARD_TRANSPORT_NCCL;
  CHECK_ERR(reshard_executor_create(&options, &untouched), RESHARD_ERROR_UNSUPPORTED,
            "reshard_nccl_executor_create");
  options.transport = RESHARD_TRANSPORT_CUDA_LOCAL + 1;
  CHECK_ERR(reshard_executor_create(&options, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->transport: invalid value 5");
  CHECK(untouched == kSentinel);

  /* Execute errors: nothing is written. */
  host_buffers_free(&h);
  REQUIRE(host_buffers_make(plan, &h));
  w_dst0 = (float*)h.tensors[0].dst[0].data;
  CHECK_ERR(reshard_executor_execute(NULL, plan, h.tensors, h.num_tensors),
            RESHARD_ERROR_INVALID_ARGUMENT, "executor: must not be NULL");
  CHECK_ERR(reshard_executor_execute(executor, NULL, h.tensors, h.num_tensors),
            RESHARD_ERROR_INVALID_ARGUMENT, "plan: must not be NULL");
  CHECK_ERR(reshard_executor_execute(executor, plan, NULL, 2), RESHARD_ERROR_INVALID_ARGUMENT,
            "buffers: must not be NULL");
  CHECK_ERR(reshard_executor_execute(executor, plan, h.tensors, 1), RESHARD_ERROR_INVALID_ARGUMENT,
            "buffers: 1 tensors given, the plan has 2");
  /* Counts are checked before anything is sized by them (issue 15: SIZE_MAX
   * was INTERNAL, a failed allocation). */
  CHECK_ERR(reshard_executor_execute(executor, plan, h.tensors, SIZE_MAX),
            RESHARD_ERROR_INVALID_ARGUMENT, "buffers: 18446744073709551615 tensors given");
  {
    const size_t saved = h.tensors[1].num_src;
    h.tensors[1].num_src = SIZE_MAX;
    CHECK_ERR(reshard_executor_execute(executor, plan, h.tensors, 2),
              RESHARD_ERROR_INVALID_ARGUMENT, "buffers[1].src: 18446744073709551615 buffers given");
    h.tensors[1].num_src = saved;
  }
  saved_src = h.tensors[1].src;
  h.tensors[1].src = NULL;
  CHECK_ERR(reshard_executor_execute(executor, plan, h.tensors, 2), RESHARD_ERROR_INVALID_ARGUMENT,
            "buffers[1].src: must not be NULL");
  h.tensors[1].src = saved_src;
  h.tensors[0].num_dst = 3;
  CHECK_ERR(reshard_executor_execute(executor, plan, h.tensors, 2), RESHARD_ERROR_INVALID_ARGUMENT,
            "buffers[0].dst: 3 buffers given, the layout has 4");
  h.tensors[0].num_dst = 4;
  ((reshard_dst_buffer_t*)h.tensors[0].dst)[1].bytes -= 4;
  CHECK_ERR(reshard_executor_execute(executor, plan, h.tensors, 2), RESHARD_ERROR_INVALID_ARGUMENT,
            "buffers[0].dst[1]: 60 bytes given");
  ((reshard_dst_buffer_t*)h.tensors[0].dst)[1].bytes += 4;
  /* Issue 37 finding 8: a size past INT64_MAX is a bad buffer, the
   * INVALID_ARGUMENT the header promises (was OUT_OF_RANGE). */
  ((reshard_dst_buffer_t*)h.tensors[0].dst)[1].bytes = (size_t)INT64_MAX + 1u;
  CHECK_ERR(reshard_executor_execute(executor, plan, h.tensors, 2), RESHARD_ERROR_INVALID_ARGUMENT,
            "buffers[0].dst[1].bytes");
  ((reshard_dst_buffer_t*)h.tensors[0].dst)[1].bytes = 64;
  saved = h.tensors[0].dst[2];
  ((reshard_dst_buffer_t*)h.tensors[0].dst)[2].data = NULL;
  CHECK_ERR(reshard_executor_execute(executor, plan, h.tensors, 2), RESHARD_ERROR_INVALID_ARGUMENT,
            "buffers[0].dst[2]: null data");
  /* A destination overlapping a source. */
  ((reshard_dst_buffer_t*)h.tensors[0].dst)[2].data = (void*)h.tensors[0].src[0].data;
  CHECK_ERR(reshard_executor_execute(executor, plan, h.tensors, 2), RESHARD_ERROR_INVALID_ARGUMENT,
            "overlaps");
  ((reshard_dst_buffer_t*)h.tensors[0].dst)[2] = saved;
  CHECK(w_dst0[0] == -1.0f); /* nothing written by the failed calls */
  /* A plan without process parts cannot run on the host. */
  request.scope = RESHARD_PLAN_SCOPE_GLOBAL;
  REQUIRE_OK(reshard_plan_create(f.input, &request, &global));
  CHECK_ERR(reshard_executor_execute(executor, global, h.tensors, 2),
            RESHARD_ERROR_INVALID_ARGUMENT, "plan: lacks the part of process 0");
  CHECK(w_dst0[0] == -1.0f);
  CHECK_OK(reshard_executor_execute(executor, plan, h.tensors, 2));
  CHECK(host_buffers_mismatches(plan, &h) == 0);

  reshard_plan_destroy(global);
  host_buffers_free(&h);
  reshard_executor_destroy(executor);
  reshard_plan_destroy(plan);
  fixture_destroy(&f);
}

typedef struct verify_report_v2 {
  reshard_verify_report_t v1;
  int64_t future_field;
} verify_report_v2;

/* Invariant: one HOST executor serves calls from several threads at once
 * (each with its own destination buffers): every call succeeds and every
 * destination holds the right values. */
typedef struct concurrent_call {
  const reshard_executor_t* executor;
  const reshard_plan_t* plan;
  host_buffers h;
  int failures;
} concurrent_call;

static int concurrent_worker(void* arg) {
  concurrent_call* c = (concurrent_call*)arg;
  int i;
  size_t t, e;
  for (i = 0; i < 25; ++i) {
    reshard_error_t* err;
    for (t = 0; t < c->h.num_tensors; ++t) {
      for (e = 0; e < c->h.tensors[t].num_dst; ++e) {
        memset(c->h.tensors[t].dst[e].data, 0, c->h.tensors[t].dst[e].bytes);
      }
    }
    err = reshard_executor_execute(c->executor, c->plan, c->h.tensors, c->h.num_tensors);
    if (err != NULL) ++c->failures;
    reshard_error_destroy(err);
  }
  return 0;
}

static void test_executor_concurrent(void) {
  fixture f;
  reshard_plan_t* plan = NULL;
  reshard_executor_t* executor = NULL;
  reshard_verify_report_t report = RESHARD_VERIFY_REPORT_INIT;
  concurrent_call calls[4];
  thrd_t threads[4];
  int i;

  REQUIRE(fixture_create(&f));
  plan = fixture_plan(&f);
  REQUIRE(plan != NULL);
  REQUIRE_OK(reshard_executor_create(NULL, &executor));
  for (i = 0; i < 4; ++i) {
    calls[i].executor = executor;
    calls[i].plan = plan;
    calls[i].failures = 0;
    REQUIRE(host_buffers_make(plan, &calls[i].h));
  }
  for (i = 0; i < 4; ++i)
    REQUIRE(thrd_create(&threads[i], concurrent_worker, &calls[i]) == thrd_success);
  for (i = 0; i < 4; ++i) thrd_join(threads[i], NULL);
  for (i = 0; i < 4; ++i) {
    CHECK(calls[i].failures == 0);
    CHECK(host_buffers_mismatches(plan, &calls[i].h) == 0);
    host_buffers_free(&calls[i].h);
  }
  /* The executor is still whole: verification passes. */
  CHECK_OK(reshard_executor_verify(executor, plan, &report));
  CHECK(report.mismatches == 0 && report.elements > 0);
  reshard_executor_destroy(executor);
  reshard_plan_destroy(plan);
  fixture_destroy(&f);
}

/* Regression (issue 37): an executor destroyed on one thread while another
 * thread is inside reshard_executor_execute freed the engine under the
 * execution. Destroy now waits for the execution in flight; a later call
 * with the destroyed handle is INVALID_ARGUMENT ("not a live executor"),
 * never a use of freed memory; destroying it again is a no-op. The same for
 * a plan. */
typedef struct racing_call {
  const reshard_executor_t* executor;
  const reshard_plan_t* plan;
  host_buffers h;
  atomic_int ok; /* read by the destroying thread */
  int refused;
  int other;
} racing_call;

/* Executes until the executor is refused (at most 2,000,000 calls). */
static int racing_worker(void* arg) {
  racing_call* c = (racing_call*)arg;
  int i;
  for (i = 0; i < 2000000 && c->refused == 0; ++i) {
    reshard_error_t* err =
        reshard_executor_execute(c->executor, c->plan, c->h.tensors, c->h.num_tensors);
    if (err == NULL) {
      atomic_fetch_add(&c->ok, 1);
    } else if (reshard_error_code(err) == RESHARD_ERROR_INVALID_ARGUMENT &&
               strstr(reshard_error_message(err), "not a live") != NULL) {
      ++c->refused;
    } else {
      ++c->other;
    }
    reshard_error_destroy(err);
  }
  return 0;
}

static void test_destroy_while_executing(void) {
  fixture f;
  reshard_plan_t* plan = NULL;
  reshard_executor_t* executor = NULL;
  racing_call call;
  thrd_t thread;
  struct timespec pause = {0, 100000}; /* 0.1 ms */

  REQUIRE(fixture_create(&f));
  plan = fixture_plan(&f);
  REQUIRE(plan != NULL);
  REQUIRE_OK(reshard_executor_create(NULL, &executor));
  memset(&call, 0, sizeof call);
  call.executor = executor;
  call.plan = plan;
  atomic_init(&call.ok, 0);
  REQUIRE(host_buffers_make(plan, &call.h));
  REQUIRE(thrd_create(&thread, racing_worker, &call) == thrd_success);
  /* Destroy while the worker is executing in a loop. */
  while (atomic_load(&call.ok) < 20) thrd_sleep(&pause, NULL);
  reshard_executor_destroy(executor); /* waits for the call in flight */
  thrd_join(thread, NULL);
  CHECK(call.other == 0);
  CHECK(call.refused == 1); /* the first call after destroy, never a crash */
  CHECK(atomic_load(&call.ok) >= 20);
  reshard_executor_destroy(executor); /* destroyed already: nothing happens */

  /* A destroyed plan is refused by a live executor. */
  REQUIRE_OK(reshard_executor_create(NULL, &executor));
  reshard_plan_destroy(plan);
  CHECK_ERR(reshard_executor_execute(executor, plan, call.h.tensors, call.h.num_tensors),
            RESHARD_ERROR_INVALID_ARGUMENT, "plan: not a live plan");
  reshard_plan_destroy(plan); /* again: nothing happens */
  reshard_executor_destroy(executor);
  host_buffers_free(&call.h);
  fixture_destroy(&f);
}

/* ABI 1.9, regression (issue 37): a HOST execution had no deadline, so a plan
 * could keep the executor busy for as long as its copies took. With
 * options->timeout_seconds the copies of 16 MB stop after 0.1 ms with
 * TIMEOUT naming it, and the executor stays usable; with time enough the
 * same plan is exact. Bad values are INVALID_ARGUMENT naming the field; a
 * 1.8-sized struct keeps the default. */
static void test_executor_timeout(void) {
  static const char kSpec[] =
      "{\"meshes\": {\"a\": {\"axis_names\": [\"x\"], \"shape\": [8]},"
      " \"b\": {\"axis_names\": [\"y\"], \"shape\": [8], \"devices\": [8, 9, 10, 11, 12, "
      "13, 14, 15]}}, \"tensors\": [{\"name\": \"w\", \"shape\": [4096, 1024], \"dtype\": "
      "\"f32\", \"src\": {\"mesh\": \"a\", \"spec\": [\"x\"]}, \"dst\": {\"mesh\": \"b\", "
      "\"spec\": [null, \"y\"]}}]}";
  const double bad[] = {0.0, -1.0, NAN, INFINITY};
  reshard_plan_input_t* input = NULL;
  reshard_plan_t* plan = NULL;
  reshard_executor_t* executor = NULL;
  reshard_executor_options_t o = RESHARD_EXECUTOR_OPTIONS_INIT;
  host_buffers h;
  size_t i;

  CHECK(o.timeout_seconds == 300.0);
  REQUIRE_OK(reshard_plan_input_from_spec(kSpec, strlen(kSpec), &input));
  REQUIRE_OK(reshard_plan_create(input, NULL, &plan));
  REQUIRE(host_buffers_make(plan, &h));
  o.threads = 1;
  o.timeout_seconds = 1e-4;
  REQUIRE_OK(reshard_executor_create(&o, &executor));
  CHECK_ERR(reshard_executor_execute(executor, plan, h.tensors, h.num_tensors),
            RESHARD_ERROR_TIMEOUT, "ran past its deadline (timeout_seconds 0.0001 s)");
  reshard_executor_destroy(executor);
  o.timeout_seconds = 300;
  REQUIRE_OK(reshard_executor_create(&o, &executor));
  CHECK_OK(reshard_executor_execute(executor, plan, h.tensors, h.num_tensors));
  CHECK(host_buffers_mismatches(plan, &h) == 0);
  reshard_executor_destroy(executor);
  for (i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    executor = NULL;
    o.timeout_seconds = bad[i];
    CHECK_ERR(reshard_executor_create(&o, &executor), RESHARD_ERROR_INVALID_ARGUMENT,
              "options->timeout_seconds");
    CHECK(executor == NULL);
  }
  /* A 1.8 caller's struct ends before the field: what follows is ignored. */
  o.struct_size = offsetof(reshard_executor_options_t, timeout_seconds);
  o.timeout_seconds = -5;
  REQUIRE_OK(reshard_executor_create(&o, &executor));
  CHECK_OK(reshard_executor_execute(executor, plan, h.tensors, h.num_tensors));
  reshard_executor_destroy(executor);
  host_buffers_free(&h);
  reshard_plan_destroy(plan);
  reshard_plan_input_destroy(input);
}

static void test_oracle(void) {
  fixture f;
  reshard_plan_t* plan;
  reshard_executor_t* executor = NULL;
  reshard_verify_report_t report = RESHARD_VERIFY_REPORT_INIT;
  verify_report_v2 bigger;
  host_buffers h;
  size_t t, e;
  int64_t mismatches = -1;
  unsigned char* dst0;

  REQUIRE(fixture_create(&f));
  plan = fixture_plan(&f);
  REQUIRE(plan != NULL);
  REQUIRE_OK(reshard_executor_create(NULL, &executor));
  /* reshard verify, in one call. */
  CHECK_OK(reshard_executor_verify(executor, plan, &report));
  CHECK(report.tensors == 2 && report.mismatches == 0);
  CHECK(report.elements == 8 * 6 + 4 * 5 && report.bytes == 8 * 6 * 4 + 4 * 5 * 4);
  memset(&bigger, 0x7f, sizeof bigger);
  bigger.v1.struct_size = sizeof bigger;
  CHECK_OK(reshard_executor_verify(executor, plan, &bigger.v1));
  CHECK(bigger.v1.mismatches == 0 && bigger.future_field == 0x7f7f7f7f7f7f7f7f);
  /* The same by hand: fill sources, execute, check each destination. */
  REQUIRE(host_buffers_make(plan, &h));
  for (t = 0; t < h.num_tensors; ++t) {
    for (e = 0; e < h.tensors[t].num_src; ++e) {
      CHECK_OK(reshard_oracle_fill_source(plan, t, e, (void*)h.tensors[t].src[e].data,
                                          h.tensors[t].src[e].bytes));
    }
  }
  CHECK_OK(reshard_executor_execute(executor, plan, h.tensors, h.num_tensors));
  for (t = 0; t < h.num_tensors; ++t) {
    for (e = 0; e < h.tensors[t].num_dst; ++e) {
      mismatches = -1;
      CHECK_OK(reshard_oracle_check_destination(plan, t, e, h.tensors[t].dst[e].data,
                                                h.tensors[t].dst[e].bytes, &mismatches));
      CHECK(mismatches == 0);
    }
  }
  dst0 = (unsigned char*)h.tensors[0].dst[0].data;
  dst0[5] ^= 0x40; /* corrupt element 1 */
  CHECK_OK(
      reshard_oracle_check_destination(plan, 0, 0, dst0, h.tensors[0].dst[0].bytes, &mismatches));
  CHECK(mismatches == 1);

  /* Errors. */
  mismatches = -1;
  CHECK_ERR(reshard_oracle_check_destination(plan, 0, 0, dst0, 3, &mismatches),
            RESHARD_ERROR_INVALID_ARGUMENT, "bytes: 3 given, the shard needs 64");
  CHECK_ERR(reshard_oracle_check_destination(plan, 0, 4, dst0, 64, &mismatches),
            RESHARD_ERROR_OUT_OF_RANGE, "entry: 4 >= 4");
  CHECK_ERR(reshard_oracle_check_destination(plan, 2, 0, dst0, 64, &mismatches),
            RESHARD_ERROR_OUT_OF_RANGE, "tensor: 2");
  CHECK_ERR(reshard_oracle_check_destination(plan, 0, 0, NULL, 64, &mismatches),
            RESHARD_ERROR_INVALID_ARGUMENT, "data: must not be NULL");
  CHECK_ERR(reshard_oracle_check_destination(plan, 0, 0, dst0, 64, NULL),
            RESHARD_ERROR_INVALID_ARGUMENT, "out_mismatches: must not be NULL");
  CHECK_ERR(reshard_oracle_check_destination(NULL, 0, 0, dst0, 64, &mismatches),
            RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK(mismatches == -1);
  CHECK_ERR(reshard_oracle_fill_source(plan, 0, 0, dst0, 5), RESHARD_ERROR_INVALID_ARGUMENT,
            "bytes: 5 given, the shard needs 48");
  CHECK_ERR(reshard_oracle_fill_source(plan, 0, 9, dst0, 48), RESHARD_ERROR_OUT_OF_RANGE,
            "entry: 9");
  CHECK_ERR(reshard_oracle_fill_source(plan, 9, 0, dst0, 48), RESHARD_ERROR_OUT_OF_RANGE,
            "tensor: 9");
  CHECK_ERR(reshard_oracle_fill_source(plan, 0, 0, NULL, 48), RESHARD_ERROR_INVALID_ARGUMENT,
            "data: must not be NULL");
  CHECK_ERR(reshard_oracle_fill_source(NULL, 0, 0, dst0, 48), RESHARD_ERROR_INVALID_ARGUMENT,
            "plan");
  report.struct_size = 0;
  report.mismatches = -3;
  CHECK_ERR(reshard_executor_verify(executor, plan, &report), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_report->struct_size: 0");
  CHECK(report.mismatches == -3);
  CHECK_ERR(reshard_executor_verify(executor, plan, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_report: must not be NULL");
  CHECK_ERR(reshard_executor_verify(NULL, plan, &report), RESHARD_ERROR_INVALID_ARGUMENT,
            "executor: must not be NULL");
  CHECK_ERR(reshard_executor_verify(executor, NULL, &report), RESHARD_ERROR_INVALID_ARGUMENT,
            "plan: must not be NULL");
  host_buffers_free(&h);
  reshard_executor_destroy(executor);
  reshard_plan_destroy(plan);
  fixture_destroy(&f);
}

/* Flat layouts (ABI 1.10): an FSDP1 flat parameter parsed from a spec,
 * executed from one flat buffer per rank through the entries' offsets, every
 * destination element checked by the oracle; bad arguments. */
/* Casts in flight (ABI 1.11): the destination's dtype is the spec's, and the
 * destination buffers hold it (a box's volume times its size), which the
 * executor takes and the oracle checks; a buffer sized by the source dtype
 * is refused. */
static void test_casts(void) {
  static const char kSpec[] =
      "{\"meshes\": {\"a\": {\"axis_names\": [\"x\"], \"shape\": [2]},"
      "            \"b\": {\"axis_names\": [\"y\"], \"shape\": [2], \"devices\": [2, 3]}},"
      " \"tensors\": ["
      "  {\"name\": \"w\", \"shape\": [4, 6], \"dtype\": \"bf16\","
      "   \"src\": {\"mesh\": \"a\", \"spec\": [\"x\", null]},"
      "   \"dst\": {\"mesh\": \"b\", \"spec\": [null, \"y\"], \"dtype\": \"f8e4m3\"}},"
      "  {\"name\": \"n\", \"shape\": [6], \"dtype\": \"bf16\","
      "   \"src\": {\"mesh\": \"a\", \"spec\": [\"x\"]}, \"dst\": {\"mesh\": \"b\"}}]}";
  reshard_plan_input_t* input = NULL;
  reshard_plan_t* plan = NULL;
  reshard_executor_t* executor = NULL;
  reshard_dtype_t dtype = 0;
  unsigned char src_mem[2][2][12 * 2], dst_mem[2][2][12 * 2];
  reshard_src_buffer_t src[2][2];
  reshard_dst_buffer_t dst[2][2];
  reshard_tensor_buffers_t buffers[2];
  const size_t src_bytes[2] = {2 * 6 * 2, 3 * 2}, dst_bytes[2] = {4 * 3 * 1, 6 * 2};
  size_t t, e;
  int64_t mismatches = -1;

  REQUIRE_OK(reshard_plan_input_from_spec(kSpec, strlen(kSpec), &input));
  REQUIRE_OK(reshard_plan_create(input, NULL, &plan));
  CHECK_OK(reshard_plan_tensor_dtype(plan, 0, &dtype));
  CHECK(dtype == RESHARD_DTYPE_BF16);
  CHECK_OK(reshard_plan_tensor_dst_dtype(plan, 0, &dtype));
  CHECK(dtype == RESHARD_DTYPE_F8E4M3);
  CHECK_OK(reshard_plan_tensor_dst_dtype(plan, 1, &dtype));
  CHECK(dtype == RESHARD_DTYPE_BF16);
  for (t = 0; t < 2; ++t) {
    for (e = 0; e < 2; ++e) {
      CHECK_OK(reshard_oracle_fill_source(plan, t, e, src_mem[t][e], src_bytes[t]));
      src[t][e].data = src_mem[t][e];
      src[t][e].bytes = src_bytes[t];
      memset(dst_mem[t][e], 0x5A, sizeof dst_mem[t][e]);
      dst[t][e].data = dst_mem[t][e];
      dst[t][e].bytes = dst_bytes[t];
    }
    buffers[t].src = src[t];
    buffers[t].num_src = 2;
    buffers[t].dst = dst[t];
    buffers[t].num_dst = 2;
  }
  REQUIRE_OK(reshard_executor_create(NULL, &executor));
  CHECK_OK(reshard_executor_execute(executor, plan, buffers, 2));
  for (t = 0; t < 2; ++t)
    for (e = 0; e < 2; ++e) {
      mismatches = -1;
      CHECK_OK(
          reshard_oracle_check_destination(plan, t, e, dst_mem[t][e], dst_bytes[t], &mismatches));
      CHECK(mismatches == 0);
    }
  /* The cast tensor's destination sized by its source dtype: refused. */
  dst[0][1].bytes = 4 * 3 * 2;
  CHECK_ERR(reshard_executor_execute(executor, plan, buffers, 2), RESHARD_ERROR_INVALID_ARGUMENT,
            "bytes");
  reshard_executor_destroy(executor);
  reshard_plan_destroy(plan);
  reshard_plan_input_destroy(input);
}

static void test_flat(void) {
  static const char kSpec[] =
      "{\"meshes\": {\"fsdp\": {\"axis_names\": [\"dp\"], \"shape\": [2], \"processes\": [0, 0]},"
      "            \"tp\": {\"axis_names\": [\"tp\"], \"shape\": [2], \"devices\": [4, 5]}},"
      " \"flat\": {\"unit\": {\"mesh\": \"fsdp\", \"align_elements\": 4}},"
      " \"tensors\": ["
      "  {\"name\": \"w\", \"shape\": [3, 4], \"dtype\": \"f32\", \"src\": {\"flat\": \"unit\"},"
      "   \"dst\": {\"mesh\": \"tp\", \"spec\": [null, \"tp\"]}},"
      "  {\"name\": \"b\", \"shape\": [5], \"dtype\": \"f32\", \"src\": {\"flat\": \"unit\"},"
      "   \"dst\": {\"mesh\": \"tp\"}}]}";
  reshard_plan_input_t* input = NULL;
  reshard_plan_t* plan = NULL;
  reshard_executor_t* executor = NULL;
  size_t count = 9, world = 0, tensors = 0, t, e, k, tensor = 9, entries = 0;
  const char* name = NULL;
  int32_t is_source = -1;
  int64_t shard_bytes = 0, device = -1, mismatches = -1;
  uint64_t ranks[3][8];
  int64_t offsets[3][8];
  size_t num_entries[2] = {0, 0};
  float flat[2][9];
  reshard_src_buffer_t src[2][8];
  reshard_dst_buffer_t dst[2][8];
  float dst_mem[2][2][12];
  reshard_tensor_buffers_t buffers[2];

  REQUIRE_OK(reshard_plan_input_from_spec(kSpec, strlen(kSpec), &input));
  CHECK_OK(reshard_plan_input_num_flats(input, &count));
  CHECK(count == 1);
  CHECK_OK(
      reshard_plan_input_flat_info(input, 0, &name, &is_source, &world, &tensors, &shard_bytes));
  CHECK(name != NULL && strcmp(name, "unit") == 0);
  CHECK(is_source == 1 && world == 2 && tensors == 2);
  CHECK(shard_bytes == 9 * 4); /* 12 + 5 elements, b at 12: 17 padded to 18, 9 per rank */
  CHECK_OK(reshard_plan_input_flat_info(input, 0, NULL, NULL, NULL, NULL, NULL));
  CHECK_OK(reshard_plan_input_flat_device(input, 0, 1, &device));
  CHECK(device == 1);
  /* w: rank 0 holds w[0:2, :] and w[2, 0] (a slot), rank 1 w[2, 1:4]. */
  CHECK_OK(reshard_plan_input_flat_tensor(input, 0, 0, &tensor, &entries, 0, NULL, NULL));
  CHECK(tensor == 0 && entries == 3);
  REQUIRE_OK(reshard_plan_create(input, NULL, &plan));
  for (k = 0; k < 2; ++k) {
    CHECK_OK(reshard_plan_input_flat_tensor(input, 0, k, &tensor, &num_entries[k], 8, ranks[k],
                                            offsets[k]));
    CHECK(tensor == k);
  }
  CHECK(num_entries[0] == 3 && num_entries[1] == 1);
  CHECK(ranks[0][2] == 0 && offsets[0][2] == 8 * 4);
  CHECK(ranks[1][0] == 1 && offsets[1][0] == 3 * 4);
  /* Views into the flat buffers, filled by the oracle entry by entry. */
  memset(flat, 0xA5, sizeof flat);
  for (t = 0; t < 2; ++t) {
    size_t ndst = 0;
    for (e = 0; e < num_entries[t]; ++e) {
      int64_t lo[2] = {0, 0}, hi[2] = {0, 0};
      size_t r, d, bytes = 4;
      CHECK_OK(reshard_plan_tensor_entry(plan, t, RESHARD_SIDE_SRC, e, NULL, NULL, lo, hi));
      for (d = 0; d < (t == 0 ? 2u : 1u); ++d) bytes *= (size_t)(hi[d] - lo[d]);
      r = (size_t)ranks[t][e];
      src[t][e].data = (const unsigned char*)flat[r] + offsets[t][e];
      src[t][e].bytes = bytes;
      CHECK_OK(
          reshard_oracle_fill_source(plan, t, e, (unsigned char*)flat[r] + offsets[t][e], bytes));
    }
    CHECK_OK(reshard_plan_tensor_num_entries(plan, t, RESHARD_SIDE_DST, &ndst));
    CHECK(ndst == 2);
    for (e = 0; e < 2; ++e) {
      dst[t][e].data = dst_mem[t][e];
      dst[t][e].bytes = t == 0 ? 3 * 2 * 4 : 5 * 4;
    }
    buffers[t].src = src[t];
    buffers[t].num_src = num_entries[t];
    buffers[t].dst = dst[t];
    buffers[t].num_dst = 2;
  }
  REQUIRE_OK(reshard_executor_create(NULL, &executor));
  CHECK_OK(reshard_executor_execute(executor, plan, buffers, 2));
  for (t = 0; t < 2; ++t)
    for (e = 0; e < 2; ++e) {
      mismatches = -1;
      CHECK_OK(reshard_oracle_check_destination(plan, t, e, dst[t][e].data, dst[t][e].bytes,
                                                &mismatches));
      CHECK(mismatches == 0);
    }

  /* Errors; outputs untouched. */
  tensor = 77;
  CHECK_ERR(reshard_plan_input_flat_tensor(input, 1, 0, &tensor, &entries, 0, NULL, NULL),
            RESHARD_ERROR_OUT_OF_RANGE, "flat: 1 is not below the 1 flat layouts");
  CHECK_ERR(reshard_plan_input_flat_tensor(input, 0, 2, &tensor, &entries, 0, NULL, NULL),
            RESHARD_ERROR_OUT_OF_RANGE, "index: 2 is not below the 2 tensors");
  CHECK_ERR(reshard_plan_input_flat_tensor(input, 0, 0, &tensor, &entries, 2, ranks[2], offsets[2]),
            RESHARD_ERROR_INVALID_ARGUMENT, "capacity: 2 is below the 3 entries");
  CHECK_ERR(reshard_plan_input_flat_tensor(input, 0, 0, &tensor, &entries, 3, NULL, offsets[2]),
            RESHARD_ERROR_INVALID_ARGUMENT, "out_ranks");
  CHECK_ERR(reshard_plan_input_flat_tensor(input, 0, 0, NULL, &entries, 0, NULL, NULL),
            RESHARD_ERROR_INVALID_ARGUMENT, "out_tensor");
  CHECK(tensor == 77);
  CHECK_ERR(reshard_plan_input_flat_device(input, 0, 2, &device), RESHARD_ERROR_OUT_OF_RANGE,
            "rank: 2 is not below the world size 2");
  CHECK_ERR(reshard_plan_input_flat_info(NULL, 0, NULL, NULL, NULL, NULL, NULL),
            RESHARD_ERROR_INVALID_ARGUMENT, "input");
  CHECK_ERR(reshard_plan_input_num_flats(input, NULL), RESHARD_ERROR_INVALID_ARGUMENT, "out_count");
  reshard_executor_destroy(executor);
  reshard_plan_destroy(plan);
  reshard_plan_input_destroy(input);
  /* An input built call by call has no flat layouts. */
  REQUIRE_OK(reshard_plan_input_create(&input));
  CHECK_OK(reshard_plan_input_num_flats(input, &count));
  CHECK(count == 0);
  reshard_plan_input_destroy(input);
}

/* A partial source reduced on the destination, checked by the oracle. */
static void test_partial(void) {
  reshard_mesh_t* mesh = NULL;
  reshard_layout_t *src = NULL, *dst = NULL;
  reshard_plan_input_t* input = NULL;
  reshard_plan_t* plan = NULL;
  reshard_executor_t* executor = NULL;
  reshard_verify_report_t report = RESHARD_VERIFY_REPORT_INIT;
  const char* axes[] = {"r", "c"};
  const char* r[] = {"r"};
  const char* c[] = {"c"};
  const int64_t mesh_shape[] = {2, 2};
  const int64_t shape[] = {6, 5};
  reshard_axes_t src_dims[2], dst_dims[2], partial;
  int32_t num_summands = 0;
  reshard_reduce_op_t op = 0;
  int64_t mismatches = 0;
  float buffer[30];

  src_dims[0].names = c;
  src_dims[0].count = 1;
  src_dims[1].names = NULL;
  src_dims[1].count = 0;
  partial.names = r;
  partial.count = 1;
  dst_dims[0].names = r;
  dst_dims[0].count = 1;
  dst_dims[1].names = c;
  dst_dims[1].count = 1;
  REQUIRE_OK(reshard_mesh_create(2, axes, mesh_shape, NULL, &mesh));
  REQUIRE_OK(
      reshard_layout_create_named(mesh, 2, shape, src_dims, &partial, RESHARD_REDUCE_SUM, &src));
  REQUIRE_OK(reshard_layout_create_named(mesh, 2, shape, dst_dims, NULL, RESHARD_REDUCE_SUM, &dst));
  REQUIRE_OK(reshard_plan_input_create(&input));
  REQUIRE_OK(reshard_plan_input_add_tensor(input, "grad", 2, shape, RESHARD_DTYPE_BF16, src, dst));
  REQUIRE_OK(reshard_plan_create(input, NULL, &plan));
  CHECK_OK(reshard_plan_tensor_partial(plan, 0, RESHARD_SIDE_SRC, &num_summands, &op));
  CHECK(num_summands == 2 && op == RESHARD_REDUCE_SUM);
  REQUIRE_OK(reshard_executor_create(NULL, &executor));
  CHECK_OK(reshard_executor_verify(executor, plan, &report));
  CHECK(report.mismatches == 0 && report.elements == 30);
  reshard_plan_destroy(plan);
  plan = NULL;
  /* A partial destination cannot be checked shard by shard. */
  reshard_plan_input_destroy(input);
  input = NULL;
  REQUIRE_OK(reshard_plan_input_create(&input));
  REQUIRE_OK(reshard_plan_input_add_tensor(input, "grad", 2, shape, RESHARD_DTYPE_F32, dst, src));
  REQUIRE_OK(reshard_plan_create(input, NULL, &plan));
  CHECK_ERR(reshard_oracle_check_destination(plan, 0, 0, buffer, 3 * 5 * 4, &mismatches),
            RESHARD_ERROR_INVALID_ARGUMENT, "tensor: 0 has a partial destination");
  CHECK_OK(reshard_executor_verify(executor, plan, &report));
  CHECK(report.mismatches == 0);
  reshard_executor_destroy(executor);
  reshard_plan_destroy(plan);
  reshard_plan_input_destroy(input);
  reshard_layout_destroy(dst);
  reshard_layout_destroy(src);
  reshard_mesh_destroy(mesh);
}

/* Allocation failure is an error value, not an abort. The oracle's buffers
 * of a 2^50-byte tensor are refused before anything is allocated
 * (RESOURCE_EXHAUSTED, ABI 1.2); 256 MiB ones, under the refusal's limit,
 * fail to allocate once the address space is limited (OUT_OF_MEMORY).
 * AddressSanitizer's throwing operator new aborts instead of throwing
 * std::bad_alloc, so an ASan build skips this group (exit code 77). */
#if defined(__SANITIZE_ADDRESS__)
#define RESHARD_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RESHARD_TEST_ASAN 1
#endif
#endif
static int g_skipped = 0;

/* A plan of one u8 tensor of `bytes` elements, replicated on one device. */
static reshard_plan_t* one_tensor_plan(int64_t bytes) {
  reshard_mesh_t* mesh = NULL;
  reshard_layout_t* layout = NULL;
  reshard_plan_input_t* input = NULL;
  reshard_plan_t* plan = NULL;
  reshard_axes_t dims[1];
  dims[0].names = NULL;
  dims[0].count = 0;
  if (ok_(reshard_mesh_create(0, NULL, NULL, NULL, &mesh), __FILE__, __LINE__, "mesh") &&
      ok_(reshard_layout_create_named(mesh, 1, &bytes, dims, NULL, RESHARD_REDUCE_SUM, &layout),
          __FILE__, __LINE__, "layout") &&
      ok_(reshard_plan_input_create(&input), __FILE__, __LINE__, "input") &&
      ok_(reshard_plan_input_add_tensor(input, "huge", 1, &bytes, RESHARD_DTYPE_U8, layout, layout),
          __FILE__, __LINE__, "add_tensor")) {
    (void)ok_(reshard_plan_create(input, NULL, &plan), __FILE__, __LINE__, "plan_create");
  }
  reshard_plan_input_destroy(input);
  reshard_layout_destroy(layout);
  reshard_mesh_destroy(mesh);
  return plan;
}

/* Virtual memory of this process in bytes (0 when unknown). */
static int64_t vm_size(void) {
  char line[256];
  long long kib = 0;
  FILE* f = fopen("/proc/self/status", "r");
  if (f == NULL) return 0;
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmSize: %lld kB", &kib) == 1) break;
  fclose(f);
  return (int64_t)kib * 1024;
}

static void test_out_of_memory(void) {
  reshard_plan_t* plan = NULL;
  reshard_executor_t* executor = NULL;
  reshard_verify_report_t report = RESHARD_VERIFY_REPORT_INIT;
  struct rlimit limit, saved;
  int64_t vm;
#ifdef RESHARD_TEST_ASAN
  fprintf(stderr, "skipped: AddressSanitizer aborts when operator new fails\n");
  g_skipped = 1;
  return;
#endif
  REQUIRE_OK(reshard_executor_create(NULL, &executor));
  plan = one_tensor_plan(INT64_C(1) << 50);
  REQUIRE(plan != NULL);
  report.mismatches = -9;
  CHECK_ERR(reshard_executor_verify(executor, plan, &report), RESHARD_ERROR_RESOURCE_EXHAUSTED,
            "oracle: the shards of every device (sources and destinations) need 2251799813685248 "
            "bytes of memory, above the limit of");
  CHECK(report.mismatches == -9);
  reshard_plan_destroy(plan);

  plan = one_tensor_plan(INT64_C(1) << 28);
  REQUIRE(plan != NULL);
  vm = vm_size();
  REQUIRE(vm > 0);
  /* 64 MiB more address space than now: enough for everything but the
   * two 256 MiB shards. The soft limit only, restored after. */
  REQUIRE(getrlimit(RLIMIT_AS, &limit) == 0);
  saved = limit;
  limit.rlim_cur = (rlim_t)(vm + (INT64_C(64) << 20));
  REQUIRE(setrlimit(RLIMIT_AS, &limit) == 0);
  CHECK_ERR(reshard_executor_verify(executor, plan, &report), RESHARD_ERROR_OUT_OF_MEMORY,
            "oracle: cannot allocate");
  CHECK(setrlimit(RLIMIT_AS, &saved) == 0);
  CHECK(report.mismatches == -9);
  reshard_plan_destroy(plan);
  reshard_executor_destroy(executor);
}

/* ------------------------------------------------------------------------ */
/* ABI 1.2: reshard_plan_request_t.max_plan_bytes, RESOURCE_EXHAUSTED       */
/* ------------------------------------------------------------------------ */

/* A fleet: 32 weights [53248, 16384] bf16 sharded FSDP over 1024 devices
 * (one process each) to dp=128 x tp=8 with tp on the columns, so every
 * destination shard takes a piece from every source shard: 2^25 pieces,
 * each in two process parts. NULL on failure. */
static reshard_plan_input_t* fleet_input(void) {
  static const char* const kDp[] = {"dp"};
  static const char* const kDpTp[] = {"dp", "tp"};
  static const char* const kTp[] = {"tp"};
  static const int64_t kShape[] = {53248, 16384};
  const int64_t train_shape[] = {1024}, infer_shape[] = {128, 8};
  reshard_mesh_t *train = NULL, *infer = NULL;
  reshard_layout_t *src = NULL, *dst = NULL;
  reshard_topology_t* topology = NULL;
  reshard_plan_input_t* input = NULL;
  reshard_axes_t src_dims[2], dst_dims[2];
  int good = 1;
  int64_t d;
  int i;
  src_dims[0].names = kDp;
  src_dims[0].count = 1;
  src_dims[1].names = NULL;
  src_dims[1].count = 0;
  dst_dims[0].names = NULL;
  dst_dims[0].count = 0;
  dst_dims[1].names = kTp;
  dst_dims[1].count = 1;
  good =
      ok_(reshard_mesh_create(1, kDp, train_shape, NULL, &train), __FILE__, __LINE__, "train") &&
      ok_(reshard_mesh_create(2, kDpTp, infer_shape, NULL, &infer), __FILE__, __LINE__, "infer") &&
      ok_(reshard_layout_create_named(train, 2, kShape, src_dims, NULL, RESHARD_REDUCE_SUM, &src),
          __FILE__, __LINE__, "src") &&
      ok_(reshard_layout_create_named(infer, 2, kShape, dst_dims, NULL, RESHARD_REDUCE_SUM, &dst),
          __FILE__, __LINE__, "dst") &&
      ok_(reshard_topology_create(&topology), __FILE__, __LINE__, "topology") &&
      ok_(reshard_plan_input_create(&input), __FILE__, __LINE__, "input");
  for (d = 0; good && d < 1024; ++d)
    good = ok_(
        reshard_topology_add_device(topology, d, (int32_t)d, (int32_t)(d / 8), (int32_t)(d % 8)),
        __FILE__, __LINE__, "add_device");
  for (i = 0; good && i < 32; ++i) {
    char name[16];
    snprintf(name, sizeof name, "w%d", i);
    good = ok_(reshard_plan_input_add_tensor(input, name, 2, kShape, RESHARD_DTYPE_BF16, src, dst),
               __FILE__, __LINE__, "add_tensor");
  }
  good = good &&
         ok_(reshard_plan_input_set_topology(input, topology), __FILE__, __LINE__, "set_topology");
  reshard_topology_destroy(topology);
  reshard_layout_destroy(dst);
  reshard_layout_destroy(src);
  reshard_mesh_destroy(infer);
  reshard_mesh_destroy(train);
  if (!good) {
    reshard_plan_input_destroy(input);
    return NULL;
  }
  return input;
}

/* Checks that `error` is RESOURCE_EXHAUSTED and its message holds every
 * string of `parts` (NULL-terminated) and none of `absent`; destroys it. */
static void check_exhausted(reshard_error_t* error, const char* const* parts,
                            const char* const* absent, int line) {
  const char* m = reshard_error_message(error);
  if (reshard_error_code(error) != RESHARD_ERROR_RESOURCE_EXHAUSTED) {
    fprintf(stderr, "%s:%d: expected resource_exhausted, got [%s] %s\n", __FILE__, line,
            reshard_error_code_name(reshard_error_code(error)), m);
    ++g_failures;
  }
  for (; *parts != NULL; ++parts)
    if (strstr(m, *parts) == NULL) {
      fprintf(stderr, "%s:%d: \"%s\" does not mention \"%s\"\n", __FILE__, line, m, *parts);
      ++g_failures;
    }
  for (; absent != NULL && *absent != NULL; ++absent)
    if (strstr(m, *absent) != NULL) {
      fprintf(stderr, "%s:%d: \"%s\" mentions \"%s\"\n", __FILE__, line, m, *absent);
      ++g_failures;
    }
  reshard_error_destroy(error);
}

/* A 1.1 caller's request: its struct ends before max_plan_bytes; the bytes
 * after it are not the library's to read. */
typedef struct plan_request_v1_1 {
  reshard_plan_request_t request; /* struct_size = offsetof(max_plan_bytes) */
} plan_request_v1_1;

/* Plans the fixture's input as it stands into *out; 0 when planning failed. */
static int fixture_stats(fixture* f, reshard_plan_stats_t* out) {
  reshard_plan_t* plan = fixture_plan(f);
  int ok = plan != NULL && ok_(reshard_plan_stats(plan, out), __FILE__, __LINE__, "plan_stats");
  reshard_plan_destroy(plan);
  return ok;
}

/* 1.3: relays for replicated destinations, switchable off. */
static void test_relays(void) {
  fixture f;
  reshard_plan_stats_t on = RESHARD_PLAN_STATS_INIT, off = RESHARD_PLAN_STATS_INIT;
  reshard_plan_options_t opts = RESHARD_PLAN_OPTIONS_INIT;
  reshard_plan_stats_t guarded = RESHARD_PLAN_STATS_INIT;
  reshard_plan_options_t v10, v17;
  size_t v10_size = offsetof(reshard_plan_options_t, relays);
  size_t v17_size = offsetof(reshard_plan_options_t, single_hop_guard);

  CHECK(opts.relays == 1 && opts.reduce_scatter == 1 && opts.single_hop_guard == 1);
  REQUIRE(fixture_create(&f)); /* single_hop_guard 0: every route kept */
  REQUIRE(fixture_stats(&f, &on));
  /* 1.8: the single-hop guard (the default) finds the relays of these tiny
   * tensors slower by the estimate than single-hop, and drops them. */
  CHECK_OK(reshard_plan_input_set_options(f.input, &opts));
  REQUIRE(fixture_stats(&f, &guarded));
  CHECK(guarded.stages == 1 && guarded.cost_seconds < on.cost_seconds);
  opts.single_hop_guard = 2;
  CHECK_ERR(reshard_plan_input_set_options(f.input, &opts), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->single_hop_guard");
  opts.single_hop_guard = 1;
  /* A 1.7-sized struct leaves the guard at its default (on). */
  memset(&v17, 0xff, sizeof v17);
  memcpy(&v17, &opts, v17_size);
  v17.struct_size = v17_size;
  CHECK_OK(reshard_plan_input_set_options(f.input, &v17));
  REQUIRE(fixture_stats(&f, &off));
  CHECK(off.stages == 1 && off.cost_seconds == guarded.cost_seconds);
  opts.relays = 0;
  CHECK_OK(reshard_plan_input_set_options(f.input, &opts));
  REQUIRE(fixture_stats(&f, &off));
  /* Single-hop: one stage, nothing forwarded, every byte crosses. */
  CHECK(off.stages == 1 && off.forwarded_bytes == 0);
  CHECK(off.cross_host_bytes == off.network_bytes);
  /* Relays: what crosses is what enters host 2 once, the bound. */
  CHECK(on.stages == 2 && on.forwarded_bytes > 0);
  CHECK(on.cross_host_bytes == on.lower_bound_cross_host_bytes);
  CHECK(on.cross_host_bytes < off.cross_host_bytes);
  CHECK(on.network_bytes == off.network_bytes);
  /* Bad values name the field. */
  opts.relays = 2;
  CHECK_ERR(reshard_plan_input_set_options(f.input, &opts), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->relays");
  opts.relays = 1;
  opts.reduce_scatter = 7;
  CHECK_ERR(reshard_plan_input_set_options(f.input, &opts), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->reduce_scatter");
  opts.reduce_scatter = 1;
  /* A 1.0-sized struct leaves relays at its default (on), and the guard
   * (on): the guarded plan. */
  memset(&v10, 0xff, sizeof v10);
  memcpy(&v10, &opts, v10_size);
  v10.struct_size = v10_size;
  CHECK_OK(reshard_plan_input_set_options(f.input, &v10));
  REQUIRE(fixture_stats(&f, &off));
  CHECK(off.stages == 1 && off.cost_seconds == guarded.cost_seconds);
  fixture_destroy(&f);
}

/* 1.7: NICs per host for the cost model. 4 devices of host 0 feed 4
 * devices of host 1 that each need the whole tensor: with one NIC per host,
 * host 1's NIC takes in everything, and the estimate and its bound rise.
 * Out-of-range values name the field; a 1.6-sized struct leaves it at its
 * default (0, one NIC per device). */
static void test_nics_per_host(void) {
  static const char kSpec[] =
      "{\"meshes\": {\"src\": {\"axis_names\": [\"dp\"], \"shape\": [4], \"devices\": [0, 1, 2, 3],"
      " \"processes\": [0, 1, 2, 3], \"hosts\": [0, 0, 0, 0]},"
      " \"dst\": {\"axis_names\": [\"r\"], \"shape\": [4], \"devices\": [4, 5, 6, 7],"
      " \"processes\": [4, 5, 6, 7], \"hosts\": [1, 1, 1, 1]}},"
      " \"tensors\": [{\"name\": \"w\", \"shape\": [1024, 256], \"dtype\": \"f32\","
      " \"src\": {\"mesh\": \"src\", \"spec\": [\"dp\", null]},"
      " \"dst\": {\"mesh\": \"dst\", \"spec\": [null, null]}}]}";
  reshard_plan_input_t* input = NULL;
  reshard_plan_t* plan = NULL;
  reshard_plan_request_t request = RESHARD_PLAN_REQUEST_INIT;
  reshard_plan_stats_t per_device = RESHARD_PLAN_STATS_INIT, one = RESHARD_PLAN_STATS_INIT;
  reshard_plan_options_t opts = RESHARD_PLAN_OPTIONS_INIT;
  reshard_plan_options_t v16;
  size_t v16_size = offsetof(reshard_plan_options_t, nics_per_host);

  CHECK(opts.nics_per_host == 0);
  REQUIRE_OK(reshard_plan_input_from_spec(kSpec, strlen(kSpec), &input));
  CHECK_OK(reshard_plan_create(input, &request, &plan));
  REQUIRE(plan != NULL);
  CHECK_OK(reshard_plan_stats(plan, &per_device));
  reshard_plan_destroy(plan);
  opts.nics_per_host = 1;
  CHECK_OK(reshard_plan_input_set_options(input, &opts));
  CHECK_OK(reshard_plan_create(input, &request, &plan));
  REQUIRE(plan != NULL);
  CHECK_OK(reshard_plan_stats(plan, &one));
  reshard_plan_destroy(plan);
  CHECK(one.cost_seconds > per_device.cost_seconds);
  CHECK(one.lower_bound_cost_seconds > per_device.lower_bound_cost_seconds);
  CHECK(one.cost_seconds >= one.lower_bound_cost_seconds);
  CHECK(one.network_bytes == per_device.network_bytes);
  opts.nics_per_host = -1;
  CHECK_ERR(reshard_plan_input_set_options(input, &opts), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->nics_per_host");
  opts.nics_per_host = (1 << 20) + 1;
  CHECK_ERR(reshard_plan_input_set_options(input, &opts), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->nics_per_host");
  opts.nics_per_host = 1;
  memset(&v16, 0xff, sizeof v16);
  memcpy(&v16, &opts, v16_size);
  v16.struct_size = v16_size;
  CHECK_OK(reshard_plan_input_set_options(input, &v16));
  CHECK_OK(reshard_plan_create(input, &request, &plan));
  REQUIRE(plan != NULL);
  CHECK_OK(reshard_plan_stats(plan, &one));
  CHECK(one.cost_seconds == per_device.cost_seconds);
  reshard_plan_destroy(plan);
  reshard_plan_input_destroy(input);
}

/* Scratch buffers (ABI 1.6): a psum over 2 holder hosts of 2 (alpha 0) whose
 * holders pre-reduce on their host. Each part lists its scratch; every piece
 * naming RESHARD_SCRATCH_ENTRY lies inside a scratch of its tensor on its
 * device; a device's scratch adds up to at most max_scratch_bytes, reached. */
static void test_scratch(void) {
  static const char kPsum[] =
      "{\"options\": {\"alpha_seconds\": 0},"
      " \"meshes\": {\"src\": {\"axis_names\": [\"dp\"], \"shape\": [4], \"devices\": [0, 1, 2, 3],"
      " \"processes\": [0, 1, 2, 3], \"hosts\": [0, 0, 1, 1]},"
      " \"dst\": {\"axis_names\": [\"r\"], \"shape\": [2], \"devices\": [4, 5],"
      " \"processes\": [4, 5], \"hosts\": [2, 3]}},"
      " \"tensors\": [{\"name\": \"g\", \"shape\": [1024, 8], \"dtype\": \"f32\","
      " \"src\": {\"mesh\": \"src\", \"spec\": [null, null], \"partial\": {\"axes\": [\"dp\"]}},"
      " \"dst\": {\"mesh\": \"dst\", \"spec\": [null, null]}}]}";
  reshard_plan_input_t* input = NULL;
  reshard_plan_t* plan = NULL;
  reshard_plan_stats_t stats = RESHARD_PLAN_STATS_INIT;
  reshard_part_info_t info = RESHARD_PART_INFO_INIT, old;
  reshard_scratch_t x = RESHARD_SCRATCH_INIT, boxes[16];
  reshard_piece_t piece = RESHARD_PIECE_INIT;
  int64_t lo[16][2], hi[16][2], plo[2], phi[2];
  int64_t per_device[6] = {0, 0, 0, 0, 0, 0}, most = 0;
  size_t n, i, k, total = 0, named = 0;
  int32_t process;
  int list, d;

  REQUIRE_OK(reshard_plan_input_from_spec(kPsum, strlen(kPsum), &input));
  REQUIRE_OK(reshard_plan_create(input, NULL, &plan));
  REQUIRE_OK(reshard_plan_stats(plan, &stats));
  CHECK(stats.max_scratch_bytes > 0);
  for (process = 0; process < 6; ++process) {
    REQUIRE_OK(reshard_plan_part_info(plan, process, &info));
    n = (size_t)info.num_scratch;
    REQUIRE(n <= 16);
    for (i = 0; i < n; ++i) {
      boxes[i].struct_size = sizeof boxes[i];
      REQUIRE_OK(reshard_plan_part_scratch(plan, process, i, &boxes[i], lo[i], hi[i]));
      CHECK(boxes[i].tensor == 0);
      CHECK(boxes[i].device == process); /* one device per process, devices 0-3 hold */
      CHECK(boxes[i].bytes == (hi[i][0] - lo[i][0]) * (hi[i][1] - lo[i][1]) * 4);
      per_device[process] += boxes[i].bytes;
    }
    total += n;
    for (list = RESHARD_PIECES_LOCAL; list <= RESHARD_PIECES_RECV; ++list) {
      const uint64_t count = list == RESHARD_PIECES_LOCAL  ? info.num_local_pieces
                             : list == RESHARD_PIECES_SEND ? info.num_send_pieces
                                                           : info.num_recv_pieces;
      for (i = 0; i < count; ++i) {
        REQUIRE_OK(reshard_plan_part_piece(plan, process, (reshard_piece_list_t)list, i, &piece,
                                           plo, phi));
        for (k = 0; k < 2; ++k) {
          const uint64_t entry = k == 0 ? piece.src_entry : piece.dst_entry;
          const int64_t device = k == 0 ? piece.src_device : piece.dst_device;
          size_t j;
          int inside = 0;
          if (entry != RESHARD_SCRATCH_ENTRY || device != process) continue;
          ++named;
          for (j = 0; j < n; ++j)
            inside |= boxes[j].device == device && boxes[j].tensor == piece.tensor &&
                      lo[j][0] <= plo[0] && phi[0] <= hi[j][0] && lo[j][1] <= plo[1] &&
                      phi[1] <= hi[j][1];
          CHECK(inside);
        }
      }
    }
  }
  for (d = 0; d < 6; ++d) most = per_device[d] > most ? per_device[d] : most;
  CHECK(total > 0 && named > 0);
  CHECK(most == stats.max_scratch_bytes);
  /* Bad inputs name what is wrong. */
  CHECK_ERR(reshard_plan_part_scratch(plan, 0, 99, &x, NULL, NULL), RESHARD_ERROR_OUT_OF_RANGE,
            "index: 99 >=");
  CHECK_ERR(reshard_plan_part_scratch(plan, 42, 0, &x, NULL, NULL), RESHARD_ERROR_OUT_OF_RANGE,
            "process: this plan holds no part for process 42");
  CHECK_ERR(reshard_plan_part_scratch(NULL, 0, 0, &x, NULL, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "plan");
  CHECK_ERR(reshard_plan_part_scratch(plan, 0, 0, NULL, NULL, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_scratch");
  x.struct_size = 0;
  CHECK_ERR(reshard_plan_part_scratch(plan, 0, 0, &x, NULL, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_scratch->struct_size");
  /* A 1.5-sized part info leaves num_scratch alone. */
  memset(&old, 0x55, sizeof old);
  old.struct_size = offsetof(reshard_part_info_t, num_scratch);
  CHECK_OK(reshard_plan_part_info(plan, 0, &old));
  CHECK(old.num_scratch == 0x5555555555555555);
  reshard_plan_destroy(plan);
  reshard_plan_input_destroy(input);
}

static void test_plan_limit(void) {
  static const char* const kFleet[] = {
      "request->max_plan_bytes: the 1,024 process parts of this plan need about ",
      " pieces, ",
      " messages, ",
      " as plan bytes), above the limit of 1.00 GiB (1,073,741,824 bytes)",
      "plan one process's part at a time (RESHARD_PLAN_SCOPE_PROCESS: at most ",
      "(RESHARD_PLAN_BYTES_UNLIMITED: no limit)",
      NULL};
  static const char* const kCppTerms[] = {"request.", "PlanScope", "(-1", NULL};
  static const char* const kSmall[] = {"request->max_plan_bytes: the 3 process parts",
                                       "above the limit of 1 B (1 bytes)", NULL};
  static const char* const kOnePart[] = {"request->max_plan_bytes: process 1's part needs about",
                                         NULL};
  static const char* const kNoScopeHint[] = {"RESHARD_PLAN_SCOPE_PROCESS", NULL};
  reshard_plan_request_t request = RESHARD_PLAN_REQUEST_INIT;
  reshard_plan_t* plan = NULL;
  reshard_plan_t* const kSentinel = (reshard_plan_t*)&g_failures;
  reshard_plan_t* untouched = kSentinel;
  reshard_plan_input_t* fleet = fleet_input();
  unsigned char v1_1[sizeof(reshard_plan_request_t) + 16];
  const reshard_api_t* api = reshard_get_api(RESHARD_ABI_MAJOR);
  int32_t has = 0;
  time_t t0;
  fixture f;

  /* 1.2: minor 2, the error code and the field appended; no new function. */
  REQUIRE(api != NULL);
  CHECK(RESHARD_ABI_MINOR >= 2);
  CHECK(api->abi_minor == RESHARD_ABI_MINOR);
  CHECK(offsetof(reshard_plan_request_t, max_plan_bytes) ==
        offsetof(reshard_plan_request_t, reserved1) + sizeof(int32_t));
  CHECK(sizeof(reshard_plan_request_t) ==
        offsetof(reshard_plan_request_t, max_plan_bytes) + sizeof(int64_t));
  CHECK(request.max_plan_bytes == 0);
  CHECK(strcmp(reshard_error_code_name(RESHARD_ERROR_RESOURCE_EXHAUSTED), "resource_exhausted") ==
        0);

  /* Every part of the fleet: refused within seconds, naming the field and
   * giving the estimate; nothing is written to out_plan. */
  REQUIRE(fleet != NULL);
  request.max_plan_bytes = INT64_C(1) << 30;
  t0 = time(NULL);
  check_exhausted(reshard_plan_create(fleet, &request, &untouched), kFleet, kCppTerms, __LINE__);
  CHECK(difftime(time(NULL), t0) < 10);
  CHECK(untouched == kSentinel);
  /* One process's part fits the same limit; statistics never need one. */
  request.scope = RESHARD_PLAN_SCOPE_PROCESS;
  request.process = 5;
  REQUIRE_OK(reshard_plan_create(fleet, &request, &plan));
  CHECK_OK(reshard_plan_has_part(plan, 5, &has));
  CHECK(has == 1);
  reshard_plan_destroy(plan);
  plan = NULL;
  request.scope = RESHARD_PLAN_SCOPE_GLOBAL;
  request.max_plan_bytes = 1;
  REQUIRE_OK(reshard_plan_create(fleet, &request, &plan));
  reshard_plan_destroy(plan);
  plan = NULL;
  reshard_plan_input_destroy(fleet);

  /* The small fixture under a 1-byte limit, then without a limit. */
  REQUIRE(fixture_create(&f));
  request = (reshard_plan_request_t)RESHARD_PLAN_REQUEST_INIT;
  request.max_plan_bytes = 1;
  check_exhausted(reshard_plan_create(f.input, &request, &untouched), kSmall, kCppTerms, __LINE__);
  request.scope = RESHARD_PLAN_SCOPE_PROCESS;
  request.process = 1;
  check_exhausted(reshard_plan_create(f.input, &request, &untouched), kOnePart, kNoScopeHint,
                  __LINE__);
  CHECK(untouched == kSentinel);
  request.scope = RESHARD_PLAN_SCOPE_ALL;
  request.max_plan_bytes = RESHARD_PLAN_BYTES_UNLIMITED;
  REQUIRE_OK(reshard_plan_create(f.input, &request, &plan));
  CHECK_OK(reshard_plan_has_part(plan, 2, &has));
  CHECK(has == 1);
  reshard_plan_destroy(plan);
  plan = NULL;
  /* Below -1: invalid, naming the field in this header's terms. */
  request.max_plan_bytes = -2;
  CHECK_ERR(reshard_plan_create(f.input, &request, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "request->max_plan_bytes: -2 is invalid (0: the default, half the memory available; "
            "N > 0: N bytes; RESHARD_PLAN_BYTES_UNLIMITED: no limit)");
  request.max_plan_bytes = INT64_MIN;
  CHECK_ERR(reshard_plan_create(f.input, &request, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "request->max_plan_bytes: ");
  CHECK(untouched == kSentinel);

  /* A 1.1-sized request gets the default limit, whatever follows it in
   * memory: here a 1-byte limit the library must not read. */
  memset(v1_1, 0, sizeof v1_1);
  request = (reshard_plan_request_t)RESHARD_PLAN_REQUEST_INIT;
  request.struct_size = offsetof(reshard_plan_request_t, max_plan_bytes);
  request.max_plan_bytes = 1;
  memcpy(v1_1, &request, sizeof request);
  REQUIRE_OK(reshard_plan_create(f.input, (const reshard_plan_request_t*)(const void*)v1_1, &plan));
  CHECK_OK(reshard_plan_has_part(plan, 0, &has));
  CHECK(has == 1);
  reshard_plan_destroy(plan);
  fixture_destroy(&f);
}

/* ------------------------------------------------------------------------ */
/* ABI 1.1: transports, executor info, device locations, MPI / NCCL options */
/* ------------------------------------------------------------------------ */

static void test_transports(void) {
  fixture f;
  reshard_plan_t* plan = NULL;
  reshard_executor_t* executor = NULL;
  reshard_executor_t* const kSentinel = (reshard_executor_t*)&g_failures;
  reshard_executor_t* untouched = kSentinel;
  reshard_executor_options_t options = RESHARD_EXECUTOR_OPTIONS_INIT;
  reshard_executor_info_t info = RESHARD_EXECUTOR_INFO_INIT;
  const reshard_api_t* api = reshard_get_api(RESHARD_ABI_MAJOR);
  char why[512];
  char tiny[8];
  int32_t available = -1, process = -1, host = -1, ordinal = -1;
  reshard_transport_t t;

  /* The 1.1 table (minor 1 or later), the new fields point at the new functions. */
  REQUIRE(api != NULL);
  CHECK(RESHARD_ABI_MINOR >= 1);
  CHECK(api->abi_minor == RESHARD_ABI_MINOR);
  CHECK(api->struct_size >= offsetof(reshard_api_t, plan_device_location) + sizeof(void*));
  CHECK(api->transport_available == &reshard_transport_available);
  CHECK(api->executor_info == &reshard_executor_info);
  CHECK(api->mpi_executor_create == &reshard_mpi_executor_create);
  CHECK(api->nccl_unique_id == &reshard_nccl_unique_id);
  CHECK(api->nccl_executor_create == &reshard_nccl_executor_create);
  CHECK(api->plan_device_location == &reshard_plan_device_location);

  /* Availability: HOST always; the others answer 0 or 1 with a reason. */
  strcpy(why, "stale");
  REQUIRE_OK(reshard_transport_available(RESHARD_TRANSPORT_HOST, &available, why, sizeof why));
  CHECK(available == 1);
  CHECK(why[0] == '\0');
  for (t = RESHARD_TRANSPORT_MPI; t <= RESHARD_TRANSPORT_CUDA_LOCAL; ++t) {
    available = -1;
    why[0] = 'x';
    CHECK_OK(reshard_transport_available(t, &available, why, sizeof why));
    CHECK(available == 0 || available == 1);
    CHECK(available == 1 ? why[0] == '\0' : strlen(why) > 10);
    printf("transport %d: %s%s\n", (int)t, available ? "available" : "unavailable: ", why);
    /* Truncated reasons stay NUL-terminated; no buffer at all is fine. */
    memset(tiny, 'x', sizeof tiny);
    CHECK_OK(reshard_transport_available(t, &available, tiny, sizeof tiny));
    CHECK(memchr(tiny, '\0', sizeof tiny) != NULL);
    CHECK_OK(reshard_transport_available(t, &available, NULL, 0));
  }
  available = -7;
  CHECK_ERR(reshard_transport_available(0, &available, why, sizeof why),
            RESHARD_ERROR_INVALID_ARGUMENT, "transport: invalid value 0");
  CHECK_ERR(reshard_transport_available(5, &available, why, sizeof why),
            RESHARD_ERROR_INVALID_ARGUMENT, "transport: invalid value 5");
  CHECK(available == -7);
  CHECK_ERR(reshard_transport_available(RESHARD_TRANSPORT_HOST, NULL, why, sizeof why),
            RESHARD_ERROR_INVALID_ARGUMENT, "out_available: must not be NULL");

  /* CUDA_LOCAL through reshard_executor_create: an executor where a GPU
   * is, otherwise UNSUPPORTED saying what is missing. */
  options.transport = RESHARD_TRANSPORT_CUDA_LOCAL;
  REQUIRE_OK(
      reshard_transport_available(RESHARD_TRANSPORT_CUDA_LOCAL, &available, why, sizeof why));
  if (available) {
    REQUIRE_OK(reshard_executor_create(&options, &executor));
    REQUIRE_OK(reshard_executor_info(executor, &info));
    CHECK(info.transport == RESHARD_TRANSPORT_CUDA_LOCAL && info.rank == 0 && info.size == 1);
    reshard_executor_destroy(executor);
    executor = NULL;
  } else {
    CHECK_ERR(reshard_executor_create(&options, &untouched), RESHARD_ERROR_UNSUPPORTED, "");
    CHECK(untouched == kSentinel);
  }

  /* Executor info of a host executor, and its errors. */
  REQUIRE_OK(reshard_executor_create(NULL, &executor));
  info.rank = info.size = info.transport = -1;
  REQUIRE_OK(reshard_executor_info(executor, &info));
  CHECK(info.struct_size == sizeof info);
  CHECK(info.transport == RESHARD_TRANSPORT_HOST && info.rank == 0 && info.size == 1);
  CHECK(info.reserved0 == 0);
  CHECK_ERR(reshard_executor_info(NULL, &info), RESHARD_ERROR_INVALID_ARGUMENT,
            "executor: must not be NULL");
  CHECK_ERR(reshard_executor_info(executor, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_info: must not be NULL");
  info.struct_size = sizeof(size_t) + 4;
  info.rank = 42;
  CHECK_ERR(reshard_executor_info(executor, &info), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_info->struct_size: 12");
  CHECK(info.rank == 42);
  reshard_executor_destroy(executor);

  /* Device locations from the fixture's topology (processes 0,0,1,1,2,2,2,2;
   * ordinal = device % 4). */
  REQUIRE(fixture_create(&f));
  plan = fixture_plan(&f);
  REQUIRE(plan != NULL);
  CHECK_OK(reshard_plan_device_location(plan, 3, &process, &host, &ordinal));
  CHECK(process == 1 && host == 1 && ordinal == 3);
  CHECK_OK(reshard_plan_device_location(plan, 6, &process, NULL, NULL));
  CHECK(process == 2);
  CHECK_OK(reshard_plan_device_location(plan, 1000, &process, &host, &ordinal));
  CHECK(process == 0 && host == 0 && ordinal == 0); /* not in the topology */
  process = 77;
  CHECK_ERR(reshard_plan_device_location(plan, -1, &process, NULL, NULL),
            RESHARD_ERROR_INVALID_ARGUMENT, "device: -1 is negative");
  CHECK_ERR(reshard_plan_device_location(NULL, 1, &process, NULL, NULL),
            RESHARD_ERROR_INVALID_ARGUMENT, "plan: must not be NULL");
  CHECK(process == 77);
  reshard_plan_destroy(plan);
  fixture_destroy(&f);
}

static void test_mpi_options(void) {
  reshard_mpi_executor_options_t o = RESHARD_MPI_EXECUTOR_OPTIONS_INIT;
  reshard_executor_t* const kSentinel = (reshard_executor_t*)&g_failures;
  reshard_executor_t* untouched = kSentinel;
  int32_t available = 0;
  char why[512];

  /* The defaults of the _INIT macro. */
  CHECK(o.struct_size == sizeof o);
  CHECK(o.comm_kind == RESHARD_MPI_COMM_WORLD);
  CHECK(o.initialize == 1 && o.max_batches_in_flight == 8 && o.timeout_seconds == 300.0);
  CHECK(o.agreement == RESHARD_AGREEMENT_FIRST_USE && o.packing == RESHARD_PACKING_AUTO);
  CHECK(o.overlap == 1 && o.library == NULL);

  /* Every bad field, named; the output untouched. None of these loads MPI
   * or initialises it. */
  CHECK_ERR(reshard_mpi_executor_create(&o, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_executor: must not be NULL");
  o.struct_size = 0;
  CHECK_ERR(reshard_mpi_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->struct_size: 0");
  o.struct_size = offsetof(reshard_mpi_executor_options_t, library);
  CHECK_ERR(reshard_mpi_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->struct_size");
  o.struct_size = sizeof o;
  o.comm_kind = 7;
  CHECK_ERR(reshard_mpi_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->comm_kind: invalid value 7");
  o.comm_kind = RESHARD_MPI_COMM_WORLD;
  o.timeout_seconds = 0;
  CHECK_ERR(reshard_mpi_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->timeout_seconds");
  o.timeout_seconds = HUGE_VAL;
  CHECK_ERR(reshard_mpi_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->timeout_seconds");
  o.timeout_seconds = 10;
  o.max_batches_in_flight = 0;
  CHECK_ERR(reshard_mpi_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->max_batches_in_flight: 0 must be at least 1");
  o.max_batches_in_flight = 2;
  o.agreement = 3;
  CHECK_ERR(reshard_mpi_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->agreement: invalid value 3");
  o.agreement = RESHARD_AGREEMENT_SKIP;
  o.packing = -1;
  CHECK_ERR(reshard_mpi_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->packing: invalid value -1");
  o.packing = RESHARD_PACKING_STAGING;
  /* The backend absent: UNSUPPORTED saying what is missing. */
  o.library = "/nonexistent/libreshard_mpi.so.1";
  CHECK_ERR(reshard_mpi_executor_create(&o, &untouched), RESHARD_ERROR_UNSUPPORTED,
            "MPI transport unavailable");
  o.library = NULL;
  /* A Fortran handle while MPI is not initialised (this process never
   * initialises MPI): named, not dereferenced. */
  REQUIRE_OK(reshard_transport_available(RESHARD_TRANSPORT_MPI, &available, why, sizeof why));
  o.comm_kind = RESHARD_MPI_COMM_FORTRAN;
  o.comm = 0;
  if (available) {
    CHECK_ERR(reshard_mpi_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
              "options->comm: MPI is not initialised");
  } else {
    CHECK_ERR(reshard_mpi_executor_create(&o, &untouched), RESHARD_ERROR_UNSUPPORTED,
              "MPI transport unavailable");
  }
  CHECK(untouched == kSentinel);
}

static void test_nccl_options(void) {
  reshard_nccl_executor_options_t o = RESHARD_NCCL_EXECUTOR_OPTIONS_INIT;
  reshard_nccl_device_t devices[2] = {RESHARD_NCCL_DEVICE_INIT, RESHARD_NCCL_DEVICE_INIT};
  reshard_executor_t* const kSentinel = (reshard_executor_t*)&g_failures;
  reshard_executor_t* untouched = kSentinel;
  reshard_nccl_unique_id_t id;
  size_t i;
  int32_t available = 0;
  char why[512];

  CHECK(sizeof(reshard_nccl_unique_id_t) == 128);
  CHECK(sizeof(reshard_nccl_device_t) == 8 + 2 * sizeof(void*));
  CHECK(o.struct_size == sizeof o && o.process == -1 && o.nccl_ranks == 0);
  CHECK(o.devices == NULL && o.num_devices == 0 && o.timeout_seconds == 300.0);
  CHECK(o.wait == 1 && o.check_pointers == 1 && o.abort_borrowed_on_failure == 0);
  CHECK(o.max_batches_in_flight == 8 && o.overlap == 1 && o.library == NULL);
  for (i = 0; i < sizeof o.unique_id.internal; ++i) CHECK(o.unique_id.internal[i] == 0);
  CHECK(devices[0].ordinal == 0 && devices[0].nccl_rank == -1 && devices[0].comm == NULL &&
        devices[0].stream == NULL);

  /* Every bad field, named, before anything is loaded. */
  CHECK_ERR(reshard_nccl_executor_create(NULL, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options: must not be NULL");
  CHECK_ERR(reshard_nccl_executor_create(&o, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_executor: must not be NULL");
  o.struct_size = 4;
  CHECK_ERR(reshard_nccl_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->struct_size: 4");
  o.struct_size = sizeof o;
  CHECK_ERR(reshard_nccl_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->num_devices: 0");
  o.num_devices = 1;
  CHECK_ERR(reshard_nccl_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->devices: must not be NULL");
  o.devices = devices;
  o.process = -2;
  CHECK_ERR(reshard_nccl_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->process: -2 is negative");
  o.process = 0;
  o.nccl_ranks = 0;
  CHECK_ERR(reshard_nccl_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->nccl_ranks: 0 must be at least 1 (options->devices[0].comm is NULL");
  o.nccl_ranks = 2;
  CHECK_ERR(reshard_nccl_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->devices[0].nccl_rank: -1 is outside [0, 2)");
  devices[0].nccl_rank = 0;
  devices[1].nccl_rank = 1;
  devices[1].ordinal = -2;
  o.num_devices = 2;
  CHECK_ERR(reshard_nccl_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->devices[1].ordinal: -2 is negative");
  devices[1].ordinal = 0;
  CHECK_ERR(reshard_nccl_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->devices[1].ordinal: 0 appears twice");
  devices[1].ordinal = 1;
  devices[1].nccl_rank = 0;
  CHECK_ERR(reshard_nccl_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->devices[1].nccl_rank: 0 appears twice");
  devices[1].nccl_rank = 1;
  CHECK_ERR(reshard_nccl_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->unique_id: all zero");
  o.unique_id.internal[5] = 1;
  o.timeout_seconds = -3;
  CHECK_ERR(reshard_nccl_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->timeout_seconds");
  o.timeout_seconds = 5;
  o.agreement = 9;
  CHECK_ERR(reshard_nccl_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->agreement: invalid value 9");
  o.agreement = RESHARD_AGREEMENT_FIRST_USE;
  /* The backend absent: UNSUPPORTED, as for the unique id. */
  o.library = "/nonexistent/libreshard_cuda.so.1";
  CHECK_ERR(reshard_nccl_executor_create(&o, &untouched), RESHARD_ERROR_UNSUPPORTED, "");
  CHECK(untouched == kSentinel);
  memset(&id, 7, sizeof id);
  CHECK_ERR(reshard_nccl_unique_id("/nonexistent/libreshard_cuda.so.1", &id),
            RESHARD_ERROR_UNSUPPORTED, "");
  CHECK(id.internal[0] == 7 && id.internal[127] == 7);
  CHECK_ERR(reshard_nccl_unique_id(NULL, NULL), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_id: must not be NULL");
  /* Without NCCL (no GPU here, say) the default backend says why. */
  REQUIRE_OK(reshard_transport_available(RESHARD_TRANSPORT_NCCL, &available, why, sizeof why));
  if (!available) {
    /* (A unique id needs no GPU: ncclGetUniqueId may succeed without one.) */
    reshard_error_t* error = reshard_nccl_unique_id(NULL, &id);
    CHECK(error == NULL || reshard_error_code(error) == RESHARD_ERROR_UNSUPPORTED);
    reshard_error_destroy(error);
    o.library = NULL;
    CHECK_ERR(reshard_nccl_executor_create(&o, &untouched), RESHARD_ERROR_UNSUPPORTED, "");
    CHECK(untouched == kSentinel);
  } else {
    CHECK_OK(reshard_nccl_unique_id(NULL, &id));
  }
}

/* ------------------------------------------------------------------------ */

typedef struct test_group {
  const char* name;
  void (*run)(void);
} test_group;

static const test_group kGroups[] = {
    {"version", test_version},
    {"errors", test_errors},
    {"dtypes", test_dtypes},
    {"mesh", test_mesh},
    {"layout_named", test_layout_named},
    {"layout_boxes", test_layout_boxes},
    {"topology", test_topology},
    {"plan_input", test_plan_input},
    {"spec", test_spec},
    {"plan_create", test_plan_create},
    {"stats", test_stats},
    {"inspect_tensors", test_inspect_tensors},
    {"inspect_parts", test_inspect_parts},
    {"local_pieces", test_local_pieces},
    {"serialize", test_serialize},
    {"corrupt_bytes", test_corrupt_bytes},
    {"mac", test_mac},
    {"executor", test_executor},
    {"executor_concurrent", test_executor_concurrent},
    {"destroy_while_executing", test_destroy_while_executing},
    {"executor_timeout", test_executor_timeout},
    {"oracle", test_oracle},
    {"flat", test_flat},
    {"casts", test_casts},
    {"partial", test_partial},
    {"out_of_memory", test_out_of_memory},
    {"plan_limit", test_plan_limit},
    {"relays", test_relays},
    {"nics_per_host", test_nics_per_host},
    {"scratch", test_scratch},
    {"transports", test_transports},
    {"mpi_options", test_mpi_options},
    {"nccl_options", test_nccl_options},
};

int main(int argc, char** argv) {
  size_t i;
  int ran = 0;
  if (argc > 1 && strcmp(argv[1], "--list") == 0) {
    for (i = 0; i < sizeof kGroups / sizeof kGroups[0]; ++i) printf("%s\n", kGroups[i].name);
    return 0;
  }
  for (i = 0; i < sizeof kGroups / sizeof kGroups[0]; ++i) {
    if (argc > 1 && strcmp(argv[1], kGroups[i].name) != 0) continue;
    kGroups[i].run();
    ++ran;
  }
  if (ran == 0) {
    fprintf(stderr, "unknown test group \"%s\"\n", argc > 1 ? argv[1] : "");
    return 2;
  }
  if (g_failures > 0) {
    fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  return g_skipped && ran == 1 ? 77 : 0;
}
