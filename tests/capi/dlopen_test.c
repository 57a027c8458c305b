/* A framework's view of libreshard.so: dlopen it by path, resolve the one
 * symbol reshard_get_api, and run plan -> serialize -> deserialize ->
 * execute -> check values through the function table only. Not linked
 * against the library: any direct call would fail to link. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/reshard.h"

#ifndef RESHARD_LIBRARY_PATH
#error "define RESHARD_LIBRARY_PATH to the path of libreshard.so.1"
#endif

static const reshard_api_t* api;

/* Exits with a message when `error` is not NULL. */
static void ok(reshard_error_t* error, const char* what) {
  if (error == NULL) return;
  fprintf(stderr, "%s failed: [%s] %s\n", what, api->error_code_name(api->error_code(error)),
          api->error_message(error));
  api->error_destroy(error);
  exit(1);
}

static void expect(int cond, const char* what) {
  if (cond) return;
  fprintf(stderr, "check failed: %s\n", what);
  exit(1);
}

/* get_api is a data pointer from dlsym; converting it to a function pointer
 * is what POSIX requires dlsym users to do (via memcpy to stay within ISO C). */
static reshard_get_api_fn resolve(void* handle) {
  reshard_get_api_fn fn = NULL;
  void* sym = dlsym(handle, "reshard_get_api");
  if (sym == NULL) return NULL;
  memcpy(&fn, &sym, sizeof fn);
  return fn;
}

