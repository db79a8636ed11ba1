// The CUDA runtime and the two cuBLAS products the backend calls, for the CPU emulation
// (tests/cuda_emu.h): device memory is host memory, copies are memcpy, streams run everything at
// once, a captured graph is the list of launches and products recorded during its capture, and
// cublasSgemm / cublasGemmEx are loops written from cuBLAS's column-major definition (not from
// the backend's calls). One emulated device, "cuda-emu".
#pragma once
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "core/dtype.h"

struct cudaDeviceProp {
  char name[256];
  int major = 0, minor = 0, multiProcessorCount = 0, memoryBusWidth = 0, l2CacheSize = 0;
  size_t totalGlobalMem = 0, sharedMemPerBlockOptin = 0;
};
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum { cudaStreamNonBlocking = 1 };
enum cudaStreamCaptureMode { cudaStreamCaptureModeThreadLocal };
struct CUgraph_st {
  std::vector<std::function<void()>> calls;
};
using cudaGraph_t = CUgraph_st*;
using cudaGraphExec_t = CUgraph_st*;
using cudaEvent_t = struct CUevent_st*;

inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) {
  return d == 0 ? cudaSuccess : cudaErrorInvalidValue;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  *p = cudaDeviceProp{};
  std::strcpy(p->name, "cuda-emu");
  p->major = 9;
  p->totalGlobalMem = size_t(1) << 30;
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = nullptr;
  return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t) {
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) {
  return cudaSuccess;
}
inline cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::calloc(n, 1);  // zeroed, so that a read of memory nobody wrote is repeatable
  return *p ? cudaSuccess : cudaErrorInvalidValue;
}
inline cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaMallocHost(void** p, size_t n) {
  return cudaMalloc(p, n);
}
inline cudaError_t cudaFreeHost(void* p) {
  return cudaFree(p);
}
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  std::memmove(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k,
                                   cudaStream_t) {
  if (::hearth::cuda_emulation::capture())
    return cudaErrorInvalidValue;  // the backend copies outside
  return cudaMemcpy(d, s, n, k);
}
inline cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t) {
  std::memset(d, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  *free = *total = size_t(1) << 30;
  return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = nullptr;
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t) {
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) {
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) {
  return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  *ms = 1.f;
  return cudaSuccess;
}
inline cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) {
  if (::hearth::cuda_emulation::capture()) return cudaErrorInvalidValue;
  ::hearth::cuda_emulation::capture() = new std::vector<std::function<void()>>;
  return cudaSuccess;
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t* g) {
  auto*& c = ::hearth::cuda_emulation::capture();
  if (!c) return cudaErrorInvalidValue;
  *g = new CUgraph_st{std::move(*c)};
  delete c;
  c = nullptr;
  return cudaSuccess;
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t g, unsigned long long) {
  *e = new CUgraph_st{g->calls};
  return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t g) {
  delete g;
  return cudaSuccess;
}
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t) {
  for (auto& call : g->calls) call();
  return cudaSuccess;
}

// cuBLAS.
using cublasHandle_t = struct cublasContext*;
enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 };
enum cublasOperation_t { CUBLAS_OP_N, CUBLAS_OP_T };
enum cudaDataType_t { CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT };
inline const char* cublasGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "success" : "invalid value";
}
inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = nullptr;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t) {
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) {
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetWorkspace(cublasHandle_t, void*, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}

namespace hearth::cuda_emulation {

inline float element(const void* p, cudaDataType_t t, size_t i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  return t == CUDA_R_16F ? ::hearth::f16_to_f32(h) : ::hearth::bf16_to_f32(h);
}

// C = alpha op(A) op(B) + beta C, column-major: op(A) is m x k, op(B) k x n, C m x n; op(X)[i, l]
// is X[i + l ld] untransposed, X[l + i ld] transposed. Run now, or recorded when captured.
inline cublasStatus_t gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           float alpha, const void* A, cudaDataType_t at, int lda, const void* B,
                           cudaDataType_t bt, int ldb, float beta, float* C, int ldc) {
  if (m < 0 || n < 0 || k < 0 || lda < (ta == CUBLAS_OP_N ? m : k) ||
      ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m)
    return CUBLAS_STATUS_INVALID_VALUE;
  auto run = [=] {
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double s = 0;
        for (int l = 0; l < k; ++l) {
          const size_t ai =
              ta == CUBLAS_OP_N ? size_t(i) + size_t(l) * lda : size_t(l) + size_t(i) * lda;
          const size_t bi =
              tb == CUBLAS_OP_N ? size_t(l) + size_t(j) * ldb : size_t(j) + size_t(l) * ldb;
          s += double(element(A, at, ai)) * element(B, bt, bi);
        }
        float& c = C[size_t(i) + size_t(j) * ldc];
        c = float(alpha * s + (beta == 0 ? 0.0 : double(beta) * c));
      }
  };
  if (capture())
    capture()->push_back(run);
  else
    run();
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace hearth::cuda_emulation

inline cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                                  int n, int k, const float* alpha, const float* A, int lda,
                                  const float* B, int ldb, const float* beta, float* C, int ldc) {
  return ::hearth::cuda_emulation::gemm(ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F,
                                        ldb, *beta, C, ldc);
}
inline cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb,
                                   int m, int n, int k, const void* alpha, const void* A,
                                   cudaDataType_t at, int lda, const void* B, cudaDataType_t bt,
                                   int ldb, const void* beta, void* C, cudaDataType_t ct, int ldc,
                                   cublasComputeType_t, cublasGemmAlgo_t) {
  if (ct != CUDA_R_32F) return CUBLAS_STATUS_INVALID_VALUE;
  return ::hearth::cuda_emulation::gemm(ta, tb, m, n, k, *static_cast<const float*>(alpha), A, at,
                                        lda, B, bt, ldb, *static_cast<const float*>(beta),
                                        static_cast<float*>(C), ldc);
}
