#!/usr/bin/env bash
# Installs every Debian package hearth needs to build and test. Safe to run again.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git
      libopenblas-dev libdnnl-dev ocl-icd-opencl-dev opencl-headers libomp-dev libsimdjson-dev doctest-dev
      libpcre2-dev libutf8proc-dev libcpp-httplib-dev
      # the Vulkan backend: loader and headers, the shader compiler, and for its tests the
      # validation layers and Mesa's drivers (lavapipe, a CPU Vulkan device)
      libvulkan-dev glslc vulkan-validationlayers mesa-vulkan-drivers
      # line editing in hearth chat (BSD-licensed)
      libedit-dev
      python3
      # bench/st2gguf.py, which writes the stand-ins as GGUFs for llama.cpp comparisons (numpy;
      # llama.cpp's gguf-py imports yaml)
      python3-numpy python3-yaml
      # examples/desktop-chat and its Xvfb test; leak checks of the C API
      libgtk-4-dev xvfb xauth x11-apps imagemagick valgrind
      # the libFuzzer targets (scripts/fuzz.sh): clang and its sanitizer/fuzzer runtimes, which
      # are only a recommendation of clang's
      clang libclang-rt-14-dev
      # hearth serve's client tests: Node.js for the openai client, Chromium for the chat page,
      # nginx as the load balancer in front of replicas
      nodejs chromium nginx-light curl)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Node.js from Debian comes without npm (a separate package there, which would clash with a
# nodesource build that bundles it), so npm is installed only where it is missing.
if ! command -v npm >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends npm
fi
# The serve tests' npm clients (tests/serve/package-lock.json pins them).
if [ ! -d tests/serve/node_modules/openai ] || [ ! -d tests/serve/node_modules/playwright-core ] ||
   [ tests/serve/package-lock.json -nt tests/serve/node_modules ]; then
  (cd tests/serve && npm ci --no-audit --no-fund --loglevel=error)
fi
