#include "core/huge_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>

namespace hearth {

size_t huge_pages_size(size_t n) {
  return (n + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}

namespace {

// n bytes of address space (a multiple of 4 KiB) at a 2 MiB boundary, PROT_NONE, for a MAP_FIXED
// mapping to take over; nullptr when the address space is exhausted. One huge page more is
// reserved, then both ends are trimmed.
void* reserve_aligned(size_t n) {
  void* raw = ::mmap(nullptr, n + kHugePageBytes, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t begin = uintptr_t(raw),
                  aligned = (begin + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  if (aligned > begin) ::munmap(raw, aligned - begin);
  const uintptr_t tail = aligned + n, end = begin + n + kHugePageBytes;
  if (end > tail) ::munmap(reinterpret_cast<void*>(tail), end - tail);
  return reinterpret_cast<void*>(aligned);
}

void* map_at(void* at, size_t n, int prot, int flags, int fd, uint64_t offset) {
  if (!at) return nullptr;
  void* p = ::mmap(at, n, prot, flags | MAP_FIXED, fd, off_t(offset));
  if (p == MAP_FAILED) {
    const int e = errno;
    ::munmap(at, n);
    errno = e;
    return nullptr;
  }
#ifdef MADV_HUGEPAGE
  (void)::madvise(p, n, MADV_HUGEPAGE);
#endif
  return p;
}

}  // namespace

// Pages are committed when first written (a KV pool reserves its whole budget).
void* map_huge_pages(size_t n) {
  n = huge_pages_size(n);
  return map_at(reserve_aligned(n), n, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
}

void* map_file_huge(int fd, uint64_t offset, size_t n, bool writable) {
  const size_t whole = (n + 4095) & ~size_t(4095);
  return map_at(reserve_aligned(whole), n, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                MAP_SHARED, fd, offset);
}

void free_huge_pages(void* p, size_t n) {
  if (p) ::munmap(p, huge_pages_size(n));
}

}  // namespace hearth
