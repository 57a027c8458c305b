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
 * process per group (capi.<group>). The groups live in capi_test*.c by
 * topic; capi_test.h declares them and the shared fixture. */
#include "capi_test.h"

/* ------------------------------------------------------------------------ */
/* version, function table                                                  */
/* ------------------------------------------------------------------------ */

void test_version(void) {
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
  CHECK(api->plan_tensor_scales == reshard_plan_tensor_scales);
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

void test_errors(void) {
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

void test_dtypes(void) {
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
  /* e8m0 (ABI 1.13): a scale tensor's dtype, named and sized; no spec
   * tensor has it, so its name does not parse. */
  CHECK(RESHARD_DTYPE_E8M0 == 16);
  CHECK(reshard_dtype_size(RESHARD_DTYPE_E8M0) == 1);
  REQUIRE(reshard_dtype_name(RESHARD_DTYPE_E8M0) != NULL);
  CHECK(strcmp(reshard_dtype_name(RESHARD_DTYPE_E8M0), "e8m0") == 0);
  CHECK_ERR(reshard_dtype_from_name("e8m0", &dtype), RESHARD_ERROR_INVALID_ARGUMENT,
            "name: unknown dtype \"e8m0\"");
  CHECK(reshard_dtype_size(0) == 0);
  CHECK(reshard_dtype_size(17) == 0);
  CHECK(reshard_dtype_size(-1) == 0);
  CHECK(reshard_dtype_name(0) == NULL);
  CHECK(reshard_dtype_name(17) == NULL);
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

void test_mesh(void) {
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

void test_layout_named(void) {
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

void test_layout_boxes(void) {
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

void test_topology(void) {
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

void test_plan_input(void) {
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

void test_spec(void) {
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
    {"sub_messages", test_sub_messages},
    {"mac", test_mac},
    {"executor", test_executor},
    {"executor_concurrent", test_executor_concurrent},
    {"destroy_while_executing", test_destroy_while_executing},
    {"executor_timeout", test_executor_timeout},
    {"oracle", test_oracle},
    {"flat", test_flat},
    {"casts", test_casts},
    {"block_scales", test_block_scales},
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
