// What core/backend_list.cpp needs to list the CPU backend: its factory, without the backend's
// own headers.
#pragma once
#include <memory>

#include "core/backend.h"

namespace hearth::cpu {

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt);

}  // namespace hearth::cpu
