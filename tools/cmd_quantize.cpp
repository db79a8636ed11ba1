// hearth quantize: a float Qwen3 checkpoint in, a hearth INT8/INT4 checkpoint out
// (quant/FORMAT.md), optionally calibrated on sample text.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_writer.h"
#include "models/tokenizer.h"
#include "quant/eval.h"
#include "quant/quantizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/progress_bar.h"

namespace hearth::cli {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, ": cannot read");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

quant::Scheme head_scheme(const std::string& s, const quant::Scheme& main) {
  quant::Scheme h = main;
  if (s == "int8")
    h.bits = 8;
  else if (s == "int4")
    h.bits = 4;
  else if (s == "bf16")
    h.bits = 16;
  else
    fail("--head: '", s, "' is not one of int8, int4, bf16");
  return h;
}

}  // namespace

void parse_quant_scheme(const Args& args, quant::QuantizeOptions* o) {
  o->main.bits = args.integer("--bits", 4);
  if (o->main.bits != 4 && o->main.bits != 8) fail("--bits must be 4 or 8");
  o->main.group = args.integer("--group", 32);
  if (o->main.group != 32 && o->main.group != 64 && o->main.group != 128)
    fail("--group must be 32, 64 or 128");
  const std::string sd = args.str("--scale-dtype", "f16");
  if (sd == "f16")
    o->main.scale_dtype = DType::F16;
  else if (sd == "bf16")
    o->main.scale_dtype = DType::BF16;
  else
    fail("--scale-dtype must be f16 or bf16");
  o->head = head_scheme(args.str("--head", "int8"), o->main);
  o->method = args.has("--rtn") ? quant::Method::Rtn : quant::Method::Search;
}

int cmd_quantize(int argc, char** argv) {
  Args args(argc, argv,
            {"--model=", "--out=", "--bits=", "--group=", "--head=", "--scale-dtype=",
             "--calibration=", "--calibration-ids=", "--calibration-ctx=", "--rtn", "--codebook",
             "--force", "--threads=", "--json"});
  const std::string in = args.required("--model"), out = args.required("--out");
  quant::QuantizeOptions o;
  parse_quant_scheme(args, &o);
  o.codebook = args.has("--codebook");
  if (o.codebook && o.main.bits != 4) fail("--codebook needs --bits 4");
  o.force = args.has("--force");
  o.threads = args.integer("--threads", 0);
  o.calibration_ctx = args.integer("--calibration-ctx", 512);
  if (o.calibration_ctx <= 0) fail("--calibration-ctx must be positive");
  if (args.has("--calibration") && args.has("--calibration-ids"))
    fail("give --calibration or --calibration-ids, not both");
  if (args.has("--calibration")) {
    const std::string text = read_text(args.required("--calibration"));
    o.calibration_ids = Tokenizer::load(in).encode(text);
    if (o.calibration_ids.empty()) fail(args.str("--calibration"), ": no text to calibrate on");
  } else if (args.has("--calibration-ids")) {
    o.calibration_ids = quant::read_token_ids(args.required("--calibration-ids"));
  }
  if (!o.calibration_ids.empty() && o.method == quant::Method::Rtn)
    fail("--rtn and calibration exclude each other");

  ProgressBar bar;
  const bool json = args.has("--json");
  o.progress = [&](size_t done, size_t total, const std::string& t) { bar.update(done, total, t); };
  o.log = [&](const std::string& line) {
    if (!json) std::fprintf(stderr, "calibration: %s\n", line.c_str());
  };
  const auto t0 = std::chrono::steady_clock::now();
  const quant::QuantizeReport r = quant::quantize_checkpoint(in, out, o);
  bar.done();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (json) {
    JsonWriter w;
    w.begin_object();
    w.field("out", out).field("scheme", quant::scheme_str(o.main));
    w.field("head", quant::scheme_str(o.head)).field("calibration", r.calibration);
    w.field("calibration_tokens", int64_t(o.calibration_ids.size()));
    if (!o.calibration_ids.empty()) w.field("calibration_error_ratio", r.calibration_error_ratio);
    if (r.has_codebook) {
      w.key("codebook").begin_array();
      for (int8_t v : r.codebook) w.value(int(v));
      w.end_array();
    }
    w.field("bits_per_weight", r.bits_per_weight).field("params", r.params);
    w.field("source_bytes", r.source_bytes).field("output_bytes", r.output_bytes);
    w.field("seconds", secs);
    w.end_object();
    std::printf("%s\n", w.str().c_str());
  } else {
    if (r.has_codebook) {
      std::string levels;
      for (int8_t v : r.codebook) levels += (levels.empty() ? "" : " ") + std::to_string(int(v));
      std::fprintf(stderr, "codebook: %s\n", levels.c_str());
    }
    std::fprintf(stderr,
                 "wrote %s: %s, head %s, %s; %.3f bits/weight (scales included), %.1f MB "
                 "(from %.1f MB) in %.1f s\n",
                 out.c_str(), quant::scheme_str(o.main).c_str(), quant::scheme_str(o.head).c_str(),
                 r.calibration.c_str(), r.bits_per_weight, double(r.output_bytes) / 1e6,
                 double(r.source_bytes) / 1e6, secs);
  }
  return 0;
}

}  // namespace hearth::cli
