/* The C ABI tests' shared fixture and host buffers (capi_test.h). */
#include "capi_test.h"

int g_failures = 0;
int g_skipped = 0;

/* ------------------------------------------------------------------------ */
/* Fixture: a training -> inference reshard of two tensors.                 */
/*   train: 2x2 mesh (dp, tp), devices 0..3, processes 0,0,1,1              */
/*   infer: 1-d mesh (tp) of 4, devices 4..7, process 2                     */
/*   "w" f32 [8, 6]: [dp, tp] -> [-, tp] (6 split 4 ways: an empty shard)   */
/*   "b" i32 [5]:    [dp]     -> replicated                                 */
/* ------------------------------------------------------------------------ */

const char* const kTrainAxes[] = {"dp", "tp"};
const int64_t kTrainShape[] = {2, 2};
const char* const kInferAxes[] = {"tp"};
const int64_t kInferShape[] = {4};
const int64_t kInferDevices[] = {4, 5, 6, 7};
const int64_t kW[] = {8, 6};
const int64_t kB[] = {5};

void fixture_destroy(fixture* f) {
  reshard_plan_input_destroy(f->input);
  reshard_topology_destroy(f->topology);
  reshard_layout_destroy(f->b_dst);
  reshard_layout_destroy(f->b_src);
  reshard_layout_destroy(f->w_dst);
  reshard_layout_destroy(f->w_src);
  reshard_mesh_destroy(f->infer);
  reshard_mesh_destroy(f->train);
  memset(f, 0, sizeof *f);
}

/* Returns 1 on success. */
int fixture_create(fixture* f) {
  const char* dp[] = {"dp"};
  const char* tp[] = {"tp"};
  reshard_axes_t w_src_dims[2], w_dst_dims[2], b_src_dims[1], b_dst_dims[1];
  int64_t d;
  memset(f, 0, sizeof *f);
  w_src_dims[0].names = dp;
  w_src_dims[0].count = 1;
  w_src_dims[1].names = tp;
  w_src_dims[1].count = 1;
  w_dst_dims[0].names = NULL;
  w_dst_dims[0].count = 0;
  w_dst_dims[1].names = tp;
  w_dst_dims[1].count = 1;
  b_src_dims[0] = w_src_dims[0];
  b_dst_dims[0] = w_dst_dims[0];
  if (!ok_(reshard_mesh_create(2, kTrainAxes, kTrainShape, NULL, &f->train), __FILE__, __LINE__,
           "train") ||
      !ok_(reshard_mesh_create(1, kInferAxes, kInferShape, kInferDevices, &f->infer), __FILE__,
           __LINE__, "infer") ||
      !ok_(reshard_layout_create_named(f->train, 2, kW, w_src_dims, NULL, RESHARD_REDUCE_SUM,
                                       &f->w_src),
           __FILE__, __LINE__, "w_src") ||
      !ok_(reshard_layout_create_named(f->infer, 2, kW, w_dst_dims, NULL, RESHARD_REDUCE_SUM,
                                       &f->w_dst),
           __FILE__, __LINE__, "w_dst") ||
      !ok_(reshard_layout_create_named(f->train, 1, kB, b_src_dims, NULL, RESHARD_REDUCE_SUM,
                                       &f->b_src),
           __FILE__, __LINE__, "b_src") ||
      !ok_(reshard_layout_create_named(f->infer, 1, kB, b_dst_dims, NULL, RESHARD_REDUCE_SUM,
                                       &f->b_dst),
           __FILE__, __LINE__, "b_dst") ||
      !ok_(reshard_topology_create(&f->topology), __FILE__, __LINE__, "topology")) {
    fixture_destroy(f);
    return 0;
  }
  for (d = 0; d < 8; ++d) {
    const int32_t process = d < 2 ? 0 : d < 4 ? 1 : 2;
    if (!ok_(reshard_topology_add_device(f->topology, d, process, process, (int32_t)(d % 4)),
             __FILE__, __LINE__, "add_device")) {
      fixture_destroy(f);
      return 0;
    }
  }
  if (!ok_(reshard_plan_input_create(&f->input), __FILE__, __LINE__, "input") ||
      !ok_(reshard_plan_input_add_tensor(f->input, "w", 2, kW, RESHARD_DTYPE_F32, f->w_src,
                                         f->w_dst),
           __FILE__, __LINE__, "add w") ||
      !ok_(reshard_plan_input_add_tensor(f->input, "b", 1, kB, RESHARD_DTYPE_I32, f->b_src,
                                         f->b_dst),
           __FILE__, __LINE__, "add b") ||
      !ok_(reshard_plan_input_set_topology(f->input, f->topology), __FILE__, __LINE__,
           "set_topology")) {
    fixture_destroy(f);
    return 0;
  }
  {
    /* The fixture's tensors are tiny: the single-hop guard (1.8) would drop
     * the relays the tests below check; test_relays checks the guard. */
    reshard_plan_options_t routes = RESHARD_PLAN_OPTIONS_INIT;
    routes.single_hop_guard = 0;
    if (!ok_(reshard_plan_input_set_options(f->input, &routes), __FILE__, __LINE__, "options")) {
      fixture_destroy(f);
      return 0;
    }
  }
  return 1;
}

