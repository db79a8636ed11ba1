// A read-only memory map of a whole file. Checkpoint weights are used in place from it, so the OS
// page cache is the only copy and pages are read lazily on first use. On request the file is
// instead read once into private memory backed by transparent huge pages: decode walks every weight
// each token, and 4 KiB page-cache pages cost it 15-20% in TLB misses against 2 MiB pages.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace hearth {

enum class MapMode {
  Shared,        // map the page cache (default: no copy, shared between processes)
  HugePageCopy,  // read into anonymous memory advised MADV_HUGEPAGE (read-only afterwards)
};

class MappedFile {
 public:
  MappedFile() = default;
  // Throws hearth::Error "PATH: cannot open: <strerror>" (or stat/mmap) on failure. An empty file
  // maps to data() == nullptr, size() == 0, since mmap cannot map zero bytes. A HugePageCopy is
  // placed so that file offset `line_at` starts a 64-byte cache line (a shared map keeps the file's
  // own alignment).
  explicit MappedFile(const std::string& path, MapMode mode = MapMode::Shared, size_t line_at = 0);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  bool shared() const { return shared_; }  // MapMode::Shared: the page cache, mapped

  // Advice only: failures (old kernels, filesystems without THP support) are ignored, since the
  // mapping works the same without them.
  void advise_hugepages() const;
  void advise_willneed() const;
  // A shared map's whole pages inside [p, p + n) leave the process (the page cache keeps them):
  // for bytes read once at load, where the weights are then read from elsewhere. Nothing for a
  // HugePageCopy, whose pages hold the only copy.
  void unmap_pages(const void* p, size_t n) const;

 private:
  void release() noexcept;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  // What munmap gets back: a HugePageCopy mapping is rounded up to whole 2 MiB pages.
  void* map_ = nullptr;
  size_t map_len_ = 0;
  std::string path_;
  bool shared_ = false;
};

}  // namespace hearth
