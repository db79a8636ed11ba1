#include "core/weight_cache.h"

#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <tuple>

#include "core/huge_pages.h"

namespace hearth {

namespace {

constexpr char kMagic[8] = {'h', 'e', 'a', 'r', 't', 'h', 'W', 'C'};
constexpr uint32_t kVersion = 1;
constexpr size_t kPage = 4096;
// Regions grow the file as arenas grow the store: small copies (scales, norms) share one, of up to
// the copies' expected size.
constexpr size_t kRegionBytes = size_t(256) << 20;

struct DiskEntry {
  uint32_t file, layout;
  uint64_t offset, bytes, at, check;
};
struct Footer {
  char magic[8];
  uint32_t version, n_entries;
  uint64_t index_at, identity_bytes, file_bytes, index_check;
};
static_assert(sizeof(DiskEntry) == 40 && sizeof(Footer) == 48, "the file's layout");

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

// Not a cryptographic hash: it finds a copy whose pages a crash left unwritten (zeros) or that
// something else overwrote. Eight independent multiply chains keep it at memory speed.
uint64_t checksum(const uint8_t* p, size_t n) {
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t a[8];
  for (int j = 0; j < 8; ++j) a[j] = 0x243F6A8885A308D3ull + uint64_t(j);
  size_t i = 0;
  for (; i + 64 <= n; i += 64)
    for (int j = 0; j < 8; ++j) {
      uint64_t x;
      std::memcpy(&x, p + i + 8 * j, 8);
      a[j] = (a[j] ^ x) * kMul;
    }
  uint64_t h = n;
  for (; i < n; ++i) h = (h ^ p[i]) * kMul;
  for (int j = 0; j < 8; ++j) h = ((h ^ a[j]) * kMul) ^ (h >> 29);
  return h;
}

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

bool CopyKey::operator<(const CopyKey& o) const {
  return std::tie(file, layout, offset, bytes) < std::tie(o.file, o.layout, o.offset, o.bytes);
}

std::string build_id() {
  struct Search {
    uintptr_t addr;
    std::string id;
  } s{reinterpret_cast<uintptr_t>(&build_id), {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) -> int {
        auto* s = static_cast<Search*>(arg);
        bool here = false;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const uintptr_t b = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && s->addr >= b && s->addr < b + ph.p_memsz) here = true;
        }
        if (!here) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          const auto* p = reinterpret_cast<const uint8_t*>(info->dlpi_addr + ph.p_vaddr);
          const uint8_t* end = p + ph.p_memsz;
          while (p + sizeof(ElfW(Nhdr)) <= end) {
            const auto* n = reinterpret_cast<const ElfW(Nhdr)*>(p);
            const uint8_t* name = p + sizeof(ElfW(Nhdr));
            const uint8_t* desc = name + round_up(n->n_namesz, 4);
            if (desc + n->n_descsz > end) break;
            if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && !std::memcmp(name, "GNU", 4)) {
              static const char* kHex = "0123456789abcdef";
              for (size_t k = 0; k < n->n_descsz; ++k)
                s->id += kHex[desc[k] >> 4], s->id += kHex[desc[k] & 15];
              return 1;
            }
            p = desc + round_up(n->n_descsz, 4);
          }
        }
        return 1;
      },
      &s);
  return s.id;
}

std::string file_stamp(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return path + " missing";
  return path + " " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec) + " " + std::to_string(st.st_ino) + " " +
         std::to_string(st.st_dev);
}

WeightCacheFile::WeightCacheFile(std::string path, std::string identity, uint64_t expect_bytes)
    : path_(std::move(path)), identity_(std::move(identity)), expect_bytes_(expect_bytes) {
  if (!open_existing()) start_new();
}

WeightCacheFile::~WeightCacheFile() {
  for (const Region& r : regions_) ::munmap(r.data, r.size);
  if (map_) ::munmap(map_, map_bytes_);
  if (fd_ >= 0) stop_writing("");
}

// A file is used only when everything about it adds up: the footer, the index's checksum, the
// identity, and every entry inside the data. Anything else is a file to write again.
bool WeightCacheFile::open_existing() {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  Footer f;
  const bool sized = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                     size_t(st.st_size) >= sizeof(Footer) &&
                     ::pread(fd, &f, sizeof f, st.st_size - off_t(sizeof f)) == ssize_t(sizeof f);
  const uint64_t size = sized ? uint64_t(st.st_size) : 0;
  bool ok = sized && !std::memcmp(f.magic, kMagic, 8) && f.version == kVersion &&
            f.file_bytes == size && f.identity_bytes == identity_.size() &&
            f.n_entries <= size / sizeof(DiskEntry) && f.index_at <= size &&
            size - f.index_at ==
                round_up(f.identity_bytes, 8) + f.n_entries * sizeof(DiskEntry) + sizeof(Footer);
  std::vector<uint8_t> index;
  if (ok) {
    index.resize(size_t(size - f.index_at - sizeof(Footer)));
    ok = ::pread(fd, index.data(), index.size(), off_t(f.index_at)) == ssize_t(index.size()) &&
         checksum(index.data(), index.size()) == f.index_check &&
         !std::memcmp(index.data(), identity_.data(), identity_.size());
  }
  if (ok) {
    const uint8_t* e = index.data() + round_up(f.identity_bytes, 8);
    for (uint32_t i = 0; i < f.n_entries && ok; ++i) {
      DiskEntry d;
      std::memcpy(&d, e + i * sizeof d, sizeof d);
      ok = d.at % kPage == 0 && d.bytes <= f.index_at && d.at <= f.index_at - d.bytes;
      index_[CopyKey{d.file, d.layout, d.offset, d.bytes}] = Entry{{}, d.at, d.check};
    }
  }
  if (ok) {
    map_ = static_cast<uint8_t*>(map_file_huge(fd, 0, size_t(size), false));
    map_bytes_ = size_t(size);
    ok = map_ != nullptr;
  }
  ::close(fd);
  if (!ok) index_.clear();
  return ok;
}

