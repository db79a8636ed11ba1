#include "core/huge_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>

namespace hearth {

size_t huge_pages_size(size_t n) {
  return (n + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}

void* map_huge_pages(size_t n) {
  n = huge_pages_size(n);
  // Map one huge page more than needed, then trim both ends to the 2 MiB boundaries. Pages are
  // committed when first written (a KV pool reserves its whole budget).
  void* raw = ::mmap(nullptr, n + kHugePageBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t begin = uintptr_t(raw),
                  aligned = (begin + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  if (aligned > begin) ::munmap(raw, aligned - begin);
  const uintptr_t tail = aligned + n, end = begin + n + kHugePageBytes;
  if (end > tail) ::munmap(reinterpret_cast<void*>(tail), end - tail);
  void* p = reinterpret_cast<void*>(aligned);
#ifdef MADV_HUGEPAGE
  (void)::madvise(p, n, MADV_HUGEPAGE);
#endif
  return p;
}

void* map_file_huge(int fd, uint64_t offset, size_t n, bool writable) {
  void* raw = ::mmap(nullptr, n + kHugePageBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t begin = uintptr_t(raw),
                  aligned = (begin + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  const int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  void* p =
      ::mmap(reinterpret_cast<void*>(aligned), n, prot, MAP_SHARED | MAP_FIXED, fd, off_t(offset));
  if (p == MAP_FAILED) {
    const int e = errno;
    ::munmap(raw, n + kHugePageBytes);
    errno = e;
    return nullptr;
  }
  if (aligned > begin) ::munmap(raw, aligned - begin);
  const uintptr_t tail = (aligned + n + 4095) & ~uintptr_t(4095), end = begin + n + kHugePageBytes;
  if (end > tail) ::munmap(reinterpret_cast<void*>(tail), end - tail);
#ifdef MADV_HUGEPAGE
  (void)::madvise(p, n, MADV_HUGEPAGE);
#endif
  return p;
}

void free_huge_pages(void* p, size_t n) {
  if (p) ::munmap(p, huge_pages_size(n));
}

}  // namespace hearth
