// reshard's MPI execution against ScaLAPACK's pdgemr2d on the same 2-d
// redistributions, in one run (docs/design.md §9.7: benchmarks print ratios
// against baselines measured in the same run).
//
//   mpirun -np 4 bench_scalapack [--n 4000] [--iters 10]
//
// The matrix M is n × n doubles, row-major, split into P_r × P_c blocks of
// ceil(n/P_r) × ceil(n/P_c) (one block per rank; the reshard sharding
// [x, y] on a P_r × P_c mesh whose device d lives on rank d). ScaLAPACK is
// column-major, so the same bytes are its matrix A = Mᵀ distributed
// block-cyclically with one block per process: grid P_c × P_r in column-
// major order (BLACS "Col": rank = pcol·P_c + prow, i.e. rank = ix·P_c + iy
// for the block in block-row ix, block-column iy of M), MB = ceil(n/P_c),
// NB = ceil(n/P_r), LLD = the block's column count. Both therefore move the
// very same buffers, and the destination of each is checked against the
// other's.
//
// Printed per case: median time over the iterations of the slowest rank
// (each run after a barrier; the three contenders alternate, so that they
// share the machine's load alike) for reshard with packing through the
// box-copy core (staging), reshard with MPI derived datatypes (gather), and
// pdgemr2d; the ratio ours / ScaLAPACK (target <= 0.5); and our bytes per
// second next to a point-to-point MPI bandwidth measured in the same run
// (MPI_Sendrecv ping-pong of 16 MiB between ranks 0 and 1).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "reshard/engine.h"
#include "reshard/error.h"
#include "reshard/plan.h"

extern "C" {
void Cblacs_pinfo(int* mypnum, int* nprocs);
void Cblacs_get(int context, int what, int* value);
void Cblacs_gridinit(int* context, const char* order, int nprow, int npcol);
void Cblacs_gridinfo(int context, int* nprow, int* npcol, int* myrow, int* mycol);
void Cblacs_gridexit(int context);
void Cblacs_exit(int not_done);
void descinit_(int* desc, const int* m, const int* n, const int* mb, const int* nb,
               const int* irsrc, const int* icsrc, const int* ictxt, const int* lld, int* info);
void Cpdgemr2d(int m, int n, double* a, int ia, int ja, int* desca, double* b, int ib, int jb,
               int* descb, int gcontext);
}

namespace {

using reshard::Box;
using reshard::DType;
using reshard::Engine;
using reshard::ExecuteOptions;
using reshard::Layout;
using reshard::LayoutEntry;
using reshard::Plan;
using reshard::PlanInput;
using reshard::PlanRequest;
using reshard::PlanScope;
using reshard::TensorBuffers;
using reshard::TensorSpec;

struct Grid {
  int pr = 1;  // splits of dim 0 (rows of M)
  int pc = 1;  // splits of dim 1
  std::string name() const { return std::to_string(pr) + "x" + std::to_string(pc); }
  int64_t rows(int64_t n) const { return (n + pr - 1) / pr; }
  int64_t cols(int64_t n) const { return (n + pc - 1) / pc; }
  // The block of rank r: block-row r / pc, block-column r % pc.
  Box box(int64_t n, int r) const {
    Box b;
    b.rank = 2;
    const int64_t ix = r / pc, iy = r % pc;
    b.lo[0] = std::min(n, ix * rows(n));
    b.hi[0] = std::min(n, (ix + 1) * rows(n));
    b.lo[1] = std::min(n, iy * cols(n));
    b.hi[1] = std::min(n, (iy + 1) * cols(n));
    return b;
  }
};

struct Case {
  const char* name;
  Grid src;
  Grid dst;
};

double now() { return MPI_Wtime(); }

// Runs the contenders in turn, `iters` times round-robin (so that all see
// the same load on a shared machine), each run after a barrier and timed on
// the slowest rank; returns each one's median.
std::vector<double> time_medians(int iters, const std::vector<std::function<void()>>& runs) {
  std::vector<std::vector<double>> t(runs.size());
  for (int i = 0; i < iters; ++i) {
    for (size_t k = 0; k < runs.size(); ++k) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now();
      runs[k]();
      double mine = now() - t0, slowest = 0;
      MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      t[k].push_back(slowest);
    }
  }
  std::vector<double> medians;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    medians.push_back(v[v.size() / 2]);
  }
  return medians;
}

