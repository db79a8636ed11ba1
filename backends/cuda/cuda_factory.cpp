#include "backends/cuda/cuda_factory.h"

#include <sstream>

#include "backends/cuda/cuda_backend.h"

namespace hearth::cuda {

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opt) {
  return std::make_unique<CudaBackend>(opt);
}

bool cuda_available() {
  return device_count(nullptr) > 0;
}

std::vector<std::string> cuda_devices() {
  std::vector<std::string> out;
  const int n = device_count(nullptr);
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    std::ostringstream os;
    os << "cuda " << i << ": " << p.name << " (sm_" << p.major * 10 + p.minor << ", "
       << p.multiProcessorCount << " SMs), " << (p.totalGlobalMem >> 20) << " MiB, "
       << p.memoryBusWidth << "-bit memory bus, " << (p.l2CacheSize >> 20) << " MiB L2, "
       << (p.sharedMemPerBlockOptin >> 10) << " KiB shared per block";
    out.push_back(os.str());
  }
  return out;
}

}  // namespace hearth::cuda
