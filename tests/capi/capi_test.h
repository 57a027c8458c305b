/* Shared by the C ABI test files (capi_test*.c): the fixture, host buffers
 * filled and checked by global index, and each test group's entry point,
 * run by name from capi_test.c's kGroups table. */
#ifndef RESHARD_TESTS_CAPI_CAPI_TEST_H_
#define RESHARD_TESTS_CAPI_CAPI_TEST_H_

/* POSIX for setrlimit (the out_of_memory group); this header comes first
 * in every capi_test*.c. */
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

/* The fixture (capi_test_common.c): a training -> inference reshard of
 * "w" f32 [8, 6] and "b" i32 [5]. */
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
typedef struct host_buffers {
  size_t num_tensors;
  reshard_tensor_buffers_t* tensors;
} host_buffers;

extern const char* const kTrainAxes[];
extern const int64_t kTrainShape[];
extern const char* const kInferAxes[];
extern const int64_t kInferShape[];
extern const int64_t kInferDevices[];
extern const int64_t kW[];
extern const int64_t kB[];

void fixture_destroy(fixture* f);
int fixture_create(fixture* f);
reshard_plan_t* fixture_plan(const fixture* f);
int64_t global_index(size_t rank, const int64_t* shape, const int64_t* lo, const int64_t* hi,
                     int64_t local);
int64_t box_volume(size_t rank, const int64_t* lo, const int64_t* hi);
void host_buffers_free(host_buffers* h);
void store_value(reshard_dtype_t dtype, void* base, int64_t i, int64_t value);
int64_t load_value(reshard_dtype_t dtype, const void* base, int64_t i);
int host_buffers_make(const reshard_plan_t* plan, host_buffers* h);
int64_t host_buffers_mismatches(const reshard_plan_t* plan, const host_buffers* h);

/* Set by a group that skipped itself (exit code 77 when it ran alone). */
extern int g_skipped;

/* capi_test.c */
void test_version(void);
void test_errors(void);
void test_dtypes(void);
void test_mesh(void);
void test_layout_named(void);
void test_layout_boxes(void);
void test_topology(void);
void test_plan_input(void);
void test_spec(void);

/* capi_test_plan.c */
void test_plan_create(void);
void test_stats(void);
void test_inspect_tensors(void);
void test_inspect_parts(void);
void test_local_pieces(void);
void test_serialize(void);
void test_mac(void);
void test_corrupt_bytes(void);
void test_sub_messages(void);

/* capi_test_exec.c */
void test_executor(void);
void test_executor_concurrent(void);
void test_destroy_while_executing(void);
void test_executor_timeout(void);
void test_oracle(void);
void test_casts(void);
void test_block_scales(void);
void test_flat(void);
void test_partial(void);
void test_out_of_memory(void);

/* capi_test_options.c */
void test_relays(void);
void test_nics_per_host(void);
void test_scratch(void);
void test_plan_limit(void);
void test_transports(void);
void test_mpi_options(void);
void test_nccl_options(void);

#endif /* RESHARD_TESTS_CAPI_CAPI_TEST_H_ */
