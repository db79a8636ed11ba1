#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: a warnings-as-errors release build, then the same
# suite under AddressSanitizer + UndefinedBehaviorSanitizer. Usage: scripts/test.sh [--no-sanitizers]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=$(nproc)

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEARTH_WERROR=ON -DHEARTH_VULKAN=ON -DHEARTH_CUDA=ON >/dev/null
ninja -C build
# The Vulkan backend's tests run on lavapipe (ctest pins it); here a missing device is a failure.
(cd build && HEARTH_REQUIRE_VULKAN=1 ctest --output-on-failure -j "$jobs" --timeout 1500)

# The NEON kernels, cross-compiled for aarch64 and run under qemu.
bash scripts/test-neon.sh build-neon

# Coverage-guided fuzzing of every parser of untrusted input (tests/fuzz/): the saved findings as
# regressions, then 30 s per target on its seed corpus (clang, build-fuzz; about 15 minutes on 2
# cores, most of it building the instrumented library).
bash scripts/fuzz.sh 30

if [ "${1:-}" != "--no-sanitizers" ]; then
  # Sanitizers slow everything ~3x; the model fixtures still run, on every ISA. Without the
  # Vulkan backend: lavapipe's JIT-compiled shaders under ASan are not what this build checks.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHEARTH_WERROR=ON \
    -DHEARTH_SANITIZE=ON -DHEARTH_VULKAN=OFF >/dev/null
  ninja -C build-asan
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j "$jobs" --timeout 3000)
fi
