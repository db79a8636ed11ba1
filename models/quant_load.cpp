#include "models/quant_load.h"

#include <cstring>

#include "core/error.h"
#include "core/quant_format.h"

namespace hearth::quant {

QuantBinder::QuantBinder(const Checkpoint& ck, QuantConfig config)
    : ck_(ck), config_(std::move(config)) {
  if (config_.has_codebook) codebook_ = std::make_shared<const Codebook>(config_.codebook);
}

const std::map<std::string, Scheme>& QuantBinder::file_schemes(const TensorRef& r) {
  auto it = by_file_.find(r.file);
  if (it != by_file_.end()) return it->second;
  for (const auto& shard : ck_.shards()) {
    if (shard->path() != r.file) continue;
    const auto& meta = shard->metadata();
    auto v = meta.find("hearth.format_version");
    if (v == meta.end())
      fail(r.file, ": __metadata__ has no 'hearth.format_version'; not a hearth quantized file");
    if (v->second != std::to_string(kFormatVersion))
      fail(r.file, ": __metadata__ hearth.format_version is '", v->second, "', expected '",
           kFormatVersion, "'");
    auto q = meta.find("hearth.quant");
    if (q == meta.end()) fail(r.file, ": __metadata__ has no 'hearth.quant' tensor table");
    // The levels a nibble selects must be the same in both places, or the file would be read with
    // another grid than it was written with.
    auto cb = meta.find("hearth.codebook");
    if (cb != meta.end() && !config_.has_codebook)
      fail(r.file, ": __metadata__ has a 'hearth.codebook' but config.json's quantization_config ",
           "has no 'codebook'");
    if (cb == meta.end() && config_.has_codebook)
      fail(r.file, ": config.json's quantization_config has a 'codebook' but __metadata__ has no ",
           "'hearth.codebook'");
    if (cb != meta.end() && parse_codebook_json(cb->second, r.file) != config_.codebook)
      fail(r.file, ": __metadata__ 'hearth.codebook' ", cb->second,
           " differs from config.json's codebook ", codebook_json(config_.codebook));
    return by_file_[r.file] = parse_tensor_schemes(q->second, r.file);
  }
  fail(r.file, ": not one of the checkpoint's files");
}

Tensor QuantBinder::bind(const std::string& name, int64_t rows, int64_t cols) {
  const Scheme& s = scheme_for(name);
  const TensorRef* r = ck_.find(name);
  if (!r) fail(ck_.dir(), ": tensor '", name, "' is missing (expected ", scheme_str(s), ")");
  const std::string where = r->file + ": tensor '" + name + "'";
  if (!s.quantized()) fail(where, ": not a quantized scheme");

  const auto& fs = file_schemes(*r);
  auto fit = fs.find(name);
  if (fit == fs.end()) fail(where, ": missing from the file's hearth.quant metadata");
  if (fit->second != s)
    fail(where, ": stored as ", scheme_str(fit->second), " but config.json says ", scheme_str(s));

  if (cols % kBlock != 0) fail(where, ": ", cols, " columns are not a multiple of 32");
  if (cols % s.group != 0)
    fail(where, ": ", cols, " columns are not a multiple of the group size ", s.group);
  const char* want_dtype = s.bits == 8 ? "I8" : "U8";
  if (r->dtype_str != want_dtype)
    fail(where, ": codes are ", r->dtype_str, " but a ", s.bits, "-bit tensor must be ", want_dtype,
         " (wrong bit count?)");
  const std::vector<int64_t> code_shape = {rows, code_cols(s.bits, cols)};
  if (r->shape != code_shape)
    fail(where, ": codes have shape ", shape_str(r->shape), ", but ", s.bits, "-bit codes of ",
         shape_str({rows, cols}), " need ", shape_str(code_shape));

  const std::string sname = scale_name(name);
  const TensorRef* sr = ck_.find(sname);
  if (!sr) fail(where, ": its scale tensor '", sname, "' is missing");
  const std::string swhere = sr->file + ": scale tensor '" + sname + "'";
  if (!sr->plain_dtype || sr->dtype != s.scale_dtype)
    fail(swhere, ": dtype ", sr->dtype_str, ", expected ", dtype_name(s.scale_dtype));
  const std::vector<int64_t> scale_shape = {rows, cols / s.group};
  if (sr->shape != scale_shape)
    fail(swhere, ": shape ", shape_str(sr->shape), ", expected ", shape_str(scale_shape),
         " (one scale per ", s.group, " weights)");
  // A scale that is NaN or infinite poisons every output it touches, silently; scales are 1/16
  // of the codes or less, so checking them all costs little at load.
  // The file places tensors at any byte offset, so a scale is read with memcpy, not through a
  // uint16_t pointer that may be misaligned.
  const auto* sv = static_cast<const uint8_t*>(sr->data);
  const int64_t n = rows * (cols / s.group);
  const uint16_t exp_mask = s.scale_dtype == DType::BF16 ? 0x7f80 : 0x7c00;  // all ones: inf/NaN
  for (int64_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, sv + 2 * i, 2);
    if ((v & exp_mask) == exp_mask)
      fail(swhere, ": scale ", i, " (row ", i / (cols / s.group), ", group ", i % (cols / s.group),
           ") is not finite; the file is corrupted");
  }
  // Kept mapped, the scan's pages would count in the process until the weights' copies hand them
  // back, and with a weight cache nothing does (they read none of the checkpoint).
  ck_.unmap_pages(*sr);

  Tensor t;
  t.dtype = dtype_of_bits(s.bits);
  t.ndim = 2;
  t.shape = {rows, cols, 0, 0};
  t.data = r->data;
  t.nbytes = r->nbytes;
  t.scales = sr->data;
  t.scale_dtype = s.scale_dtype;
  t.group_size = s.group;
  if (s.bits == 4 && codebook_) t.codebook = codebook_->data();
  check_quantized_view(t, where);
  return t;
}

}  // namespace hearth::quant
