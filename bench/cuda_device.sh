#!/usr/bin/env bash
# The GPU backends' checks and benchmarks for a lent GPU machine (the device tool: ~15 minutes of
# device time, a bare machine with the CUDA toolkit, PyTorch's python3 and none of our Debian
# libraries, nothing fetched there). Two steps:
#
#   here:  bash bench/cuda_device.sh pack
#          builds build-dev/ (sm_90, CUDA and Vulkan on) and packs into .devpack/ (git-ignored
#          through .git/info/exclude) the binaries, the shared libraries the bare machine lacks
#          (the Vulkan loader among them), the Khronos validation layer and the Qwen3 tokenizer
#          for stand-ins; under 30 MB.
#   there: run with carry [".devpack"] and the command `bash bench/cuda_device.sh run` (CUDA,
#          then Vulkan) or `bash bench/cuda_device.sh run vulkan` (Vulkan alone)
#
# `run` writes everything to $OUT (log.txt, bench JSON lines): the op tests on the CUDA targets
# against float64 (test_ops.cpp, test_cuda_math.cpp) with HEARTH_REQUIRE_CUDA=1; compute-sanitizer
# memcheck over the attention and matmul op tests and one generation; CUDA against the CPU
# backend (the reference verified on the shared fixtures) on a 0.6B stand-in made there: logits
# of a 40-token prompt in one pass and in chunks, and 24 greedy tokens; then `hearth bench
# --backend cuda` on 0.6B/1.7B/8B-shape stand-ins, BF16 and INT4, with CUDA graphs, cuBLAS
# prefill and the int8 mat-vec on and off (HEARTH_CUDA_GRAPHS=0, HEARTH_CUDA_CUBLAS=0,
# HEARTH_CUDA_DP4A=0). The shared model fixtures themselves (tests/test_cuda.cpp) are 54-73 MB
# each, too large to travel: they run where ../shared is beside the checkout. Vulkan, on the machine's NVIDIA driver: the op tests on
# the Vulkan targets under the validation layer, the same comparison with the CPU, and `hearth
# bench --backend vulkan` on the 0.6B and 1.7B stand-ins (16-bit storage and integer dot products
# on and off).
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}

if [ "$mode" = pack ]; then
  set -e
  cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEARTH_WERROR=ON \
    -DHEARTH_CUDA=ON -DHEARTH_VULKAN=ON -DHEARTH_CUDA_ARCHITECTURES=90-real >/dev/null
  ninja -C build-dev hearth hearth_tests
  grep -qx '/.devpack/' .git/info/exclude 2>/dev/null || echo '/.devpack/' >>.git/info/exclude
  rm -rf .devpack /tmp/hearth-devpack && mkdir -p .devpack /tmp/hearth-devpack/lib
  cp build-dev/hearth build-dev/hearth_tests /tmp/hearth-devpack/
  # Every shared library but the C/C++ runtime (newer there) and cuBLAS (the machine's own).
  ldd build-dev/hearth build-dev/hearth_tests | awk '/=> \//{print $3}' | sort -u |
    grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*|libcublas|libcublasLt)\.so' |
    xargs -I{} cp -L {} /tmp/hearth-devpack/lib/
  cp -r ../shared/qwen3-tokenizer /tmp/hearth-devpack/tokenizer
  # The validation layer the Vulkan tests run under (its manifest names the library, which the
  # loader finds on LD_LIBRARY_PATH there).
  mkdir -p /tmp/hearth-devpack/layers
  cp /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json /tmp/hearth-devpack/layers/
  cp -L /usr/lib/x86_64-linux-gnu/libVkLayer_khronos_validation.so /tmp/hearth-devpack/lib/
  tar cf - -C /tmp/hearth-devpack . | xz -T0 -6 >.devpack/pack.tar.xz
  ls -la .devpack
  exit 0
fi

if [ "$mode" != run ]; then
  echo "usage: bash bench/cuda_device.sh pack|run [vulkan]" >&2
  exit 2
fi
only=${2:-}

