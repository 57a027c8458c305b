/* The C ABI's NCCL and CUDA_LOCAL executors on one GPU (ABI 1.1), ctest
 * gpu.capi.nccl. Plain C11 against reshard.h + reshard_nccl.h. It compiles
 * and links everywhere (no CUDA library at link time: device memory comes
 * from the CUDA driver API, loaded with dlopen) and exits 77 (skipped) with
 * the reason when there is no driver, no GPU or no NCCL.
 *
 * On a GPU it proves: a unique id from reshard_nccl_unique_id creates a
 * one-rank NCCL executor (one process, one GPU, reshard's own
 * communicator); a plan of one process (several plan devices on the GPU,
 * uneven shards, a partial bf16 source) executes on device buffers, and
 * every destination element matches the oracle; the same through a
 * CUDA_LOCAL executor; a host pointer is INVALID_ARGUMENT, not a fault. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "reshard/reshard.h"
#include "reshard/reshard_nccl.h"

int g_failures = 0;

/* The few driver API entry points used (cuda.h signatures, 64-bit). */
typedef int (*cu_init_fn)(unsigned int);
typedef int (*cu_device_get_count_fn)(int*);
typedef int (*cu_device_get_fn)(int*, int);
typedef int (*cu_primary_ctx_retain_fn)(void**, int);
typedef int (*cu_ctx_set_current_fn)(void*);
typedef int (*cu_mem_alloc_fn)(unsigned long long*, size_t);
typedef int (*cu_mem_free_fn)(unsigned long long);
typedef int (*cu_memcpy_htod_fn)(unsigned long long, const void*, size_t);
typedef int (*cu_memcpy_dtoh_fn)(void*, unsigned long long, size_t);
typedef int (*cu_memset_d8_fn)(unsigned long long, unsigned char, size_t);

static struct {
  cu_init_fn init;
  cu_device_get_count_fn device_get_count;
  cu_device_get_fn device_get;
  cu_primary_ctx_retain_fn primary_ctx_retain;
  cu_ctx_set_current_fn ctx_set_current;
  cu_mem_alloc_fn mem_alloc;
  cu_mem_free_fn mem_free;
  cu_memcpy_htod_fn memcpy_htod;
  cu_memcpy_dtoh_fn memcpy_dtoh;
  cu_memset_d8_fn memset_d8;
} cu;

/* dlsym into a function pointer without a cast ISO C forbids. */
static int load(void* library, const char* name, void* fn, size_t size) {
  void* p = dlsym(library, name);
  if (p == NULL) return 0;
  memcpy(fn, &p, size);
  return 1;
}

/* 1 with a current context on GPU 0; 0 and a reason otherwise. */
static int gpu_setup(char* why, size_t n) {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  int count = 0, device = 0;
  void* context = NULL;
  if (library == NULL) {
    snprintf(why, n, "no CUDA driver (dlopen libcuda.so.1: %s)", dlerror());
    return 0;
  }
  if (!load(library, "cuInit", &cu.init, sizeof cu.init) ||
      !load(library, "cuDeviceGetCount", &cu.device_get_count, sizeof cu.device_get_count) ||
      !load(library, "cuDeviceGet", &cu.device_get, sizeof cu.device_get) ||
      !load(library, "cuDevicePrimaryCtxRetain", &cu.primary_ctx_retain,
            sizeof cu.primary_ctx_retain) ||
      !load(library, "cuCtxSetCurrent", &cu.ctx_set_current, sizeof cu.ctx_set_current) ||
      !load(library, "cuMemAlloc_v2", &cu.mem_alloc, sizeof cu.mem_alloc) ||
      !load(library, "cuMemFree_v2", &cu.mem_free, sizeof cu.mem_free) ||
      !load(library, "cuMemcpyHtoD_v2", &cu.memcpy_htod, sizeof cu.memcpy_htod) ||
      !load(library, "cuMemcpyDtoH_v2", &cu.memcpy_dtoh, sizeof cu.memcpy_dtoh) ||
      !load(library, "cuMemsetD8_v2", &cu.memset_d8, sizeof cu.memset_d8)) {
    snprintf(why, n, "the CUDA driver lacks a driver API function");
    return 0;
  }
  if (cu.init(0) != 0 || cu.device_get_count(&count) != 0 || count == 0) {
    snprintf(why, n, "no GPU (cuInit / cuDeviceGetCount found none)");
    return 0;
  }
  /* The primary context: the one the CUDA runtime of the backend uses. */
  if (cu.device_get(&device, 0) != 0 || cu.primary_ctx_retain(&context, device) != 0 ||
      cu.ctx_set_current(context) != 0) {
    snprintf(why, n, "cannot make GPU 0's primary context current");
    return 0;
  }
  return 1;
}

