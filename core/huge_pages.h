// Anonymous memory for weights that decode streams every token: placed on 2 MiB boundaries and
// advised into transparent huge pages, which spare it the TLB misses of 4 KiB pages (15-20% of a
// decode). Shared by the model's huge-page file copies, the backends' weight store and KV pools.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hearth {

constexpr size_t kHugePageBytes = size_t(2) << 20;

// n bytes (rounded up to whole huge pages), read-write, 2 MiB aligned, advised MADV_HUGEPAGE
// (advice only: without THP it is ordinary memory); nullptr when the address space is exhausted.
// Free with free_huge_pages(p, n) with the same n.
void* map_huge_pages(size_t n);
void free_huge_pages(void* p, size_t n);
size_t huge_pages_size(size_t n);  // what map_huge_pages(n) really maps
// n bytes of file `fd` from `offset` (a multiple of 2 MiB), shared, read-only or read-write, at a
// 2 MiB boundary and advised MADV_HUGEPAGE, so that the page cache's 2 MiB pages of the file map
// whole; nullptr (errno set) on failure. Unmap with munmap(p, n).
void* map_file_huge(int fd, uint64_t offset, size_t n, bool writable);

}  // namespace hearth
