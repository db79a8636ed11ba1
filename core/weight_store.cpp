#include "core/weight_store.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/huge_pages.h"

namespace hearth {

WeightStore::~WeightStore() {
  for (const Arena& a : arenas_) free_huge_pages(a.data, a.size);
}

uint8_t* WeightStore::arena_room(size_t need) {
  if (arenas_.empty() || arenas_.back().size - arenas_.back().used < need) {
    Arena a;
    a.size = need > kArenaBytes ? need : kArenaBytes;
    a.data = static_cast<uint8_t*>(map_huge_pages(a.size));
    if (!a.data)
      fail("cannot allocate ", a.size >> 20,
           " MiB for huge-page copies of the weights: ", std::strerror(errno));
    arenas_.push_back(a);
  }
  return arenas_.back().data + arenas_.back().used;
}

const void* WeightStore::get(const void* src, int layout, size_t bytes,
                             const std::function<void(void* dst)>& make, bool release) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = copies_.find({src, layout});
  if (it != copies_.end()) return it->second;
  CopyKey key;
  const bool keyed = cache_ && cache_key(src, layout, bytes, &key);
  const void* found = keyed ? cache_->find(key) : nullptr;
  if (!found) {
    const size_t need = (bytes + 4095) / 4096 * 4096;  // copies start on 4 KiB pages
    auto* in_file = keyed ? static_cast<uint8_t*>(cache_->room(bytes)) : nullptr;
    uint8_t* dst = in_file ? in_file : arena_room(need);
    make(dst);  // a throw leaves the space unused, not handed out
    if (in_file)
      cache_->keep(key, bytes);
    else
      arenas_.back().used += need;
    if (release) hand_back(src, bytes);
    found = dst;
  }
  bytes_ += bytes;
  return copies_.emplace(std::make_pair(src, layout), found).first->second;
}

bool WeightStore::cache_key(const void* src, int layout, size_t bytes, CopyKey* key) const {
  std::lock_guard<std::mutex> lock(maps_mu_);
  for (size_t i = 0; i < file_maps_.size(); ++i) {
    const auto [b, e] = file_maps_[i];
    if (uintptr_t(src) >= b && uintptr_t(src) < e) {
      *key = CopyKey{uint32_t(i), uint32_t(layout), uint64_t(uintptr_t(src) - b), uint64_t(bytes)};
      return true;
    }
  }
  return false;
}

void WeightStore::use_cache(const std::string& path, const std::string& identity,
                            uint64_t expect_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  cache_ = std::make_unique<WeightCacheFile>(path, identity, expect_bytes);
}

bool WeightStore::cache_mapped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_ && cache_->mapped();
}

std::string WeightStore::commit_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_ ? cache_->commit() : "";
}

void WeightStore::add_file_mapping(const void* data, size_t bytes) {
  std::lock_guard<std::mutex> lock(maps_mu_);
  file_maps_.emplace_back(uintptr_t(data), uintptr_t(data) + bytes);
}

void WeightStore::hand_back(const void* src, size_t bytes) const {
  // Only whole pages inside the source: its neighbours may be in use. In a file's mapping the 2 MiB
  // pages around the source go as well: the page cache may hold the file in 2 MiB pages (the kernel
  // collapses a mapped file's pages), a read of one byte maps all of such a page, and its other
  // bytes, in use or not, are mapped again from the page cache when read.
  const uintptr_t page = 4096, huge = uintptr_t(2) << 20, a = uintptr_t(src), z = a + bytes;
  uintptr_t s0 = (a + page - 1) & ~(page - 1), s1 = z & ~(page - 1);
  bool file = false;
  {
    std::lock_guard<std::mutex> lock(maps_mu_);  // not mu_: get() calls this holding it
    for (const auto& [b, e] : file_maps_)
      if (a >= b && z <= e) {
        file = true;
        s0 = std::max(b, a & ~(huge - 1));
        s1 = std::min(e & ~(page - 1), (z + huge - 1) & ~(huge - 1));
        break;
      }
  }
  if (s1 <= s0) return;
  if (file) {
    (void)::madvise(reinterpret_cast<void*>(s0), s1 - s0, MADV_DONTNEED);  // advice
    return;
  }
#ifdef MADV_PAGEOUT
  (void)::madvise(reinterpret_cast<void*>(s0), s1 - s0, MADV_PAGEOUT);  // advice
#endif
}

size_t WeightStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace hearth