static const char kSpec[] =
    "{\"meshes\": {"
    "\"a\": {\"axis_names\": [\"x\"], \"shape\": [4], \"devices\": [0, 1, 2, 3]},"
    "\"b\": {\"axis_names\": [\"y\", \"z\"], \"shape\": [2, 2], \"devices\": [4, 5, 6, 7]}},"
    "\"tensors\": ["
    "{\"name\": \"w\", \"shape\": [33, 17], \"dtype\": \"f32\","
    " \"src\": {\"mesh\": \"a\", \"spec\": [\"x\", null]},"
    " \"dst\": {\"mesh\": \"b\", \"spec\": [\"z\", \"y\"]}},"
    "{\"name\": \"g\", \"shape\": [50], \"dtype\": \"bf16\","
    " \"src\": {\"mesh\": \"a\", \"spec\": [null], \"partial\": {\"axes\": [\"x\"], \"op\": "
    "\"sum\"}},"
    " \"dst\": {\"mesh\": \"b\", \"spec\": [\"y\"]}}"
    "]}";

#define MAX_ENTRIES 8
#define MAX_TENSORS 2

typedef struct device_buffers {
  size_t num_tensors;
  reshard_tensor_buffers_t tensors[MAX_TENSORS];
  reshard_src_buffer_t src[MAX_TENSORS][MAX_ENTRIES];
  reshard_dst_buffer_t dst[MAX_TENSORS][MAX_ENTRIES];
} device_buffers;

static size_t entry_bytes(const reshard_plan_t* plan, size_t t, reshard_side_t side, size_t e) {
  int64_t lo[RESHARD_MAX_RANK], hi[RESHARD_MAX_RANK];
  size_t rank = 0, d, bytes;
  reshard_dtype_t dtype = 0;
  CHECK_OK(reshard_plan_tensor_entry(plan, t, side, e, NULL, NULL, lo, hi));
  CHECK_OK(reshard_plan_tensor_rank(plan, t, &rank));
  CHECK_OK(reshard_plan_tensor_dtype(plan, t, &dtype));
  bytes = reshard_dtype_size(dtype);
  for (d = 0; d < rank; ++d) bytes *= (size_t)(hi[d] - lo[d]);
  return bytes;
}

/* Device buffers for every entry: sources hold the oracle's values,
 * destinations 0xA5 bytes. */
static int buffers_make(const reshard_plan_t* plan, device_buffers* b) {
  size_t t, e, n;
  memset(b, 0, sizeof *b);
  CHECK_OK(reshard_plan_num_tensors(plan, &b->num_tensors));
  if (b->num_tensors > MAX_TENSORS) return 0;
  for (t = 0; t < b->num_tensors; ++t) {
    CHECK_OK(reshard_plan_tensor_num_entries(plan, t, RESHARD_SIDE_SRC, &n));
    if (n > MAX_ENTRIES) return 0;
    b->tensors[t].src = b->src[t];
    b->tensors[t].num_src = n;
    for (e = 0; e < n; ++e) {
      const size_t bytes = entry_bytes(plan, t, RESHARD_SIDE_SRC, e);
      unsigned long long p = 0;
      void* host = malloc(bytes + 1);
      CHECK_OK(reshard_oracle_fill_source(plan, t, e, host, bytes));
      if (cu.mem_alloc(&p, bytes + 1) != 0 || cu.memcpy_htod(p, host, bytes) != 0) {
        free(host);
        return 0;
      }
      free(host);
      b->src[t][e].data = (const void*)(uintptr_t)p;
      b->src[t][e].bytes = bytes;
    }
    CHECK_OK(reshard_plan_tensor_num_entries(plan, t, RESHARD_SIDE_DST, &n));
    if (n > MAX_ENTRIES) return 0;
    b->tensors[t].dst = b->dst[t];
    b->tensors[t].num_dst = n;
    for (e = 0; e < n; ++e) {
      const size_t bytes = entry_bytes(plan, t, RESHARD_SIDE_DST, e);
      unsigned long long p = 0;
      if (cu.mem_alloc(&p, bytes + 1) != 0 || cu.memset_d8(p, 0xA5, bytes + 1) != 0) return 0;
      b->dst[t][e].data = (void*)(uintptr_t)p;
      b->dst[t][e].bytes = bytes;
    }
  }
  return 1;
}

static void buffers_poison(device_buffers* b) {
  size_t t, e;
  for (t = 0; t < b->num_tensors; ++t) {
    for (e = 0; e < b->tensors[t].num_dst; ++e) {
      CHECK(cu.memset_d8((unsigned long long)(uintptr_t)b->dst[t][e].data, 0xA5,
                         b->dst[t][e].bytes) == 0);
    }
  }
}

static int64_t buffers_mismatches(const reshard_plan_t* plan, const device_buffers* b) {
  size_t t, e;
  int64_t total = 0;
  for (t = 0; t < b->num_tensors; ++t) {
    for (e = 0; e < b->tensors[t].num_dst; ++e) {
      const size_t bytes = b->dst[t][e].bytes;
      void* host = malloc(bytes + 1);
      int64_t m = -1;
      CHECK(cu.memcpy_dtoh(host, (unsigned long long)(uintptr_t)b->dst[t][e].data, bytes) == 0);
      CHECK_OK(reshard_oracle_check_destination(plan, t, e, host, bytes, &m));
      total += m < 0 ? 1 : m;
      free(host);
    }
  }
  return total;
}

