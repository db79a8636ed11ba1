// Private copies of weights in the layouts a backend reads fastest, kept in huge-page memory and
// shared by every backend of one model (one per session): the store belongs to the model's owner
// and goes to each backend through BackendOptions::weight_copies. Decode streams every weight once
// per token, so a layout that turns several row streams into one, and 2 MiB pages instead of the
// page cache's 4 KiB ones, are worth a copy (the CLI's default; --mmap goes without). Copies may
// also live in a weight cache file (use_cache), mapped by the next load instead of made again.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/weight_cache.h"

namespace hearth {

class WeightStore {
 public:
  WeightStore() = default;
  ~WeightStore();
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

  // The copy of the weight at `src` in layout `layout` (a backend's own numbering), `bytes` long,
  // written by make(dst) the first time it is asked for and shared afterwards. With `release`, the
  // `bytes` bytes at `src` are then handed back to the OS (MADV_PAGEOUT: their data is kept, in the
  // page cache or swap), so a mapped checkpoint does not stay resident beside its copy; without,
  // they stay (a derived copy of another size, whose maker hands its source back itself).
  // Safe to call from several threads. Throws hearth::Error when the memory cannot be had.
  const void* get(const void* src, int layout, size_t bytes,
                  const std::function<void(void* dst)>& make, bool release = true);
  size_t bytes() const;  // all copies together
  // Hands the whole pages of [src, src + bytes) back to the OS as get(..., release) does (in a
  // file's mapping, the 2 MiB around them too): for a source read again after its copy was made
  // (to derive another one from it), or read once (a norm widened to f32).
  void hand_back(const void* src, size_t bytes) const;
  // Marks [data, data + bytes) as a shared read-only mapping of a file (a checkpoint mapped in
  // place). Its pages are handed back with MADV_DONTNEED, which unmaps them and leaves them in the
  // page cache, so the next load copies from memory; other memory goes with MADV_PAGEOUT, which
  // keeps anonymous contents but drops a file's clean pages, so each load would read the disk.
  void add_file_mapping(const void* data, size_t bytes);

  // Keeps the copies of sources in the file mappings (add_file_mapping, all of them added first)
  // in a weight cache file at `path` (weight_cache.h) made for `identity`: where it holds them they
  // are mapped from it, else they are written to a new one, which commit_cache() publishes once the
  // load has placed its weights. Copies asked for after that are made in memory as without a cache.
  // `expect_bytes`: about how large the copies will be, for the disk space a new file needs.
  void use_cache(const std::string& path, const std::string& identity, uint64_t expect_bytes = 0);
  // What the cache did, for a note: wrote a file, could not, or "" (it was read, or there is none).
  std::string commit_cache();
  // Whether the copies came from a published weight cache file, which this load left as it was.
  bool cache_mapped() const;

 private:
  // Copies are carved from arenas of at least kArenaBytes, so that small tensors (scales, norms)
  // do not each take a whole 2 MiB page.
  static constexpr size_t kArenaBytes = size_t(256) << 20;
  struct Arena {
    uint8_t* data = nullptr;  // map_huge_pages(size)
    size_t size = 0, used = 0;
  };
  mutable std::mutex mu_;
  std::vector<Arena> arenas_;
  std::map<std::pair<const void*, int>, const void*> copies_;
  std::unique_ptr<WeightCacheFile> cache_;
  // Whether src lies in a file mapping, and the copy's name in the cache if so.
  bool cache_key(const void* src, int layout, size_t bytes, CopyKey* key) const;
  uint8_t* arena_room(size_t need);
  mutable std::mutex maps_mu_;
  std::vector<std::pair<uintptr_t, uintptr_t>> file_maps_;  // [begin, end) of add_file_mapping
  size_t bytes_ = 0;
};

}  // namespace hearth
