#!/usr/bin/env bash
# sass-compare.sh — proves that a change left the device code alone: builds every CUDA
# kernel at two commits and compares their SASS (cuobjdump -sass) kernel by kernel, per
# architecture, with symbol-name noise normalized (the anonymous-namespace and
# internal-linkage hashes nvcc derives from file paths).
#
#   scripts/sass-compare.sh [options] BASE [HEAD]      (HEAD defaults to HEAD)
#     --base-build DIR   reuse a build directory of BASE (its CMakeFiles/mxf_cuda_*.dir
#                        objects) instead of building BASE
#     --head-build DIR   likewise for HEAD
#     --keep             keep the temporary directory (sources, builds, dumps)
#     -j N               parallel compile jobs (default 2)
#   MXF_CUDA_ARCHS_PORTABLE / MXF_CUDA_ARCHS_SM90 limit the architectures built (default:
#   the project's own, CMakeLists.txt). Both sides must be built the same way.
#
# Prints one line per kernel: "<arch> <object> <kernel> identical|differs|removed|added",
# then "sass-compare: N kernels, N identical, N differ, N removed, N added". Exit status 0
# when no kernel differs (a kernel deleted on purpose shows as removed).
# Needs git, cmake, nvcc, cuobjdump and nvdisasm (CUDA toolkit, or the pip packages
# nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm), python3 and c++filt.
set -euo pipefail

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
base_build= head_build= keep=0 jobs=2
args=()
while [ $# -gt 0 ]; do
  case "$1" in
  --base-build) base_build=$(cd "$2" && pwd); shift 2 ;;
  --head-build) head_build=$(cd "$2" && pwd); shift 2 ;;
  --keep) keep=1; shift ;;
  -j) jobs=$2; shift 2 ;;
  -h | --help) usage ;;
  -*) echo "sass-compare: unknown option $1" >&2; usage ;;
  *) args+=("$1"); shift ;;
  esac
