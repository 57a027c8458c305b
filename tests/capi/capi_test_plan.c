/* C ABI tests (capi_test.c has the conventions): planning, statistics, inspection, serialization
 * and authenticated plans. */
#include "capi_test.h"

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

void test_plan_create(void) {
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
    if (kBadOptions[i].is_int) {
      /* Only integer fields convert: a double value may be inf or NaN. */
      const int64_t as_int = (int64_t)kBadOptions[i].value;
      memcpy(field, &as_int, sizeof as_int);
    } else
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

void test_stats(void) {
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

void test_inspect_tensors(void) {
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

void test_inspect_parts(void) {
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
      CHECK(message.sub == 0); /* the planner's fixture plan has no subs */
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
void test_local_pieces(void) {
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

void test_serialize(void) {
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
void test_mac(void) {
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

void test_corrupt_bytes(void) {
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

#ifndef RESHARD_TEST_SUB_PLAN
#define RESHARD_TEST_SUB_PLAN ""
#endif

/* Reads a whole file into a malloc'd buffer; NULL where it cannot. */
static unsigned char* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  unsigned char* data = NULL;
  long n;
  if (f == NULL) return NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
    data = (unsigned char*)malloc((size_t)n);
    if (data != NULL && fread(data, 1, (size_t)n, f) != (size_t)n) {
      free(data);
      data = NULL;
    }
    *size = (size_t)n;
  }
  fclose(f);
  return data;
}

/* reshard_message_t as a 1.13 header declared it (no sub). */
typedef struct message_v13 {
  size_t struct_size;
  int64_t src_device;
  int64_t dst_device;
  uint64_t round;
  uint64_t first_piece;
  uint64_t num_pieces;
  int64_t bytes;
  uint64_t stage;
} message_v13;

/* A plan with sub-messages (written by make_sub_plan.cc: a planner plan
 * whose messages of several pieces are cut into up to 3 subs) shows them:
 * as many subs above 0 as the plan holds, sub j > 0 right after sub j - 1 of
 * the same stage, round and devices, each sub's bytes those of its own
 * pieces; a caller with the 1.13 struct_size gets every other field and
 * nothing written past its struct. */
void test_sub_messages(void) {
  size_t size = 0, n = 0, p;
  unsigned char* data = read_file(RESHARD_TEST_SUB_PLAN, &size);
  FILE* count_file = NULL;
  unsigned long expected = 0, seen = 0;
  char count_path[1024];
  reshard_plan_t* plan = NULL;
  reshard_message_t message = RESHARD_MESSAGE_INIT, previous = RESHARD_MESSAGE_INIT;
  reshard_piece_t piece = RESHARD_PIECE_INIT;
  reshard_part_info_t info = RESHARD_PART_INFO_INIT;
  int64_t lo[2], hi[2];

  REQUIRE(data != NULL);
  REQUIRE(strlen(RESHARD_TEST_SUB_PLAN) + 6 < sizeof count_path);
  snprintf(count_path, sizeof count_path, "%s.subs", RESHARD_TEST_SUB_PLAN);
  count_file = fopen(count_path, "r");
  REQUIRE(count_file != NULL);
  CHECK(fscanf(count_file, "%lu", &expected) == 1);
  fclose(count_file);
  CHECK(expected > 0);
  CHECK_OK(reshard_plan_deserialize(data, size, &plan));
  free(data);
  REQUIRE(plan != NULL);
  CHECK_OK(reshard_plan_num_processes(plan, &n));
  for (p = 0; p < n; ++p) {
    int32_t process = -1;
    int d;
    CHECK_OK(reshard_plan_process(plan, p, &process));
    CHECK_OK(reshard_plan_part_info(plan, process, &info));
    for (d = 0; d < 2; ++d) {
      const reshard_direction_t dir = d == 0 ? RESHARD_DIRECTION_SEND : RESHARD_DIRECTION_RECV;
      const uint64_t count = d == 0 ? info.num_sends : info.num_recvs;
      uint64_t m, k;
      for (m = 0; m < count; ++m) {
        message_v13 old;
        int64_t bytes = 0;
        unsigned char* tail;
        CHECK_OK(reshard_plan_part_message(plan, process, dir, (size_t)m, &message));
        CHECK(message.struct_size == sizeof message);
        if (message.sub > 0) {
          ++seen;
          CHECK(m > 0 && previous.sub + 1 == message.sub && previous.stage == message.stage &&
                previous.round == message.round && previous.src_device == message.src_device &&
                previous.dst_device == message.dst_device);
        }
        for (k = message.first_piece; k < message.first_piece + message.num_pieces; ++k) {
          CHECK_OK(reshard_plan_part_piece(plan, process,
                                           d == 0 ? RESHARD_PIECES_SEND : RESHARD_PIECES_RECV,
                                           (size_t)k, &piece, lo, hi));
          bytes += piece.bytes;
        }
        CHECK(bytes == message.bytes);
        previous = message;
        /* The 1.13 struct: everything but sub, and not a byte past it. */
        {
          unsigned char buffer[sizeof(message_v13) + 16];
          memset(buffer, 0xA5, sizeof buffer);
          ((message_v13*)(void*)buffer)->struct_size = sizeof(message_v13);
          CHECK_OK(reshard_plan_part_message(plan, process, dir, (size_t)m,
                                             (reshard_message_t*)(void*)buffer));
          memcpy(&old, buffer, sizeof old);
          CHECK(old.struct_size == sizeof(message_v13));
          CHECK(old.src_device == message.src_device && old.dst_device == message.dst_device &&
                old.round == message.round && old.first_piece == message.first_piece &&
                old.num_pieces == message.num_pieces && old.bytes == message.bytes &&
                old.stage == message.stage);
          for (tail = buffer + sizeof(message_v13); tail < buffer + sizeof buffer; ++tail) {
            CHECK(*tail == 0xA5);
          }
        }
      }
    }
  }
  CHECK(seen == expected);
  reshard_plan_destroy(plan);
}
