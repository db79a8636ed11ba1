// What a translation unit includes first to compile the CUDA backend's kernel files on the CPU
// (tests/cuda_emu.h): the emulation switched on, in namespace hearth::cuda_emu, so that the
// emulated backend never clashes with the library's own when it has the real one.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <doctest/doctest.h>

#define HEARTH_CUDA_EMU 1
#define HEARTH_CUDA_NS cuda_emu
