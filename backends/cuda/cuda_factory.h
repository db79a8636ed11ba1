// What core/backend_list.cpp needs to list the CUDA backend, without CUDA's headers.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"

namespace hearth::cuda {

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opt);
bool cuda_available();  // a driver and at least one device
// One line per device: index, name, compute capability, memory and limits.
std::vector<std::string> cuda_devices();

}  // namespace hearth::cuda
