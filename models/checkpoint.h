// A Hugging Face checkpoint folder: one model.safetensors, or shards listed by
// model.safetensors.index.json. Opening validates every header and the index against the shards,
// but reads no weight data.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/weight_store.h"
#include "models/safetensors.h"

namespace hearth {

class Checkpoint {
 public:
  // Like transformers, a single model.safetensors wins over an index when both exist.
  // MapMode::HugePageCopy reads every shard into huge-page memory (see MappedFile).
  static Checkpoint open(const std::string& dir, MapMode mode = MapMode::Shared);

  const TensorRef* find(const std::string& name) const;  // nullptr when absent
  // Every tensor, shard by shard in files() order, each shard in data-offset order.
  const std::vector<const TensorRef*>& all() const { return all_; }
  // Paths of the safetensors files, as opened (DIR/NAME).
  const std::vector<std::string>& files() const { return files_; }
  const std::vector<std::shared_ptr<SafetensorsFile>>& shards() const { return shards_; }
  const std::string& dir() const { return dir_; }
  void advise_hugepages();
  // Tells the store which memory is this checkpoint's shared file mappings (WeightStore::
  // add_file_mapping), so copies made from them hand their pages back to the page cache.
  void lend_mappings(WeightStore& store) const;
  // t's whole pages leave the process's mapping (MappedFile::unmap_pages): after a scan at load.
  void unmap_pages(const TensorRef& t) const;
  // Has the store keep its copies in a weight cache file in folder `cache_dir` (WeightStore::
  // use_cache), one per checkpoint folder and `variant` (the options that choose the copies'
  // layouts: a forced ISA), valid for this build and for the folder's safetensors and JSON files as
  // they are now. After lend_mappings. Nothing where the build has no ID.
  void cache_weights(WeightStore& store, const std::string& cache_dir,
                     const std::string& variant) const;
  size_t total_bytes() const { return total_bytes_; }  // sum of tensor data bytes

 private:
  // The shards an index names (its path ipath, inside dir_), each checked against it.
  void open_shards(const std::string& ipath, MapMode mode);

  std::string dir_;
  std::vector<std::string> files_;
  // Tensor views and TensorRef pointers stay valid across moves of the Checkpoint, since the
  // files live on the heap; holders of a shard's shared_ptr keep its map alive.
  std::vector<std::shared_ptr<SafetensorsFile>> shards_;
  std::vector<const TensorRef*> all_;
  std::unordered_map<std::string, const TensorRef*> by_name_;
  size_t total_bytes_ = 0;
};

}  // namespace hearth
