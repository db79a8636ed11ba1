// The bookkeeping of a paged KV cache: one pool per model of fixed-size blocks, each holding
// `block_size` consecutive positions of every layer's keys and values (the memory is the backend's,
// KVStorage in core/backend.h). A sequence holds a block table; position p lives in block
// table[p / block_size]. Blocks are reference-counted, so sequences with a common prefix share
// them.
//
// Prefix sharing: a full block whose keys and values are final is published under the hash of
// every token up to its end (its parent's hash and its own tokens), and stays cached after its
// last sequence lets go, so a later request with the same prefix (a chat's next turn, a shared
// system prompt) takes it instead of recomputing it. A published block is never written again. The
// block's own tokens are kept and compared on lookup: a hash collision cannot hand out wrong keys.
// Unreferenced cached blocks are evicted least recently used first when a block is needed.
//
// Thread-safe: sequences end (and release blocks) on whatever thread frees them.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

namespace hearth {

class KVPool {
 public:
  static constexpr uint64_t kRootHash = 0x6a09e667f3bcc908ull;  // the parent of a first block

  // extent_blocks: blocks the backend lays out together (KVStorage::extent_blocks).
  KVPool(int n_blocks, int block_size, int extent_blocks = 1);
  KVPool(const KVPool&) = delete;
  KVPool& operator=(const KVPool&) = delete;

  int block_size() const { return block_size_; }
  int n_blocks() const { return int(refs_.size()); }
  int used() const;       // referenced by a sequence
  int cached() const;     // unreferenced but published: evictable, findable
  int available() const;  // free or evictable: what alloc() can still hand out

  // A block for one sequence to write (one reference): the block after `after` (the sequence's
  // last block) when it is free and in the same extent, else the first block of the lowest
  // extent with no block in use, else the lowest free block, else the least recently used cached
  // block, evicted; -1 when every block is referenced. A sequence growing alone thus takes
  // consecutive blocks, which a backend may read as one run (KVStorage::extent_blocks).
  int alloc(int after = -1);
  void retain(int block);
  // Drops a reference; at zero a published block becomes cached, an unpublished one free.
  void release(int block);
  int refs(int block) const;

  static uint64_t hash_block(uint64_t parent, const int32_t* tokens, int n);
  // Block `block` (full, its keys and values final) holds `tokens` (block_size of them) after the
  // prefix hashed as `parent`. It becomes findable unless an equal block already is. Returns its
  // hash, the parent of the next block.
  uint64_t publish(int block, uint64_t parent, const int32_t* tokens);
  bool published(int block) const;
  // The longest run of cached full blocks holding tokens[0 .. max_blocks * block_size): appends
  // them, each retained, to `blocks` and their hashes to `hashes`; returns how many.
  int match(const int32_t* tokens, int max_blocks, std::vector<int32_t>& blocks,
            std::vector<uint64_t>& hashes);

  int64_t hits() const;     // blocks handed out by match() since creation
  int64_t evicted() const;  // cached blocks reused for other data

 private:
  struct Meta {
    uint64_t hash = 0, parent = 0;
    bool published = false;
    uint64_t stamp = 0;  // key in lru_ while cached
  };
  void unpublish(int block);
  int extent_size(int extent) const;  // blocks in it (the last one may be short)
  void take_free(int block);
  void put_free(int block);
  bool holds(int block, uint64_t parent, const int32_t* tokens) const;

  const int block_size_, extent_blocks_;
  mutable std::mutex mu_;
  std::vector<int32_t> refs_;
  std::vector<Meta> meta_;
  std::vector<int32_t> tokens_;  // [n_blocks][block_size], of published blocks
  std::set<int32_t> free_;
  std::vector<int32_t> extent_free_;  // free blocks per extent
  std::set<int32_t> empty_extents_;   // extents whose blocks are all free
  std::map<uint64_t, int32_t> lru_;   // stamp -> cached block, oldest first
  std::unordered_map<uint64_t, int32_t> by_hash_;
  uint64_t clock_ = 0;
  int used_ = 0;
  int64_t hits_ = 0, evicted_ = 0;
};

}  // namespace hearth
