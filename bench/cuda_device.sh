#!/usr/bin/env bash
# The CUDA backend's checks and benchmarks for a lent GPU machine (the device tool: ~15 minutes of
# device time, a bare machine with the CUDA toolkit, PyTorch's python3 and none of our Debian
# libraries, nothing fetched there). Two steps:
#
#   here:  bash bench/cuda_device.sh pack
#          builds build-dev/ (sm_90, CUDA on, Vulkan off) and packs into .devpack/ (git-ignored
#          through .git/info/exclude) the binaries, the shared libraries the bare machine lacks
#          and the Qwen3 tokenizer for stand-ins; under 25 MB.
#   there: run with carry [".devpack"] and the command `bash bench/cuda_device.sh run`
#
# `run` writes everything to $OUT (log.txt, bench JSON lines): the op tests on the CUDA targets
# against float64 (test_ops.cpp, test_cuda_math.cpp) with HEARTH_REQUIRE_CUDA=1; compute-sanitizer
# memcheck over the attention and matmul op tests and one generation; CUDA against the CPU
# backend (the reference verified on the shared fixtures) on a 0.6B stand-in made there: logits
# of a 40-token prompt in one pass and in chunks, and 24 greedy tokens; then `hearth bench
# --backend cuda` on 0.6B/1.7B/8B-shape stand-ins, BF16 and INT4, with CUDA graphs on and off
# and cuBLAS prefill on and off (HEARTH_CUDA_GRAPHS=0, HEARTH_CUDA_CUBLAS=0). The shared model
# fixtures themselves (tests/test_cuda.cpp) are 54-73 MB each, too large to travel: they run
# where ../shared is beside the checkout.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}

if [ "$mode" = pack ]; then
  set -e
  cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEARTH_WERROR=ON \
    -DHEARTH_CUDA=ON -DHEARTH_VULKAN=OFF -DHEARTH_CUDA_ARCHITECTURES=90-real >/dev/null
  ninja -C build-dev hearth hearth_tests
  grep -qx '/.devpack/' .git/info/exclude 2>/dev/null || echo '/.devpack/' >>.git/info/exclude
  rm -rf .devpack /tmp/hearth-devpack && mkdir -p .devpack /tmp/hearth-devpack/lib
  cp build-dev/hearth build-dev/hearth_tests /tmp/hearth-devpack/
  # Every shared library but the C/C++ runtime (newer there) and cuBLAS (the machine's own).
  ldd build-dev/hearth build-dev/hearth_tests | awk '/=> \//{print $3}' | sort -u |
    grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*|libcublas|libcublasLt)\.so' |
    xargs -I{} cp -L {} /tmp/hearth-devpack/lib/
  cp -r ../shared/qwen3-tokenizer /tmp/hearth-devpack/tokenizer
  tar cf - -C /tmp/hearth-devpack . | xz -T0 -6 >.devpack/pack.tar.xz
  ls -la .devpack
  exit 0
fi

if [ "$mode" != run ]; then
  echo "usage: bash bench/cuda_device.sh pack|run" >&2
  exit 2
fi

