/* C ABI tests (capi_test.c has the conventions): execution, the oracle, casts, flat layouts,
 * partial sums and allocation failure. */
#include "capi_test.h"

/* ------------------------------------------------------------------------ */
/* execution and the oracle                                                 */
/* ------------------------------------------------------------------------ */

typedef struct executor_options_v2 {
  reshard_executor_options_t v1;
  int64_t future_field;
} executor_options_v2;

void test_executor(void) {
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

void test_executor_concurrent(void) {
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

void test_destroy_while_executing(void) {
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
void test_executor_timeout(void) {
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

void test_oracle(void) {
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
void test_casts(void) {
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

/* Block scales (ABI 1.12): reshard_plan_tensor_scales names a tensor's
 * scale tensor and block; the plan executes from C with no source buffers
 * for the scale tensor, values and scales checked by the oracle; bad
 * arguments name themselves and leave the outputs untouched. */
void test_block_scales(void) {
  static const char kSpec[] =
      "{\"meshes\": {\"a\": {\"axis_names\": [\"x\"], \"shape\": [2]},"
      "            \"b\": {\"axis_names\": [\"y\"], \"shape\": [2], \"devices\": [2, 3]}},"
      " \"tensors\": ["
      "  {\"name\": \"w\", \"shape\": [256, 6], \"dtype\": \"bf16\","
      "   \"src\": {\"mesh\": \"a\", \"spec\": [\"x\", null]},"
      "   \"dst\": {\"mesh\": \"b\", \"spec\": [null, \"y\"], \"dtype\": \"f8e4m3\","
      "           \"scales\": {\"name\": \"w.scale\", \"block\": [128, 4]}}}]}";
  reshard_plan_input_t* input = NULL;
  reshard_plan_t* plan = NULL;
  reshard_executor_t* executor = NULL;
  const char* name = NULL;
  size_t n = 0, t, e;
  int64_t scale_tensor = -7, block[2] = {-7, -7}, shape[2] = {0, 0};
  int64_t device = 0, lo[2], hi[2], mismatches = -1;
  reshard_dtype_t dtype = 0;
  unsigned char src_mem[2][128 * 6 * 2], dst_mem[2][2][256 * 3];
  reshard_src_buffer_t src[2];
  reshard_dst_buffer_t dst[2][2];
  reshard_tensor_buffers_t buffers[2];

  REQUIRE_OK(reshard_plan_input_from_spec(kSpec, strlen(kSpec), &input));
  REQUIRE_OK(reshard_plan_create(input, NULL, &plan));
  CHECK_OK(reshard_plan_num_tensors(plan, &n));
  CHECK(n == 2);
  CHECK_OK(reshard_plan_tensor_scales(plan, 0, &scale_tensor, block));
  CHECK(scale_tensor == 1 && block[0] == 128 && block[1] == 4);
  /* The scale tensor: f32, ceil(shape / block), no scales of its own (and
   * out_block neither read nor written). */
  CHECK_OK(reshard_plan_tensor_name(plan, 1, &name));
  CHECK(name != NULL && strcmp(name, "w.scale") == 0);
  CHECK_OK(reshard_plan_tensor_dtype(plan, 1, &dtype));
  CHECK(dtype == RESHARD_DTYPE_F32);
  CHECK_OK(reshard_plan_tensor_shape(plan, 1, shape));
  CHECK(shape[0] == 2 && shape[1] == 2);
  block[0] = block[1] = -7;
  CHECK_OK(reshard_plan_tensor_scales(plan, 1, &scale_tensor, block));
  CHECK(scale_tensor == -1 && block[0] == -7 && block[1] == -7);
  CHECK_OK(reshard_plan_tensor_scales(plan, 1, &scale_tensor, NULL));
  CHECK(scale_tensor == -1);

  /* Errors, outputs untouched. */
  scale_tensor = -7;
  CHECK_ERR(reshard_plan_tensor_scales(plan, 2, &scale_tensor, block), RESHARD_ERROR_OUT_OF_RANGE,
            "tensor: 2 >= 2 tensors");
  CHECK_ERR(reshard_plan_tensor_scales(NULL, 0, &scale_tensor, block),
            RESHARD_ERROR_INVALID_ARGUMENT, "plan");
  CHECK_ERR(reshard_plan_tensor_scales(plan, 0, NULL, block), RESHARD_ERROR_INVALID_ARGUMENT,
            "out_scale_tensor");
  CHECK_ERR(reshard_plan_tensor_scales(plan, 0, &scale_tensor, NULL),
            RESHARD_ERROR_INVALID_ARGUMENT, "out_block");
  CHECK(scale_tensor == -7 && block[0] == -7 && block[1] == -7);

  /* Executed: sources of the values only; the destinations of both. */
  for (e = 0; e < 2; ++e) {
    CHECK_OK(reshard_oracle_fill_source(plan, 0, e, src_mem[e], sizeof src_mem[e]));
    src[e].data = src_mem[e];
    src[e].bytes = sizeof src_mem[e];
  }
  for (t = 0; t < 2; ++t) {
    const size_t size = t == 0 ? 1 : 4;
    for (e = 0; e < 2; ++e) {
      CHECK_OK(reshard_plan_tensor_entry(plan, t, RESHARD_SIDE_DST, e, &device, NULL, lo, hi));
      memset(dst_mem[t][e], 0x5A, sizeof dst_mem[t][e]);
      dst[t][e].data = dst_mem[t][e];
      dst[t][e].bytes = (size_t)((hi[0] - lo[0]) * (hi[1] - lo[1])) * size;
    }
    buffers[t].src = t == 0 ? src : NULL;
    buffers[t].num_src = t == 0 ? 2 : 0;
    buffers[t].dst = dst[t];
    buffers[t].num_dst = 2;
  }
  /* Entry 1 of the destination (columns 3-6) touches both block columns. */
  CHECK(dst[1][0].bytes == 2 * 4 && dst[1][1].bytes == 4 * 4);
  REQUIRE_OK(reshard_executor_create(NULL, &executor));
  CHECK_OK(reshard_executor_execute(executor, plan, buffers, 2));
  for (t = 0; t < 2; ++t)
    for (e = 0; e < 2; ++e) {
      mismatches = -1;
      CHECK_OK(reshard_oracle_check_destination(plan, t, e, dst_mem[t][e], dst[t][e].bytes,
                                                &mismatches));
      CHECK(mismatches == 0);
    }
  reshard_executor_destroy(executor);
  reshard_plan_destroy(plan);
  reshard_plan_input_destroy(input);
}

void test_flat(void) {
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
void test_partial(void) {
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

void test_out_of_memory(void) {
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
