/* Reshard a few transformer weights from a training layout to an inference
 * layout through the C API: build meshes and named shardings, plan, print
 * the plan's statistics, serialize it to a file, execute it on host buffers
 * and check the results.
 *
 *   training:  mesh (dp=2, tp=2) on devices 0-3, processes 0 and 1
 *              (FSDP over dp on dim 0 x Megatron tp)
 *   inference: mesh (tp=4) on devices 4-7, process 2
 *
 * Usage: plan_and_execute [plan-file]   (default: plan.bin)
 * Exits non-zero on any error or wrong value. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "reshard/reshard.h"

/* Every fallible call returns NULL or an error the caller owns. */
static void check(reshard_error_t* error, const char* what) {
  if (error == NULL) return;
  fprintf(stderr, "%s: [%s] %s\n", what, reshard_error_code_name(reshard_error_code(error)),
          reshard_error_message(error));
  reshard_error_destroy(error);
  exit(1);
}

enum { kTensors = 3 };

typedef struct tensor_def {
  const char* name;
  int64_t shape[2];
  size_t rank;
  /* Axis names per dim: NULL-terminated lists, empty = replicated. */
  const char* src_dims[2][3];
  const char* dst_dims[2][3];
} tensor_def;

static const tensor_def kDefs[kTensors] = {
    /* column-parallel: [dp, tp] -> [-, tp] */
    {"layers.0.attn.q", {256, 256}, 2, {{"dp", NULL}, {"tp", NULL}}, {{NULL}, {"tp", NULL}}},
    /* row-parallel: [(tp, dp), -] -> [tp, -] */
    {"layers.0.mlp.w2", {512, 256}, 2, {{"tp", "dp", NULL}, {NULL}}, {{"tp", NULL}, {NULL}}},
    /* a norm: FSDP-sharded -> replicated on every inference device */
    {"layers.0.norm", {256, 0}, 1, {{"dp", NULL}, {NULL}}, {{NULL}, {NULL}}},
};

static reshard_axes_t axes_of(const char* const* names) {
  reshard_axes_t axes;
  axes.names = names;
  axes.count = 0;
  while (names[axes.count] != NULL) ++axes.count;
  return axes;
}

static reshard_layout_t* named_layout(const reshard_mesh_t* mesh, const tensor_def* def,
                                      const char* const (*dims)[3]) {
  reshard_axes_t axes[2];
  reshard_layout_t* layout = NULL;
  size_t d;
  for (d = 0; d < def->rank; ++d) axes[d] = axes_of(dims[d]);
  check(reshard_layout_create_named(mesh, def->rank, def->shape, axes, NULL, RESHARD_REDUCE_SUM,
                                    &layout),
        def->name);
  return layout;
}

/* The value every element starts with: its row-major global index. */
static float value_at(const tensor_def* def, int64_t row, int64_t col) {
  return (float)(def->rank == 1 ? row : row * def->shape[1] + col);
}

/* A shard buffer for entry `entry` of a side of tensor t: sources hold
 * value_at, destinations -1. Returns the element count through *count. */
