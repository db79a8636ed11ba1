#include "models/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/huge_pages.h"

namespace hearth {

MappedFile::MappedFile(const std::string& path, MapMode mode, size_t line_at) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(path, ": cannot stat: ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, ": not a regular file");
  }
  size_ = size_t(st.st_size);
  if (size_ > 0 && mode == MapMode::HugePageCopy) {
    const size_t shift = (64 - line_at % 64) % 64;
    map_len_ = huge_pages_size(shift + size_);
    map_ = map_huge_pages(map_len_);
    if (!map_) {
      int e = errno;
      ::close(fd);
      const size_t mib = map_len_ >> 20;
      size_ = map_len_ = 0;
      fail(path, ": cannot allocate ", std::to_string(mib),
           " MiB for a huge-page copy: ", std::strerror(e));
    }
    auto* dst = static_cast<uint8_t*>(map_) + shift;
    for (size_t done = 0; done < size_;) {
      const ssize_t n = ::pread(fd, dst + done, size_ - done, off_t(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int e = n < 0 ? errno : EIO;
        ::close(fd);
        ::munmap(map_, map_len_);
        map_ = nullptr;
        size_ = map_len_ = 0;
        fail(path, ": cannot read: ", n < 0 ? std::strerror(e) : "file shrank while reading");
      }
      done += size_t(n);
    }
    ::mprotect(map_, map_len_, PROT_READ);
    data_ = dst;
  } else if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      size_ = 0;
      fail(path, ": cannot mmap: ", std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
    map_ = p;
    map_len_ = size_;
    shared_ = true;
  }
  // The mapping keeps the file referenced; holding the descriptor would only use up fd slots on
  // checkpoints with many shards.
  ::close(fd);
}

MappedFile::~MappedFile() {
  release();
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      map_(std::exchange(o.map_, nullptr)),
      map_len_(std::exchange(o.map_len_, 0)),
      path_(std::move(o.path_)),
      shared_(std::exchange(o.shared_, false)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_len_ = std::exchange(o.map_len_, 0);
    shared_ = std::exchange(o.shared_, false);
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (map_) ::munmap(map_, map_len_);
  map_ = nullptr;
  data_ = nullptr;
  size_ = map_len_ = 0;
}

void MappedFile::advise_hugepages() const {
#ifdef MADV_HUGEPAGE
  if (data_) (void)::madvise(const_cast<uint8_t*>(data_), size_, MADV_HUGEPAGE);
#endif
}

void MappedFile::advise_willneed() const {
  if (data_) (void)::madvise(const_cast<uint8_t*>(data_), size_, MADV_WILLNEED);
}

void MappedFile::unmap_pages(const void* p, size_t n) const {
  const uintptr_t page = 4096, a = (uintptr_t(p) + page - 1) & ~(page - 1),
                  z = (uintptr_t(p) + n) & ~(page - 1);
  if (!shared_ || z <= a || uintptr_t(p) < uintptr_t(data_) ||
      uintptr_t(p) + n > uintptr_t(data_) + size_)
    return;
  (void)::madvise(reinterpret_cast<void*>(a), z - a, MADV_DONTNEED);  // advice
}

}  // namespace hearth
