#!/usr/bin/env bash
# gpu-check.sh — the whole check on a machine with an NVIDIA GPU, in one command:
#   1. configure + build (CUDA on; portable kernels for 90a only by default, to save time)
#   2. ctest: every test labelled gpu
#   2b. `mxfuse demo`, the main job, on the GPU
#   2c. the Python package: tests/python (torch, JAX) and bench/bench_python.py
#   3. the GPU benchmark (bench/bench_gpu.c), table + JSON
#   4. compute-sanitizer memcheck + racecheck on the GPU gemm test in small mode
#      (MXF_GPU_TEST_SMALL=1), memcheck on the CUDA graph test, memcheck + racecheck on
#      the proj_rope test (racecheck without its in-mainloop MXFP8 path, whose reports
#      are open)
#   5. the CPU-side tests (every other label)
#   6. the CPU benchmark on two cores (bench/bench_cpu.c) and oneDNN's flushing study
# Logs and JSON go to $OUT (default ./gpu-check-out): build.log, ctest.log, sanitizer.log,
# bench.log, bench_gpu.json, demo.log, pytest.log, bench_python.log/.json. The last thing printed is a summary table. The exit status is
# non-zero when the build, any test or any sanitizer run fails (a sanitizer that cannot
# attach to this device is reported as "n/a", not as a failure).
#
# Options (environment):
#   BUILD_DIR=build-gpu            build directory
#   MXF_CUDA_ARCHS_PORTABLE=90a-real  archs of the portable kernels (CMake cache value)
#   GPU_CHECK_BENCH=full|quick|0   benchmark: all shapes (default), two shapes, or none
#   GPU_CHECK_BENCH_ONLY=section   only that benchmark section (gemm, mixed, proj or plan)
#   GPU_CHECK_SANITIZER=1|0        run the sanitizer step (default 1)
#   GPU_CHECK_CPU_TESTS=1|0        run the CPU-side tests too (default 1)
#   GPU_CHECK_CPU_BENCH=1|0        the CPU benchmark (default 1)
#   GPU_CHECK_PYTHON=1|0           the Python package's tests and bench on the GPU (default 1)
#   GPU_CHECK_PYBENCH=1|0          bench/bench_python.py (default 1)
#   GPU_CHECK_PIP=0|1              also `pip install .` the package and import it (default 0)
#   GPU_CHECK_TESTS=regex          only the GPU ctests matching regex (default: all)
#   MXF_GPU_TEST_MODES=a,b         (read by the tests) only these kernel modes of
#                                  test_gemm_amax_gpu: default, sm90-f16, sm90-bpre,
#                                  sm90-swap, portable, gemv (default: all)
#   GPU_CHECK_TARGETS="a b"        build only these targets (default: all)
#   JOBS=N                         parallel build / CPU test jobs (default: nproc)
#   GPU_CHECK_CMAKE_ARGS="..."     extra configure arguments, e.g. -DMXF_WITH_BLAS=OFF
#
# The steps can run apart; runs that share the build directory build incrementally. The
# whole check in three parts, e.g.:
#   1. GPU_CHECK_BENCH=0 GPU_CHECK_SANITIZER=0 GPU_CHECK_CPU_TESTS=0 GPU_CHECK_CPU_BENCH=0 \
#      GPU_CHECK_PYTHON=0 MXF_GPU_TEST_MODES=default,sm90-f16,sm90-bpre bash scripts/gpu-check.sh
#   2. the same with MXF_GPU_TEST_MODES=sm90-swap,portable,gemv and GPU_CHECK_PYTHON=1
#   3. GPU_CHECK_TESTS='^$' GPU_CHECK_PYTHON=0 bash scripts/gpu-check.sh
#      (no GPU ctest: the benchmark, the sanitizers, the CPU side)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
BUILD_DIR=${BUILD_DIR:-build-gpu}
ARCHS=${MXF_CUDA_ARCHS_PORTABLE:-90a-real}
BENCH=${GPU_CHECK_BENCH:-full}
SANITIZE=${GPU_CHECK_SANITIZER:-1}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT"
# Libraries the system lacks (cJSON for the CLI) may be put in .deps/ (include/, lib/); it
# is searched first when present.
DEPS_ARGS=""
[ -d .deps ] && DEPS_ARGS="-DCMAKE_PREFIX_PATH=$PWD/.deps" && export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
# oneDNN as one file (.deps/lib/libdnnl.so, include/oneapi/dnnl): its soname beside it
[ -f .deps/lib/libdnnl.so ] && [ ! -e .deps/lib/libdnnl.so.2 ] && ln -s libdnnl.so .deps/lib/libdnnl.so.2
declare -a SUMMARY
status=0
add() { SUMMARY+=("$(printf '%-34s %s' "$1" "$2")"); }
fail() { status=1; }