// An unnamed file in the cache's folder (O_TMPFILE): a load that dies before commit() leaves
// nothing behind. Where the filesystem has none, PATH.partPID, which remove_orphans() clears once
// its process is gone.
void WeightCacheFile::start_new() {
  std::string dir = std::filesystem::path(path_).parent_path().string();
  if (dir.empty()) dir = ".";
  // A cache is a second copy of the weights on the disk: it takes at most half of the free space.
  struct statvfs v;
  if (::statvfs(dir.c_str(), &v) == 0) {
    const double free = double(v.f_bavail) * double(v.f_frsize);
    if (2 * double(expect_bytes_) > free) {
      char mb[96];
      std::snprintf(mb, sizeof mb, "about %.0f MB would take over half of its disk's %.0f MB free",
                    double(expect_bytes_) / 1e6, free / 1e6);
      message_ = "no weight cache written in " + dir + ": " + mb;
      return;
    }
  }
  fd_ = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    named_ = path_ + ".part" + std::to_string(::getpid());
    ::unlink(named_.c_str());
    fd_ = ::open(named_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0644);
  }
  if (fd_ < 0) {
    message_ = "cannot write a weight cache in " + dir + ": " + errno_text();
    named_.clear();
  }
}

void WeightCacheFile::stop_writing(const std::string& why) {
  message_ = why;
  if (!named_.empty()) ::unlink(named_.c_str());  // a file abandoned before commit()
  named_.clear();
  ::close(fd_);  // the copies already in its regions stay mapped, and the file with them
  fd_ = -1;
  written_.clear();
}

const void* WeightCacheFile::find(const CopyKey& key) {
  auto it = index_.find(key);
  const uint8_t* p = it == index_.end() ? nullptr : map_ + it->second.at;
  if (p && checksum(p, key.bytes) != it->second.check) {
    index_.erase(it);
    p = nullptr;
    rewrite("a copy in it was damaged");
  }
  if (!p) {
    rewrite("it lacked a copy");
    return nullptr;
  }
  if (fd_ < 0) {
    found_.push_back(key);
    return p;
  }
  void* dst = room(key.bytes);  // the new file gets it too
  if (!dst) return p;
  std::memcpy(dst, p, key.bytes);
  keep(key, key.bytes);
  return dst;
}

void WeightCacheFile::rewrite(const char* why) {
  if (rewrite_why_ || !map_ || committed_) return;
  rewrite_why_ = why;
  start_new();
  for (const CopyKey& k : found_) {
    void* dst = room(k.bytes);
    if (!dst) return;
    std::memcpy(dst, map_ + index_.at(k).at, k.bytes);
    keep(k, k.bytes);
  }
}

void* WeightCacheFile::room(size_t bytes) {
  if (fd_ < 0) return nullptr;
  const size_t need = round_up(bytes, kPage);
  if (regions_.empty() || regions_.back().size - regions_.back().used < need) {
    Region r;
    // A load of unknown size (expect_bytes_ 0) grows it 2 MiB at a time at least.
    const size_t region = size_t(std::min<uint64_t>(kRegionBytes, expect_bytes_));
    r.size = round_up(std::max(need, region), kHugePageBytes);
    r.at = file_bytes_;
    // Space on the disk first: a write through a mapping that finds the disk full is a SIGBUS.
    if (::fallocate(fd_, 0, off_t(r.at), off_t(r.size)) != 0) {
      stop_writing("cannot grow the weight cache " + path_ + ": " + errno_text());
      return nullptr;
    }
    r.data = static_cast<uint8_t*>(map_file_huge(fd_, r.at, r.size, true));
    if (!r.data) {
      stop_writing("cannot map the weight cache " + path_ + ": " + errno_text());
      return nullptr;
    }
    file_bytes_ += r.size;
    regions_.push_back(r);
  }
  return regions_.back().data + regions_.back().used;
}

void WeightCacheFile::keep(const CopyKey& key, size_t bytes) {
  Region& r = regions_.back();
  written_.push_back(Entry{key, r.at + r.used, checksum(r.data + r.used, bytes)});
  r.used += round_up(bytes, kPage);
}