OUT=${OUT:-/tmp/hearth-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
P=/tmp/hearth-devpack
mkdir -p $P && tar xJf .devpack/pack.tar.xz -C $P
cublas=$(dirname "$( (ldconfig -p | awk '/libcublas\.so\.13/{print $NF}'; \
  find / -name 'libcublas.so.13' -not -path '/proc/*' 2>/dev/null) | head -1)")
export LD_LIBRARY_PATH="$P/lib:$cublas:${LD_LIBRARY_PATH:-}"
H=$P/hearth
step() { echo; echo "=== $* ($(date +%T))"; }

step "machine"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv
$H devices

step "op tests on the CUDA targets against float64"
HEARTH_REQUIRE_CUDA=1 $P/hearth_tests --test-suite=ops,cuda_math

step "compute-sanitizer memcheck: attention and matmul op tests"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$SAN" ]; then
  HEARTH_REQUIRE_CUDA=1 timeout 240 "$SAN" --tool memcheck --error-exitcode 9 \
    $P/hearth_tests --test-suite=ops '--test-case=*attention*,*matmul*'
  echo "memcheck exit: $?"
else
  echo "compute-sanitizer not found: memcheck skipped"
fi

step "stand-ins"
M=/tmp/hearth-models
mkdir -p $M
$H standin --out $M/s06bf --preset 0.6b --tokenizer $P/tokenizer >/dev/null &&
  $H standin --out $M/s06q4 --preset 0.6b --bits 4 --rtn --tokenizer $P/tokenizer >/dev/null
ls $M

step "CUDA against the CPU backend: logits (one pass, chunks) and greedy tokens"
ids=$(seq -s, 100 139)
for m in s06bf s06q4; do
  $H logits --model $M/$m --ids "$ids" --out $M/$m.cpu.f32 --mmap
  HEARTH_CUDA_CUBLAS=0 $H logits --model $M/$m --ids "$ids" --out $M/$m.cuda.f32 --backend cuda
  $H logits --model $M/$m --ids "$ids" --out $M/$m.cublas.f32 --backend cuda
  $H logits --model $M/$m --ids "$ids" --out $M/$m.chunks.f32 --backend cuda --chunks 7,1,32
  python3 - "$M/$m" <<'EOF'
import sys, numpy as np
base = sys.argv[1]
ref = np.fromfile(base + ".cpu.f32", dtype=np.float32).reshape(40, -1).astype(np.float64)
def kl(a):
    p = np.exp(ref - ref.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
    q = np.exp(a - a.max(1, keepdims=True)); q /= q.sum(1, keepdims=True)
    return float((p * (np.log(p + 1e-300) - np.log(q + 1e-300))).sum(1).max())
for kind in ("cuda", "cublas", "chunks"):
    got = np.fromfile(base + "." + kind + ".f32", dtype=np.float32).reshape(40, -1)
    err = np.abs(got - ref).max() / np.abs(ref).max()
    same = (got.argmax(1) == ref.argmax(1)).mean()
    print(f"{base.split('/')[-1]} {kind}: max |diff| / max |ref| {err:.2e}, worst KL {kl(got):.2e}, argmax agree {same:.3f}")
EOF
  a=$($H generate --model $M/$m --ids "$ids" --max-new-tokens 24 --greedy --mmap | tail -1)
  b=$($H generate --model $M/$m --ids "$ids" --max-new-tokens 24 --greedy --backend cuda | tail -1)
  echo "$m greedy cpu:  $a"
  echo "$m greedy cuda: $b"
  [ "$a" = "$b" ] && echo "$m greedy: identical" || echo "$m greedy: DIFFERENT"
done
if [ -n "$SAN" ]; then
  step "compute-sanitizer memcheck: one generation"
  timeout 180 "$SAN" --tool memcheck --error-exitcode 9 $H generate --model $M/s06q4 \
    --ids 1,2,3,4,5,6,7,8,9,10 --max-new-tokens 4 --greedy --backend cuda --prefill-chunk 4
  echo "memcheck exit: $?"
fi

step "benchmarks"
bench() {  # model, label, env...
  local m=$1 label=$2
  shift 2
  echo "--- $m $label"
  env "$@" $H bench --model $M/$m --backend cuda --prompt 512 --gen 128 --reps 2 --json |
    tee -a "$OUT/bench.jsonl" | python3 -c '
import sys, json
for line in sys.stdin:
    r = json.loads(line)
    print(json.dumps({k: r[k] for k in r if not isinstance(r[k], (dict, list))})[:600])'
}
bench s06bf graphs
bench s06bf no-graphs HEARTH_CUDA_GRAPHS=0
bench s06q4 graphs
bench s06q4 no-graphs HEARTH_CUDA_GRAPHS=0
bench s06q4 no-cublas HEARTH_CUDA_CUBLAS=0
$H standin --out $M/s17q4 --preset 1.7b --bits 4 --rtn --tokenizer $P/tokenizer >/dev/null &&
  bench s17q4 graphs
$H standin --out $M/s8q4 --preset 8b --bits 4 --rtn --tokenizer $P/tokenizer >/dev/null &&
  bench s8q4 graphs
$H standin --out $M/s8bf --preset 8b --tokenizer $P/tokenizer >/dev/null && bench s8bf graphs
step "done"