# ---------------------------------------------------------------- 1. build
t0=$SECONDS
{
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DMXF_CUDA_ARCHS_PORTABLE="$ARCHS" $DEPS_ARGS ${GPU_CHECK_CMAKE_ARGS:-} &&
    if [ -n "${GPU_CHECK_TARGETS:-}" ]; then
      cmake --build "$BUILD_DIR" -j "$JOBS" --target ${GPU_CHECK_TARGETS}
    else
      cmake --build "$BUILD_DIR" -j "$JOBS"
    fi
} >"$OUT/build.log" 2>&1
brc=$?
if [ $brc -ne 0 ]; then
  add "build" "FAILED (see build.log; $((SECONDS - t0)) s)"
  grep -E "error|Error" "$OUT/build.log" | head -20
  fail
else
  add "build" "ok ($((SECONDS - t0)) s, portable archs $ARCHS)"
fi

# ---------------------------------------------------------------- 2. tests
ctest_summary() { # label, log section -> "N/M passed, K skipped"
  local log=$1
  local line
  line=$(grep -E "tests passed|tests failed" "$log" | tail -1)
  local skipped
  skipped=$(grep -cE "[0-9]+ - .*\(Skipped\)" "$log")
  echo "${line:-no tests ran} (${skipped} skipped)"
}
if [ $brc -eq 0 ] || [ -n "${GPU_CHECK_TARGETS:-}" ]; then
  : >"$OUT/ctest.log"
  t0=$SECONDS
  (cd "$BUILD_DIR" && ctest -L gpu ${GPU_CHECK_TESTS:+-R "$GPU_CHECK_TESTS"} -V -j 1 --timeout 900) >"$OUT/ctest_gpu.tmp" 2>&1
  grc=$?
  cat "$OUT/ctest_gpu.tmp" >>"$OUT/ctest.log"
  add "ctest -L gpu" "$([ $grc -eq 0 ] && echo ok || echo FAILED): $(ctest_summary "$OUT/ctest_gpu.tmp") $((SECONDS - t0)) s"
  [ $grc -ne 0 ] && fail
  # the per-test pass lines of the GPU tests ("name: N passed, N failed")
  grep -ohE "test_[a-z0-9_]+: ([0-9]+ passed, [0-9]+ failed|SKIPPED.*)" "$OUT/ctest_gpu.tmp" | sed 's/^/  /' >"$OUT/gpu_lines.tmp"
  rm -f "$OUT/ctest_gpu.tmp"
fi

# ---------------------------------------------------------------- 2b. the main job on the GPU
if [ $brc -eq 0 ] && [ -x "$BUILD_DIR/mxfuse" ]; then
  t0=$SECONDS
  "$BUILD_DIR/mxfuse" demo >"$OUT/demo.log" 2>&1
  drc=$?
  add "mxfuse demo" "$([ $drc -eq 0 ] && echo ok || echo FAILED) ($((SECONDS - t0)) s; demo.log)"
  [ $drc -ne 0 ] && fail
  cat "$OUT/demo.log"
fi

