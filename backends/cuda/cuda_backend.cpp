#include "backends/cuda/cuda_backend.h"

#include <algorithm>

#include "core/error.h"
#include "core/gpu_ops.h"
#include "core/quant_format.h"

namespace hearth::HEARTH_CUDA_NS {

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;

}  // namespace

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = cudaGetErrorString(e);
    return 0;
  }
  if (n == 0 && why) *why = "the driver sees no device";
  return n;
}

CudaBackend::CudaBackend(const BackendOptions& opt)
    : kv_dtype_(opt.kv_dtype), device_(opt.device), opt_(opt.cuda) {
  check_gpu_kv_dtype(opt.kv_dtype, "CUDA");
  std::string why;
  const int n = device_count(&why);
  if (n == 0) fail("CUDA: no device found (", why, "); the CPU backend runs without one");
  if (device_ < 0 || device_ >= n)
    fail("CUDA: no device ", device_, " (this machine has ", n, "; hearth devices lists them)");
  check(cudaSetDevice(device_), "selecting the device");
  check(cudaGetDeviceProperties(&props_, device_), "reading the device's properties");
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream");
  if (!opt_.cublas) return;
  blas_ = open_cublas();
  blas_.check(blas_.create(&cublas_), "creating a handle");
  blas_.check(blas_.set_stream(cublas_, stream_), "setting its stream");
  // A workspace of its own, so that cuBLAS allocates nothing while a step is captured.
  cublas_workspace_ = DeviceBuffer(kCublasWorkspace, "cuBLAS's workspace");
  blas_.check(blas_.set_workspace(cublas_, cublas_workspace_.get(), kCublasWorkspace),
              "setting its workspace");
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  if (cublas_) blas_.destroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

std::string CudaBackend::describe() const {
  return "cuda " + std::to_string(device_) + ": " + props_.name + " (sm_" +
         std::to_string(props_.major * 10 + props_.minor) + ", " +
         std::to_string(props_.totalGlobalMem >> 30) + " GiB" +
         (opt_.cublas ? ", cuBLAS prefill" : "") + (opt_.graphs ? ", CUDA graphs" : "") + ")";
}

bool CudaBackend::supports_op(const Graph& g, const Node& n) const {
  return gpu_supports_op(g, n);
}

std::unique_ptr<CompiledGraph> CudaBackend::compile(const Graph& g, int max_tokens,
                                                    int max_outputs) {
  check_gpu_graph(*this, g, "CUDA", max_tokens, max_outputs);
  check(cudaSetDevice(device_), "selecting the device");
  place_weights(g);
  auto c = std::make_unique<CuCompiled>();
  c->graph = &g;
  c->max_tokens = max_tokens;
  c->max_outputs = max_outputs;
  c->argmax_fused = true;
  allocate(g, *c);
  return c;
}

KVRoom CudaBackend::kv_room(const Graph& g) const {
  check(cudaSetDevice(device_), "selecting the device");
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "reading free memory");
  return gpu_kv_room(g, free, 0);
}

std::unique_ptr<KVStorage> CudaBackend::alloc_kv(const KVSpec& spec, int n_blocks, int block_size) {
  check(cudaSetDevice(device_), "selecting the device");
  auto kv = std::make_unique<CuKVStorage>();
  kv->spec = spec;
  kv->dtype = kv_dtype_;
  kv->n_blocks = n_blocks;
  kv->block_size = block_size;
  kv->serial = next_kv_serial_++;
  const size_t layer_bytes = size_t(n_blocks) * size_t(block_size) * size_t(spec.n_kv_heads) *
                             size_t(spec.head_dim) * dtype_size(kv_dtype_);
  for (int l = 0; l < spec.n_layers; ++l) {
    kv->k.emplace_back(layer_bytes, "the KV cache (a smaller --kv-budget or --ctx needs less)");
    kv->v.emplace_back(layer_bytes, "the KV cache (a smaller --kv-budget or --ctx needs less)");
  }
  return kv;
}

void CudaBackend::copy_kv_block(KVStorage& kv, int from, int to) {
  auto& s = static_cast<CuKVStorage&>(kv);
  const size_t block = size_t(s.block_size) * size_t(s.spec.n_kv_heads) * size_t(s.spec.head_dim) *
                       dtype_size(s.dtype);
  check(cudaSetDevice(device_), "selecting the device");
  for (size_t l = 0; l < s.k.size(); ++l)
    for (auto* layers : {&s.k, &s.v}) {
      char* base = (*layers)[l].as<char>();
      check(cudaMemcpyAsync(base + size_t(to) * block, base + size_t(from) * block, block,
                            cudaMemcpyDeviceToDevice, stream_),
            "copying a KV block");
    }
  check(cudaStreamSynchronize(stream_), "copying a KV block");
}

MachinePeaks CudaBackend::measure_peaks(bool /*compute*/) const {
  check(cudaSetDevice(device_), "selecting the device");
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "reading free memory");
  const size_t bytes = std::min<size_t>(size_t(1) << 30, free / 4) & ~size_t(15);
  DeviceBuffer src(bytes, "the bandwidth probe"), sink(4096 * 4, "the bandwidth probe");
  check(cudaMemsetAsync(src.get(), 1, bytes, stream_), "the bandwidth probe");
  cudaEvent_t t0, t1;
  check(cudaEventCreate(&t0), "the bandwidth probe");
  check(cudaEventCreate(&t1), "the bandwidth probe");
  float best_ms = 0;
  for (int rep = 0; rep < 6; ++rep) {  // the first warms up
    cudaEventRecord(t0, stream_);
    read_probe(src.get(), bytes, sink.as<uint32_t>(), stream_);
    cudaEventRecord(t1, stream_);
    check(cudaEventSynchronize(t1), "the bandwidth probe");
    float ms = 0;
    cudaEventElapsedTime(&ms, t0, t1);
    if (rep > 0 && (best_ms == 0 || ms < best_ms)) best_ms = ms;
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  MachinePeaks p;
  p.read_gbs = best_ms > 0 ? double(bytes) / (best_ms * 1e6) : 0;
  return p;
}

}  // namespace hearth::HEARTH_CUDA_NS
