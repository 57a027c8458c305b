/* C ABI tests (capi_test.c has the conventions): ABI 1.2 plan limits and relays, and the ABI 1.1
 * transports with their MPI and NCCL options. */
#include "capi_test.h"

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
void test_relays(void) {
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
void test_nics_per_host(void) {
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
void test_scratch(void) {
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

void test_plan_limit(void) {
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

void test_transports(void) {
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

void test_mpi_options(void) {
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

void test_nccl_options(void) {
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