static void buffers_free(device_buffers* b) {
  size_t t, e;
  for (t = 0; t < b->num_tensors; ++t) {
    for (e = 0; e < b->tensors[t].num_src; ++e) {
      cu.mem_free((unsigned long long)(uintptr_t)b->src[t][e].data);
    }
    for (e = 0; e < b->tensors[t].num_dst; ++e) {
      cu.mem_free((unsigned long long)(uintptr_t)b->dst[t][e].data);
    }
  }
}

int main(void) {
  char why[1024];
  int32_t available = 0;
  reshard_plan_input_t* input = NULL;
  reshard_topology_t* topology = NULL;
  int64_t device;
  reshard_plan_t* plan = NULL;
  reshard_executor_t *nccl = NULL, *local = NULL;
  reshard_executor_options_t local_options = RESHARD_EXECUTOR_OPTIONS_INIT;
  reshard_executor_info_t info = RESHARD_EXECUTOR_INFO_INIT;
  reshard_nccl_executor_options_t o = RESHARD_NCCL_EXECUTOR_OPTIONS_INIT;
  reshard_nccl_device_t gpu = RESHARD_NCCL_DEVICE_INIT;
  reshard_nccl_unique_id_t id;
  device_buffers b;
  float host_src[64];
  size_t i;
  int zero = 1;

  if (!gpu_setup(why, sizeof why)) {
    printf("skipped: %s (scripts/gpu-check.sh runs this on a GPU machine)\n", why);
    return 77;
  }
  if (reshard_transport_available(RESHARD_TRANSPORT_NCCL, &available, why, sizeof why) != NULL ||
      !available) {
    printf("skipped: %s\n", why);
    return 77;
  }

  /* A one-rank group from a unique id made by reshard. */
  memset(&id, 0, sizeof id);
  if (!ok_(reshard_nccl_unique_id(NULL, &id), __FILE__, __LINE__, "unique_id")) return 1;
  for (i = 0; i < sizeof id.internal; ++i) zero = zero && id.internal[i] == 0;
  CHECK(!zero);
  gpu.ordinal = 0;
  gpu.nccl_rank = 0;
  o.process = 0;
  o.nccl_ranks = 1;
  o.devices = &gpu;
  o.num_devices = 1;
  o.unique_id = id;
  o.timeout_seconds = 60;
  if (!ok_(reshard_nccl_executor_create(&o, &nccl), __FILE__, __LINE__, "nccl_executor_create")) {
    return 1;
  }
  CHECK_OK(reshard_executor_info(nccl, &info));
  CHECK(info.transport == RESHARD_TRANSPORT_NCCL && info.rank == 0 && info.size == 1);

  /* One process owns every plan device, all on GPU 0 (topology ordinal 0;
   * the default would be the device's position). */
  if (!ok_(reshard_plan_input_from_spec(kSpec, strlen(kSpec), &input), __FILE__, __LINE__,
           "spec") ||
      !ok_(reshard_topology_create(&topology), __FILE__, __LINE__, "topology")) {
    return 1;
  }
  for (device = 0; device < 8; ++device) {
    CHECK_OK(reshard_topology_add_device(topology, device, 0, 0, 0));
  }
  if (!ok_(reshard_plan_input_set_topology(input, topology), __FILE__, __LINE__, "set_topology") ||
      !ok_(reshard_plan_create(input, NULL, &plan), __FILE__, __LINE__, "plan")) {
    return 1;
  }
  reshard_topology_destroy(topology);
  if (!buffers_make(plan, &b)) {
    fprintf(stderr, "device allocation failed\n");
    return 1;
  }
  CHECK_OK(reshard_executor_execute(nccl, plan, b.tensors, b.num_tensors));
  CHECK(buffers_mismatches(plan, &b) == 0);
  buffers_poison(&b);
  CHECK_OK(reshard_executor_execute(nccl, plan, b.tensors, b.num_tensors));
  CHECK(buffers_mismatches(plan, &b) == 0);

  /* A host pointer where device memory belongs: an error, not a fault. */
  {
    const reshard_src_buffer_t saved = b.src[0][0];
    if (saved.bytes <= sizeof host_src) {
      b.src[0][0].data = host_src;
      CHECK_ERR(reshard_executor_execute(nccl, plan, b.tensors, b.num_tensors),
                RESHARD_ERROR_INVALID_ARGUMENT, "");
    }
    b.src[0][0] = saved;
  }

  /* The same plan through a CUDA_LOCAL executor. */
  local_options.transport = RESHARD_TRANSPORT_CUDA_LOCAL;
  CHECK_OK(reshard_executor_create(&local_options, &local));
  if (local != NULL) {
    buffers_poison(&b);
    CHECK_OK(reshard_executor_execute(local, plan, b.tensors, b.num_tensors));
    CHECK(buffers_mismatches(plan, &b) == 0);
  }

  reshard_executor_destroy(local);
  reshard_executor_destroy(nccl);
  buffers_free(&b);
  reshard_plan_destroy(plan);
  reshard_plan_input_destroy(input);
  printf("capi_nccl_test: %d failed check(s)\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
