#include "models/checkpoint.h"

#include <simdjson.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/weight_cache.h"
#include "models/qwen3_config.h"

namespace fs = std::filesystem;

namespace hearth {

namespace {

// Whether p is a regular file (through symlinks); false when nothing is there. Something that is
// there but is no file to map (a FIFO, a folder, a symlink loop or one to nowhere) is an error
// saying what it is, not "missing".
bool is_file(const fs::path& p) {
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(p, ec);
  if (ec || !fs::exists(link)) return false;
  const fs::file_status st = fs::status(p, ec);
  if (ec) fail(p.string(), ": cannot be read: ", ec.message());
  if (fs::is_regular_file(st)) return true;
  const char* what = fs::is_directory(st)                                 ? "a folder"
                     : fs::is_fifo(st)                                    ? "a FIFO"
                     : fs::is_socket(st)                                  ? "a socket"
                     : fs::is_block_file(st) || fs::is_character_file(st) ? "a device"
                     : !fs::exists(st)                                    ? "a symlink to nothing"
                                                                          : "not a file";
  fail(p.string(), ": not a regular file (", what, ")");
}

// Shard names come from a file we did not write; keep them inside the checkpoint folder.
bool safe_shard_name(const std::string& s) {
  if (s.empty()) return false;
  fs::path p(s);
  if (p.is_absolute()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

// The index's weight_map (tensor -> shard file name), every entry checked.
std::map<std::string, std::string> read_weight_map(const std::string& ipath) {
  simdjson::dom::parser parser;
  simdjson::padded_string json;
  if (simdjson::padded_string::load(ipath).get(json)) fail(ipath, ": cannot read");
  simdjson::dom::element doc;
  auto err = parser.parse(json).get(doc);
  if (err) fail(ipath, ": invalid JSON: ", simdjson::error_message(err));
  simdjson::dom::object wm;
  if (doc["weight_map"].get_object().get(wm)) fail(ipath, ": missing or non-object 'weight_map'");
  std::map<std::string, std::string> weight_map;
  for (auto kv : wm) {
    std::string name(kv.key);
    std::string_view file;
    if (kv.value.get_string().get(file))
      fail(ipath, ": weight_map entry for tensor '", name, "' is not a string");
    std::string f(file);
    if (!safe_shard_name(f))
      fail(ipath, ": weight_map entry for tensor '", name, "' names shard '", f,
           "' outside the checkpoint folder");
    if (!weight_map.emplace(name, f).second)
      fail(ipath, ": tensor '", name, "' listed twice in weight_map");
  }
  if (weight_map.empty()) fail(ipath, ": weight_map is empty");
  return weight_map;
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& dir, MapMode mode) {
  Checkpoint ck;
  ck.dir_ = dir;
  const fs::path d(dir);
  std::error_code ec;
  if (!fs::is_directory(d, ec)) fail(dir, ": checkpoint folder does not exist or is not a folder");

  const fs::path single = d / "model.safetensors";
  const fs::path index = d / "model.safetensors.index.json";
  if (is_file(single)) {
    ck.files_.push_back(single.string());
    ck.shards_.push_back(SafetensorsFile::open(single.string(), mode));
    for (const TensorRef& t : ck.shards_[0]->tensors()) ck.by_name_.emplace(t.name, &t);
  } else if (is_file(index)) {
    ck.open_shards(index.string(), mode);
  } else {
    fail(dir, ": no model.safetensors or model.safetensors.index.json in this folder");
  }

  for (const auto& s : ck.shards_)
    for (const TensorRef& t : s->tensors()) {
      ck.all_.push_back(&t);
      ck.total_bytes_ += t.nbytes;
    }
  return ck;
}

void Checkpoint::open_shards(const std::string& ipath, MapMode mode) {
  const fs::path d(dir_);
  const std::map<std::string, std::string> weight_map = read_weight_map(ipath);
  std::set<std::string> shard_names;  // sorted, so model-00001-of-N comes first
  for (const auto& [name, f] : weight_map) shard_names.insert(f);
  // Check all shards exist before mapping any, so a partial download is reported as such.
  for (const std::string& f : shard_names)
    if (!is_file(d / f)) fail(ipath, ": shard '", f, "' is missing from ", dir_);
  for (const std::string& f : shard_names) {
    files_.push_back((d / f).string());
    shards_.push_back(SafetensorsFile::open(files_.back(), mode));
  }
  // Duplicates are checked across all shards first: a tensor in two shards is the real fault
  // even when the index happens to name one of them.
  for (const auto& s : shards_)
    for (const TensorRef& t : s->tensors()) {
      auto [it, fresh] = by_name_.emplace(t.name, &t);
      if (!fresh)
        fail(dir_, ": tensor '", t.name, "' appears in two shards, ", it->second->file, " and ",
             t.file);
    }
  for (const auto& s : shards_) {
    for (const TensorRef& t : s->tensors()) {
      auto it = weight_map.find(t.name);
      if (it == weight_map.end())
        fail(t.file, ": tensor '", t.name, "' is in the shard but not in ", ipath);
      if ((d / it->second).string() != t.file)
        fail(t.file, ": tensor '", t.name, "' found here but the index places it in '", it->second,
             "'");
    }
  }
  for (const auto& [name, f] : weight_map)
    if (!by_name_.count(name))
      fail((d / f).string(), ": tensor '", name, "' listed in the index but absent from shard '", f,
           "'");
}

const TensorRef* Checkpoint::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

void Checkpoint::advise_hugepages() {
  for (auto& s : shards_) s->file().advise_hugepages();
}

void Checkpoint::cache_weights(WeightStore& store, const std::string& cache_dir,
                               const std::string& variant) const {
  const std::string build = build_id();
  if (build.empty()) return;
  std::error_code ec;
  fs::path dir = fs::weakly_canonical(dir_, ec);
  if (dir.filename().empty()) dir = dir.parent_path();  // "DIR/"
  std::vector<std::string> stamps;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string ext = e.path().extension().string();
    if (ext == ".json" || ext == ".safetensors") stamps.push_back(file_stamp(e.path().string()));
  }
  std::sort(stamps.begin(), stamps.end());
  std::string identity = "hearth weight cache\nbuild " + build + "\nvariant " + variant + "\n";
  for (const std::string& s : stamps) identity += s + "\n";
  // One file per folder, named for it: a changed checkpoint or a new build writes it again in
  // place rather than beside it.
  const std::string key = dir.string() + '\n' + variant;
  const std::string name = dir.filename().string() + "-" + fnv1a64_hex(key.data(), key.size());
  // The copies of the tied Qwen3 models ran 1.1-1.3x the checkpoint (the LM head's screen).
  store.use_cache((fs::path(cache_dir) / (name + ".weights")).string(), identity,
                  total_bytes_ / 2 * 3);
}

void Checkpoint::unmap_pages(const TensorRef& t) const {
  for (const auto& shard : shards_)
    if (shard->file().path() == t.file) shard->file().unmap_pages(t.data, t.nbytes);
}

void Checkpoint::lend_mappings(WeightStore& store) const {
  for (const auto& shard : shards_)
    if (shard->file().shared()) store.add_file_mapping(shard->file().data(), shard->file().size());
}

}  // namespace hearth
