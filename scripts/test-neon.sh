#!/usr/bin/env bash
# Cross-compiles the CPU kernel tests (tests/test_kernels.cpp, kernel half only) for aarch64 and
# runs them under qemu, so the NEON kernels are checked against the float64 references without an
# Arm machine: once on qemu's default CPU (with dotprod), once on a core without it. Then the whole
# library and test binary for aarch64 (cmake/aarch64-linux-gnu.cmake), and the shared model
# fixtures through the Arm engine: weight placement, graphs and kernels together. Needs Debian's
# g++-aarch64-linux-gnu, qemu-user and the arm64 builds of the libraries hearth links (installed
# when missing; the latter after enabling the arm64 architecture in dpkg).
# Usage: scripts/test-neon.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-build-neon}"
need=()
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
# Not libsimdjson-dev:arm64: Debian 12 cannot install it beside the host's (installing it removes
# libsimdjson-dev:amd64); the cross build takes the shared library alone (below).
arm64=(libsimdjson14:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64 libcpp-httplib-dev:arm64
       libgomp1:arm64)
for p in "${arm64[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
mkdir -p "$out/include"
# doctest is header-only; expose just its folder, not the host's whole /usr/include.
ln -sfn /usr/include/doctest "$out/include/doctest"

cxx=(aarch64-linux-gnu-g++ -std=c++17 -O2 -Wall -Wextra -Wno-unused-parameter -Werror -I. -I"$out/include"
     -DHEARTH_KERNELS_ONLY)
srcs=(tests/main.cpp tests/test_kernels.cpp core/dtype.cpp core/tensor.cpp core/quant_format.cpp
      backends/cpu/kernels.cpp backends/cpu/cpu_features.cpp backends/cpu/ops_ref.cpp
      backends/cpu/head_screen.cpp backends/cpu/q4_panel.cpp backends/cpu/q8_panel.cpp
      backends/cpu/bf16_coded.cpp)
for f in backends/cpu/*_scalar.cpp backends/cpu/matmul_quant.cpp; do srcs+=("$f"); done
objs=()
for f in "${srcs[@]}" backends/cpu/*_neon.cpp; do
  o="$out/$(echo "$f" | tr / _).o"
  flags=()
  case "$f" in *_neon.cpp) flags=(-march=armv8.2-a+fp16) ;; esac
  "${cxx[@]}" "${flags[@]}" -c "$f" -o "$o"
  objs+=("$o")
done
aarch64-linux-gnu-g++ -static -o "$out/kernel_tests" "${objs[@]}"
# Dot-product instructions may only sit in the kernels installed when the CPU reports dotprod
# (functions named *_sdot, compiled with a per-function target); anything else runs everywhere.
bad=$(for o in "$out"/backends_cpu_*_neon.cpp.o; do aarch64-linux-gnu-objdump -d -C "$o"; done |
  awk '/^[0-9a-f]+ <.*>:$/ { fn = $0 } /\t[su]dot\t/ && fn !~ /_sdot</ { print fn }' | sort -u)
if [ -n "$bad" ]; then
  echo "SDOT/UDOT outside the dotprod kernels:" >&2
  echo "$bad" >&2
  exit 1
fi
qemu-aarch64 "$out/kernel_tests" --test-suite=kernels
# Again as an ARMv8.0 core without dotprod (Cortex-A72, as in a Raspberry Pi 4): detection must pick
# the plain kernels, and qemu traps any instruction that core lacks.
qemu-aarch64 -cpu cortex-a72 "$out/kernel_tests" --test-suite=kernels

# simdjson for the cross build: the arm64 shared library with the host package's header (the same
# version; /usr/include is on the cross compiler's path), as the package's own config would say.
mkdir -p "$out/simdjson-arm64"
so=$(ls /usr/lib/aarch64-linux-gnu/libsimdjson.so.* | head -n 1)
printf '%s\n' 'find_package(Threads REQUIRED)' \
  'add_library(simdjson::simdjson SHARED IMPORTED)' \
  "set_target_properties(simdjson::simdjson PROPERTIES IMPORTED_LOCATION \"$so\"" \
  '  INTERFACE_COMPILE_DEFINITIONS SIMDJSON_THREADS_ENABLED=1' \
  '  INTERFACE_LINK_LIBRARIES Threads::Threads)' >"$out/simdjson-arm64/simdjsonConfig.cmake"
# The engine for aarch64 (no Vulkan, CUDA, OpenBLAS or oneDNN there: the portable GEMM), the model
# fixtures through it on scalar and NEON, batched steps against single ones, and threads claiming
# rows in chunks against one thread (11 s). The int8/16-bit
# KV fixture case is left out (166 s under qemu; the kernel tests above check those caches'
# kernels), as are the engine suite's scheduler cases, which no ISA changes (6 minutes).
PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig \
  cmake -S . -B "$out/engine" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEARTH_WERROR=ON \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" -DHEARTH_VULKAN=OFF \
  -DHEARTH_CUDA=OFF -Dsimdjson_DIR="$(cd "$out/simdjson-arm64" && pwd)" >/dev/null
ninja -C "$out/engine" hearth_tests
qemu-aarch64 "$out/engine/hearth_tests" --test-suite=model_fixtures \
  --test-case-exclude='16-bit and int8 KV caches*'
qemu-aarch64 "$out/engine/hearth_tests" --test-suite=engine \
  --test-case='a batched step equals*,row claims*,rows claimed*'
