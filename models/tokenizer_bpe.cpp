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
  while (cap < n * 3) cap <<= 1, ++bits;  // load factor <= 1/3 keeps probe chains short
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

// ---- PieceCache ----

namespace {
constexpr size_t kShards = 16;
constexpr size_t kSlotsPerShard = 8192;  // power of two
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
  void clear() {
    std::fill(slots.begin(), slots.end(), Slot{});
    keys.clear();
    ids.clear();
    used = 0;
  }
};

PieceCache::PieceCache() : shards_(new Shard[kShards]) {
  for (size_t i = 0; i < kShards; ++i) shards_[i].slots.resize(kSlotsPerShard);
}
PieceCache::~PieceCache() = default;

uint64_t PieceCache::hash(std::string_view key) {
  // A small multiply-mix over 8-byte words: pieces are short, so speed beats quality here.
  uint64_t h = 0x243F6A8885A308D3ull ^ key.size();
  size_t i = 0;
  for (; i + 8 <= key.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, key.data() + i, 8);
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  if (i < key.size()) {
    uint64_t w = 0;
    std::memcpy(&w, key.data() + i, key.size() - i);
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 31);
}

bool PieceCache::lookup(uint64_t h, std::string_view key, std::vector<int32_t>& out) {
  if (key.size() > kMaxKeyLen) return false;
  Shard& sh = shards_[h % kShards];
  std::unique_lock<std::mutex> lock(sh.mu, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  size_t i = (h >> 8) & (kSlotsPerShard - 1);
  for (;;) {
    const Shard::Slot& s = sh.slots[i];
    if (s.key_len == 0) return false;
    if (s.hash == h && s.key_len == key.size() &&
        std::memcmp(sh.keys.data() + s.key_off, key.data(), key.size()) == 0) {
      out.insert(out.end(), sh.ids.begin() + s.ids_off, sh.ids.begin() + s.ids_off + s.n_ids);
      return true;
    }
    i = (i + 1) & (kSlotsPerShard - 1);
  }
}

void PieceCache::insert(uint64_t h, std::string_view key, const int32_t* ids, size_t n) {
  if (key.size() > kMaxKeyLen) return;
  Shard& sh = shards_[h % kShards];
  std::unique_lock<std::mutex> lock(sh.mu, std::try_to_lock);
  if (!lock.owns_lock()) return;
  // When full, start over: cheaper than LRU bookkeeping, and hot pieces come back at once.
  if (sh.used >= kMaxEntries || sh.keys.size() + key.size() > kMaxKeyBytes) sh.clear();
  size_t i = (h >> 8) & (kSlotsPerShard - 1);
  for (;;) {
    Shard::Slot& s = sh.slots[i];
    if (s.key_len == 0) break;
    if (s.hash == h && s.key_len == key.size() &&
        std::memcmp(sh.keys.data() + s.key_off, key.data(), key.size()) == 0) {
      return;  // another thread got here first
    }
    i = (i + 1) & (kSlotsPerShard - 1);
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
constexpr size_t kFlatMax = 48;
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

  // Heap path, as in `tokenizers`: candidates ordered by (rank, position); stale ones skipped.
  auto& syms = s.syms;
  syms.clear();
  for (size_t i = 0; i < n; ++i) {
    int32_t id = byte_id[bytes[i]];
    if (id < 0) id = unk_id;
    if (id < 0) continue;
    if (fuse_unk && id == unk_id && !syms.empty() && syms.back().id == unk_id) continue;
    int32_t k = int32_t(syms.size());
    syms.push_back({id, k - 1, k + 1});
  }
  if (syms.empty()) return;
  syms.back().next = -1;
  auto& heap = s.heap;
  heap.clear();
  auto worse = [](const BpeScratch::Cand& a, const BpeScratch::Cand& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  auto push = [&](int32_t pos) {
    int32_t nx = syms[pos].next;
    if (nx < 0) return;
    int32_t r, id;
    if (!merges.get(syms[pos].id, syms[nx].id, &r, &id)) return;
    heap.push_back({r, pos, id});
    std::push_heap(heap.begin(), heap.end(), worse);
  };
  for (int32_t i = 0; i + 1 < int32_t(syms.size()); ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), worse);
    BpeScratch::Cand c = heap.back();
    heap.pop_back();
    auto& a = syms[c.pos];
    if (a.id < 0 || a.next < 0) continue;  // merged away, or no right neighbour any more
    auto& b = syms[a.next];
    int32_t r, id;
    if (!merges.get(a.id, b.id, &r, &id) || id != c.id) continue;  // the pair changed
    a.id = c.id;
    int32_t gone = a.next;
    a.next = b.next;
    if (b.next >= 0) syms[b.next].prev = c.pos;
    syms[gone].id = -1;
    if (a.prev >= 0) push(a.prev);
    push(c.pos);
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
      if (byte_id[b] < 0)
        all_known = false;
      else
        mapped += id_to_token[size_t(byte_id[b])];
    }
    auto it = all_known ? token_to_id.find(mapped) : token_to_id.end();
    if (it != token_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }
  uint64_t h = PieceCache::hash(piece);
  if (cache.lookup(h, piece, out)) return;
  size_t before = out.size();
  bpe_uncached(piece, out, s);
  cache.insert(h, piece, out.data() + before, out.size() - before);
}

}  // namespace hearth::tok
