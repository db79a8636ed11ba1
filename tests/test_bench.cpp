// What `hearth bench` and the banners read from the CPU backend: its one-line description of the
// weights it was given, the arithmetic a step runs on (Backend::step_arithmetic), and the AMX
// peak loop. In the kernels suite: these are the CPU backend's.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels.h"
#include "core/runner.h"
#include "models/qwen3_model.h"
#include "quant/quantizer.h"
#include "tests/fixture_models.h"

namespace fs = std::filesystem;
using namespace hearth;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("hearth_bench_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str(const std::string& sub) const { return (path / sub).string(); }
};

// The fixture quantized as `hearth quantize --bits 4 --rtn` does: Q4 layers, a Q8 head.
std::string quantized_fixture(const TempDir& d) {
  quant::QuantizeOptions o;
  o.main = {4, 32, DType::F16};
  o.head = {8, 32, DType::F16};
  o.threads = 1;
  quant::quantize_checkpoint(test::kModels + "tiny-tied-bf16", d.str("q4"), o);
  return d.str("q4");
}

std::unique_ptr<Backend> cpu_backend(const std::string& isa, const std::string& gemm,
                                     int threads = 2) {
  BackendOptions bo;
  bo.threads = threads;
  bo.cpu.isa = isa;
  bo.cpu.gemm = gemm;
  return create_backend("cpu", bo);
}

bool has(const std::vector<Arithmetic>& v, Arithmetic a) {
  return std::find(v.begin(), v.end(), a) != v.end();
}

bool int8_gemm_here() {
  return cpu::make_kernel_table(cpu::detect_cpu_features().best()).quant_prefill;
}

}  // namespace

TEST_SUITE("kernels") {
  TEST_CASE("backend description: ISA and threads, then what multiplies the weights given") {
    auto be = cpu_backend("", "", 1);
    const std::string isa = cpu::isa_name(cpu::detect_cpu_features().best());
    CHECK(be->describe() == "cpu " + isa + ", 1 thread");  // no graph yet: nothing of weights
    CHECK(cpu_backend("", "", 2)->describe() == "cpu " + isa + ", 2 threads");

    auto bf16 = Qwen3Model::load(test::kModels + "tiny-tied-bf16");
    Runner r(cpu_backend("", ""), bf16->graph(), bf16->config().vocab_size, 256, 64);
    const std::string d = r.backend().describe();  // known before anything is compiled
    CAPTURE(d);
    CHECK(d.rfind("cpu " + isa + ", 2 threads, bf16 weights: ", 0) == 0);
    CHECK(d.find("int8") == std::string::npos);
    CHECK(d.find("int4") == std::string::npos);
    CHECK(d.size() < 80);

    TempDir dir;
    auto q4 = Qwen3Model::load(quantized_fixture(dir));
    Runner rq(cpu_backend("", ""), q4->graph(), q4->config().vocab_size, 256, 64);
    const std::string dq = rq.backend().describe();
    CAPTURE(dq);
    // The Q8 LM head runs on one row per sequence: not a prefill path, not named.
    CHECK(dq.find("int4 weights: ") != std::string::npos);
    CHECK(dq.find("bf16") == std::string::npos);
    if (int8_gemm_here())
      CHECK(dq.find("int8 GEMM from " + std::to_string(hearth::cpu::kQuantGemmMinTokens) +
                    " tokens") != std::string::npos);
    CHECK(dq.size() < 80);

    Runner rn(cpu_backend("scalar", "native"), q4->graph(), q4->config().vocab_size, 256, 64);
    CHECK(rn.backend().describe() == "cpu scalar, 2 threads, int4 weights: native kernels");
  }

  TEST_CASE("step arithmetic follows the route of each step size") {
    auto bf16 = Qwen3Model::load(test::kModels + "tiny-tied-bf16");
    auto arith = [&](const Qwen3Model& m, const std::string& gemm, int n) {
      Runner r(cpu_backend("", gemm), m.graph(), m.config().vocab_size, 256, 128);
      return r.backend().step_arithmetic(n);
    };
    // Native kernels widen BF16 to f32; so do the f32 libraries.
    CHECK(arith(*bf16, "native", 128) == std::vector<Arithmetic>{Arithmetic::F32Fma});
    CHECK(arith(*bf16, "auto", 8) == std::vector<Arithmetic>{Arithmetic::F32Fma});
    if (cpu::detect_cpu_features().best() == cpu::Isa::Avx512 &&
        cpu::choose_gemm("auto") == cpu::GemmKind::Dnnl) {
      // The bf16 GEMM from gemm_min_tokens (64) on, on AMX tiles where the CPU has them.
      const bool amx = cpu::make_kernel_table(cpu::Isa::Avx512).dot_bf16_tile_loop != nullptr;
      const auto a = arith(*bf16, "dnnl-bf16", 128);
      CHECK(has(a, amx ? Arithmetic::Bf16Tile : Arithmetic::Bf16Dot));
      CHECK(has(a, Arithmetic::F32Fma));  // attention
      CHECK(arith(*bf16, "dnnl-bf16", 63) == std::vector<Arithmetic>{Arithmetic::F32Fma});
    }
    TempDir dir;
    auto q4 = Qwen3Model::load(quantized_fixture(dir));
    // The quantized kernels multiply int8 codes by int8 activations at every size.
    CHECK(has(arith(*q4, "native", 4), Arithmetic::Int8Dot));
    if (int8_gemm_here()) CHECK(has(arith(*q4, "auto", 128), Arithmetic::Int8Dot));
    if (!int8_gemm_here() && cpu::choose_gemm("auto") != cpu::GemmKind::Native)
      CHECK(arith(*q4, "auto", 128) == std::vector<Arithmetic>{Arithmetic::F32Fma});
  }

  TEST_CASE("AMX peak loop: four tile chains of 0.5 x 0.5 pairs") {
    const cpu::KernelTable kt = cpu::make_kernel_table(cpu::detect_cpu_features().best());
    if (!kt.dot_bf16_tile_loop) return;
    double flops = -1;
    const float s = kt.dot_bf16_tile_loop(16 * 1000, &flops);
    if (flops == 0) return;  // the OS refused tile state: the probe reports no peak
    // 1000 rounds of 4 tile products; each adds 16 pairs x 2 x 0.25 = 8 to every element.
    CHECK(flops == 1000.0 * 4 * 16 * 16 * 32 * 2);
    CHECK(s == float(4 * 8 * 1000));
  }
}
