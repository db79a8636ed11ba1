// Weights on the device: each weight's codes (and a quantized one's scales) copied once per
// backend into its own cudaMalloc'd buffer, in the checkpoint's bytes; a graph names them by
// their host address, which finds their device copy.
#include <cstring>

#include "backends/cuda/cuda_backend.h"
#include "core/error.h"

namespace hearth::HEARTH_CUDA_NS {

namespace {

size_t scale_bytes(const Tensor& t) {
  return size_t(t.rows()) * size_t(t.cols() / t.group_size) * 2;
}

uint32_t weight_type(const Tensor& t) {
  switch (t.dtype) {
    case DType::F32:
      return kF32;
    case DType::F16:
      return kF16;
    case DType::BF16:
      return kBF16;
    case DType::Q8:
      return kQ8;
    default:
      return t.codebook ? kQ4Codebook : kQ4;
  }
}

}  // namespace

void CudaBackend::place_weights(const Graph& g) {
  auto upload = [&](const void* host, size_t bytes, const std::string& name) {
    if (!host || weights_.count(host)) return;
    DeviceBuffer buf(bytes, "weight " + name);
    check(cudaMemcpy(buf.get(), host, bytes, cudaMemcpyHostToDevice), "uploading a weight");
    weights_.emplace(host, std::move(buf));
  };
  for (const GraphTensor& t : g.tensors()) {
    if (t.kind != TensorKind::Weight) continue;
    upload(t.weight.data, t.weight.nbytes, t.name);
    if (t.weight.quantized()) upload(t.weight.scales, scale_bytes(t.weight), t.name + " scales");
  }
  // A copy from pageable memory may return before its DMA lands, and the backend's stream does
  // not wait for the legacy one.
  check(cudaDeviceSynchronize(), "uploading the weights");
}

WeightView CudaBackend::weight(const Tensor& t, const std::string& name) const {
  auto device = [&](const void* host) {
    auto it = weights_.find(host);
    if (it == weights_.end()) fail("CUDA: weight ", name, " was not placed on the device");
    return it->second.as<const uint8_t>();
  };
  WeightView w;
  w.codes = device(t.data);
  w.cols = t.cols();
  w.type = weight_type(t);
  if (t.quantized()) {
    w.scales = device(t.scales);
    w.stype = t.scale_dtype == DType::BF16 ? kBF16 : kF16;
    w.group = uint32_t(t.group_size);
    if (t.codebook) std::memcpy(w.codebook, t.codebook, 16);
  }
  return w;
}

}  // namespace hearth::HEARTH_CUDA_NS