int main(void) {
  void* handle = dlopen(RESHARD_LIBRARY_PATH, RTLD_NOW | RTLD_LOCAL);
  reshard_get_api_fn get_api;
  const char* train_axes[] = {"dp", "tp"};
  const int64_t train_shape[] = {2, 4};
  const char* infer_axes[] = {"tp"};
  const int64_t infer_shape[] = {2};
  const int64_t infer_devices[] = {8, 9};
  const char* dp[] = {"dp"};
  const char* tp[] = {"tp"};
  const int64_t shape[] = {6, 10};
  reshard_axes_t src_dims[2], dst_dims[2];
  reshard_mesh_t *train = NULL, *infer = NULL;
  reshard_layout_t *src = NULL, *dst = NULL;
  reshard_plan_input_t* input = NULL;
  reshard_plan_t *plan = NULL, *decoded = NULL;
  reshard_buffer_t* bytes = NULL;
  reshard_executor_t* executor = NULL;
  reshard_plan_stats_t stats = RESHARD_PLAN_STATS_INIT;
  reshard_verify_report_t report = RESHARD_VERIFY_REPORT_INIT;
  reshard_src_buffer_t src_buffers[8];
  reshard_dst_buffer_t dst_buffers[2];
  reshard_tensor_buffers_t buffers;
  size_t n_src = 0, n_dst = 0, e;
  int64_t checked = 0;

  if (handle == NULL) {
    fprintf(stderr, "dlopen(%s): %s\n", RESHARD_LIBRARY_PATH, dlerror());
    return 1;
  }
  get_api = resolve(handle);
  if (get_api == NULL) {
    fprintf(stderr, "dlsym(reshard_get_api): %s\n", dlerror());
    return 1;
  }
  expect(get_api(RESHARD_ABI_MAJOR + 1) == NULL, "unknown ABI major gives NULL");
  api = get_api(RESHARD_ABI_MAJOR);
  expect(api != NULL, "reshard_get_api(1)");
  expect(api->abi_major == RESHARD_ABI_MAJOR, "abi_major");
  /* A caller built against this header may use every field it knows. */
  expect(api->struct_size >= sizeof(reshard_api_t), "table has every 1.0 function");
  printf("libreshard %s (ABI %u.%u)\n", api->version(), api->abi_major, api->abi_minor);

  /* Plan a [6, 10] f64 tensor from (dp, tp) = 2x4 to tp = 2 on other devices. */
  src_dims[0].names = dp;
  src_dims[0].count = 1;
  src_dims[1].names = tp;
  src_dims[1].count = 1;
  dst_dims[0].names = tp;
  dst_dims[0].count = 1;
  dst_dims[1].names = NULL;
  dst_dims[1].count = 0;
  ok(api->mesh_create(2, train_axes, train_shape, NULL, &train), "mesh_create train");
  ok(api->mesh_create(1, infer_axes, infer_shape, infer_devices, &infer), "mesh_create infer");
  ok(api->layout_create_named(train, 2, shape, src_dims, NULL, RESHARD_REDUCE_SUM, &src), "src");
  ok(api->layout_create_named(infer, 2, shape, dst_dims, NULL, RESHARD_REDUCE_SUM, &dst), "dst");
  ok(api->plan_input_create(&input), "plan_input_create");
  ok(api->plan_input_add_tensor(input, "w", 2, shape, RESHARD_DTYPE_F64, src, dst), "add_tensor");
  ok(api->plan_create(input, NULL, &plan), "plan_create");
  ok(api->plan_serialize(plan, NULL, &bytes), "plan_serialize");
  ok(api->plan_deserialize(api->buffer_data(bytes), api->buffer_size(bytes), &decoded),
     "plan_deserialize");
  ok(api->plan_stats(decoded, &stats), "plan_stats");
  expect(stats.network_bytes == 6 * 10 * 8, "every element moves once");

  /* Execute the decoded plan on host buffers holding value = global index. */
  ok(api->plan_tensor_num_entries(decoded, 0, RESHARD_SIDE_SRC, &n_src), "num src");
  ok(api->plan_tensor_num_entries(decoded, 0, RESHARD_SIDE_DST, &n_dst), "num dst");
  expect(n_src == 8 && n_dst == 2, "entry counts");
  for (e = 0; e < n_src + n_dst; ++e) {
    const int is_src = e < n_src;
    const size_t entry = is_src ? e : e - n_src;
    int64_t lo[2], hi[2], r, c;
    double* data;
    size_t bytes_needed;
    ok(api->plan_tensor_entry(decoded, 0, is_src ? RESHARD_SIDE_SRC : RESHARD_SIDE_DST, entry, NULL,
                              NULL, lo, hi),
       "plan_tensor_entry");
    bytes_needed = (size_t)((hi[0] - lo[0]) * (hi[1] - lo[1])) * sizeof(double);
    data = (double*)malloc(bytes_needed);
    expect(data != NULL, "malloc");
    for (r = lo[0]; r < hi[0]; ++r) {
      for (c = lo[1]; c < hi[1]; ++c) {
        data[(r - lo[0]) * (hi[1] - lo[1]) + (c - lo[1])] = is_src ? (double)(r * 10 + c) : -1.0;
      }
    }
    if (is_src) {
      src_buffers[entry].data = data;
      src_buffers[entry].bytes = bytes_needed;
    } else {
      dst_buffers[entry].data = data;
      dst_buffers[entry].bytes = bytes_needed;
    }
  }
  buffers.src = src_buffers;
  buffers.num_src = n_src;
  buffers.dst = dst_buffers;
  buffers.num_dst = n_dst;
  ok(api->executor_create(NULL, &executor), "executor_create");
  ok(api->executor_execute(executor, decoded, &buffers, 1), "executor_execute");
  for (e = 0; e < n_dst; ++e) {
    int64_t lo[2], hi[2], r, c;
    const double* data = (const double*)dst_buffers[e].data;
    ok(api->plan_tensor_entry(decoded, 0, RESHARD_SIDE_DST, e, NULL, NULL, lo, hi), "dst entry");
    for (r = lo[0]; r < hi[0]; ++r) {
      for (c = lo[1]; c < hi[1]; ++c) {
        expect(data[(r - lo[0]) * (hi[1] - lo[1]) + (c - lo[1])] == (double)(r * 10 + c),
               "destination value");
        ++checked;
      }
    }
  }
  expect(checked == 60, "every destination element checked");
  ok(api->executor_verify(executor, decoded, &report), "executor_verify");
  expect(report.mismatches == 0 && report.elements == 60, "oracle");
  /* Errors come back through the table too. */
  {
    reshard_error_t* error = api->plan_deserialize(api->buffer_data(bytes), 7, &plan);
    expect(api->error_code(error) == RESHARD_ERROR_CORRUPT, "truncated bytes are CORRUPT");
    api->error_destroy(error);
  }
  printf("plan -> %zu bytes -> plan -> executed: %lld elements correct\n", api->buffer_size(bytes),
         (long long)checked);

  for (e = 0; e < n_src; ++e) free((void*)src_buffers[e].data);
  for (e = 0; e < n_dst; ++e) free(dst_buffers[e].data);
  api->executor_destroy(executor);
  api->buffer_destroy(bytes);
  api->plan_destroy(decoded);
  api->plan_destroy(plan);
  api->plan_input_destroy(input);
  api->layout_destroy(dst);
  api->layout_destroy(src);
  api->mesh_destroy(infer);
  api->mesh_destroy(train);
  dlclose(handle);
  return 0;
}
