#!/usr/bin/env bash
# Installs what building, testing or packaging mxfuse needs and is missing, on Debian 12
# (or a Debian-like system with apt-get). Prints nothing when everything is present.
#
#   scripts/deps.sh [--check] build|test|ci
#
#   build   the C library, the CLI and the demo: cmake, a C/C++ compiler, cJSON (required);
#           OpenBLAS and oneDNN (optional: faster CPU GEMM cores)
#   test    build, plus python3 with pip and the Python test packages (numpy, ml_dtypes,
#           pytest, safetensors, jax); clang with libFuzzer (optional: the fuzz tests)
#   ci      test, plus scikit-build-core (the `pip install .` check of .ci/run) and torch (the
#           torch tests on CPU tensors: `pip install torch` from PyPI, the only index assumed
#           reachable: the full wheel with its CUDA libraries, ~4 GB, 70-95 s here)
#   --check list what is missing and exit 1 if anything is, install nothing
#
# System packages go through apt-get when run as root or where sudo needs no password;
# elsewhere the script names the missing packages and, if a required one is among them,
# exits 1. Python packages go through `python -m pip` ($PYTHON, default python3), with
# --break-system-packages where the interpreter is externally managed (PEP 668).
# The CUDA toolkit is not installed: without nvcc the CPU backend builds alone.
set -euo pipefail

say() { printf '==> %s\n' "$*"; }

check=0
if [ "${1:-}" = "--check" ]; then check=1 && shift; fi
mode=${1:-}
case "$mode" in
build | test | ci) ;;
*)
  echo "usage: scripts/deps.sh [--check] build|test|ci" >&2
  exit 2
  ;;
esac

PY=${PYTHON:-python3}

apt_required="cmake make gcc g++ libcjson-dev"
apt_optional="libopenblas-dev libdnnl-dev"
py_packages=""
if [ "$mode" != build ]; then
  apt_required="$apt_required python3 python3-pip"
  apt_optional="$apt_optional clang libclang-rt-14-dev"
  py_packages="numpy ml_dtypes pytest safetensors jax"
fi
if [ "$mode" = ci ]; then py_packages="$py_packages scikit-build-core torch"; fi

# ---------------------------------------------------------------- system packages
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing_req=() missing_opt=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in $apt_required; do installed "$p" || missing_req+=("$p"); done
  for p in $apt_optional; do installed "$p" || missing_opt+=("$p"); done
else
  # no dpkg: judge by the commands alone (libraries are left to CMake to find)
  for c in cmake make cc c++; do command -v "$c" >/dev/null 2>&1 || missing_req+=("$c"); done
fi
missing_sys=("${missing_req[@]}" "${missing_opt[@]}")

as_root=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then as_root=(sudo -n); else as_root=(none); fi
fi

if [ $check = 1 ]; then
  [ ${#missing_req[@]} = 0 ] || echo "missing system packages: ${missing_req[*]}"
  [ ${#missing_opt[@]} = 0 ] || echo "missing optional system packages: ${missing_opt[*]}"
elif [ ${#missing_sys[@]} != 0 ]; then
  if [ "${as_root[*]}" = none ] || ! command -v apt-get >/dev/null 2>&1; then
    why="not root and sudo asks for a password"
    command -v sudo >/dev/null 2>&1 || why="not root and no sudo"
    command -v apt-get >/dev/null 2>&1 || why="no apt-get"
    if [ ${#missing_req[@]} != 0 ]; then
      echo "scripts/deps.sh: $why; install these packages, then run again:" >&2
      echo "  apt-get install ${missing_sys[*]}" >&2
      exit 1
    fi
    say "optional packages missing ($why), going on without them: ${missing_opt[*]}"
  else
    export DEBIAN_FRONTEND=noninteractive
    say "apt-get update"
    "${as_root[@]}" apt-get update -qq
    wanted=()
    for p in "${missing_sys[@]}"; do
      if apt-cache show "$p" >/dev/null 2>&1; then wanted+=("$p"); else say "apt: no package $p here, skipped"; fi
    done
    if [ ${#wanted[@]} != 0 ]; then
      say "apt-get install ${wanted[*]}"
      "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${wanted[@]}" >/dev/null
    fi
  fi
fi

# ---------------------------------------------------------------- python packages
if [ -z "$py_packages" ]; then
  [ $check = 0 ] || [ ${#missing_sys[@]} = 0 ]
  exit
fi
if ! command -v "$PY" >/dev/null 2>&1; then
  if [ $check = 1 ]; then
    echo "missing python packages: $py_packages ($PY not found)"
    exit 1
  fi
  echo "scripts/deps.sh: $PY not found; install python3, then run again" >&2
  exit 1
fi
missing_py=()
for p in $py_packages; do
  module=${p//-/_}
  "$PY" -c "import $module" >/dev/null 2>&1 || missing_py+=("$p")
done
if [ $check = 1 ]; then
  [ ${#missing_py[@]} = 0 ] || echo "missing python packages: ${missing_py[*]} ($PY)"
  [ ${#missing_req[@]} = 0 ] && [ ${#missing_opt[@]} = 0 ] && [ ${#missing_py[@]} = 0 ]
  exit
fi
[ ${#missing_py[@]} != 0 ] || exit 0

say "pip install ${missing_py[*]} ($PY)"
t_pip=$(date +%s)
if ! "$PY" -m pip --version >/dev/null 2>&1; then "$PY" -m ensurepip --upgrade >/dev/null 2>&1 || true; fi
if ! out=$("$PY" -m pip install -q "${missing_py[@]}" 2>&1); then
  if grep -q "externally-managed-environment" <<<"$out"; then
    say "pip: externally managed environment, installing with --break-system-packages"
    "$PY" -m pip install -q --break-system-packages "${missing_py[@]}"
  else
    printf '%s\n' "$out" >&2
    exit 1
  fi
fi
say "pip install done in $(($(date +%s) - t_pip)) s"
