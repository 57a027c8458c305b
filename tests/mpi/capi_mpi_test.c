/* The C ABI's MPI executor across processes (ABI 1.1), run under
 * `mpirun -np 2` and `-np 4` (ctest mpi.capi.np2, mpi.capi.np4). Plain C11
 * against reshard.h + reshard_mpi.h + mpi.h only, as a user would write it.
 *
 * What it proves, on every rank:
 *  - the communicator crosses as a Fortran handle: a duplicate of
 *    MPI_COMM_WORLD works (and may be freed right after creation), while
 *    MPI_COMM_NULL's handle and a handle naming nothing are INVALID_ARGUMENT
 *    naming options->comm;
 *  - each rank plans its own part (RESHARD_PLAN_SCOPE_PROCESS), fills only
 *    its own source entries with the oracle, passes {NULL, 0} for every
 *    other entry, executes, and every local destination element matches the
 *    oracle; twice (the agreement cached), and with staging instead of
 *    gathering, on a budget that forces several rounds;
 *  - local mistakes (a buffer for another process's entry, a missing local
 *    buffer) fail on the rank that made them, before any message;
 *  - reshard_executor_verify works on an MPI executor: each rank checks its
 *    own shards and the report sums every rank's;
 *  - ranks that planned different inputs all get MISMATCH (no hang), and the
 *    executor works afterwards;
 *  - a rank that never calls execute: the others get TIMEOUT naming it,
 *    within the executor's timeout.
 * Exit status 0 when every check passed on every rank. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "reshard/reshard.h"
#include "reshard/reshard_mpi.h"

int g_failures = 0;

static int g_rank = 0;
static int g_size = 1;

/* Meshes over 2P, 2P and 3 devices; tensors with uneven shards,
 * replication, a partial (summed) source and a scalar. `w_cols` differs on
 * a rank that is meant to disagree. */
static int make_spec(char* out, size_t n, int w_cols) {
  char a_dev[512] = "", a_proc[512] = "", b_dev[512] = "", b_proc[512] = "";
  size_t used = 0;
  int i;
  const int p = g_size;
  for (i = 0; i < 2 * p; ++i) {
    used = strlen(a_dev);
    snprintf(a_dev + used, sizeof a_dev - used, "%s%d", i ? "," : "", i);
    used = strlen(a_proc);
    snprintf(a_proc + used, sizeof a_proc - used, "%s%d", i ? "," : "", i / 2);
    used = strlen(b_dev);
    snprintf(b_dev + used, sizeof b_dev - used, "%s%d", i ? "," : "", 2 * p + i);
    used = strlen(b_proc);
    snprintf(b_proc + used, sizeof b_proc - used, "%s%d", i ? "," : "", (i * 3 + 1) % p);
  }
  return snprintf(
      out, n,
      "{\"meshes\": {"
      "\"a\": {\"axis_names\": [\"x\"], \"shape\": [%d], \"devices\": [%s], \"processes\": [%s]},"
      "\"b\": {\"axis_names\": [\"y\", \"z\"], \"shape\": [%d, 2], \"devices\": [%s],"
      " \"processes\": [%s]},"
      "\"c\": {\"axis_names\": [\"u\"], \"shape\": [3], \"devices\": [%d, %d, %d],"
      " \"processes\": [%d, 0, %d]}},"
      "\"tensors\": ["
      "{\"name\": \"w\", \"shape\": [37, %d], \"dtype\": \"f32\","
      " \"src\": {\"mesh\": \"a\", \"spec\": [\"x\", null]},"
      " \"dst\": {\"mesh\": \"b\", \"spec\": [\"z\", \"y\"]}},"
      "{\"name\": \"g\", \"shape\": [50], \"dtype\": \"bf16\","
      " \"src\": {\"mesh\": \"a\", \"spec\": [null], \"partial\": {\"axes\": [\"x\"], \"op\": "
      "\"sum\"}},"
      " \"dst\": {\"mesh\": \"b\", \"spec\": [\"y\"]}},"
      "{\"name\": \"e\", \"shape\": [7, 3], \"dtype\": \"i32\","
      " \"src\": {\"mesh\": \"a\", \"spec\": [null, null]},"
      " \"dst\": {\"mesh\": \"c\", \"spec\": [\"u\", null]}},"
      "{\"name\": \"s\", \"shape\": [], \"dtype\": \"f64\","
      " \"src\": {\"mesh\": \"b\", \"spec\": []},"
      " \"dst\": {\"mesh\": \"a\", \"spec\": []}}"
      "]}",
      2 * p, a_dev, a_proc, p, b_dev, b_proc, 4 * p, 4 * p + 1, 4 * p + 2, p - 1, p - 1, w_cols);
}

