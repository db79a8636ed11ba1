// Device memory (cudaMalloc, no managed memory) and page-locked host memory (cudaMallocHost),
// freed with their owner; a failed allocation names what it was for and how much.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "backends/cuda/cu_check.h"

namespace hearth::HEARTH_CUDA_NS {

template <bool kPinned>
class Memory {
 public:
  Memory() = default;
  Memory(size_t bytes, const std::string& what) : bytes_(bytes) {
    if (bytes == 0) return;
    const cudaError_t e = kPinned ? cudaMallocHost(&ptr_, bytes) : cudaMalloc(&ptr_, bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear it: an out-of-memory must not fail the next launch
      fail("CUDA: cannot allocate ", bytes >> 20, " MiB of ", kPinned ? "page-locked" : "device",
           " memory for ", what, " (", cudaGetErrorString(e), ")");
    }
  }
  ~Memory() {
    if (ptr_) kPinned ? cudaFreeHost(ptr_) : cudaFree(ptr_);
  }
  Memory(Memory&& o) noexcept { *this = std::move(o); }
  Memory& operator=(Memory&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

using DeviceBuffer = Memory<false>;
using PinnedBuffer = Memory<true>;

}  // namespace hearth::HEARTH_CUDA_NS