# ---------------------------------------------------------------- 2c. the Python package on the GPU
# tests/python on this build's libraries (torch eager / compile / CUDA graphs, JAX jit),
# then the Python layer's costs (bench/bench_python.py); with GPU_CHECK_PIP=1 also
# `pip install --no-build-isolation .` into a scratch target and an import of it.
PYENV="PYTHONPATH=$PWD/python MXFUSE_LIB=$PWD/$BUILD_DIR/libmxfuse.so MXFUSE_CLI=$PWD/$BUILD_DIR/mxfuse"
[ -f "$BUILD_DIR/libmxfuse_xla.so" ] && PYENV="$PYENV MXFUSE_XLA_LIB=$PWD/$BUILD_DIR/libmxfuse_xla.so"
if [ $brc -eq 0 ] && [ "${GPU_CHECK_PYTHON:-1}" != "0" ]; then
  t0=$SECONDS
  env $PYENV XLA_PYTHON_CLIENT_PREALLOCATE=false python3 -m pytest -q -rs tests/python >"$OUT/pytest.log" 2>&1
  prc=$?
  add "pytest tests/python (GPU)" "$([ $prc -eq 0 ] && echo ok || echo FAILED): $(tail -1 "$OUT/pytest.log") $((SECONDS - t0)) s"
  [ $prc -ne 0 ] && fail && grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -20
  if [ "${GPU_CHECK_PYBENCH:-1}" != "0" ]; then
    env $PYENV python3 bench/bench_python.py --json "$OUT/bench_python.json" >"$OUT/bench_python.log" 2>&1
    bprc=$?
    add "bench_python" "$([ $bprc -eq 0 ] && echo ok || echo FAILED) (bench_python.log)"
    [ $bprc -ne 0 ] && fail
    cat "$OUT/bench_python.log"
  fi
fi
# tensor parallelism under torch.distributed: one process per GPU (a world of one on a
# one-GPU machine)
if [ $brc -eq 0 ] && [ "${GPU_CHECK_PYTHON:-1}" != "0" ] && command -v torchrun >/dev/null 2>&1; then
  t0=$SECONDS
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c GPU)
  env $PYENV torchrun --standalone --nproc_per_node="${ngpu:-1}" tests/python/dist_tp.py >"$OUT/dist_tp.log" 2>&1
  trc=$?
  add "torchrun dist_tp ($ngpu GPU)" "$([ $trc -eq 0 ] && echo ok || echo FAILED): $(grep -E "passed, " "$OUT/dist_tp.log" | tail -1) $((SECONDS - t0)) s"
  [ $trc -ne 0 ] && fail && tail -20 "$OUT/dist_tp.log"
fi
if [ "${GPU_CHECK_PIP:-0}" = "1" ]; then
  t0=$SECONDS
  python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/mxfuse-pip \
    -C cmake.define.MXF_CUDA_ARCHS_PORTABLE="$ARCHS" -C build-dir=build-gpu-pip . >"$OUT/pip.log" 2>&1 &&
    (cd /tmp && PYTHONPATH=/tmp/mxfuse-pip python3 -c "import mxfuse, mxfuse.jax; print('import ok', mxfuse.__version__, mxfuse.cuda_device_count(), 'GPU')") >>"$OUT/pip.log" 2>&1
  piprc=$?
  add "pip install . (GPU)" "$([ $piprc -eq 0 ] && echo ok || echo FAILED) ($((SECONDS - t0)) s; pip.log)"
  [ $piprc -ne 0 ] && fail && tail -5 "$OUT/pip.log"
fi

# ---------------------------------------------------------------- 3. benchmark
if [ "$BENCH" != "0" ] && [ -x "$BUILD_DIR/mxf_bench_gpu" ]; then
  t0=$SECONDS
  extra=""
  [ "$BENCH" = "quick" ] && extra="--quick"
  [ -n "${GPU_CHECK_BENCH_ONLY:-}" ] && extra="$extra --only $GPU_CHECK_BENCH_ONLY"
  CUBLASLT_LOG_MASK=1 "$BUILD_DIR/mxf_bench_gpu" $extra "$OUT/bench_gpu.json" >"$OUT/bench.log" 2>&1
  bbrc=$?
  add "benchmark" "$([ $bbrc -eq 0 ] && echo ok || echo FAILED) ($((SECONDS - t0)) s; bench.log, bench_gpu.json)"
  [ $bbrc -ne 0 ] && fail
  echo
  cat "$OUT/bench.log"
elif [ "$BENCH" != "0" ]; then
  add "benchmark" "not built"
fi

