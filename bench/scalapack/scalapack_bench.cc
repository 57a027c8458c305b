// reshard's MPI execution against ScaLAPACK's pdgemr2d on the same 2-d
// redistributions, in one run (docs/design.md §9.7: benchmarks print ratios
// against baselines measured in the same run).
//
//   mpirun -np 4 bench_scalapack [--n 4000] [--iters 10] [--staging] [--json FILE]
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
// Printed per case: median and minimum time over the iterations of the
// slowest rank (each run after a barrier; the contenders alternate, so that
// they share the machine's load alike) for reshard with MPI derived
// datatypes (gather, the default), optionally reshard with packing through
// the box-copy core (--staging), and pdgemr2d; the CPU seconds each rank
// spent in the run (getrusage of the whole process, helper threads
// included; the mean over ranks, median over iterations): a rank that waits
// for its peers should use little; the ratio ours / ScaLAPACK; and our bytes
// per second next to a point-to-point MPI bandwidth measured in the same run
// (MPI_Sendrecv ping-pong of 16 MiB between ranks 0 and 1). The 1-minute
// load average is printed before and after. --json FILE writes the same
// figures for bench/scalapack/contention.py, which runs this program on an
// idle machine and beside busy processes.
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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

// CPU seconds (user + system) of the whole process so far.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double load_average() {
  double l = 0;
  return getloadavg(&l, 1) == 1 ? l : -1;
}

