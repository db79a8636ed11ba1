#include "core/weight_store.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace hearth {

namespace {

constexpr size_t kHugePage = size_t(2) << 20;

// n bytes of anonymous memory on a 2 MiB boundary, advised into huge pages.
void* map_huge(size_t n, void** map, size_t* map_len) {
  const size_t len = (n + kHugePage - 1) / kHugePage * kHugePage + kHugePage;
  void* raw = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  *map = raw;
  *map_len = len;
  auto* p = reinterpret_cast<void*>((uintptr_t(raw) + kHugePage - 1) & ~uintptr_t(kHugePage - 1));
#ifdef MADV_HUGEPAGE
  (void)::madvise(p, len - kHugePage, MADV_HUGEPAGE);  // advice; without THP a plain copy
#endif
  return p;
}

}  // namespace

WeightStore::~WeightStore() {
  for (const Arena& a : arenas_) ::munmap(a.map, a.map_len);
}

const void* WeightStore::get(const void* src, int layout, size_t bytes,
                             const std::function<void(void* dst)>& make) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = copies_.find({src, layout});
  if (it != copies_.end()) return it->second;
  const size_t need = (bytes + 4095) / 4096 * 4096;  // copies start on 4 KiB pages
  if (arenas_.empty() || arenas_.back().size - arenas_.back().used < need) {
    Arena a;
    a.size = need > kArenaBytes ? need : kArenaBytes;
    a.data = static_cast<uint8_t*>(map_huge(a.size, &a.map, &a.map_len));
    if (!a.data)
      fail("cannot allocate ", a.size >> 20,
           " MiB for huge-page copies of the weights: ", std::strerror(errno));
    arenas_.push_back(a);
  }
  Arena& a = arenas_.back();
  uint8_t* dst = a.data + a.used;
  make(dst);  // a throw leaves the space unused, not handed out
  a.used += need;
#ifdef MADV_PAGEOUT
  // Only whole pages inside the source: its neighbours may be in use.
  const uintptr_t page = 4096, s0 = (uintptr_t(src) + page - 1) & ~(page - 1),
                  s1 = (uintptr_t(src) + bytes) & ~(page - 1);
  if (s1 > s0) (void)::madvise(reinterpret_cast<void*>(s0), s1 - s0, MADV_PAGEOUT);  // advice
#endif
  bytes_ += bytes;
  return copies_.emplace(std::make_pair(src, layout), dst).first->second;
}

size_t WeightStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace hearth
