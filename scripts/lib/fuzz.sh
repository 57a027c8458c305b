# Sourced by scripts/test-fuzz.sh and scripts/fuzz-long.sh: builds the
# libFuzzer targets (clang, ASan+UBSan, coverage on the library) and says
# where each target's seeds are. The targets: fuzz_<name> for each name below.
# Where they are built:
#   - RESHARD_FUZZ_BUILD set (scripts/test.sh sets build/asan once the asan
#     preset's build is made): in that build, which already holds them (the
#     library at -O1 with the coverage, CMakePresets.json);
#   - otherwise in build/fuzz, configured here (RelWithDebInfo, an
#     instrumented copy of the library: tests/fuzz/CMakeLists.txt).
FUZZ_TARGETS=(plan_decode spec_parse capi_plan plan_attack)
FUZZ_BUILD=${RESHARD_FUZZ_BUILD:-build/fuzz}

fuzz_build() {
  local targets=()
  for t in "$@"; do targets+=("fuzz_$t"); done
  if [[ $FUZZ_BUILD != build/fuzz ]]; then
    [[ -f $FUZZ_BUILD/CMakeCache.txt ]] || die "RESHARD_FUZZ_BUILD=$FUZZ_BUILD is not a configured build"
    cmake --build "$FUZZ_BUILD" -j "${JOBS:-$(nproc)}" --target "${targets[@]}"
    return
  fi
  # Warnings are enforced by the gcc builds; the CUDA backend is not fuzzed.
  CC=clang CXX=clang++ cmake -S . -B $FUZZ_BUILD -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DRESHARD_FUZZ=ON -DRESHARD_WERROR=OFF -DRESHARD_CUDA=OFF -DRESHARD_BENCH=OFF >/dev/null
  cmake --build $FUZZ_BUILD -j "${JOBS:-$(nproc)}" --target "${targets[@]}"
}

# The seeds the build writes for a target (encoded plans, example specs).
fuzz_seeds() {
  case $1 in
    plan_decode) echo $FUZZ_BUILD/tests/fuzz/plan_corpus ;;
    plan_attack) echo $FUZZ_BUILD/tests/fuzz/attack_corpus ;;
    *) echo $FUZZ_BUILD/tests/fuzz/spec_corpus ;;
  esac
}

# The corpus kept in the repository (minimised by scripts/fuzz-long.sh).
fuzz_kept() { echo tests/fuzz/corpus/$1; }
