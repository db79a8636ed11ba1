// Byte-level BPE: the merge table, the per-piece result cache and the merge loop. Symbols are
// token ids over the piece's raw bytes, so no byte-level-mapped strings are built while encoding.
#include <algorithm>
#include <climits>
#include <cstring>

#include "models/tokenizer_impl.h"

namespace hearth::tok {

// ---- MergeMap ----

void MergeMap::reserve(size_t n) {
  size_t cap = 16;
  int bits = 4;
  // Load factor <= 3/5: probe chains stay short (~1.8 slots on a miss) and Qwen3's 151k merges take
  // 4 MiB rather than the 8 of a table twice as sparse (a process's steady heap, issue 21).
  while (cap * 3 < n * 5) cap <<= 1, ++bits;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  shift_ = 64 - bits;
}

void MergeMap::set(int32_t a, int32_t b, int32_t rank, int32_t id) {
  uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  size_t i = size_t((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
  slots_[i] = Slot{key, rank, id};
}

uint64_t hash_bytes(std::string_view key) {
  // A small multiply-mix over 8-byte words.
  uint64_t h = 0x243F6A8885A308D3ull ^ key.size();
  size_t i = 0;
  for (; i + 8 <= key.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, key.data() + i, 8);
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  // The 1..7 byte tail (most pieces are this short) without a variable-length memcpy call:
  // two possibly overlapping loads cover it, the length is already mixed into h.
  const size_t rest = key.size() - i;
  if (rest > 0) {
    const auto* p = reinterpret_cast<const unsigned char*>(key.data() + i);
    uint64_t w;
    if (rest >= 4) {
      uint32_t lo, hi;
      std::memcpy(&lo, p, 4);
      std::memcpy(&hi, p + rest - 4, 4);
      w = (uint64_t(hi) << 32) | lo;
    } else {
      w = uint64_t(p[0]) | (uint64_t(p[rest / 2]) << 8) | (uint64_t(p[rest - 1]) << 16);
    }
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 31);
}

// ---- TokenTable ----

void TokenTable::reserve(size_t ids, size_t bytes) {
  arena_.reserve(bytes);
  off_.reserve(ids);
  len_.reserve(ids);
  while (slots_.size() < ids * 2) grow();
}

void TokenTable::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 16 : old.size() * 2, Slot{});
  mask_ = slots_.size() - 1;
  for (const Slot& o : old) {
    if (o.id < 0) continue;
    size_t i = hash_bytes(text(o.id)) & mask_;
    while (slots_[i].id >= 0) i = (i + 1) & mask_;
    slots_[i] = o;
  }
}

void TokenTable::set(int32_t id, std::string_view text) {
  if (size_t(id) >= len_.size()) {
    off_.resize(size_t(id) + 1, 0);
    len_.resize(size_t(id) + 1, kNone);
  }
  if (len_[size_t(id)] == kNone)
    ++count_;
  else if (this->text(id) != text)
    renamed_.insert_or_assign(std::string(this->text(id)), id);
  off_[size_t(id)] = uint32_t(arena_.size());
  len_[size_t(id)] = uint32_t(text.size());
  arena_.append(text);
  if ((used_ + 1) * 2 > slots_.size()) grow();
  uint64_t h = hash_bytes(text);
  for (size_t i = h & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.id < 0) {
      s = Slot{uint32_t(h >> 32), id};
      ++used_;
      return;
    }
    if (s.tag == uint32_t(h >> 32) && this->text(s.id) == text) {
      s.id = id;
      return;
    }
  }
}

int32_t TokenTable::find(std::string_view text) const {
  if (slots_.empty()) return -1;
  uint64_t h = hash_bytes(text);
  for (size_t i = h & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.id < 0) break;
    if (s.tag == uint32_t(h >> 32) && this->text(s.id) == text) return s.id;
  }
  if (renamed_.empty()) return -1;
  const auto r = renamed_.find(std::string(text));
  return r == renamed_.end() ? -1 : r->second;
}

// ---- PieceCache ----

namespace {
constexpr size_t kShards = 16;
constexpr size_t kSlotsPerShard = 8192;  // the most a shard's table grows to; power of two
constexpr size_t kFirstSlots = 64;       // its size at the first insert, doubling from there
constexpr size_t kMaxEntries = kSlotsPerShard / 2;
constexpr size_t kMaxKeyLen = 255;  // longer pieces are rare and cheap to redo relative to size
constexpr size_t kMaxKeyBytes = kMaxEntries * 24;
}  // namespace

