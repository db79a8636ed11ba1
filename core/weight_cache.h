// A file of one model's weight copies (WeightStore), kept so that the next load of the same
// checkpoint by the same build maps them from the page cache instead of making them again. Making
// them takes fresh memory, which a VM whose balloon hands freed pages back to its host backs again
// slowly (bench/RESULTS.md); pages the page cache holds map at once, in 2 MiB folios where the
// kernel keeps the file in them.
//
// File layout: the copies at 4 KiB-aligned offsets inside 2 MiB-aligned regions, then the index
// (the identity it was made for, one Entry per copy) and a Footer as the file's last bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hearth {

// What names a copy across loads, where its source's address does not: the checkpoint file its
// source lies in (WeightStore::add_file_mapping's order), where in it, and the copy's layout.
struct CopyKey {
  uint32_t file = 0;
  uint32_t layout = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;  // the copy's
  bool operator<(const CopyKey& o) const;
};

// This program's ELF build ID (hex), or "" where it has none: a copy's bytes are whatever the build
// that made them wrote, so another build never reads them.
std::string build_id();
// A file's path, size, modification time, inode and device: it changes when the file is replaced
// or written.
std::string file_stamp(const std::string& path);

// Removes the weight cache files in `dir` whose checkpoint folder is gone (deleted or moved), and
// files being written by processes that are gone: commit() does, after it wrote a file there.
void remove_orphans(const std::string& dir);

class WeightCacheFile {
 public:
  // Opens `path` where it holds copies made for `identity`; otherwise (absent, another identity,
  // damaged) starts a new unnamed file in its folder, written by room()/keep() and published under
  // `path` by commit(), unless `expect_bytes` of it would take over half of the disk's free space.
  // Never throws: where no file can be made the cache is off (commit() says why).
  WeightCacheFile(std::string path, std::string identity, uint64_t expect_bytes = 0);
  ~WeightCacheFile();
  WeightCacheFile(const WeightCacheFile&) = delete;
  WeightCacheFile& operator=(const WeightCacheFile&) = delete;

  // The copy stored under `key`, once its checksum holds; nullptr where absent or damaged. A file
  // that lacks a copy, or holds a damaged one, is written again whole: a new file gets the copies
  // found so far and every later one (found ones are copied from the old file).
  const void* find(const CopyKey& key);
  // Writing: room for `bytes` at a 4 KiB boundary, or nullptr where the file cannot grow (a full
  // disk); keep() then records what was written there under `key`.
  void* room(size_t bytes);
  void keep(const CopyKey& key, size_t bytes);
  // Writes the index and publishes the file under its path. Returns what happened, for a note.
  // Afterwards the file is only read: a copy it lacks is made in memory.
  std::string commit();
  // Whether a published file was mapped and not replaced (nothing in it was missing or damaged).
  bool mapped() const { return map_ && !rewrite_why_; }

 private:
  struct Entry {
    CopyKey key;
    uint64_t at = 0;     // file offset
    uint64_t check = 0;  // checksum of the copy's bytes
  };
  struct Region {
    uint8_t* data = nullptr;
    size_t size = 0, used = 0;
    uint64_t at = 0;  // file offset
  };
  bool open_existing();
  void start_new();
  // Switches from the published file to writing a new one, for `why`.
  void rewrite(const char* why);
  void stop_writing(const std::string& why);

  std::string path_, identity_, message_;
  uint64_t expect_bytes_ = 0;
  const char* rewrite_why_ = nullptr;  // why a published file is written again
  bool committed_ = false;
  int fd_ = -1;        // the new file while it is written
  std::string named_;  // its name where it could not be an unnamed one
  uint64_t file_bytes_ = 0;
  std::vector<Region> regions_;  // the new file's mapped regions
  std::vector<Entry> written_;
  // A published file, mapped whole, and its index.
  uint8_t* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::map<CopyKey, Entry> index_;
  std::vector<CopyKey> found_;  // copies handed out from it, in order
};

}  // namespace hearth