std::string WeightCacheFile::commit() {
  committed_ = true;
  if (fd_ < 0) return message_;
  if (written_.empty()) {  // a backend that keeps no copies (a GPU's)
    stop_writing("");
    return "";
  }
  // The unused ends of the regions go back to the disk; the index follows the last copy.
  for (const Region& r : regions_)
    if (r.used < r.size && &r != &regions_.back())
      (void)::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(r.at + r.used),
                        off_t(r.size - r.used));
  const uint64_t index_at = regions_.empty() ? 0 : regions_.back().at + regions_.back().used;
  std::vector<uint8_t> index(round_up(identity_.size(), 8) + written_.size() * sizeof(DiskEntry));
  std::memcpy(index.data(), identity_.data(), identity_.size());
  uint8_t* e = index.data() + round_up(identity_.size(), 8);
  for (const Entry& w : written_) {
    const DiskEntry d{w.key.file, w.key.layout, w.key.offset, w.key.bytes, w.at, w.check};
    std::memcpy(e, &d, sizeof d);
    e += sizeof d;
  }
  Footer f;
  std::memcpy(f.magic, kMagic, 8);
  f.version = kVersion;
  f.n_entries = uint32_t(written_.size());
  f.index_at = index_at;
  f.identity_bytes = identity_.size();
  f.file_bytes = index_at + index.size() + sizeof f;
  f.index_check = checksum(index.data(), index.size());
  // An unnamed file gets a name beside the path first: linkat cannot replace a file.
  const std::string tmp = named_.empty() ? path_ + ".tmp" + std::to_string(::getpid()) : named_;
  const std::string self = "/proc/self/fd/" + std::to_string(fd_);
  if (named_.empty()) ::unlink(tmp.c_str());
  const bool ok =
      ::ftruncate(fd_, off_t(index_at)) == 0 &&
      ::pwrite(fd_, index.data(), index.size(), off_t(index_at)) == ssize_t(index.size()) &&
      ::pwrite(fd_, &f, sizeof f, off_t(index_at + index.size())) == ssize_t(sizeof f) &&
      (!named_.empty() ||
       ::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, tmp.c_str(), AT_SYMLINK_FOLLOW) == 0) &&
      ::rename(tmp.c_str(), path_.c_str()) == 0;
  const std::string why = errno_text();
  if (ok) named_.clear();
  ::unlink(tmp.c_str());  // where the rename failed
  char mb[32];
  std::snprintf(mb, sizeof mb, "%.0f MB", double(f.file_bytes) / 1e6);
  const std::string again = rewrite_why_ ? std::string(" (again: ") + rewrite_why_ + ")" : "";
  stop_writing(ok ? "wrote " + std::string(mb) + " of prepared weights to " + path_ + again +
                        "; later loads map them"
                  : "cannot write the weight cache " + path_ + ": " + why);
  if (ok) remove_orphans(std::filesystem::path(path_).parent_path().string());
  return message_;
}

namespace {

// The identity a cache file was made for, or "" where it is not one (its footer's word only: the
// file is not used, just judged).
std::string identity_of(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st;
  Footer f;
  std::string id;
  if (::fstat(fd, &st) == 0 && size_t(st.st_size) >= sizeof f &&
      ::pread(fd, &f, sizeof f, st.st_size - off_t(sizeof f)) == ssize_t(sizeof f) &&
      !std::memcmp(f.magic, kMagic, 8) && f.identity_bytes <= (uint64_t(1) << 20) &&
      f.index_at + f.identity_bytes <= uint64_t(st.st_size)) {
    id.resize(size_t(f.identity_bytes));
    if (::pread(fd, id.data(), id.size(), off_t(f.index_at)) != ssize_t(id.size())) id.clear();
  }
  ::close(fd);
  return id;
}

// Whether the checkpoint an identity stamps is gone: its first stamped file (file_stamp's "PATH
// SIZE MTIME INODE DEVICE") no longer exists.
bool checkpoint_gone(const std::string& identity) {
  size_t b = 0;
  for (size_t e; (e = identity.find('\n', b)) != std::string::npos; b = e + 1) {
    std::string path = identity.substr(b, e - b);
    for (int k = 0; k < 4; ++k) {
      const size_t space = path.rfind(' ');
      path.resize(space == std::string::npos ? 0 : space);
    }
    struct stat st;
    if (!path.empty() && path[0] == '/') return ::stat(path.c_str(), &st) != 0;
  }
  return false;
}

}  // namespace

void remove_orphans(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string ext = e.path().extension().string();
    if (ext.rfind(".part", 0) == 0 && e.path().stem().extension() == ".weights") {
      // A file a load was writing (start_new's fallback): gone with its process.
      const long pid = std::strtol(ext.c_str() + 5, nullptr, 10);
      if (pid > 0 && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH)
        std::filesystem::remove(e.path(), ec);
      continue;
    }
    if (ext != ".weights") continue;
    const std::string id = identity_of(e.path().string());
    if (!id.empty() && checkpoint_gone(id)) std::filesystem::remove(e.path(), ec);
  }
}

}  // namespace hearth