struct PieceCache::Shard {
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_off = 0, ids_off = 0;
    uint16_t key_len = 0, n_ids = 0;  // key_len 0 marks an empty slot (pieces are never empty)
  };
  std::mutex mu;
  std::vector<Slot> slots;
  std::string keys;
  std::vector<int32_t> ids;
  size_t used = 0;
  size_t mask() const { return slots.size() - 1; }
  // Doubles the table (slots kept at most half full), placing each entry again by its hash.
  void grow() {
    std::vector<Slot> old = std::move(slots);
    slots.assign(old.empty() ? kFirstSlots : old.size() * 2, Slot{});
    for (const Slot& o : old) {
      if (o.key_len == 0) continue;
      size_t i = (o.hash >> 8) & mask();
      while (slots[i].key_len != 0) i = (i + 1) & mask();
      slots[i] = o;
    }
  }
  void clear() {
    std::fill(slots.begin(), slots.end(), Slot{});
    keys.clear();
    ids.clear();
    used = 0;
  }
};

// A shard's slots grow with its entries, from none to kSlotsPerShard (192 KiB): a tokenizer that
// encodes little (a C API client that only detokenizes, a tokenizer loaded to be checked) never
// pays the 3 MiB of the full tables.
PieceCache::PieceCache() : shards_(new Shard[kShards]) {}
PieceCache::~PieceCache() = default;

bool PieceCache::lookup(uint64_t h, std::string_view key, std::vector<int32_t>& out) {
  if (key.size() > kMaxKeyLen) return false;
  Shard& sh = shards_[h % kShards];
  std::unique_lock<std::mutex> lock(sh.mu, std::try_to_lock);
  if (!lock.owns_lock() || sh.slots.empty()) return false;
  size_t i = (h >> 8) & sh.mask();
  for (;;) {
    const Shard::Slot& s = sh.slots[i];
    if (s.key_len == 0) return false;
    if (s.hash == h && s.key_len == key.size() &&
        std::memcmp(sh.keys.data() + s.key_off, key.data(), key.size()) == 0) {
      out.insert(out.end(), sh.ids.begin() + s.ids_off, sh.ids.begin() + s.ids_off + s.n_ids);
      return true;
    }
    i = (i + 1) & sh.mask();
  }
}

void PieceCache::insert(uint64_t h, std::string_view key, const int32_t* ids, size_t n) {
  if (key.size() > kMaxKeyLen) return;
  Shard& sh = shards_[h % kShards];
  std::unique_lock<std::mutex> lock(sh.mu, std::try_to_lock);
  if (!lock.owns_lock()) return;
  // When full, start over: cheaper than LRU bookkeeping, and hot pieces come back at once.
  if (sh.used >= kMaxEntries || sh.keys.size() + key.size() > kMaxKeyBytes) sh.clear();
  if ((sh.used + 1) * 2 > sh.slots.size()) sh.grow();
  size_t i = (h >> 8) & sh.mask();
  for (;;) {
    Shard::Slot& s = sh.slots[i];
    if (s.key_len == 0) break;
    if (s.hash == h && s.key_len == key.size() &&
        std::memcmp(sh.keys.data() + s.key_off, key.data(), key.size()) == 0) {
      return;  // another thread got here first
    }
    i = (i + 1) & sh.mask();
  }
  Shard::Slot& s = sh.slots[i];
  s.hash = h;
  s.key_off = uint32_t(sh.keys.size());
  s.key_len = uint16_t(key.size());
  s.ids_off = uint32_t(sh.ids.size());
  s.n_ids = uint16_t(n);
  sh.keys.append(key);
  sh.ids.insert(sh.ids.end(), ids, ids + n);
  ++sh.used;
}

// ---- Merge loop ----

namespace {
// Pieces up to this many bytes use a flat array and a linear scan for the lowest rank, which beats
// a heap at these sizes; longer pieces (long whitespace or digit-free runs) use the heap, whose
// cost stays O(n log n).
constexpr size_t kFlatMax = 32;
}  // namespace