/* This rank's part of the plan of `spec`, on a 256-byte staging budget. */
static reshard_plan_t* plan_part(const char* spec) {
  reshard_plan_input_t* input = NULL;
  reshard_plan_t* plan = NULL;
  reshard_plan_options_t options = RESHARD_PLAN_OPTIONS_INIT;
  reshard_plan_request_t request = RESHARD_PLAN_REQUEST_INIT;
  options.staging_budget_bytes = 256;
  request.scope = RESHARD_PLAN_SCOPE_PROCESS;
  request.process = g_rank;
  if (ok_(reshard_plan_input_from_spec(spec, strlen(spec), &input), __FILE__, __LINE__, "spec") &&
      ok_(reshard_plan_input_set_options(input, &options), __FILE__, __LINE__, "options")) {
    (void)ok_(reshard_plan_create(input, &request, &plan), __FILE__, __LINE__, "plan_create");
  }
  reshard_plan_input_destroy(input);
  return plan;
}

/* Buffers for every entry of every tensor: allocated (sources filled by the
 * oracle, destinations with a poison pattern) for this rank's entries,
 * {NULL, 0} for the others. */
typedef struct rank_buffers {
  size_t num_tensors;
  reshard_tensor_buffers_t* tensors;
  size_t local_src;
  size_t local_dst;
} rank_buffers;

static size_t entry_bytes(const reshard_plan_t* plan, size_t t, reshard_side_t side, size_t e,
                          int* local) {
  int64_t device = -1, lo[RESHARD_MAX_RANK], hi[RESHARD_MAX_RANK];
  size_t rank = 0, d, bytes;
  int32_t process = -1;
  reshard_dtype_t dtype = 0;
  CHECK_OK(reshard_plan_tensor_entry(plan, t, side, e, &device, NULL, lo, hi));
  CHECK_OK(reshard_plan_tensor_rank(plan, t, &rank));
  CHECK_OK(reshard_plan_tensor_dtype(plan, t, &dtype));
  CHECK_OK(reshard_plan_device_location(plan, device, &process, NULL, NULL));
  bytes = reshard_dtype_size(dtype);
  for (d = 0; d < rank; ++d) bytes *= (size_t)(hi[d] - lo[d]);
  *local = process == g_rank;
  return bytes;
}

static int buffers_make(const reshard_plan_t* plan, rank_buffers* b) {
  size_t t, e, n;
  int local;
  memset(b, 0, sizeof *b);
  if (!ok_(reshard_plan_num_tensors(plan, &b->num_tensors), __FILE__, __LINE__, "tensors"))
    return 0;
  b->tensors = calloc(b->num_tensors, sizeof *b->tensors);
  for (t = 0; t < b->num_tensors; ++t) {
    reshard_src_buffer_t* src;
    reshard_dst_buffer_t* dst;
    CHECK_OK(reshard_plan_tensor_num_entries(plan, t, RESHARD_SIDE_SRC, &n));
    src = calloc(n + 1, sizeof *src);
    b->tensors[t].src = src;
    b->tensors[t].num_src = n;
    for (e = 0; e < n; ++e) {
      const size_t bytes = entry_bytes(plan, t, RESHARD_SIDE_SRC, e, &local);
      if (!local) continue;
      src[e].data = malloc(bytes + 1);
      src[e].bytes = bytes;
      CHECK_OK(reshard_oracle_fill_source(plan, t, e, (void*)src[e].data, bytes));
      ++b->local_src;
    }
    CHECK_OK(reshard_plan_tensor_num_entries(plan, t, RESHARD_SIDE_DST, &n));
    dst = calloc(n + 1, sizeof *dst);
    b->tensors[t].dst = dst;
    b->tensors[t].num_dst = n;
    for (e = 0; e < n; ++e) {
      const size_t bytes = entry_bytes(plan, t, RESHARD_SIDE_DST, e, &local);
      if (!local) continue;
      dst[e].data = malloc(bytes + 1);
      dst[e].bytes = bytes;
      ++b->local_dst;
    }
  }
  return 1;
}

