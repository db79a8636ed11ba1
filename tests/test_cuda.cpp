// The CUDA backend on the shared fixtures, where a device is found (a lent GPU machine:
// bench/cuda_device.sh); the checks every GPU backend passes (tests/gpu_fixture_checks.h), with
// cuBLAS prefill and without, with CUDA graphs and without; clear refusals. Without a device each
// case says it is skipped (ctest: the suite is reported skipped). Its ops against float64 are in
// test_ops.cpp, its index math on the CPU in test_cuda_math.cpp; its code on a CPU emulation of
// CUDA here (suite cuda_math), in test_ops.cpp and in test_cuda_kernels.cpp.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "core/backend.h"
#include "core/error.h"
#include "models/qwen3_model.h"
#include "models/standin.h"
#include "quant/quantizer.h"
#include "tests/cuda_target.h"
#include "tests/fixture_models.h"
#include "tests/gpu_fixture_checks.h"

using namespace hearth;
using namespace hearth::test;

namespace {

const MakeGpu kCuda = [](DType kv) { return cuda_backend(kv); };
const MakeGpu kCudaExact = [](DType kv) { return cuda_backend(kv, false); };
const CheckGpu kNothing = [](const Backend&) {};

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE(
      "fixture logits match the float64 reference: mat-vec, chunks, with and without graphs") {
    if (!cuda_device_here()) return;
    for (const char* fx : {kFixtures[0], kFixtures[1]}) {
      auto model = Qwen3Model::load(kModels + fx);
      // Every matmul in f32 (cuBLAS off): the fixture's tolerance holds for whole sequences.
      auto exact = gpu_runner(cuda_backend(DType::F32, false), *model, 256);
      auto chunked = gpu_runner(cuda_backend(DType::F32, false), *model, 7);
      auto launched = gpu_runner(cuda_backend(DType::F32, false, false), *model, 5);
      check_fixture_logits(kModels + fx, {exact.get(), chunked.get(), launched.get()});
    }
  }

  TEST_CASE("cuBLAS prefill (16-bit products) stays within the bf16 bound of the reference") {
    if (!cuda_device_here()) return;
    for (const char* fx : {kFixtures[0], kFixtures[1]}) {
      const std::string dir = kModels + fx;
      auto model = Qwen3Model::load(dir);
      const size_t V = size_t(model->config().vocab_size);
      const auto s = load_sequences(dir).back();
      const auto want = read_f32(dir + "/" + s.logits_file);
      auto runner = gpu_runner(cuda_backend(), *model, 256);  // one 33-row step: cuBLAS
      const double worst = worst_kl_of_forward(*runner, s, want, V);
      CAPTURE(fx);
      // The CPU's bf16 GEMM bound (test_model_fixtures.cpp: dnnl-bf16); a wrong layout is O(1).
      CHECK(worst < 1e-3);
    }
  }

  TEST_CASE("16-bit KV caches stay close to the float64 reference, chunked or not") {
    if (!cuda_device_here()) return;
    check_16bit_kv(kCudaExact, kNothing);
  }

  TEST_CASE("greedy and sampled continuations through the scheduler are exact") {
    if (!cuda_device_here()) return;
    check_scheduler_greedy(kCuda, kNothing);
    check_scheduler_greedy(kCudaExact, kNothing);
    check_scheduler_sampled(kCudaExact, kNothing);
  }

  TEST_CASE("a batched step equals each of its sequences run alone") {
    if (!cuda_device_here()) return;
    // Attention splits a row's positions by the step's row count, so sums round differently
    // between a step of 10 rows and one of 3: equal within f32 rounding, not bit for bit.
    check_batched_equals_alone(kCudaExact, kNothing, 1e-5);
  }

  TEST_CASE("what it does not run is refused clearly") {
    if (!cuda_device_here()) return;
    auto moe = Qwen3Model::load(kModels + kFixtures[2]);
    auto be = cuda_backend();
    CHECK_THROWS_WITH_AS(be->compile(moe->graph(), 4, 1),
                         doctest::Contains("does not run Qwen3-MoE"), Error);
    BackendOptions o;
    o.kv_dtype = DType::I8;
    CHECK_THROWS_WITH_AS(create_backend("cuda", o), doctest::Contains("not I8"), Error);
    o.kv_dtype = DType::F32;
    o.device = 99;
    CHECK_THROWS_WITH_AS(create_backend("cuda", o), doctest::Contains("no device 99"), Error);
  }