struct Timing {
  double median = 0;  // wall seconds of the slowest rank
  double min = 0;
  double cpu = 0;                   // CPU seconds per rank: mean over ranks, median over iterations
  std::vector<double> walls, cpus;  // per iteration
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs the contenders in turn, `iters` times round-robin (so that all see
// the same load on a shared machine), each run after a barrier and timed on
// the slowest rank, its CPU time averaged over the ranks.
std::vector<Timing> time_runs(int iters, const std::vector<std::function<void()>>& runs) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<std::vector<double>> t(runs.size()), cpu(runs.size());
  for (int i = 0; i < iters; ++i) {
    for (size_t k = 0; k < runs.size(); ++k) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double c0 = cpu_seconds();
      const double t0 = now();
      runs[k]();
      double mine[2] = {now() - t0, cpu_seconds() - c0}, slowest = 0, cpu_sum = 0;
      MPI_Allreduce(&mine[0], &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      MPI_Allreduce(&mine[1], &cpu_sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      t[k].push_back(slowest);
      cpu[k].push_back(cpu_sum / size);
    }
  }
  std::vector<Timing> out;
  for (size_t k = 0; k < runs.size(); ++k) {
    out.push_back({median_of(t[k]), *std::min_element(t[k].begin(), t[k].end()), median_of(cpu[k]),
                   t[k], cpu[k]});
  }
  return out;
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
  bool with_staging = false;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const bool has_value = i + 1 < argc;
    if (flag == "--staging") {
      with_staging = true;
    } else if (flag == "--n" && has_value) {
      n = std::stoll(argv[++i]);
    } else if (flag == "--iters" && has_value) {
      iters = std::max(1, std::stoi(argv[++i]));
    } else if (flag == "--json" && has_value) {
      json_path = argv[++i];
    } else {
      if (rank == 0) std::fprintf(stderr, "unknown or incomplete argument: %s\n", flag.c_str());
      MPI_Finalize();
      return 2;
    }
  }
  if (size != 4) {
    if (rank == 0) std::fprintf(stderr, "run with mpirun -np 4\n");
    MPI_Finalize();
    return 2;
  }
  // The redistributions of the issue that asked for this benchmark: rows ->
  // columns, a 2 x 2 grid -> columns, rows -> a 2 x 2 grid.
  const std::vector<Case> cases = {
      {"rows -> columns", {4, 1}, {1, 4}},
      {"2x2 -> columns", {2, 2}, {1, 4}},
      {"rows -> 2x2", {4, 1}, {2, 2}},
  };
  int status = 0;
  std::string json = "{\"n\": " + std::to_string(n) + ", \"ranks\": " + std::to_string(size) +
                     ", \"iters\": " + std::to_string(iters);
  const auto json_list = [](const std::vector<double>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) {
      char x[32];
      std::snprintf(x, sizeof x, "%s%.6f", i ? ", " : "", v[i]);
      s += x;
    }
    return s + "]";
  };
  const auto json_timing = [&](const char* name, const Timing& t) {
    char s[160];
    std::snprintf(s, sizeof s, "\"%s\": {\"median_s\": %.6f, \"min_s\": %.6f, \"cpu_s\": %.6f, ",
                  name, t.median, t.min, t.cpu);
    return std::string(s) + "\"wall_s\": " + json_list(t.walls) +
           ", \"cpu_per_rank_s\": " + json_list(t.cpus) + "}";
  };
  try {
    reshard::MpiTransportOptions topts;
    topts.initialize = false;
    Engine engine(reshard::make_mpi_transport(topts));
    const double p2p = pingpong_bandwidth(rank);
    const double load_before = load_average();
    if (rank == 0) {
      std::printf(
          "reshard vs ScaLAPACK pdgemr2d: %lld x %lld doubles, 4 ranks, %d iterations "
          "(slowest rank, after a barrier; contenders alternate)\n",
          static_cast<long long>(n), static_cast<long long>(n), iters);
      std::printf(
          "point-to-point MPI bandwidth (16 MiB MPI_Sendrecv, ranks 0<->1): %s per "
          "direction; load average %.2f\n\n",
          gbs(p2p).c_str(), load_before);
      std::printf("%-18s %22s %22s", "case", "reshard med/min", "pdgemr2d med/min");
      if (with_staging) std::printf(" %12s", "staging");
      std::printf(" %9s %9s %7s %11s %7s\n", "CPU ours", "CPU theirs", "ratio", "ours B/s",
                  "vs p2p");
    }
    json += ", \"p2p_Bps\": " + std::to_string(p2p) + ", \"cases\": [";
    bool first_case = true;
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
      const ExecuteOptions defaults;  // kAuto: MPI derived datatypes on the mpi transport
      Scalapack a = scalapack_grid(c.src, static_cast<int>(n), rank);
      Scalapack b = scalapack_grid(c.dst, static_cast<int>(n), rank);
      int all = 0;
      Cblacs_get(0, 0, &all);
      Cblacs_gridinit(&all, "Row", 1, size);
      const int ni = static_cast<int>(n);
      std::vector<std::function<void()>> runs = {
          [&] { engine.execute(plan, rank, views, defaults); },
          [&] { Cpdgemr2d(ni, ni, src.data(), 1, 1, a.desc, theirs.data(), 1, 1, b.desc, all); },
      };
      if (with_staging) runs.push_back([&] { engine.execute(plan, rank, views, staging); });
      for (const auto& run : runs) run();  // warm-up (and the engine's agreement)
      const std::vector<Timing> tm = time_runs(iters, runs);
      const Timing& ours_t = tm[0];
      const Timing& theirs_t = tm[1];
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
      const double bytes = static_cast<double>(plan.stats().network_bytes);
      if (rank == 0) {
        std::printf("%-18s %9.2fms /%7.2fms %9.2fms /%7.2fms", c.name, ours_t.median * 1e3,
                    ours_t.min * 1e3, theirs_t.median * 1e3, theirs_t.min * 1e3);
        if (with_staging) std::printf(" %10.2fms", tm[2].median * 1e3);
        std::printf(" %8.1fms %9.1fms %7.3f %11s %6.0f%%%s\n", ours_t.cpu * 1e3, theirs_t.cpu * 1e3,
                    ours_t.median / theirs_t.median, gbs(bytes / ours_t.median).c_str(),
                    100 * (bytes / ours_t.median) / p2p, all_ok ? "" : "  RESULTS DIFFER");
      }
      json += std::string(first_case ? "" : ", ") + "{\"name\": \"" + c.name + "\", " +
              json_timing("reshard", ours_t) + ", " + json_timing("pdgemr2d", theirs_t) +
              (with_staging ? ", " + json_timing("staging", tm[2]) : std::string()) +
              ", \"network_bytes\": " + std::to_string(plan.stats().network_bytes) +
              ", \"ok\": " + (all_ok ? "true" : "false") + "}";
      first_case = false;
      if (!all_ok) status = 1;
    }
    const double load_after = load_average();
    json += "], \"load_before\": " + std::to_string(load_before) +
            ", \"load_after\": " + std::to_string(load_after) + "}\n";
    if (rank == 0) {
      std::printf(
          "\nload average %.2f at the end. reshard: the default execution (MPI derived "
          "datatypes); med/min: median and minimum over the iterations of the slowest rank; "
          "CPU: CPU seconds per rank (mean over ranks, median over iterations); ratio = "
          "reshard / pdgemr2d medians; ours B/s = the plan's network bytes / reshard's median, "
          "all ranks together, against one pair's point-to-point bandwidth\n",
          load_after);
      if (!json_path.empty()) {
        FILE* f = std::fopen(json_path.c_str(), "w");
        if (f == nullptr || std::fputs(json.c_str(), f) < 0 || std::fclose(f) != 0) {
          std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
          status = 1;
        }
      }
    }
  } catch (const reshard::Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  Cblacs_exit(1);
  MPI_Finalize();
  return status;
}