static void buffers_poison(rank_buffers* b) {
  size_t t, e;
  for (t = 0; t < b->num_tensors; ++t) {
    for (e = 0; e < b->tensors[t].num_dst; ++e) {
      if (b->tensors[t].dst[e].data) {
        memset(b->tensors[t].dst[e].data, 0xA5, b->tensors[t].dst[e].bytes);
      }
    }
  }
}

/* Wrong elements over this rank's destination entries. */
static int64_t buffers_mismatches(const reshard_plan_t* plan, const rank_buffers* b) {
  size_t t, e;
  int64_t total = 0, m;
  for (t = 0; t < b->num_tensors; ++t) {
    for (e = 0; e < b->tensors[t].num_dst; ++e) {
      const reshard_dst_buffer_t* d = &b->tensors[t].dst[e];
      if (d->data == NULL && d->bytes == 0) continue;
      m = -1;
      CHECK_OK(reshard_oracle_check_destination(plan, t, e, d->data, d->bytes, &m));
      total += m;
    }
  }
  return total;
}

static void buffers_free(rank_buffers* b) {
  size_t t, e;
  for (t = 0; t < b->num_tensors; ++t) {
    for (e = 0; e < b->tensors[t].num_src; ++e) free((void*)b->tensors[t].src[e].data);
    for (e = 0; e < b->tensors[t].num_dst; ++e) free(b->tensors[t].dst[e].data);
    free((void*)b->tensors[t].src);
    free((void*)b->tensors[t].dst);
  }
  free(b->tensors);
  memset(b, 0, sizeof *b);
}

/* The first entry of tensor 0 ("w", on mesh a) on `want_local` (1: this
 * rank, 0: another rank), as an index into its source list. */
static size_t some_src_entry(const reshard_plan_t* plan, int want_local) {
  size_t n = 0, e;
  int local;
  CHECK_OK(reshard_plan_tensor_num_entries(plan, 0, RESHARD_SIDE_SRC, &n));
  for (e = 0; e < n; ++e) {
    (void)entry_bytes(plan, 0, RESHARD_SIDE_SRC, e, &local);
    if (local == want_local) return e;
  }
  return n;
}