static float* make_shard(const reshard_plan_t* plan, size_t t, reshard_side_t side, size_t entry,
                         size_t* count) {
  int64_t lo[2] = {0, 0}, hi[2] = {1, 1}, r, c;
  float* data;
  size_t i = 0;
  check(reshard_plan_tensor_entry(plan, t, side, entry, NULL, NULL, lo, hi), "entry");
  *count = (size_t)((hi[0] - lo[0]) * (kDefs[t].rank == 2 ? hi[1] - lo[1] : 1));
  data = (float*)malloc(*count * sizeof(float) + 1);
  if (data == NULL) exit(1);
  for (r = lo[0]; r < hi[0]; ++r) {
    for (c = kDefs[t].rank == 2 ? lo[1] : 0; c < (kDefs[t].rank == 2 ? hi[1] : 1); ++c) {
      data[i++] = side == RESHARD_SIDE_SRC ? value_at(&kDefs[t], r, c) : -1.0f;
    }
  }
  return data;
}

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "plan.bin";
  const char* train_axes[] = {"dp", "tp"};
  const int64_t train_shape[] = {2, 2};
  const char* infer_axes[] = {"tp"};
  const int64_t infer_shape[] = {4};
  const int64_t infer_devices[] = {4, 5, 6, 7};
  reshard_mesh_t *train = NULL, *infer = NULL;
  reshard_topology_t* topology = NULL;
  reshard_plan_input_t* input = NULL;
  reshard_plan_t* plan = NULL;
  reshard_plan_stats_t stats = RESHARD_PLAN_STATS_INIT;
  reshard_buffer_t* bytes = NULL;
  reshard_executor_t* executor = NULL;
  reshard_tensor_buffers_t buffers[kTensors];
  uint64_t fingerprint = 0;
  int64_t device, checked = 0, wrong = 0;
  size_t t, e;
  FILE* file;

  printf("reshard %s\n", reshard_version());
  check(reshard_mesh_create(2, train_axes, train_shape, NULL, &train), "train mesh");
  check(reshard_mesh_create(1, infer_axes, infer_shape, infer_devices, &infer), "infer mesh");
  /* Devices 0-1 are process 0, 2-3 process 1, 4-7 process 2 (one per host). */
  check(reshard_topology_create(&topology), "topology");
  for (device = 0; device < 8; ++device) {
    const int32_t process = device < 4 ? (int32_t)(device / 2) : 2;
    check(reshard_topology_add_device(topology, device, process, process, (int32_t)(device % 4)),
          "add_device");
  }

  check(reshard_plan_input_create(&input), "plan input");
  check(reshard_plan_input_set_topology(input, topology), "set_topology");
  for (t = 0; t < kTensors; ++t) {
    reshard_layout_t* src = named_layout(train, &kDefs[t], kDefs[t].src_dims);
    reshard_layout_t* dst = named_layout(infer, &kDefs[t], kDefs[t].dst_dims);
    check(reshard_plan_input_add_tensor(input, kDefs[t].name, kDefs[t].rank, kDefs[t].shape,
                                        RESHARD_DTYPE_F32, src, dst),
          kDefs[t].name);
    /* The input keeps copies: the layouts can go now. */
    reshard_layout_destroy(src);
    reshard_layout_destroy(dst);
  }
  check(reshard_plan_create(input, NULL, &plan), "plan");

  check(reshard_plan_stats(plan, &stats), "stats");
  check(reshard_plan_fingerprint(plan, &fingerprint), "fingerprint");
  printf("plan %016llx: %lld pieces in %lld messages, %lld round(s)\n",
         (unsigned long long)fingerprint, (long long)stats.pieces, (long long)stats.messages,
         (long long)stats.rounds);
  printf("  network bytes  %10lld (lower bound %lld)\n", (long long)stats.network_bytes,
         (long long)stats.lower_bound_network_bytes);
  printf("  cross-host     %10lld\n", (long long)stats.cross_host_bytes);
  printf("  max send/recv  %10lld / %lld (lower bounds %lld / %lld)\n",
         (long long)stats.max_send_bytes, (long long)stats.max_recv_bytes,
         (long long)stats.lower_bound_max_send_bytes, (long long)stats.lower_bound_max_recv_bytes);
  printf("  cost estimate  %10.3g s (lower bound %.3g s)\n", stats.cost_seconds,
         stats.lower_bound_cost_seconds);
  for (e = 0; e < stats.num_devices; ++e) {
    reshard_device_traffic_t traffic = RESHARD_DEVICE_TRAFFIC_INIT;
    check(reshard_plan_device_traffic(plan, e, &traffic), "device traffic");
    printf("  device %lld: sends %lld bytes, receives %lld bytes\n", (long long)traffic.device,
           (long long)traffic.send_bytes, (long long)traffic.recv_bytes);
  }
  if (stats.network_bytes != stats.lower_bound_network_bytes) {
    fprintf(stderr, "network bytes above the lower bound\n");
    return 1;
  }

  /* Serialize: these bytes are what a coordinator ships to its workers. */
  check(reshard_plan_serialize(plan, NULL, &bytes), "serialize");
  file = fopen(path, "wb");
  if (file == NULL ||
      fwrite(reshard_buffer_data(bytes), 1, reshard_buffer_size(bytes), file) !=
          reshard_buffer_size(bytes) ||
      fclose(file) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    return 1;
  }
  printf("wrote %zu plan bytes to %s\n", reshard_buffer_size(bytes), path);

  /* Execute on host buffers, one per layout entry, in entry order. */
  for (t = 0; t < kTensors; ++t) {
    size_t n_src = 0, n_dst = 0, count;
    reshard_src_buffer_t* src;
    reshard_dst_buffer_t* dst;
    check(reshard_plan_tensor_num_entries(plan, t, RESHARD_SIDE_SRC, &n_src), "entries");
    check(reshard_plan_tensor_num_entries(plan, t, RESHARD_SIDE_DST, &n_dst), "entries");
    src = (reshard_src_buffer_t*)calloc(n_src, sizeof *src);
    dst = (reshard_dst_buffer_t*)calloc(n_dst, sizeof *dst);
    if (src == NULL || dst == NULL) return 1;
    for (e = 0; e < n_src; ++e) {
      src[e].data = make_shard(plan, t, RESHARD_SIDE_SRC, e, &count);
      src[e].bytes = count * sizeof(float);
    }
    for (e = 0; e < n_dst; ++e) {
      dst[e].data = make_shard(plan, t, RESHARD_SIDE_DST, e, &count);
      dst[e].bytes = count * sizeof(float);
    }
    buffers[t].src = src;
    buffers[t].num_src = n_src;
    buffers[t].dst = dst;
    buffers[t].num_dst = n_dst;
  }
  check(reshard_executor_create(NULL, &executor), "executor");
  check(reshard_executor_execute(executor, plan, buffers, kTensors), "execute");

  /* Check every destination element; print a few. */
  for (t = 0; t < kTensors; ++t) {
    for (e = 0; e < buffers[t].num_dst; ++e) {
      int64_t lo[2] = {0, 0}, hi[2] = {1, 1}, r, c;
      const float* data = (const float*)buffers[t].dst[e].data;
      size_t i = 0;
      check(reshard_plan_tensor_entry(plan, t, RESHARD_SIDE_DST, e, &device, NULL, lo, hi),
            "entry");
      if (kDefs[t].rank == 1) {
        lo[1] = 0;
        hi[1] = 1;
      }
      for (r = lo[0]; r < hi[0]; ++r) {
        for (c = lo[1]; c < hi[1]; ++c, ++i) {
          const float want = value_at(&kDefs[t], r, c);
          if (data[i] != want) ++wrong;
          ++checked;
        }
      }
      if (i > 0 && e == 1) {
        printf("  %s on device %lld: first element %g (expected %g)\n", kDefs[t].name,
               (long long)device, data[0], value_at(&kDefs[t], lo[0], lo[1]));
      }
    }
  }
  printf("checked %lld destination elements: %lld wrong\n", (long long)checked, (long long)wrong);

  for (t = 0; t < kTensors; ++t) {
    for (e = 0; e < buffers[t].num_src; ++e) free((void*)buffers[t].src[e].data);
    for (e = 0; e < buffers[t].num_dst; ++e) free(buffers[t].dst[e].data);
    free((void*)buffers[t].src);
    free((void*)buffers[t].dst);
  }
  reshard_executor_destroy(executor);
  reshard_buffer_destroy(bytes);
  reshard_plan_destroy(plan);
  reshard_plan_input_destroy(input);
  reshard_topology_destroy(topology);
  reshard_mesh_destroy(infer);
  reshard_mesh_destroy(train);
  return wrong == 0 && checked > 0 ? 0 : 1;
}