  TEST_CASE("devices are listed with their limits") {
    if (!cuda_device_here()) return;
    for (const auto& f : backend_list())
      if (f.name == "cuda") {
        const auto lines = f.devices();
        REQUIRE(!lines.empty());
        CHECK(lines[0].rfind("cuda 0: ", 0) == 0);
        CHECK(lines[0].find("SMs") != std::string::npos);
      }
  }
}

// A small F32 stand-in (vocabulary 4096, so that the emulation runs it in seconds) through the
// CPU backend, the reference verified on the fixtures, and through the CUDA backend's own code on
// the CPU emulation (tests/cuda_emu.h): every build runs this.
TEST_SUITE("cuda_math") {
  TEST_CASE("the emulated CUDA backend runs a stand-in as the CPU backend does") {
    namespace fs = std::filesystem;
    const fs::path dir =
        fs::temp_directory_path() / ("hearth_cuda_emu_" + std::to_string(getpid()));
    fs::remove_all(dir);
    StandinSpec spec;
    spec.hidden = 64;
    spec.intermediate = 96;
    spec.layers = 2;
    spec.heads = 4;
    spec.kv_heads = 2;
    spec.head_dim = 16;
    spec.vocab = 4096;
    spec.dtype = "F32";
    write_standin(dir.string(), spec, "");
    auto model = Qwen3Model::load(dir.string());
    const size_t V = 4096;
    BackendOptions cpu_opt;
    cpu_opt.cpu.isa = "scalar";  // f32 products in element order, whatever the machine
    auto cpu = gpu_runner(create_backend("cpu", cpu_opt), *model, 256);
    const std::vector<int32_t> ids = {5, 900, 33, 4000, 17, 2, 2, 2, 1234, 77, 3000, 8};
    auto logits = [&](Runner& r) {
      std::vector<float> out(ids.size() * V);
      auto kv = r.new_kv(64);
      r.forward(*kv, ids.data(), int(ids.size()), 0, out.data(), nullptr);
      return out;
    };
    const auto want = logits(*cpu);
    // cuBLAS (f32 weights: cublasSgemm) and graphs; the mat-vec alone in chunks of 5, launched.
    auto with_cublas = gpu_runner(cuda_emulated(), *model, 256);
    auto exact = gpu_runner(cuda_emulated(DType::F32, false, false), *model, 5);
    for (Runner* r : {with_cublas.get(), exact.get()}) {
      CAPTURE(r->prefill_chunk());
      const auto got = logits(*r);
      double worst = 0, scale = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        worst = std::max(worst, double(std::abs(got[i] - want[i])));
        scale = std::max(scale, double(std::abs(want[i])));
      }
      CHECK(worst <= 1e-5 * scale);
    }
    // The last row alone, in chunks of 5: the first two chunks ask for no logits at all.
    {
      std::vector<float> last(V);
      auto kv = exact->new_kv(64);
      exact->forward(*kv, ids.data(), int(ids.size()), 0, nullptr, last.data());
      double worst = 0;
      for (size_t i = 0; i < V; ++i)
        worst = std::max(worst, double(std::abs(last[i] - want[(ids.size() - 1) * V + i])));
      CHECK(worst <= 1e-4);
    }
    // Greedy continuations of three prompts sharing steps through the scheduler.
    auto greedy = [&](Runner& r) {
      Scheduler sched(r);
      std::vector<Scheduler::Id> seq;
      for (size_t i = 0; i < 3; ++i) {
        GenerateOptions o;
        o.max_new_tokens = 6;
        o.ignore_eos = true;
        seq.push_back(sched.submit(std::vector<int32_t>(ids.begin() + long(i), ids.end()), o));
      }
      std::vector<Scheduler::Event> events;
      for (int guard = 0; !sched.idle() && guard < 1000; ++guard) sched.step(events);
      std::vector<std::vector<int32_t>> out;
      for (auto id : seq) out.push_back(sched.take(id).tokens);
      return out;
    };
    CHECK(greedy(*with_cublas) == greedy(*cpu));
    fs::remove_all(dir);
  }

  TEST_CASE("the emulated CUDA backend decodes an INT4 stand-in as the CPU's kernels do") {
    // An INT4 copy of a small stand-in (the embedding BF16, whose activations have no exact int8
    // ties; Q8 runs are in the kernel test), one token a step: the int8 mat-vec (dp4a) gives the
    // CPU SIMD kernels' logits (the same int8 activations, FORMAT.md) and the exact target the
    // scalar kernels' (f32 products), each within float rounding; the two kinds differ by the
    // activations' rounding.
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("hearth_cuda_q_" + std::to_string(getpid()));
    fs::remove_all(dir);
    StandinSpec spec;
    spec.hidden = 128, spec.intermediate = 256, spec.layers = 2, spec.heads = 4, spec.kv_heads = 2;
    spec.head_dim = 32, spec.vocab = 512, spec.max_position = 64, spec.seed = 5;
    write_standin((dir / "f").string(), spec, "");
    const std::vector<int32_t> ids = {1, 5, 9, 200, 33};
    auto decode = [&](std::unique_ptr<Backend> be, const Qwen3Model& m) {
      auto r = gpu_runner(std::move(be), m);
      auto kv = r->new_kv(int(ids.size()));
      std::vector<float> all(ids.size() * size_t(m.config().vocab_size));
      r->forward(*kv, ids.data(), int(ids.size()), 0, all.data(), nullptr, 1);
      return all;
    };
    auto cpu = [](const char* isa) {
      BackendOptions o;
      o.cpu.isa = isa;
      return create_backend("cpu", o);
    };
    auto rel_error = [](const std::vector<float>& a, const std::vector<float>& b) {
      double num = 0, den = 0;
      for (size_t i = 0; i < a.size(); ++i) num += double(a[i] - b[i]) * (a[i] - b[i]);
      for (float v : b) den += double(v) * v;
      return std::sqrt(num / den);
    };
    quant::QuantizeOptions qo;
    qo.main = {4, 32, DType::F16};
    qo.head = {16, 32, DType::F16};
    quant::quantize_checkpoint((dir / "f").string(), (dir / "q").string(), qo);
    auto m = Qwen3Model::load((dir / "q").string());
    const auto scalar = decode(cpu("scalar"), *m);
    CHECK(rel_error(decode(cuda_emulated(DType::F32, false), *m), scalar) < 1e-5);
    const auto dp4a = decode(cuda_emulated(), *m);
    const double drift = rel_error(dp4a, scalar);
    CHECK(drift > 1e-3);
    CHECK(drift < 3e-2);
    if (cpu::detect_cpu_features().best() != cpu::Isa::Scalar)
      CHECK(rel_error(dp4a, decode(cpu(""), *m)) < 1e-5);
    fs::remove_all(dir);
  }