static double now_seconds(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run(void) {
  static char spec[8192];
  static char other_spec[8192];
  reshard_mpi_executor_options_t o = RESHARD_MPI_EXECUTOR_OPTIONS_INIT;
  reshard_executor_info_t info = RESHARD_EXECUTOR_INFO_INIT;
  reshard_verify_report_t report = RESHARD_VERIFY_REPORT_INIT;
  reshard_executor_t* const kSentinel = (reshard_executor_t*)&g_failures;
  reshard_executor_t* untouched = kSentinel;
  reshard_executor_t* ex = NULL;
  reshard_executor_t* world = NULL;
  reshard_plan_t *plan = NULL, *other = NULL;
  rank_buffers b;
  MPI_Comm dup = MPI_COMM_NULL;
  int32_t available = 0;
  char why[1024];
  size_t e;
  double t0, waited;

  REQUIRE_OK(reshard_transport_available(RESHARD_TRANSPORT_MPI, &available, why, sizeof why));
  if (!available) fprintf(stderr, "rank %d: %s\n", g_rank, why);
  REQUIRE(available == 1);

  /* Handles that name no communicator: errors, never a crash, every rank
   * (nothing collective happens before the handle is accepted). */
  o.comm_kind = RESHARD_MPI_COMM_FORTRAN;
  o.timeout_seconds = 60;
  o.comm = (int32_t)MPI_Comm_c2f(MPI_COMM_NULL);
  CHECK_ERR(reshard_mpi_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->comm");
  o.comm = 123456;
  CHECK_ERR(reshard_mpi_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->comm: 123456 is not a live communicator");
  o.comm = -5;
  CHECK_ERR(reshard_mpi_executor_create(&o, &untouched), RESHARD_ERROR_INVALID_ARGUMENT,
            "options->comm");
  CHECK(untouched == kSentinel);

  /* An executor on a duplicate of MPI_COMM_WORLD, freed right after. */
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  o.comm = (int32_t)MPI_Comm_c2f(dup);
  REQUIRE_OK(reshard_mpi_executor_create(&o, &ex));
  MPI_Comm_free(&dup);
  REQUIRE_OK(reshard_executor_info(ex, &info));
  CHECK(info.transport == RESHARD_TRANSPORT_MPI);
  CHECK(info.rank == g_rank && info.size == g_size);

  /* This rank's part: execute, check, twice. */
  REQUIRE(make_spec(spec, sizeof spec, 20) < (int)sizeof spec);
  plan = plan_part(spec);
  REQUIRE(plan != NULL);
  REQUIRE(buffers_make(plan, &b));
  CHECK(b.local_src > 0);
  buffers_poison(&b);
  CHECK_OK(reshard_executor_execute(ex, plan, b.tensors, b.num_tensors));
  CHECK(buffers_mismatches(plan, &b) == 0);
  buffers_poison(&b);
  CHECK_OK(reshard_executor_execute(ex, plan, b.tensors, b.num_tensors));
  CHECK(buffers_mismatches(plan, &b) == 0);

  /* Local mistakes fail here, before any message (every rank makes one). */
  e = some_src_entry(plan, 0);
  if (e < b.tensors[0].num_src) {
    reshard_src_buffer_t* src = (reshard_src_buffer_t*)b.tensors[0].src;
    src[e].data = b.tensors[0].src[some_src_entry(plan, 1)].data;
    src[e].bytes = 4;
    CHECK_ERR(reshard_executor_execute(ex, plan, b.tensors, b.num_tensors),
              RESHARD_ERROR_INVALID_ARGUMENT, "buffers[0].src[");
    CHECK_ERR(reshard_executor_execute(ex, plan, b.tensors, b.num_tensors),
              RESHARD_ERROR_INVALID_ARGUMENT, ": pass {NULL, 0}");
    src[e].data = NULL;
    src[e].bytes = 0;
  }
  {
    reshard_src_buffer_t* src = (reshard_src_buffer_t*)b.tensors[0].src;
    reshard_src_buffer_t saved;
    e = some_src_entry(plan, 1);
    saved = src[e];
    src[e].data = NULL;
    src[e].bytes = 0;
    CHECK_ERR(reshard_executor_execute(ex, plan, b.tensors, b.num_tensors),
              RESHARD_ERROR_INVALID_ARGUMENT, "buffers[0].src[");
    src[e] = saved;
  }
  /* Verification is collective: every rank fills, executes and checks its
   * own shards, and the counts are summed over the group. */
  report.mismatches = -1;
  CHECK_OK(reshard_executor_verify(ex, plan, &report));
  CHECK(report.mismatches == 0);
  CHECK(report.tensors > 0 && report.elements > 0 && report.bytes >= report.elements);

  /* Different inputs on the last rank: MISMATCH on every rank, no hang. */
  REQUIRE(make_spec(other_spec, sizeof other_spec, g_rank == g_size - 1 ? 21 : 20) <
          (int)sizeof other_spec);
  if (g_rank == g_size - 1) {
    reshard_plan_destroy(other);
    other = plan_part(other_spec);
    REQUIRE(other != NULL);
    {
      rank_buffers ob;
      REQUIRE(buffers_make(other, &ob));
      CHECK_ERR(reshard_executor_execute(ex, other, ob.tensors, ob.num_tensors),
                RESHARD_ERROR_MISMATCH, "rank");
      buffers_free(&ob);
    }
  } else {
    /* The others use a plan they have not run yet (so they agree again):
     * the same inputs with a different staging budget. */
    reshard_plan_input_t* input = NULL;
    reshard_plan_options_t options = RESHARD_PLAN_OPTIONS_INIT;
    reshard_plan_request_t request = RESHARD_PLAN_REQUEST_INIT;
    rank_buffers ob;
    options.staging_budget_bytes = 1000;
    request.scope = RESHARD_PLAN_SCOPE_PROCESS;
    request.process = g_rank;
    REQUIRE_OK(reshard_plan_input_from_spec(spec, strlen(spec), &input));
    REQUIRE_OK(reshard_plan_input_set_options(input, &options));
    REQUIRE_OK(reshard_plan_create(input, &request, &other));
    reshard_plan_input_destroy(input);
    REQUIRE(buffers_make(other, &ob));
    {
      reshard_error_t* error = reshard_executor_execute(ex, other, ob.tensors, ob.num_tensors);
      char text[32];
      snprintf(text, sizeof text, "%d", g_size - 1);
      if (g_rank == 0 && error != NULL) printf("mismatch: %s\n", reshard_error_message(error));
      CHECK(reshard_error_code(error) == RESHARD_ERROR_MISMATCH);
      CHECK(strstr(reshard_error_message(error), text) != NULL); /* names the last rank */
      reshard_error_destroy(error);
    }
    buffers_free(&ob);
  }
  /* The executor still works after a mismatch. */
  buffers_poison(&b);
  CHECK_OK(reshard_executor_execute(ex, plan, b.tensors, b.num_tensors));
  CHECK(buffers_mismatches(plan, &b) == 0);

  /* MPI_COMM_WORLD with the defaults (MPI is initialised already), staging
   * instead of gathering, agreement on every call. */
  o = (reshard_mpi_executor_options_t)RESHARD_MPI_EXECUTOR_OPTIONS_INIT;
  o.packing = RESHARD_PACKING_STAGING;
  o.agreement = RESHARD_AGREEMENT_EVERY_CALL;
  o.max_batches_in_flight = 1;
  o.timeout_seconds = 60;
  REQUIRE_OK(reshard_mpi_executor_create(&o, &world));
  buffers_poison(&b);
  CHECK_OK(reshard_executor_execute(world, plan, b.tensors, b.num_tensors));
  CHECK(buffers_mismatches(plan, &b) == 0);
  reshard_executor_destroy(world);
  world = NULL;

  /* The last rank never calls execute: the others time out naming it. This
   * executor is not used again (as after any timeout). */
  o = (reshard_mpi_executor_options_t)RESHARD_MPI_EXECUTOR_OPTIONS_INIT;
  o.timeout_seconds = 2;
  REQUIRE_OK(reshard_mpi_executor_create(&o, &world));
  if (g_rank != g_size - 1) {
    reshard_error_t* error;
    char text[64];
    t0 = now_seconds();
    error = reshard_executor_execute(world, plan, b.tensors, b.num_tensors);
    waited = now_seconds() - t0;
    snprintf(text, sizeof text, "%d", g_size - 1);
    if (g_rank == 0 && error != NULL) printf("timeout: %s\n", reshard_error_message(error));
    CHECK(reshard_error_code(error) == RESHARD_ERROR_TIMEOUT);
    CHECK(strstr(reshard_error_message(error), text) != NULL);
    CHECK(waited >= 1.5 && waited < 30);
    reshard_error_destroy(error);
  }
  reshard_executor_destroy(world);

  buffers_free(&b);
  reshard_plan_destroy(other);
  reshard_plan_destroy(plan);
  reshard_executor_destroy(ex);
}

int main(int argc, char** argv) {
  int failures = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  run();
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Allreduce(&g_failures, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) {
    printf("capi_mpi_test: %d ranks, %d failed check(s)\n", g_size, failures);
  }
  MPI_Finalize();
  return failures == 0 ? 0 : 1;
}