done
[ ${#args[@]} -ge 1 ] && [ ${#args[@]} -le 2 ] || usage
base=${args[0]} head=${args[1]:-HEAD}
repo=$(git rev-parse --show-toplevel)
base_rev=$(git -C "$repo" rev-parse --verify "$base^{commit}")
head_rev=$(git -C "$repo" rev-parse --verify "$head^{commit}")

# the tools: PATH, then the CUDA toolkit, then pip's nvidia packages
for d in /usr/local/cuda/bin ${CUDA_HOME:+$CUDA_HOME/bin}; do
  [ -d "$d" ] && PATH="$PATH:$d"
done
pipbin=$(python3 - 2>/dev/null <<'PY' || true
import glob, site, sys
for p in site.getsitepackages() + [site.getusersitepackages()] + sys.path:
    for b in glob.glob(p + "/nvidia/cu*/bin"):
        print(b)
PY
)
for d in $pipbin; do PATH="$PATH:$d"; done
export PATH
for tool in cuobjdump nvdisasm nvcc cmake c++filt python3; do
  command -v "$tool" >/dev/null || { echo "sass-compare: $tool not found (see the header of $0)" >&2; exit 2; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sass-compare.XXXXXX")
[ "$keep" = 1 ] && echo "sass-compare: working in $tmp" >&2 || trap 'rm -rf "$tmp"' EXIT

# Builds the CUDA object targets of commit $1 into $2/build (sources in $2/src).
build_side() {
  local rev=$1 dir=$2
  mkdir -p "$dir/src"
  git -C "$repo" archive "$rev" | tar -x -C "$dir/src"
  local cfg=(-DCMAKE_BUILD_TYPE=Release -DMXF_WITH_CUDA=ON -DMXF_WITH_BLAS=OFF -DMXF_WITH_ONEDNN=OFF
    -DMXF_WITH_XLA=OFF)
  [ -n "${MXF_CUDA_ARCHS_PORTABLE:-}" ] && cfg+=("-DMXF_CUDA_ARCHS_PORTABLE=$MXF_CUDA_ARCHS_PORTABLE")
  [ -n "${MXF_CUDA_ARCHS_SM90:-}" ] && cfg+=("-DMXF_CUDA_ARCHS_SM90=$MXF_CUDA_ARCHS_SM90")
  cmake -S "$dir/src" -B "$dir/build" "${cfg[@]}" >"$dir/configure.log" 2>&1 ||
    { echo "sass-compare: configure of ${rev:0:12} failed ($dir/configure.log)" >&2; return 1; }
  local targets
  targets=$(make -C "$dir/build" help | sed -n 's/^\.\.\. \(mxf_cuda_[a-z0-9_]*\)$/\1/p')
  [ -n "$targets" ] || { echo "sass-compare: ${rev:0:12} has no CUDA object targets (is nvcc found?)" >&2; return 1; }
  echo "sass-compare: building $(echo $targets) of ${rev:0:12}" >&2
  # shellcheck disable=SC2086
  make -C "$dir/build" -j"$jobs" $targets >"$dir/build.log" 2>&1 ||
    { echo "sass-compare: build of ${rev:0:12} failed ($dir/build.log)" >&2; return 1; }
}

# Dumps the SASS of every object of build directory $1 into $2 (one file per object), $jobs
# objects at a time.
dump_side() {
  local bdir=$1 out=$2
  mkdir -p "$out"
  find "$bdir"/CMakeFiles -path '*/mxf_cuda_*.dir/*' -name '*.o' | sort |
    BDIR=$bdir OUT=$out xargs -r -P "$jobs" -I{} sh -c '
      o=$1; rel=${o#"$BDIR"/CMakeFiles/}; rel=${rel#*.dir/}
      mkdir -p "$OUT/$(dirname "$rel")"
      cuobjdump -sass "$o" >"$OUT/$rel.sass" 2>"$OUT/$rel.err" && exit 0
      # an object without device code has nothing to dump
      grep -q "does not contain device code" "$OUT/$rel.err" || { cat "$OUT/$rel.err" >&2; exit 1; }' sh {}
}

# the builds first (the slow part), then the dumps
for side in base head; do
  rev_var=${side}_rev build_var=${side}_build
  if [ -z "${!build_var}" ]; then
    build_side "${!rev_var}" "$tmp/$side"
    printf -v "$build_var" %s "$tmp/$side/build"
  fi
done
dump_side "$base_build" "$tmp/sass-base"
dump_side "$head_build" "$tmp/sass-head"

python3 - "$tmp/sass-base" "$tmp/sass-head" <<'PY'
import hashlib, os, re, subprocess, sys

# nvcc names an anonymous namespace _GLOBAL__N__<hash>_<len>_<file>_cu_<hash> and an
# internal-linkage symbol _INTERNAL_<hash>_<len>_<file>_cu_<hash>_...: the hashes come from
# the path and the compile, not from the code
ANON = re.compile(r"\d+_GLOBAL__N__[0-9a-f]+_\d+_\w+?_[0-9a-f]{8}(?=\d|[A-Z])")
INTERNAL = re.compile(r"_INTERNAL_[0-9a-f]+_\d+_\w+?_[0-9a-f]{8}_")

def normalize(s):
    return INTERNAL.sub("_INTERNAL_", ANON.sub("12_GLOBAL__N_1", s))

def kernels(root):
    """{(object, arch, normalized mangled name): hash of the normalized SASS}"""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".sass"):
                continue
            obj = os.path.relpath(os.path.join(d, f), root)[: -len(".o.sass")]
            arch, name, body = None, None, []
            def flush():
                if name is not None:
                    out[(obj, arch, name)] = hashlib.sha256("\n".join(body).encode()).hexdigest()
            for line in open(os.path.join(d, f), errors="replace"):
                line = line.rstrip("\n")
                m = re.match(r"\s*arch = (\S+)", line)
                if m:
                    flush(); name = None; body = []; arch = m.group(1); continue
                m = re.match(r"\s*Function : (\S+)", line)
                if m:
                    flush(); name = normalize(m.group(1)); body = []; continue
                if name is not None and line.strip():
                    body.append(normalize(line))
            flush()
    return out

base, head = kernels(sys.argv[1]), kernels(sys.argv[2])
keys = sorted(set(base) | set(head))
names = sorted({k[2] for k in keys})
dem = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
short = dict(zip(names, dem))
count = {"identical": 0, "differs": 0, "removed": 0, "added": 0}
for k in keys:
    if k not in head: st = "removed"
    elif k not in base: st = "added"
    else: st = "identical" if base[k] == head[k] else "differs"
    count[st] += 1
    print(f"{k[1]} {os.path.basename(k[0])} {short.get(k[2], k[2])} {st}")
print(f"sass-compare: {len(keys)} kernels, {count['identical']} identical, {count['differs']} differ, "
      f"{count['removed']} removed, {count['added']} added")
sys.exit(1 if count["differs"] or not keys else 0)
PY
