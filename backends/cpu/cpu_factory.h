// What core/backend_list.cpp needs to list the CPU backend: its factory, without the backend's
// own headers.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"

namespace hearth::cpu {

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt);
// One line: the best ISA and the cores (`hearth devices`).
std::vector<std::string> cpu_devices();

}  // namespace hearth::cpu