# ---------------------------------------------------------------- 4. sanitizer
sanitize() { # name, tool, exe [VAR=value ...: the test's environment]
  local name=$1 tool=$2 exe=$3
  shift 3
  if [ ! -x "$exe" ]; then
    add "sanitizer $tool $name" "not built"
    return
  fi
  local t0=$SECONDS
  echo "==================== $tool $name" >>"$OUT/sanitizer.log"
  env MXF_GPU_TEST_SMALL=1 MXF_NUM_THREADS=4 "$@" compute-sanitizer --tool "$tool" --error-exitcode 99 "$exe" \
    >"$OUT/san.tmp" 2>&1
  local rc=$?
  cat "$OUT/san.tmp" >>"$OUT/sanitizer.log"
  if grep -q "Device not supported\|unsupported device\|Unable to find injection library" "$OUT/san.tmp"; then
    add "sanitizer $tool $name" "n/a (the sanitizer cannot attach on this machine)"
  elif [ $rc -eq 0 ]; then
    add "sanitizer $tool $name" "ok: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/san.tmp" | tail -1) $((SECONDS - t0)) s"
  else
    add "sanitizer $tool $name" "FAILED (rc $rc): $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed, " "$OUT/san.tmp" | tail -2 | tr '\n' ' ')"
    fail
  fi
  rm -f "$OUT/san.tmp"
}
if [ "$SANITIZE" != "0" ] && [ $brc -eq 0 ]; then
  if command -v compute-sanitizer >/dev/null 2>&1; then
    : >"$OUT/sanitizer.log"
    sanitize test_gemm_amax_gpu memcheck "$BUILD_DIR/test_gemm_amax_gpu"
    sanitize test_gemm_amax_gpu racecheck "$BUILD_DIR/test_gemm_amax_gpu"
    sanitize test_cuda_graph memcheck "$BUILD_DIR/test_cuda_graph"
    sanitize test_proj_rope_gpu memcheck "$BUILD_DIR/test_proj_rope_gpu"
    # racecheck without the in-mainloop MXFP8 path: its reports there are open (the Y
    # hand-off and the scales' bulk copies, docs/decisions.md, proj_rope: MXFP8 inputs);
    # memcheck above runs it
    sanitize test_proj_rope_gpu racecheck "$BUILD_DIR/test_proj_rope_gpu" MXF_GPU_TEST_NO_MAINLOOP=1
  else
    add "sanitizer" "n/a (compute-sanitizer not on PATH)"
  fi
fi

# ---------------------------------------------------------------- 5. CPU-side tests
if [ "${GPU_CHECK_CPU_TESTS:-1}" != "0" ] && [ $brc -eq 0 ]; then
  t0=$SECONDS
  (cd "$BUILD_DIR" && ctest -LE gpu --output-on-failure -j "$JOBS" --timeout 900) >"$OUT/ctest_cpu.tmp" 2>&1
  crc=$?
  echo "==================== CPU-side tests" >>"$OUT/ctest.log"
  cat "$OUT/ctest_cpu.tmp" >>"$OUT/ctest.log"
  add "ctest -LE gpu (cpu, python)" "$([ $crc -eq 0 ] && echo ok || echo FAILED): $(ctest_summary "$OUT/ctest_cpu.tmp") $((SECONDS - t0)) s"
  [ $crc -ne 0 ] && fail
  rm -f "$OUT/ctest_cpu.tmp"
fi

# ---------------------------------------------------------------- 6. the CPU benchmark
# bench/bench_cpu.c on two cores (taskset; the CI-class machine) with every GEMM core
# this build has, and what oneDNN's bf16 units do below 2^-126 (bench/onednn_flush.c)
if [ "${GPU_CHECK_CPU_BENCH:-1}" != "0" ] && [ -x "$BUILD_DIR/mxf_bench_cpu" ]; then
  [ -x "$BUILD_DIR/mxf_onednn_flush" ] && "$BUILD_DIR/mxf_onednn_flush" >"$OUT/onednn_flush.log" 2>&1
  t0=$SECONDS
  MXF_BENCH_PROJ_T=128 taskset -c 0,1 env MXF_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2 \
    "$BUILD_DIR/mxf_bench_cpu" "$OUT/bench_cpu.json" >"$OUT/bench_cpu.log" 2>&1
  crc=$?
  add "CPU benchmark (2 cores)" "$([ $crc -eq 0 ] && echo ok || echo FAILED) ($((SECONDS - t0)) s; bench_cpu.log)"
  [ $crc -ne 0 ] && fail
  cat "$OUT/bench_cpu.log"
fi

# ---------------------------------------------------------------- summary
echo
echo "==================== gpu-check summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1))"
for l in "${SUMMARY[@]}"; do echo "$l"; done
[ -f "$OUT/gpu_lines.tmp" ] && cat "$OUT/gpu_lines.tmp" && rm -f "$OUT/gpu_lines.tmp"
echo "result: $([ $status -eq 0 ] && echo PASS || echo FAIL)   (logs in $OUT)"
exit $status
