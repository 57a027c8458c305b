#!/usr/bin/env bash
# Builds and runs the ScaLAPACK comparison (bench/scalapack/scalapack_bench.cc)
# on 4 MPI ranks: reshard's MPI execution and pdgemr2d on the same 2-d
# redistributions of a 4000 x 4000 double matrix, with the ratio and the
# achieved bandwidth against a point-to-point MPI bandwidth of the same run.
#   BUILD_DIR (default build/bench; an existing build keeps its settings)
#   N (default 4000)   ITERS (default 10)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build/bench}
if [[ -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  # An existing build (e.g. build/dev): keep its settings, build the targets.
  cmake "$BUILD_DIR" >/dev/null
else
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRESHARD_TESTS=OFF \
    -DRESHARD_CUDA=OFF >/dev/null
fi
cmake --build "$BUILD_DIR" --target bench_scalapack reshard_mpi -j "${JOBS:-2}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
export RESHARD_BACKEND_DIR="$PWD/$BUILD_DIR/lib"
oversubscribe=()
(( $(nproc) < 4 )) && oversubscribe=(--oversubscribe)
mpirun --allow-run-as-root "${oversubscribe[@]}" -np 4 \
  "$BUILD_DIR/bench/scalapack/bench_scalapack" --n "${N:-4000}" --iters "${ITERS:-10}"