OUT=${OUT:-/tmp/hearth-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
P=/tmp/hearth-devpack
mkdir -p $P && tar xJf .devpack/pack.tar.xz -C $P
cublas=$(dirname "$( (ldconfig -p | awk '/libcublas\.so\.13/{print $NF}'; \
  find / -name 'libcublas.so.13' -not -path '/proc/*' 2>/dev/null) | head -1)")
export LD_LIBRARY_PATH="$P/lib:$cublas:${LD_LIBRARY_PATH:-}"
export VK_LAYER_PATH=$P/layers  # the validation layer the Vulkan tests run under
H=$P/hearth
step() { echo; echo "=== $* ($(date +%T))"; }

step "machine"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv
$H devices

if [ "$only" != vulkan ]; then
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
fi

step "stand-ins"
M=/tmp/hearth-models
mkdir -p $M
$H standin --out $M/s06bf --preset 0.6b --tokenizer $P/tokenizer >/dev/null &&
  $H standin --out $M/s06q4 --preset 0.6b --bits 4 --rtn --tokenizer $P/tokenizer >/dev/null
ls $M

# $1 against the CPU backend on the 0.6B stand-ins: logits of a 40-token prompt in one pass (the
# mat-vec alone, and the backend's long-step path) and in chunks, then 24 greedy tokens.
compare() {
  local be=$1
  step "$be against the CPU backend: logits (one pass, chunks) and greedy tokens"
  ids=$(seq -s, 100 139)
  for m in s06bf s06q4; do
    $H logits --model $M/$m --ids "$ids" --out $M/$m.cpu.f32 --mmap
    HEARTH_CUDA_CUBLAS=0 $H logits --model $M/$m --ids "$ids" --out $M/$m.one.f32 --backend $be --ctx 4096
    $H logits --model $M/$m --ids "$ids" --out $M/$m.long.f32 --backend $be --ctx 4096
    $H logits --model $M/$m --ids "$ids" --out $M/$m.chunks.f32 --backend $be --ctx 4096 --chunks 7,1,32
    python3 - "$M/$m" "$be" <<'EOF'
import sys, numpy as np
base, be = sys.argv[1], sys.argv[2]
ref = np.fromfile(base + ".cpu.f32", dtype=np.float32).reshape(40, -1).astype(np.float64)
def kl(a):
    p = np.exp(ref - ref.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
    q = np.exp(a - a.max(1, keepdims=True)); q /= q.sum(1, keepdims=True)
    return float((p * (np.log(p + 1e-300) - np.log(q + 1e-300))).sum(1).max())
for kind in ("one", "long", "chunks"):
    got = np.fromfile(base + "." + kind + ".f32", dtype=np.float32).reshape(40, -1)
    err = np.abs(got - ref).max() / np.abs(ref).max()
    same = (got.argmax(1) == ref.argmax(1)).mean()
    print(f"{be} {base.split('/')[-1]} {kind}: max |diff| / max |ref| {err:.2e}, worst KL {kl(got):.2e}, argmax agree {same:.3f}")
EOF
    a=$($H generate --model $M/$m --ids "$ids" --max-new-tokens 24 --greedy --mmap | tail -1)
    b=$($H generate --model $M/$m --ids "$ids" --max-new-tokens 24 --greedy --backend $be --ctx 4096 | tail -1)
    echo "$m greedy cpu: $a"
    echo "$m greedy $be: $b"
    [ "$a" = "$b" ] && echo "$m greedy: identical" || echo "$m greedy: DIFFERENT"
  done
}

bench() {  # backend, model, label, env...
  local be=$1 m=$2 label=$3
  shift 3
  echo "--- $be $m $label"
  env "$@" $H bench --model $M/$m --backend $be --prompt 512 --gen 128 --reps 2 --json |
    tee -a "$OUT/bench.jsonl" | python3 -c '
import sys, json
for line in sys.stdin:
    r = json.loads(line)
    print(json.dumps({k: r[k] for k in r if not isinstance(r[k], (dict, list))})[:600])'
}

vulkan_checks() {
  step "Vulkan: the NVIDIA driver"
  for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json \
    /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
    [ -e "$icd" ] && export VK_DRIVER_FILES=$icd && break
  done
  echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-unset}"
  $H devices
  step "op tests on the Vulkan targets against float64 (validation layer on)"
  HEARTH_REQUIRE_VULKAN=1 timeout 300 $P/hearth_tests --test-suite=ops
  compare vulkan
  step "Vulkan benchmarks"
  bench vulkan s06bf default
  bench vulkan s06q4 default
  bench vulkan s06bf no-16bit-storage HEARTH_VULKAN_STORAGE16=0
  bench vulkan s06q4 no-integer-dot HEARTH_VULKAN_INTEGER_DOT=0
  [ -d $M/s17q4 ] || $H standin --out $M/s17q4 --preset 1.7b --bits 4 --rtn --tokenizer $P/tokenizer >/dev/null
  bench vulkan s17q4 default
}

if [ "$only" = vulkan ]; then
  vulkan_checks
  step "done"
  exit 0
fi

compare cuda
if [ -n "$SAN" ]; then
  step "compute-sanitizer memcheck: one generation"
  timeout 180 "$SAN" --tool memcheck --error-exitcode 9 $H generate --model $M/s06q4 \
    --ids 1,2,3,4,5,6,7,8,9,10 --max-new-tokens 4 --greedy --backend cuda --prefill-chunk 4 --ctx 4096
  echo "memcheck exit: $?"
fi

step "benchmarks"
bench cuda s06bf graphs
bench cuda s06bf no-graphs HEARTH_CUDA_GRAPHS=0
bench cuda s06q4 graphs
bench cuda s06q4 no-graphs HEARTH_CUDA_GRAPHS=0
bench cuda s06q4 no-cublas HEARTH_CUDA_CUBLAS=0
bench cuda s06q4 no-dp4a HEARTH_CUDA_DP4A=0
$H standin --out $M/s17q4 --preset 1.7b --bits 4 --rtn --tokenizer $P/tokenizer >/dev/null &&
  bench cuda s17q4 graphs
$H standin --out $M/s8q4 --preset 8b --bits 4 --rtn --tokenizer $P/tokenizer >/dev/null &&
  bench cuda s8q4 graphs
$H standin --out $M/s8bf --preset 8b --tokenizer $P/tokenizer >/dev/null && bench cuda s8bf graphs
vulkan_checks
step "done"