void Model::bpe_uncached(std::string_view piece, std::vector<int32_t>& out, BpeScratch& s) const {
  const size_t n = piece.size();
  const auto* bytes = reinterpret_cast<const unsigned char*>(piece.data());
  if (n <= kFlatMax) {
    int32_t ids[kFlatMax], ranks[kFlatMax], merged[kFlatMax];
    size_t m = 0;
    for (size_t i = 0; i < n; ++i) {
      int32_t id = byte_id[bytes[i]];
      if (id < 0) id = unk_id;  // a byte the vocab lacks: unk, or dropped below when none
      if (id < 0) continue;
      if (fuse_unk && id == unk_id && m > 0 && ids[m - 1] == unk_id) continue;
      ids[m++] = id;
    }
    auto rank_of = [&](size_t i) {
      int32_t r, id;
      if (merges.get(ids[i], ids[i + 1], &r, &id)) {
        merged[i] = id;
        return r;
      }
      return INT32_MAX;
    };
    for (size_t i = 0; i + 1 < m; ++i) ranks[i] = rank_of(i);
    while (m > 1) {
      size_t best = 0;
      for (size_t i = 1; i + 1 < m; ++i) {
        if (ranks[i] < ranks[best]) best = i;  // strict: the leftmost of equal ranks wins
      }
      if (ranks[best] == INT32_MAX) break;
      ids[best] = merged[best];
      // Drop symbol best+1 and pair best+1; pairs best-1 and best are recomputed below.
      std::memmove(ids + best + 1, ids + best + 2, (m - best - 2) * sizeof(int32_t));
      if (m >= best + 3) {
        std::memmove(ranks + best + 1, ranks + best + 2, (m - best - 3) * sizeof(int32_t));
        std::memmove(merged + best + 1, merged + best + 2, (m - best - 3) * sizeof(int32_t));
      }
      --m;
      if (best > 0) ranks[best - 1] = rank_of(best - 1);
      if (best + 1 < m) ranks[best] = rank_of(best);
    }
    out.insert(out.end(), ids, ids + m);
    return;
  }

  // Long pieces: a linked list of symbols and a tournament tree over the pair starting at each
  // symbol, keyed rank << 32 | position, so the root is always the lowest-rank, leftmost pair
  // (the order `tokenizers` gets from its heap). Unlike a heap it holds no stale entries, and a
  // merge touches three leaves.
  auto& syms = s.syms;
  syms.clear();
  for (size_t i = 0; i < n; ++i) {
    int32_t id = byte_id[bytes[i]];
    if (id < 0) id = unk_id;
    if (id < 0) continue;
    if (fuse_unk && id == unk_id && !syms.empty() && syms.back().id == unk_id) continue;
    int32_t k = int32_t(syms.size());
    syms.push_back({id, k - 1, k + 1, 0});
  }
  if (syms.empty()) return;
  syms.back().next = -1;
  constexpr uint64_t kNone = ~uint64_t(0);
  size_t leaves = 1;
  while (leaves < syms.size()) leaves <<= 1;
  auto& tree = s.tree;
  tree.assign(2 * leaves, kNone);
  auto key_at = [&](int32_t pos) {
    BpeScratch::Sym& a = syms[size_t(pos)];
    int32_t r;
    if (a.next < 0 || !merges.get(a.id, syms[size_t(a.next)].id, &r, &a.merged)) return kNone;
    return (uint64_t(uint32_t(r)) << 32) | uint32_t(pos);
  };
  auto update = [&](int32_t pos, uint64_t key) {
    size_t i = leaves + size_t(pos);
    tree[i] = key;
    for (i >>= 1; i > 0; i >>= 1) {
      uint64_t v = std::min(tree[2 * i], tree[2 * i + 1]);
      if (tree[i] == v) break;  // ancestors depend only on this value: nothing above changes
      tree[i] = v;
    }
  };
  for (size_t i = 0; i < syms.size(); ++i) tree[leaves + i] = key_at(int32_t(i));
  for (size_t i = leaves - 1; i > 0; --i) tree[i] = std::min(tree[2 * i], tree[2 * i + 1]);
  while (tree[1] != kNone) {
    const int32_t pos = int32_t(uint32_t(tree[1]));
    BpeScratch::Sym& a = syms[size_t(pos)];
    const int32_t gone = a.next;
    a.id = a.merged;
    a.next = syms[size_t(gone)].next;
    if (a.next >= 0) syms[size_t(a.next)].prev = pos;
    update(gone, kNone);
    update(pos, key_at(pos));
    if (a.prev >= 0) update(a.prev, key_at(a.prev));
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

void Model::bpe(std::string_view piece, std::vector<int32_t>& out, BpeScratch& s) const {
  if (piece.size() == 1) {
    int32_t id = byte_id[static_cast<unsigned char>(piece[0])];
    if (id < 0) id = unk_id;
    if (id >= 0) out.push_back(id);
    return;
  }
  if (ignore_merges) {
    // Whole pieces found in the vocab skip merging; the vocab is keyed by mapped spelling.
    std::string mapped;
    bool all_known = true;
    for (unsigned char b : piece) {
      all_known = all_known && byte_id[b] >= 0;
      if (all_known) mapped += tokens.text(byte_id[b]);
    }
    int32_t id = all_known ? tokens.find(mapped) : -1;
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  uint64_t h = hash_bytes(piece);
  if (cache.lookup(h, piece, out)) return;
  size_t before = out.size();
  bpe_uncached(piece, out, s);
  cache.insert(h, piece, out.data() + before, out.size() - before);
}

}  // namespace hearth::tok