reshard_plan_t* fixture_plan(const fixture* f) {
  reshard_plan_t* plan = NULL;
  if (!ok_(reshard_plan_create(f->input, NULL, &plan), __FILE__, __LINE__, "plan_create")) {
    return NULL;
  }
  return plan;
}

/* Row-major global flat index of the `local`-th element of box [lo, hi). */
int64_t global_index(size_t rank, const int64_t* shape, const int64_t* lo, const int64_t* hi,
                     int64_t local) {
  int64_t coord[RESHARD_MAX_RANK];
  int64_t g = 0;
  size_t d;
  for (d = rank; d-- > 0;) {
    const int64_t extent = hi[d] - lo[d];
    coord[d] = lo[d] + local % extent;
    local /= extent;
  }
  for (d = 0; d < rank; ++d) g = g * shape[d] + coord[d];
  return g;
}

int64_t box_volume(size_t rank, const int64_t* lo, const int64_t* hi) {
  int64_t v = 1;
  size_t d;
  for (d = 0; d < rank; ++d) v *= hi[d] - lo[d];
  return v;
}

/* Shard buffers of every tensor of a plan: sources hold value = global
 * index (as f32 for tensor "w", i32 for "b"), destinations hold -1. */

void host_buffers_free(host_buffers* h) {
  size_t t, e;
  for (t = 0; t < h->num_tensors; ++t) {
    reshard_tensor_buffers_t* tb = &h->tensors[t];
    for (e = 0; e < tb->num_src; ++e) free((void*)tb->src[e].data);
    for (e = 0; e < tb->num_dst; ++e) free(tb->dst[e].data);
    free((void*)tb->src);
    free((void*)tb->dst);
  }
  free(h->tensors);
  memset(h, 0, sizeof *h);
}

void store_value(reshard_dtype_t dtype, void* base, int64_t i, int64_t value) {
  if (dtype == RESHARD_DTYPE_F32) {
    ((float*)base)[i] = (float)value;
  } else {
    ((int32_t*)base)[i] = (int32_t)value;
  }
}

int64_t load_value(reshard_dtype_t dtype, const void* base, int64_t i) {
  if (dtype == RESHARD_DTYPE_F32) return (int64_t)((const float*)base)[i];
  return ((const int32_t*)base)[i];
}

