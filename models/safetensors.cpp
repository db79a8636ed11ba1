#include "models/safetensors.h"

#include <simdjson.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string_view>

#include "core/error.h"

namespace hearth {

size_t safetensors_dtype_size(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  // U8/I8 hold the quantizer's packed codes; they are sized per byte and carry no hearth DType.
  if (dtype == "U8" || dtype == "I8") return 1;
  return 0;
}

Tensor TensorRef::view() const {
  if (!plain_dtype)
    fail(file, ": tensor '", name, "': dtype ", dtype_str, " cannot be viewed as a plain tensor");
  if (shape.size() > 4)
    fail(file, ": tensor '", name, "': ", shape.size(), " dimensions, at most 4 supported");
  Tensor t;
  t.dtype = dtype;
  t.ndim = int(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t.shape[i] = shape[i];
  t.data = data;
  t.nbytes = nbytes;
  return t;
}

namespace {

std::string span_str(uint64_t b, uint64_t e) {
  return "[" + std::to_string(b) + ", " + std::to_string(e) + "]";
}

struct Entry {
  TensorRef ref;
  uint64_t begin = 0, end = 0;
};

// Where the data section starts (8 + the header length), or 0 when the file is too short to say;
// open() reports that properly.
size_t data_offset(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  uint8_t len[8];
  if (!f.read(reinterpret_cast<char*>(len), 8)) return 0;
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(len[i]) << (8 * i);
  return size_t(8 + n);  // only its remainder mod 64 is used; a corrupt length is reported later
}

// Whether a tensor of `shape` in elements of esize bytes fills exactly `span` bytes. Counting in
// elements and comparing against the span by division keeps a hostile shape from overflowing the
// byte count.
void check_size(const std::string& where, const std::vector<int64_t>& shape, size_t esize,
                uint64_t span) {
  uint64_t nelem = 1;
  bool too_big = false;
  for (int64_t d : shape) {
    if (d == 0) {
      nelem = 0;
      too_big = false;
      break;
    }
    if (!too_big && nelem > span / uint64_t(d)) too_big = true;
    if (!too_big) nelem *= uint64_t(d);
  }
  if (too_big || nelem * esize != span) {
    std::string need =
        too_big ? "more than " + std::to_string(span) : std::to_string(nelem * esize);
    fail(where, ": shape ", shape_str(shape), " needs ", need, " bytes but data_offsets span ",
         span);
  }
}

// One tensor's header entry, checked against the data section [data_base, + data_size).
Entry parse_entry(const std::string& path, const std::string& name, simdjson::dom::element value,
                  const uint8_t* data_base, uint64_t data_size) {
  const std::string where = path + ": tensor '" + name + "'";
  simdjson::dom::object obj;
  if (value.get_object().get(obj)) fail(where, ": entry is not a JSON object");

  Entry e;
  TensorRef& r = e.ref;
  r.name = name;
  r.file = path;

  std::string_view dt;
  if (obj["dtype"].get_string().get(dt)) fail(where, ": missing or non-string 'dtype'");
  r.dtype_str = std::string(dt);
  const size_t esize = safetensors_dtype_size(r.dtype_str);
  if (esize == 0)
    fail(where, ": unknown dtype '", r.dtype_str, "' (supported: F32, F16, BF16, I32, U8, I8)");
  r.plain_dtype = dtype_from_safetensors(r.dtype_str, &r.dtype);

  simdjson::dom::array shape;
  if (obj["shape"].get_array().get(shape)) fail(where, ": missing or non-array 'shape'");
  for (auto d : shape) {
    int64_t v;
    if (d.get_int64().get(v) || v < 0)
      fail(where, ": 'shape' must hold non-negative integers, got ", simdjson::minify(d));
    r.shape.push_back(v);
  }

  simdjson::dom::array offs;
  if (obj["data_offsets"].get_array().get(offs) || offs.size() != 2)
    fail(where, ": missing 'data_offsets' or not a [begin, end] pair");
  if (offs.at(0).get_uint64().get(e.begin) || offs.at(1).get_uint64().get(e.end))
    fail(where, ": 'data_offsets' must hold non-negative integers");
  if (e.begin > e.end) fail(where, ": data_offsets ", span_str(e.begin, e.end), " has begin > end");
  if (e.begin % esize != 0)
    fail(where, ": data_offsets ", span_str(e.begin, e.end),
         " start at a byte that is not a multiple of the ", esize,
         "-byte element size; tensors are read in place and must be aligned (re-save the file "
         "with the safetensors library, which aligns them)");
  if (e.end > data_size)
    fail(where, ": data_offsets ", span_str(e.begin, e.end),
         " run past the end of the data section (", data_size, " bytes)");

  const uint64_t span = e.end - e.begin;
  check_size(where, r.shape, esize, span);
  r.data = data_base + e.begin;
  r.nbytes = size_t(span);
  return e;
}

// Empty tensors own no bytes, so only non-empty ones can overlap. Sorts entries by offset.
void check_disjoint(const std::string& path, std::vector<Entry>& entries) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Entry* last = nullptr;
  for (const Entry& e : entries) {
    if (e.begin == e.end) continue;
    if (last && e.begin < last->end)
      fail(path, ": tensors '", last->ref.name, "' ", span_str(last->begin, last->end), " and '",
           e.ref.name, "' ", span_str(e.begin, e.end), " overlap");
    if (!last || e.end > last->end) last = &e;
  }
}

// The header's __metadata__: string values only.
void read_metadata(const std::string& path, simdjson::dom::element value,
                   std::map<std::string, std::string>& out) {
  simdjson::dom::object meta;
  if (value.get_object().get(meta)) fail(path, ": __metadata__ is not a JSON object");
  for (auto kv : meta) {
    std::string_view v;
    if (kv.value.get_string().get(v))
      fail(path, ": __metadata__ key '", kv.key, "': value is not a string");
    out[std::string(kv.key)] = std::string(v);
  }
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path, MapMode mode) {
  std::shared_ptr<SafetensorsFile> sf(new SafetensorsFile);
  // Tensors are read with 64-byte vector loads, and one that straddles two cache lines costs
  // decode about a fifth of its speed (measured on Zen 5: BF16 29 -> 34.5 GB/s). A copy can fix
  // what the file does not: the data section starts on a line.
  sf->file_ = MappedFile(path, mode, mode == MapMode::HugePageCopy ? data_offset(path) : 0);
  const uint8_t* base = sf->file_.data();
  const uint64_t fsize = sf->file_.size();
  if (fsize < 8) fail(path, ": file is ", fsize, " bytes, too short for a safetensors header");
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= uint64_t(base[i]) << (8 * i);
  if (hlen > fsize - 8)
    fail(path, ": header length ", hlen, " runs past the end of the file (", fsize, " bytes)");
  // Kernels read a tensor through pointers of its element type, which must be aligned (a compiler
  // may use aligned vector loads on them). A shared map keeps the file's own alignment, so a file
  // whose header is not padded to a multiple of 8 bytes (written before safetensors padded it) is
  // read into an aligned private copy instead.
  if (sf->file_.shared() && (8 + hlen) % 8 != 0) {
    sf->file_ = MappedFile(path, MapMode::HugePageCopy, size_t(8 + hlen));
    if (sf->file_.size() != fsize) fail(path, ": the file changed while it was opened");
    base = sf->file_.data();
  }
  const uint64_t data_size = fsize - 8 - hlen;
  const uint8_t* data_base = base + 8 + hlen;

  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  // The map is not padded as simdjson wants, so the parser copies the header (small) first.
  auto err = parser.parse(reinterpret_cast<const char*>(base + 8), size_t(hlen)).get(doc);
  if (err) fail(path, ": header is not valid JSON: ", simdjson::error_message(err));
  simdjson::dom::object root;
  if (doc.get_object().get(root)) fail(path, ": header is not a JSON object");

  std::vector<Entry> entries;
  std::set<std::string_view> seen;
  bool have_meta = false;
  for (auto field : root) {
    std::string_view key = field.key;
    if (key == "__metadata__") {
      if (have_meta) fail(path, ": __metadata__ appears twice in the header");
      have_meta = true;
      read_metadata(path, field.value, sf->metadata_);
      continue;
    }
    std::string name(key);
    if (!seen.insert(key).second) fail(path, ": tensor '", name, "' appears twice in the header");
    entries.push_back(parse_entry(path, name, field.value, data_base, data_size));
  }

  check_disjoint(path, entries);

  sf->tensors_.reserve(entries.size());
  for (Entry& e : entries) sf->tensors_.push_back(std::move(e.ref));
  return sf;
}

}  // namespace hearth
