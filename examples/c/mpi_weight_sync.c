/* Weight sync over MPI through the C API, as an RL loop does it every step:
 * a trainer's weights (processes 0 and 1, mesh dp=2 x tp=2 on devices 0-3)
 * are resharded to an inference layout (process 2, mesh tp=4 on devices
 * 4-7) after each training step.
 *
 * Every rank plans only its own part of the plan (no rank needs the whole
 * plan), holds only its own shards, and calls the same collective execute;
 * shards of other ranks are passed as {NULL, 0}. The executor keeps the
 * schedule of a plan it has run, so every step after the first skips that
 * work. Uses reshard.h, reshard_mpi.h and mpi.h only.
 *
 *   mpirun -np 3 mpi_weight_sync_c [steps]        (default 3 steps)
 *
 * Exits non-zero on any error or wrong value, on every rank. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "reshard/reshard.h"
#include "reshard/reshard_mpi.h"

static int g_rank = 0;

/* Every fallible call returns NULL or an error the caller owns. */
static void check(reshard_error_t* error, const char* what) {
  if (error == NULL) return;
  fprintf(stderr, "rank %d: %s: [%s] %s\n", g_rank, what,
          reshard_error_code_name(reshard_error_code(error)), reshard_error_message(error));
  reshard_error_destroy(error);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

enum { kTensors = 2 };

typedef struct tensor_def {
  const char* name;
  int64_t shape[2];
  /* Axis names per dim: NULL-terminated lists, empty = replicated. */
  const char* src_dims[2][3];
  const char* dst_dims[2][3];
} tensor_def;

static const tensor_def kDefs[kTensors] = {
    /* column-parallel: [dp, tp] -> [-, tp] */
    {"layers.0.attn.q", {256, 256}, {{"dp", NULL}, {"tp", NULL}}, {{NULL}, {"tp", NULL}}},
    /* row-parallel: [(tp, dp), -] -> [tp, -] */
    {"layers.0.mlp.w2", {512, 128}, {{"tp", "dp", NULL}, {NULL}}, {{"tp", NULL}, {NULL}}},
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
  axes[0] = axes_of(dims[0]);
  axes[1] = axes_of(dims[1]);
  check(reshard_layout_create_named(mesh, 2, def->shape, axes, NULL, RESHARD_REDUCE_SUM, &layout),
        def->name);
  return layout;
}

/* The weight at (row, col) after training step `step`. */
static float weight(const tensor_def* def, int64_t row, int64_t col, int step) {
  return (float)(row * def->shape[1] + col) + 0.5f * (float)step;
}

/* The process holding entry `entry` of one side of tensor t, and its box. */
static int32_t entry_process(const reshard_plan_t* plan, size_t t, reshard_side_t side,
                             size_t entry, int64_t lo[2], int64_t hi[2]) {
  int64_t device = 0;
  int32_t process = 0;
  check(reshard_plan_tensor_entry(plan, t, side, entry, &device, NULL, lo, hi), "entry");
  check(reshard_plan_device_location(plan, device, &process, NULL, NULL), "device location");
  return process;
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? atoi(argv[1]) : 3;
  const char* train_axes[] = {"dp", "tp"};
  const int64_t train_shape[] = {2, 2};
  const char* infer_axes[] = {"tp"};
  const int64_t infer_shape[] = {4};
  const int64_t infer_devices[] = {4, 5, 6, 7};
  reshard_mesh_t *train = NULL, *infer = NULL;
  reshard_topology_t* topology = NULL;
  reshard_plan_input_t* input = NULL;
  reshard_plan_t* plan = NULL;
  reshard_plan_request_t request = RESHARD_PLAN_REQUEST_INIT;
  reshard_mpi_executor_options_t options = RESHARD_MPI_EXECUTOR_OPTIONS_INIT;
  reshard_executor_t* executor = NULL;
  reshard_tensor_buffers_t buffers[kTensors];
  int64_t device, checked = 0, wrong = 0, all_checked = 0, all_wrong = 0;
  int size = 0, step;
  size_t t, e;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 3) {
    if (g_rank == 0) fprintf(stderr, "run with mpirun -np 3 (got %d ranks)\n", size);
    MPI_Finalize();
    return 2;
  }

  /* The same input on every rank: devices 0-1 are process 0, 2-3 process 1,
   * 4-7 process 2 (one host each). */
  check(reshard_mesh_create(2, train_axes, train_shape, NULL, &train), "train mesh");
  check(reshard_mesh_create(1, infer_axes, infer_shape, infer_devices, &infer), "infer mesh");
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
    check(reshard_plan_input_add_tensor(input, kDefs[t].name, 2, kDefs[t].shape, RESHARD_DTYPE_F32,
                                        src, dst),
          kDefs[t].name);
    reshard_layout_destroy(src);
    reshard_layout_destroy(dst);
  }
  /* This rank's part only; every rank's plan has the same fingerprint. */
  request.scope = RESHARD_PLAN_SCOPE_PROCESS;
  request.process = g_rank;
  request.global_stats = 0;
  check(reshard_plan_create(input, &request, &plan), "plan");

  /* The executor: collective over the communicator, given as its Fortran
   * handle (reshard_mpi.h says why); plan process p is rank p. */
  options.comm_kind = RESHARD_MPI_COMM_FORTRAN;
  options.comm = (int32_t)MPI_Comm_c2f(MPI_COMM_WORLD);
  options.timeout_seconds = 60;
  check(reshard_mpi_executor_create(&options, &executor), "executor");

  /* This rank's shard buffers; {NULL, 0} for the other ranks' entries. */
  for (t = 0; t < kTensors; ++t) {
    size_t n_src = 0, n_dst = 0;
    reshard_src_buffer_t* src;
    reshard_dst_buffer_t* dst;
    check(reshard_plan_tensor_num_entries(plan, t, RESHARD_SIDE_SRC, &n_src), "entries");
    check(reshard_plan_tensor_num_entries(plan, t, RESHARD_SIDE_DST, &n_dst), "entries");
    src = (reshard_src_buffer_t*)calloc(n_src, sizeof *src);
    dst = (reshard_dst_buffer_t*)calloc(n_dst, sizeof *dst);
    if (src == NULL || dst == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
    for (e = 0; e < n_src; ++e) {
      int64_t lo[2], hi[2];
      if (entry_process(plan, t, RESHARD_SIDE_SRC, e, lo, hi) != g_rank) continue;
      src[e].bytes = (size_t)((hi[0] - lo[0]) * (hi[1] - lo[1])) * sizeof(float);
      src[e].data = malloc(src[e].bytes + 1);
      if (src[e].data == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (e = 0; e < n_dst; ++e) {
      int64_t lo[2], hi[2];
      if (entry_process(plan, t, RESHARD_SIDE_DST, e, lo, hi) != g_rank) continue;
      dst[e].bytes = (size_t)((hi[0] - lo[0]) * (hi[1] - lo[1])) * sizeof(float);
      dst[e].data = malloc(dst[e].bytes + 1);
      if (dst[e].data == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
    }
    buffers[t].src = src;
    buffers[t].num_src = n_src;
    buffers[t].dst = dst;
    buffers[t].num_dst = n_dst;
  }

  for (step = 0; step < steps; ++step) {
    /* Trainer ranks: this step's weights into their source shards. */
    for (t = 0; t < kTensors; ++t) {
      for (e = 0; e < buffers[t].num_src; ++e) {
        int64_t lo[2], hi[2], r, c;
        float* data = (float*)buffers[t].src[e].data;
        if (data == NULL) continue;
        entry_process(plan, t, RESHARD_SIDE_SRC, e, lo, hi);
        for (r = lo[0]; r < hi[0]; ++r) {
          for (c = lo[1]; c < hi[1]; ++c) *data++ = weight(&kDefs[t], r, c, step);
        }
      }
    }
    check(reshard_executor_execute(executor, plan, buffers, kTensors), "execute");
    /* Inference rank: every element of its destination shards. */
    for (t = 0; t < kTensors; ++t) {
      for (e = 0; e < buffers[t].num_dst; ++e) {
        int64_t lo[2], hi[2], r, c;
        const float* data = (const float*)buffers[t].dst[e].data;
        if (data == NULL) continue;
        entry_process(plan, t, RESHARD_SIDE_DST, e, lo, hi);
        for (r = lo[0]; r < hi[0]; ++r) {
          for (c = lo[1]; c < hi[1]; ++c, ++checked) {
            if (*data++ != weight(&kDefs[t], r, c, step)) ++wrong;
          }
        }
      }
    }
  }
  MPI_Allreduce(&checked, &all_checked, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&wrong, &all_wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) {
    printf("%d steps of weight sync over %d ranks: %lld destination elements checked, %lld wrong\n",
           steps, size, (long long)all_checked, (long long)all_wrong);
  }

  for (t = 0; t < kTensors; ++t) {
    for (e = 0; e < buffers[t].num_src; ++e) free((void*)buffers[t].src[e].data);
    for (e = 0; e < buffers[t].num_dst; ++e) free(buffers[t].dst[e].data);
    free((void*)buffers[t].src);
    free((void*)buffers[t].dst);
  }
  reshard_executor_destroy(executor); /* before MPI_Finalize */
  reshard_plan_destroy(plan);
  reshard_plan_input_destroy(input);
  reshard_topology_destroy(topology);
  reshard_mesh_destroy(infer);
  reshard_mesh_destroy(train);
  MPI_Finalize();
  return all_wrong == 0 && all_checked > 0 ? 0 : 1;
}