/* Allocates and fills; returns 1 on success. Only f32 / i32 tensors. */
int host_buffers_make(const reshard_plan_t* plan, host_buffers* h) {
  size_t t, e, n;
  memset(h, 0, sizeof *h);
  if (!ok_(reshard_plan_num_tensors(plan, &n), __FILE__, __LINE__, "num_tensors")) return 0;
  h->num_tensors = n;
  h->tensors = (reshard_tensor_buffers_t*)calloc(n, sizeof *h->tensors);
  for (t = 0; t < n; ++t) {
    reshard_tensor_buffers_t* tb = &h->tensors[t];
    reshard_dtype_t dtype;
    size_t rank, ns, nd;
    int64_t shape[RESHARD_MAX_RANK], lo[RESHARD_MAX_RANK], hi[RESHARD_MAX_RANK];
    reshard_src_buffer_t* src;
    reshard_dst_buffer_t* dst;
    CHECK_OK(reshard_plan_tensor_dtype(plan, t, &dtype));
    CHECK_OK(reshard_plan_tensor_rank(plan, t, &rank));
    CHECK_OK(reshard_plan_tensor_shape(plan, t, shape));
    CHECK_OK(reshard_plan_tensor_num_entries(plan, t, RESHARD_SIDE_SRC, &ns));
    CHECK_OK(reshard_plan_tensor_num_entries(plan, t, RESHARD_SIDE_DST, &nd));
    src = (reshard_src_buffer_t*)calloc(ns, sizeof *src);
    dst = (reshard_dst_buffer_t*)calloc(nd, sizeof *dst);
    tb->src = src;
    tb->num_src = ns;
    tb->dst = dst;
    tb->num_dst = nd;
    for (e = 0; e < ns; ++e) {
      int64_t i, volume;
      void* data;
      CHECK_OK(reshard_plan_tensor_entry(plan, t, RESHARD_SIDE_SRC, e, NULL, NULL, lo, hi));
      volume = box_volume(rank, lo, hi);
      data = malloc((size_t)volume * 4 + 1);
      for (i = 0; i < volume; ++i) {
        store_value(dtype, data, i, global_index(rank, shape, lo, hi, i));
      }
      src[e].data = data;
      src[e].bytes = (size_t)volume * reshard_dtype_size(dtype);
    }
    for (e = 0; e < nd; ++e) {
      int64_t i, volume;
      void* data;
      CHECK_OK(reshard_plan_tensor_entry(plan, t, RESHARD_SIDE_DST, e, NULL, NULL, lo, hi));
      volume = box_volume(rank, lo, hi);
      data = malloc((size_t)volume * 4 + 1);
      for (i = 0; i < volume; ++i) store_value(dtype, data, i, -1);
      dst[e].data = data;
      dst[e].bytes = (size_t)volume * reshard_dtype_size(dtype);
    }
  }
  return 1;
}

/* Number of destination elements that differ from their global index. */
int64_t host_buffers_mismatches(const reshard_plan_t* plan, const host_buffers* h) {
  int64_t bad = 0;
  size_t t, e;
  for (t = 0; t < h->num_tensors; ++t) {
    const reshard_tensor_buffers_t* tb = &h->tensors[t];
    reshard_dtype_t dtype;
    size_t rank;
    int64_t shape[RESHARD_MAX_RANK], lo[RESHARD_MAX_RANK], hi[RESHARD_MAX_RANK];
    CHECK_OK(reshard_plan_tensor_dtype(plan, t, &dtype));
    CHECK_OK(reshard_plan_tensor_rank(plan, t, &rank));
    CHECK_OK(reshard_plan_tensor_shape(plan, t, shape));
    for (e = 0; e < tb->num_dst; ++e) {
      int64_t i, volume;
      CHECK_OK(reshard_plan_tensor_entry(plan, t, RESHARD_SIDE_DST, e, NULL, NULL, lo, hi));
      volume = box_volume(rank, lo, hi);
      for (i = 0; i < volume; ++i) {
        if (load_value(dtype, tb->dst[e].data, i) != global_index(rank, shape, lo, hi, i)) ++bad;
      }
    }
  }
  return bad;
}
