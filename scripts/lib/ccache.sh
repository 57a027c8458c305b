# Sourced by scripts/test.sh (from the repository root): compiler caching for
# every CMake build the test command makes (dev, asan, tsan, the fuzz build,
# the Python package, the find_package consumer), through ccache (a Debian
# package; scripts/deps.sh installs it). The cache lives in ccache's default
# directory (~/.cache/ccache), so it survives from one run to the next on the
# same machine, whichever folder the clone is in: paths are rewritten
# relative to the clone (CCACHE_BASEDIR) and the working directory is left
# out of the hash (CCACHE_NOHASHDIR; debug information then names the folder
# of the run that filled the cache). On a fresh machine every lookup misses
# and costs a few percent. RESHARD_CCACHE=0 turns it off.
if [[ ${RESHARD_CCACHE:-1} == 1 ]] && command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=$PWD
  export CCACHE_NOHASHDIR=true
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
  # CMake (3.17+) starts every new build tree's launchers from these.
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  ccache --zero-stats >/dev/null
fi
