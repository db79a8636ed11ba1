#include "quant/quantizer.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/quant_format.h"
#include "core/threadpool.h"
#include "models/quant_config.h"
#include "models/qwen3_model.h"
#include "models/safetensors_writer.h"
#include "models/standin.h"
#include "quant/calibrate.h"

namespace fs = std::filesystem;

namespace hearth::quant {

namespace {

struct Plan {
  const TensorRef* src = nullptr;
  // Makes src->data valid (a generated stand-in's tensor), or null where it is mapped already.
  std::function<void()> load;
  Scheme scheme{16, 0, DType::F16};  // bits 16: stored as float
  const std::vector<float>* col_scale = nullptr;
  const std::vector<float>* row_div = nullptr;
  const std::vector<float>* norm_div = nullptr;
  const std::vector<float>* importance = nullptr;
  int64_t rows() const { return src->shape[0]; }
  int64_t cols() const { return src->shape.back(); }
};

template <typename M>
const typename M::mapped_type* find_in(const M& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? nullptr : &it->second;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) fail(p.string(), ": cannot read");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spit(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  if (!f.flush()) fail(p.string(), ": write failed");
}

// config.json with "quantization_config" added as its last member; the rest stays byte for byte.
std::string config_with_quant(const std::string& text, const std::string& qc_json,
                              const std::string& src) {
  const size_t end = text.rfind('}');
  if (end == std::string::npos) fail(src, ": not a JSON object");
  std::string head = text.substr(0, end);
  while (!head.empty() && std::isspace(static_cast<unsigned char>(head.back()))) head.pop_back();
  const bool empty = !head.empty() && head.back() == '{';
  return head + (empty ? "" : ",") + "\n  \"quantization_config\": " + qc_json + "\n}\n";
}

// Quantizes every row of one weight into codes (dst) and scales (scales), rows split over threads.
void quantize_tensor(const Plan& p, Method method, const int8_t* codebook, ThreadPool& pool,
                     uint8_t* dst, std::vector<uint16_t>& scales,
                     const std::function<void(int64_t)>& on_rows) {
  const int64_t rows = p.rows(), k = p.cols(), ng = k / p.scheme.group;
  const int64_t row_bytes = row_code_bytes(p.scheme.bits, k);
  scales.assign(size_t(rows * ng), 0);
  std::atomic<int64_t> done{0};
  pool.run([&](int tid, int nth) {
    int64_t b, e;
    ThreadPool::split(rows, tid, nth, 1, &b, &e);
    std::vector<float> w(static_cast<size_t>(k));
    std::vector<int8_t> q(static_cast<size_t>(k));
    const size_t esz = dtype_size(p.src->dtype);
    for (int64_t r = b; r < e; ++r) {
      to_f32(p.src->dtype, p.src->data + size_t(r * k) * esz, w.data(), size_t(k));
      if (p.col_scale)
        for (int64_t j = 0; j < k; ++j) w[size_t(j)] *= (*p.col_scale)[size_t(j)];
      if (p.row_div) {
        const float d = (*p.row_div)[size_t(r)];
        for (int64_t j = 0; j < k; ++j) w[size_t(j)] /= d;
      }
      quantize_row(w.data(), k, p.scheme, method, p.importance ? p.importance->data() : nullptr,
                   q.data(), scales.data() + r * ng, codebook);
      pack_row(p.scheme.bits, q.data(), k, dst + r * row_bytes);
      const int64_t n = done.fetch_add(1) + 1;
      if (tid == 0 && on_rows && (r - b) % 64 == 63) on_rows(n);
    }
  });
  if (on_rows) on_rows(rows);
}

bool is_router(const std::string& name) {
  const std::string tail = ".mlp.gate.weight";
  return name.size() > tail.size() &&
         name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
}

// The codebook for a checkpoint, fitted to an even spread of rows of its linear weights (about 4 M
// values: the fit sees the distribution, not every weight).
Codebook fit_checkpoint_codebook(const Checkpoint& ck, int group) {
  std::vector<const TensorRef*> linears;
  int64_t total = 0;
  for (const TensorRef* r : ck.all())
    if (r->shape.size() == 2 && r->name != "model.embed_tokens.weight" &&
        r->name != "lm_head.weight" && !is_router(r->name)) {
      linears.push_back(r);
      total += r->shape[0] * r->shape[1];
    }
  const int64_t stride = std::max<int64_t>(1, total / (int64_t(1) << 22));
  std::vector<float> sample;
  for (const TensorRef* r : linears) {
    const int64_t rows = r->shape[0], cols = r->shape[1];
    if (cols % group != 0) continue;
    for (int64_t i = 0; i < rows; i += stride) {
      const size_t at = sample.size();
      sample.resize(at + size_t(cols));
      to_f32(r->dtype, r->data + size_t(i * cols) * dtype_size(r->dtype), sample.data() + at,
             size_t(cols));
    }
  }
  if (sample.empty()) fail(ck.dir(), ": no linear weight to fit a codebook to");
  Codebook c;
  fit_codebook(sample.data(), int64_t(sample.size()), group, c.data());
  return c;
}

// What one tensor becomes: the main scheme, the head's for the embedding and LM head, 16 bits for
// a MoE router and for vectors; with calibration, its scales.
Plan plan_for(const TensorRef* r, const QuantizeOptions& opt, const Calibration& cal) {
  Plan p;
  p.src = r;
  if (r->shape.size() != 2) {
    p.norm_div = find_in(cal.norm_div, r->name);
    return p;
  }
  const bool head = r->name == "model.embed_tokens.weight" || r->name == "lm_head.weight";
  p.scheme = head ? opt.head : opt.main;
  // A MoE router stays as it is: its top-k must match the original's choice, and it is tiny.
  if (is_router(r->name)) p.scheme = Scheme{16, opt.main.group, opt.main.scale_dtype};
  if (p.scheme.quantized()) {
    if (p.cols() % kBlock != 0 || p.cols() % p.scheme.group != 0)
      fail(r->file, ": tensor '", r->name, "' has ", p.cols(),
           " columns, not a multiple of the group size ", p.scheme.group,
           " (and of 32); choose a smaller --group");
    p.col_scale = find_in(cal.col_scale, r->name);
    p.row_div = find_in(cal.row_div, r->name);
    if (!head) p.importance = find_in(cal.importance, r->name);
  }
  return p;
}

void check_options(const QuantizeOptions& opt) {
  if (!opt.main.quantized()) fail("quantize: --bits must be 4 or 8");
  for (const Scheme* s : {&opt.main, &opt.head})
    if (s->quantized() && !valid_group(s->group))
      fail("quantize: group size ", s->group, " is not one of 32, 64, 128");
}

// The output folder, checked: absolute, and not there yet unless opt.force.
fs::path output_folder(const std::string& out_dir, const QuantizeOptions& opt) {
  std::error_code ec;
  const fs::path out = fs::absolute(out_dir).lexically_normal();
  if (out.filename().empty()) fail(out_dir, ": not a valid output folder name");
  if (fs::exists(out, ec) && !opt.force)
    fail(out_dir, ": already exists; pass --force to replace it");
  return out;
}

int thread_count(const QuantizeOptions& opt) {
  return opt.threads > 0 ? opt.threads : int(std::max(1u, std::thread::hardware_concurrency()));
}

// Tokenizer, generation config, chat template, license: the small files of `in` the runtime or
// the user needs. Other weight formats of the same model would only bloat the output.
void copy_side_files(const fs::path& in, const fs::path& out) {
  static const char* const kWeights[] = {".safetensors", ".bin", ".pt",   ".pth",    ".ckpt",
                                         ".gguf",        ".h5",  ".onnx", ".msgpack"};
  for (const auto& e : fs::directory_iterator(in)) {
    const std::string name = e.path().filename().string();
    bool weights = false;
    for (const char* ext : kWeights) weights |= e.path().extension() == ext;
    if (!e.is_regular_file() || weights || name == "config.json" ||
        name == "model.safetensors.index.json")
      continue;
    fs::copy_file(e.path(), out / name, fs::copy_options::overwrite_existing);
  }
}

// Writes the plans' tensors as a quantized checkpoint at out (through a hidden sibling folder,
// renamed into place only when complete); side_files(tmp, quantization_config_json) writes
// config.json and the other small files. rep comes with its calibration fields set.
QuantizeReport write_quantized(
    const std::vector<Plan>& plans, const QuantizeOptions& opt, QuantizeReport rep, Method method,
    int threads, const fs::path& out,
    const std::function<void(const fs::path&, const std::string&)>& side_files) {
  const int8_t* codebook = rep.has_codebook ? rep.codebook.data() : nullptr;
  // Sizes, bits per weight and the config, all known before writing.
  QuantConfig qc;
  qc.main = opt.main;
  qc.calibration = rep.calibration;
  qc.has_codebook = rep.has_codebook;
  std::copy(rep.codebook.begin(), rep.codebook.end(), qc.codebook.begin());
  std::map<std::string, Scheme> file_schemes;
  size_t total_src = 0, out_bytes = 0;
  for (const Plan& p : plans) {
    total_src += p.src->nbytes;
    rep.params += int64_t(p.src->nbytes / dtype_size(p.src->dtype));
    if (p.scheme.quantized()) {
      file_schemes[p.src->name] = p.scheme;
      out_bytes += size_t(p.rows() * row_code_bytes(p.scheme.bits, p.cols())) +
                   size_t(p.rows() * (p.cols() / p.scheme.group)) * 2;
    } else {
      out_bytes += p.norm_div ? p.src->nbytes / dtype_size(p.src->dtype) * 4 : p.src->nbytes;
    }
    if (p.src->shape.size() == 2 && p.scheme != opt.main) qc.overrides[p.src->name] = p.scheme;
  }
  rep.source_bytes = total_src;
  rep.output_bytes = out_bytes;
  rep.bits_per_weight = 8.0 * double(out_bytes) / double(rep.params);
  qc.bits_per_weight = rep.bits_per_weight;

  ThreadPool pool(threads);
  std::vector<uint16_t> pending;  // scales of the tensor just quantized, written right after it
  size_t done_bytes = 0;
  std::vector<TensorToWrite> tw;
  for (const Plan& p : plans) {
    const TensorRef& r = *p.src;
    if (p.scheme.quantized()) {
      const int64_t rows = p.rows(), k = p.cols();
      TensorToWrite codes;
      codes.name = r.name;
      codes.dtype = p.scheme.bits == 8 ? "I8" : "U8";
      codes.shape = {rows, code_cols(p.scheme.bits, k)};
      codes.nbytes = size_t(rows * row_code_bytes(p.scheme.bits, k));
      codes.fill = [&, p, rows](uint8_t* dst) {
        if (p.load) p.load();
        const size_t before = done_bytes;
        auto on_rows = [&](int64_t n) {
          if (opt.progress)
            opt.progress(before + size_t(n) * p.src->nbytes / size_t(rows), total_src, p.src->name);
        };
        quantize_tensor(p, method, codebook, pool, dst, pending, on_rows);
        done_bytes += p.src->nbytes;
      };
      tw.push_back(std::move(codes));
      TensorToWrite sc;
      sc.name = scale_name(r.name);
      sc.dtype = dtype_name(p.scheme.scale_dtype);
      sc.shape = {rows, k / p.scheme.group};
      sc.nbytes = size_t(rows * (k / p.scheme.group)) * 2;
      sc.fill = [&](uint8_t* dst) {
        std::memcpy(dst, pending.data(), pending.size() * 2);
        pending.clear();
        pending.shrink_to_fit();
      };
      tw.push_back(std::move(sc));
    } else {
      TensorToWrite t;
      t.name = r.name;
      t.shape = r.shape;
      if (p.norm_div) {  // calibration folded 1/s in: keep it exact in F32
        t.dtype = "F32";
        t.nbytes = r.nbytes / dtype_size(r.dtype) * 4;
        t.fill = [&, p](uint8_t* dst) {
          if (p.load) p.load();
          const size_t n = p.src->nbytes / dtype_size(p.src->dtype);
          std::vector<float> v(n);
          to_f32(p.src->dtype, p.src->data, v.data(), n);
          for (size_t j = 0; j < n; ++j) v[j] /= (*p.norm_div)[j];
          std::memcpy(dst, v.data(), n * 4);
          done_bytes += p.src->nbytes;
        };
      } else {
        t.dtype = r.dtype_str;
        t.nbytes = r.nbytes;
        t.fill = [&, p](uint8_t* dst) {
          if (p.load) p.load();
          std::memcpy(dst, p.src->data, p.src->nbytes);
          done_bytes += p.src->nbytes;
          if (opt.progress) opt.progress(done_bytes, total_src, p.src->name);
        };
      }
      tw.push_back(std::move(t));
    }
  }
  std::map<std::string, std::string> meta = {
      {"format", "pt"},
      {"hearth.format_version", std::to_string(kFormatVersion)},
      {"hearth.quant", tensor_schemes_json(file_schemes)}};
  if (qc.has_codebook) meta["hearth.codebook"] = codebook_json(qc.codebook);

  // Everything goes to a hidden sibling folder first, renamed into place only when complete.
  std::error_code ec;
  const fs::path tmp = out.parent_path() / ("." + out.filename().string() + ".partial");
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) fail(tmp.string(), ": cannot create: ", ec.message());
  try {
    write_safetensors((tmp / "model.safetensors").string(), tw, meta);
    side_files(tmp, quant_config_json(qc));
    if (fs::exists(out)) fs::remove_all(out);
    fs::rename(tmp, out);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return rep;
}

}  // namespace

QuantizeReport quantize_checkpoint(const std::string& in_dir, const std::string& out_dir,
                                   const QuantizeOptions& opt) {
  check_options(opt);
  std::error_code ec;
  const fs::path in = fs::absolute(in_dir).lexically_normal();
  const fs::path out = output_folder(out_dir, opt);
  if (fs::equivalent(in, out, ec) || in == out)
    fail(out_dir, ": the output folder must differ from the input");

  // Loading validates every tensor's name, shape and type before any work is done.
  auto model = Qwen3Model::load(in_dir);
  const Qwen3Config& cfg = model->config();
  if (cfg.has_quantization_config)
    fail(cfg.source, ": this checkpoint is already quantized (quantization_config is set)");
  const Checkpoint& ck = model->checkpoint();

  const int threads = thread_count(opt);
  QuantizeReport rep;
  if (opt.codebook) {
    if (opt.main.bits != 4) fail("quantize: a codebook needs 4-bit weights (--bits 4)");
    const Codebook c = fit_checkpoint_codebook(ck, opt.main.group);
    rep.has_codebook = true;
    std::copy(c.begin(), c.end(), rep.codebook.begin());
  }
  const int8_t* codebook = rep.has_codebook ? rep.codebook.data() : nullptr;  // for calibration
  Calibration cal;
  const bool calibrated = !opt.calibration_ids.empty();
  if (calibrated) {
    CalibrationOptions co;
    co.scheme = opt.main;
    co.codebook = codebook;
    co.ctx = opt.calibration_ctx;
    co.threads = threads;
    co.log = opt.log;
    cal = calibrate(*model, opt.calibration_ids, co);
    rep.calibration_error_ratio = cal.err_plain > 0 ? cal.err_scaled / cal.err_plain : 1.0;
  }
  rep.calibration = calibrated ? "awq+clip" : opt.method == Method::Rtn ? "rtn" : "mse-clip";

  std::vector<Plan> plans;
  for (const TensorRef* r : ck.all())
    // A tied model's duplicate head carries no information; the quantized embedding serves both.
    if (!(cfg.tie_word_embeddings && r->name == "lm_head.weight"))
      plans.push_back(plan_for(r, opt, cal));
  const Method method = calibrated ? Method::Search : opt.method;
  return write_quantized(
      plans, opt, rep, method, threads, out, [&](const fs::path& tmp, const std::string& qc_json) {
        const fs::path cfg_path = in / "config.json";
        spit(tmp / "config.json", config_with_quant(slurp(cfg_path), qc_json, cfg_path.string()));
        copy_side_files(in, tmp);
      });
}

QuantizeReport quantize_standin(const StandinSpec& spec, const std::string& tokenizer_dir,
                                const std::string& out_dir, const QuantizeOptions& opt) {
  check_options(opt);
  if (opt.codebook || !opt.calibration_ids.empty())
    fail(
        "quantize: a stand-in is written with plain or searched scales; a codebook or "
        "calibration needs the 16-bit stand-in first (hearth standin, then hearth quantize)");
  const fs::path out = output_folder(out_dir, opt);
  check_standin_tokenizer(tokenizer_dir);  // before the long write, not after it
  const StandinSource source(spec);
  const int threads = thread_count(opt);
  // One generated tensor in memory at a time, loaded when the writer reaches it.
  std::vector<TensorRef> refs(source.size());
  std::vector<uint8_t> buf;
  std::vector<Plan> plans;
  const Calibration none;
  // In name order, as write_standin lays them out, so the output is quantize_checkpoint's.
  std::vector<size_t> order(source.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return source.name(a) < source.name(b); });
  for (const size_t i : order) {
    TensorRef& r = refs[i];
    r.name = source.name(i);
    r.dtype_str = source.dtype();
    r.plain_dtype = dtype_from_safetensors(r.dtype_str, &r.dtype);
    r.shape = source.shape(i);
    r.nbytes = source.nbytes(i);
    r.file = "stand-in";
    Plan p = plan_for(&r, opt, none);
    p.load = [&, i] {
      buf.resize(refs[i].nbytes);
      source.fill(i, buf.data(), threads);
      refs[i].data = buf.data();
    };
    plans.push_back(std::move(p));
  }
  QuantizeReport rep;
  rep.calibration = opt.method == Method::Rtn ? "rtn" : "mse-clip";
  return write_quantized(plans, opt, rep, opt.method, threads, out,
                         [&](const fs::path& tmp, const std::string& qc_json) {
                           write_standin_files(tmp.string(), spec, tokenizer_dir);
                           const fs::path cfg_path = tmp / "config.json";
                           spit(cfg_path,
                                config_with_quant(slurp(cfg_path), qc_json, cfg_path.string()));
                         });
}

}  // namespace hearth::quant
