#include "models/qwen3_model.h"

#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/quant_format.h"
#include "models/qwen3_graph.h"

namespace hearth {

void check_checkpoint_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) fail(dir, ": ", ec.message());
  if (!fs::exists(st)) fail(dir, ": no such checkpoint folder");
  if (fs::is_directory(st)) return;
  if (fs::is_regular_file(st)) {
    char magic[4] = {};
    std::ifstream(dir, std::ios::binary).read(magic, 4);
    if (std::string(magic, 4) == "GGUF")
      fail(dir,
           ": a GGUF file, which hearth does not load (yet); it loads Hugging Face checkpoint ",
           "folders (config.json, *.safetensors and the tokenizer files)");
    const std::string parent = fs::path(dir).parent_path().string();
    fail(dir, ": a file, not a checkpoint folder; pass the folder with config.json and ",
         "*.safetensors", parent.empty() ? "" : " (" + parent + "?)");
  }
  fail(dir, ": not a checkpoint folder (a folder with config.json and *.safetensors)");
}

std::unique_ptr<Qwen3Model> Qwen3Model::load(const std::string& dir) {
  return load(dir, nullptr);
}

std::unique_ptr<Qwen3Model> Qwen3Model::load(const std::string& dir,
                                             const std::function<void(const char* stage)>& progress,
                                             MapMode mode) {
  auto step = [&](const char* stage) {
    if (progress) progress(stage);
  };
  auto m = std::unique_ptr<Qwen3Model>(new Qwen3Model());
  check_checkpoint_folder(dir);
  m->dir_ = dir;
  m->config_ = load_qwen3_config(dir);
  m->gen_ = load_generation_config(dir, m->config_);
  step("config");
  m->ckpt_ = Checkpoint::open(dir, mode);
  step("checkpoint");
  m->weights_ = bind_qwen3_weights(m->ckpt_, m->config_);
  m->ckpt_.advise_hugepages();
  step("weights");
  m->graph_ = build_qwen3_graph(m->config_, m->weights_);
  step("graph");
  return m;
}

std::string Qwen3Model::weight_dtypes() const {
  std::set<std::string> names;
  for (const auto& t : graph_.tensors())
    if (t.kind == TensorKind::Weight)
      names.insert(t.weight.codebook ? std::string("Q4CB") : dtype_name(t.weight.dtype));
  std::string s;
  for (auto& n : names) s += (s.empty() ? "" : "+") + n;
  return s;
}

size_t Qwen3Model::decode_weight_bytes() const {
  size_t bytes = 0;
  for (const Node& n : graph_.nodes()) {
    if (n.op == Op::MatMul) bytes += quant::weight_bytes(graph_.tensor(n.in[1]).weight);
    if (n.op != Op::MoE) continue;
    // The router, and top_k experts' worth of the experts (their mean size).
    bytes += quant::weight_bytes(graph_.tensor(n.in[1]).weight);
    size_t experts = 0;
    for (int i = 0; i < 3 * n.p.n_experts; ++i)
      experts += quant::weight_bytes(graph_.tensor(n.in[2] + i).weight);
    bytes += experts / size_t(n.p.n_experts) * size_t(n.p.top_k);
  }
  const Tensor& e = weights_.embed;  // one row, with its scales when quantized
  bytes += quant::weight_bytes(e) / size_t(e.rows());
  return bytes;
}

}  // namespace hearth