#ifdef HEARTH_HAVE_CUDA
  TEST_CASE("cuBLAS is opened when a backend needs it, not linked into every process") {
    auto mapped = [] {
      std::ifstream maps("/proc/self/maps");
      std::string line;
      while (std::getline(maps, line))
        if (line.find("libcublas") != std::string::npos) return true;
      return false;
    };
    // Without a device no backend of this process can have opened it.
    if (cuda::device_count(nullptr) == 0) CHECK_FALSE(mapped());
    const cuda::Cublas b = cuda::open_cublas();
    CHECK(mapped());
    CHECK((b.create && b.destroy && b.set_stream && b.set_workspace && b.sgemm && b.gemm_ex &&
           b.status_string));
    CHECK(std::string(b.status_string(CUBLAS_STATUS_SUCCESS)).size() > 0);
    CHECK_THROWS_WITH_AS(b.check(CUBLAS_STATUS_INVALID_VALUE, "a test"),
                         doctest::Contains("cuBLAS: a test: "), Error);
    b.check(CUBLAS_STATUS_SUCCESS, "nothing");
  }

  TEST_CASE("without a device the backend refuses by name and the default stays the CPU") {
    std::string why;
    if (cuda::device_count(&why) > 0) return;  // the GPU machine: the suite above covers it
    CHECK_THROWS_WITH_AS(create_backend("cuda", BackendOptions{}),
                         doctest::Contains("CUDA: no device found"), Error);
    CHECK(create_backend("", BackendOptions{})->name() == "cpu");
  }
#endif
}
