#include "core/kv_pool.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace hearth {

KVPool::KVPool(int n_blocks, int block_size, int extent_blocks)
    : block_size_(block_size),
      extent_blocks_(extent_blocks),
      refs_(size_t(std::max(n_blocks, 0)), 0),
      meta_(refs_.size()),
      tokens_(refs_.size() * size_t(std::max(block_size, 0))) {
  if (n_blocks <= 0) fail("KV pool: needs at least one block (got ", n_blocks, ")");
  if (block_size <= 0) fail("KV pool: block size must be positive (got ", block_size, ")");
  if (extent_blocks <= 0) fail("KV pool: extent size must be positive (got ", extent_blocks, ")");
  for (int b = 0; b < n_blocks; ++b) free_.insert(free_.end(), b);
  const int extents = (n_blocks + extent_blocks - 1) / extent_blocks;
  extent_free_.resize(size_t(extents));
  for (int e = 0; e < extents; ++e) {
    extent_free_[size_t(e)] = extent_size(e);
    empty_extents_.insert(empty_extents_.end(), e);
  }
}

int KVPool::extent_size(int e) const {
  return std::min(extent_blocks_, n_blocks() - e * extent_blocks_);
}
void KVPool::take_free(int b) {
  free_.erase(b);
  const int e = b / extent_blocks_;
  if (extent_free_[size_t(e)]-- == extent_size(e)) empty_extents_.erase(e);
}
void KVPool::put_free(int b) {
  free_.insert(b);
  const int e = b / extent_blocks_;
  if (++extent_free_[size_t(e)] == extent_size(e)) empty_extents_.insert(e);
}

int KVPool::used() const {
  std::lock_guard<std::mutex> lk(mu_);
  return used_;
}
int KVPool::cached() const {
  std::lock_guard<std::mutex> lk(mu_);
  return int(lru_.size());
}
int KVPool::available() const {
  std::lock_guard<std::mutex> lk(mu_);
  return int(free_.size() + lru_.size());
}
int KVPool::refs(int block) const {
  std::lock_guard<std::mutex> lk(mu_);
  return refs_.at(size_t(block));
}
bool KVPool::published(int block) const {
  std::lock_guard<std::mutex> lk(mu_);
  return meta_.at(size_t(block)).published;
}
int64_t KVPool::hits() const {
  std::lock_guard<std::mutex> lk(mu_);
  return hits_;
}
int64_t KVPool::evicted() const {
  std::lock_guard<std::mutex> lk(mu_);
  return evicted_;
}

void KVPool::unpublish(int b) {
  Meta& m = meta_[size_t(b)];
  auto it = by_hash_.find(m.hash);
  if (it != by_hash_.end() && it->second == b) by_hash_.erase(it);
  m.published = false;
}

int KVPool::alloc(int after) {
  std::lock_guard<std::mutex> lk(mu_);
  const int next = after + 1;
  int b;
  if (after >= 0 && next < n_blocks() && next % extent_blocks_ != 0 && free_.count(next)) {
    take_free(b = next);
  } else if (!empty_extents_.empty()) {
    take_free(b = *empty_extents_.begin() * extent_blocks_);
  } else if (!free_.empty()) {
    take_free(b = *free_.begin());
  } else if (!lru_.empty()) {
    b = lru_.begin()->second;
    lru_.erase(lru_.begin());
    unpublish(b);
    ++evicted_;
  } else {
    return -1;
  }
  refs_[size_t(b)] = 1;
  ++used_;
  return b;
}

void KVPool::retain(int b) {
  std::lock_guard<std::mutex> lk(mu_);
  int32_t& r = refs_.at(size_t(b));
  if (r == 0) {
    // Only a cached block can come back from zero references.
    if (!meta_[size_t(b)].published) fail("KV pool: retaining free block ", b);
    lru_.erase(meta_[size_t(b)].stamp);
    ++used_;
  }
  ++r;
}

void KVPool::release(int b) {
  std::lock_guard<std::mutex> lk(mu_);
  int32_t& r = refs_.at(size_t(b));
  if (r <= 0) fail("KV pool: releasing block ", b, " that nobody holds");
  if (--r > 0) return;
  --used_;
  Meta& m = meta_[size_t(b)];
  if (m.published) {
    m.stamp = ++clock_;
    lru_.emplace(m.stamp, b);
  } else {
    put_free(b);
  }
}

uint64_t KVPool::hash_block(uint64_t parent, const int32_t* tokens, int n) {
  // FNV-1a over the parent hash and the token ids, then a final mix (splitmix64).
  uint64_t h = 0xcbf29ce484222325ull ^ parent;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  };
  mix(parent);
  for (int i = 0; i < n; ++i) mix(uint64_t(uint32_t(tokens[i])));
  h ^= h >> 30, h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27, h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

bool KVPool::holds(int b, uint64_t parent, const int32_t* tokens) const {
  const Meta& m = meta_[size_t(b)];
  return m.published && m.parent == parent &&
         std::memcmp(tokens_.data() + size_t(b) * size_t(block_size_), tokens,
                     size_t(block_size_) * sizeof(int32_t)) == 0;
}

uint64_t KVPool::publish(int b, uint64_t parent, const int32_t* tokens) {
  const uint64_t h = hash_block(parent, tokens, block_size_);
  std::lock_guard<std::mutex> lk(mu_);
  if (refs_.at(size_t(b)) <= 0) fail("KV pool: publishing block ", b, " that nobody holds");
  Meta& m = meta_[size_t(b)];
  if (m.published) return m.hash;
  if (by_hash_.count(h)) return h;  // an equal block is findable already; this one stays private
  m.hash = h;
  m.parent = parent;
  m.published = true;
  std::memcpy(tokens_.data() + size_t(b) * size_t(block_size_), tokens,
              size_t(block_size_) * sizeof(int32_t));
  by_hash_.emplace(h, b);
  return h;
}

int KVPool::match(const int32_t* tokens, int max_blocks, std::vector<int32_t>& blocks,
                  std::vector<uint64_t>& hashes) {
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t parent = KVPool::kRootHash;
  int n = 0;
  for (; n < max_blocks; ++n) {
    const int32_t* t = tokens + size_t(n) * size_t(block_size_);
    const uint64_t h = hash_block(parent, t, block_size_);
    auto it = by_hash_.find(h);
    if (it == by_hash_.end() || !holds(it->second, parent, t)) break;
    const int b = it->second;
    if (refs_[size_t(b)]++ == 0) {
      lru_.erase(meta_[size_t(b)].stamp);
      ++used_;
    }
    blocks.push_back(b);
    hashes.push_back(h);
    parent = h;
  }
  hits_ += n;
  return n;
}

}  // namespace hearth