Layout block_layout(const std::vector<int64_t>& shape, const Grid& g, int ranks) {
  std::vector<LayoutEntry> entries;
  for (int r = 0; r < ranks; ++r) entries.push_back({r, 0, g.box(shape[0], r)});
  return Layout::from_boxes(shape, entries, 1, reshard::ReduceOp::kSum, g.name());
}

// ScaLAPACK descriptor of the matrix Aᵀ... see the header comment.
struct Scalapack {
  int context = -1;
  int desc[9] = {};
};

Scalapack scalapack_grid(const Grid& g, int n, int rank) {
  Scalapack s;
  int ctx = 0;
  Cblacs_get(0, 0, &ctx);
  Cblacs_gridinit(&ctx, "Col", g.pc, g.pr);  // nprow = P_c, npcol = P_r
  s.context = ctx;
  int nprow = 0, npcol = 0, myrow = 0, mycol = 0;
  Cblacs_gridinfo(ctx, &nprow, &npcol, &myrow, &mycol);
  const int mb = static_cast<int>(g.cols(n));  // rows of A = columns of M
  const int nb = static_cast<int>(g.rows(n));
  const Box b = g.box(n, rank);
  const int lld = std::max(1, static_cast<int>(b.hi[1] - b.lo[1]));
  const int zero = 0;
  int info = 0;
  descinit_(s.desc, &n, &n, &mb, &nb, &zero, &zero, &ctx, &lld, &info);
  if (info != 0) {
    std::fprintf(stderr, "descinit failed: %d\n", info);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  // The grid position must be the one the header comment promises.
  const int ix = rank / g.pc, iy = rank % g.pc;
  if (myrow != iy || mycol != ix) {
    std::fprintf(stderr, "rank %d: BLACS grid position (%d, %d), expected (%d, %d)\n", rank, myrow,
                 mycol, iy, ix);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return s;
}

double pingpong_bandwidth(int rank) {
  const int bytes = 16 << 20;
  std::vector<char> a(static_cast<size_t>(bytes), 1), b(static_cast<size_t>(bytes));
  const int reps = 6;
  double best = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now();
    if (rank == 0) {
      MPI_Sendrecv(a.data(), bytes, MPI_BYTE, 1, 7, b.data(), bytes, MPI_BYTE, 1, 7, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Sendrecv(a.data(), bytes, MPI_BYTE, 0, 7, b.data(), bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
    }
    best = std::min(best, now() - t0);
  }
  double bw = bytes / best;  // each rank sends `bytes` and receives `bytes`
  MPI_Bcast(&bw, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return bw;
}

std::string gbs(double bytes_per_second) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GB/s", bytes_per_second / 1e9);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int64_t n = 4000;
  int iters = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--n") n = std::stoll(argv[i + 1]);
    if (flag == "--iters") iters = std::stoi(argv[i + 1]);
  }
  if (size != 4) {
    if (rank == 0) std::fprintf(stderr, "run with mpirun -np 4\n");
    MPI_Finalize();
    return 2;
  }
  const std::vector<Case> cases = {
      {"row blocks -> column blocks", {4, 1}, {1, 4}},
      {"2x2 -> 4x1", {2, 2}, {4, 1}},
      {"1x4 -> 2x2", {1, 4}, {2, 2}},
  };
  int status = 0;
  try {
    reshard::MpiTransportOptions topts;
    topts.initialize = false;
    Engine engine(reshard::make_mpi_transport(topts));
    const double p2p = pingpong_bandwidth(rank);
    if (rank == 0) {
      std::printf(
          "reshard vs ScaLAPACK pdgemr2d: %lld x %lld doubles, 4 ranks, median of %d "
          "iterations (slowest rank, after a barrier)\n",
          static_cast<long long>(n), static_cast<long long>(n), iters);
      std::printf(
          "point-to-point MPI bandwidth (16 MiB MPI_Sendrecv, ranks 0<->1): %s per "
          "direction\n\n",
          gbs(p2p).c_str());
      std::printf("%-30s %12s %12s %12s %8s %12s %10s\n", "case", "staging", "gather", "pdgemr2d",
                  "ratio", "ours B/s", "vs p2p");
    }
    for (const Case& c : cases) {
      PlanInput in;
      for (int r = 0; r < size; ++r) {
        reshard::DeviceInfo info;
        info.device = r;
        info.process = r;
        info.host = r;
        in.topology.add(info);
      }
      TensorSpec t;
      t.name = "M";
      t.shape = {n, n};
      t.dtype = DType::kF64;
      t.src = block_layout(t.shape, c.src, size);
      t.dst = block_layout(t.shape, c.dst, size);
      in.tensors.push_back(t);
      const Plan plan = make_plan(in, PlanRequest{PlanScope::kProcess, rank, true});
      const Box sb = c.src.box(n, rank), db = c.dst.box(n, rank);
      std::vector<double> src(static_cast<size_t>(sb.volume()));
      std::vector<double> ours(static_cast<size_t>(db.volume()));
      std::vector<double> theirs(static_cast<size_t>(db.volume()));
      for (int64_t i = sb.lo[0]; i < sb.hi[0]; ++i) {
        for (int64_t j = sb.lo[1]; j < sb.hi[1]; ++j) {
          src[static_cast<size_t>((i - sb.lo[0]) * (sb.hi[1] - sb.lo[1]) + (j - sb.lo[1]))] =
              static_cast<double>(i * n + j);
        }
      }
      std::vector<TensorBuffers> views(1);
      views[0].src.resize(static_cast<size_t>(size));
      views[0].dst.resize(static_cast<size_t>(size));
      views[0].src[static_cast<size_t>(rank)] = {src.data(),
                                                 static_cast<int64_t>(src.size() * sizeof(double))};
      views[0].dst[static_cast<size_t>(rank)] = {
          ours.data(), static_cast<int64_t>(ours.size() * sizeof(double))};
      ExecuteOptions staging;
      staging.packing = ExecuteOptions::Packing::kStaging;
      ExecuteOptions gather;
      gather.packing = ExecuteOptions::Packing::kGather;
      Scalapack a = scalapack_grid(c.src, static_cast<int>(n), rank);
      Scalapack b = scalapack_grid(c.dst, static_cast<int>(n), rank);
      int all = 0;
      Cblacs_get(0, 0, &all);
      Cblacs_gridinit(&all, "Row", 1, size);
      const int ni = static_cast<int>(n);
      const std::vector<std::function<void()>> runs = {
          [&] { engine.execute(plan, rank, views, staging); },
          [&] { engine.execute(plan, rank, views, gather); },
          [&] { Cpdgemr2d(ni, ni, src.data(), 1, 1, a.desc, theirs.data(), 1, 1, b.desc, all); },
      };
      for (const auto& run : runs) run();  // warm-up (and the engine's agreement)
      const std::vector<double> med = time_medians(iters, runs);
      const double t_stage = med[0], t_gather = med[1], t_scalapack = med[2];
      Cblacs_gridexit(a.context);
      Cblacs_gridexit(b.context);
      Cblacs_gridexit(all);

      int same = ours == theirs ? 1 : 0;
      bool right = true;
      for (int64_t i = db.lo[0]; i < db.hi[0] && right; ++i) {
        for (int64_t j = db.lo[1]; j < db.hi[1]; ++j) {
          if (ours[static_cast<size_t>((i - db.lo[0]) * (db.hi[1] - db.lo[1]) + (j - db.lo[1]))] !=
              static_cast<double>(i * n + j)) {
            right = false;
            break;
          }
        }
      }
      int ok = same && right ? 1 : 0, all_ok = 0;
      MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      // The default (ExecuteOptions::Packing::kAuto) gathers on the mpi transport.
      const double t_default = t_gather;
      const double bytes = static_cast<double>(plan.stats().network_bytes);
      if (rank == 0) {
        char ratio[16];
        std::snprintf(ratio, sizeof ratio, "%.3f", t_default / t_scalapack);
        std::printf("%-30s %10.2fms %10.2fms %10.2fms %8s %12s %9.0f%%%s\n", c.name, t_stage * 1e3,
                    t_gather * 1e3, t_scalapack * 1e3, ratio, gbs(bytes / t_default).c_str(),
                    100 * (bytes / t_default) / p2p, all_ok ? "" : "  RESULTS DIFFER");
      }
      if (!all_ok) status = 1;
    }
    if (rank == 0) {
      std::printf(
          "\nstaging: packed by the box-copy core; gather: MPI derived datatypes (the default, "
          "kAuto); ratio = gather / pdgemr2d (target <= 0.5); ours B/s = the plan's network "
          "bytes / gather time, all ranks together, against one pair's point-to-point "
          "bandwidth\n");
    }
  } catch (const reshard::Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  Cblacs_exit(1);
  MPI_Finalize();
  return status;
}
