// Internals of the tokenizer shared by models/tokenizer*.cpp; not part of the public API.
#pragma once
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hearth::tok {

// ---- UTF-8 and Unicode (tokenizer_text.cpp) ----

bool utf8_valid(std::string_view s);
// Appends String::from_utf8_lossy(bytes) to `out`. When `final` is false a trailing sequence that
// is incomplete but could still become valid is left alone; returns the number of bytes consumed.
size_t utf8_lossy_append(std::string_view bytes, std::string& out, bool final);
// Decodes the code point at s[i] (input known valid) and advances i.
uint32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(uint32_t cp, std::string& out);
// NFC of `s`; returns `s` itself when it is already NFC by a quick check, else fills `buf`.
std::string_view nfc(std::string_view s, std::string& buf);
// Rewrites \s and \S in a regex to Unicode White_Space (what Rust's regex means by \s; PCRE2's UCP
// \s also takes U+180E). `where` names the field for errors.
std::string rewrite_whitespace(const std::string& pattern, const std::string& where);

// A PCRE2 regex used by Split(behavior=Isolated): matches and the gaps between them are pieces.
class Regex {
 public:
  Regex(const std::string& pattern, const std::string& where);
  Regex(Regex&& o) noexcept : code_(o.code_), jit_(o.jit_) { o.code_ = nullptr; }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex();
  // Appends the non-empty pieces of s[begin, end) as [begin, end) offsets into `s`.
  void split(std::string_view s, size_t begin, size_t end, pcre2_match_data* md,
             std::vector<std::pair<uint32_t, uint32_t>>& out) const;

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// A piece of text after splitting out added tokens: id -1 means plain text.
struct Segment {
  uint32_t begin, end;
  int32_t id;
};

// Finds added tokens leftmost-longest (as the aho-corasick matcher in `tokenizers` does) and
// applies their single_word / lstrip / rstrip flags.
class AddedTokenSplitter {
 public:
  void add(const AddedToken& t, std::string match_text);
  bool empty() const { return tokens_.empty(); }
  // Splits s[begin, end) into segments appended to `out` (offsets into s).
  void split(std::string_view s, uint32_t begin, uint32_t end, std::vector<Segment>& out) const;

 private:
  struct Entry {
    std::string text;
    AddedToken tok;
  };
  std::vector<Entry> tokens_;
  std::vector<uint32_t> by_first_[256];  // indices into tokens_, longest first
  int single_first_ = -1;                // the first byte of every token when they all share one
};

// ---- Hash tables and BPE (tokenizer_bpe.cpp) ----

// A fast hash for short byte strings (tokens, pieces): speed matters more than quality here.
uint64_t hash_bytes(std::string_view s);

// Token spellings by id and ids by spelling, kept in one arena: 150k separately allocated strings
// cost more to build, look up and free than the lookups themselves.
class TokenTable {
 public:
  void reserve(size_t ids, size_t bytes);
  void set(int32_t id, std::string_view text);  // a later set wins in both directions
  int32_t find(std::string_view text) const;    // -1 if none
  std::string_view text(int32_t id) const {
    return has(id) ? view(off_[size_t(id)], len_[size_t(id)]) : std::string_view();
  }
  bool has(int32_t id) const {
    return id >= 0 && size_t(id) < len_.size() && len_[size_t(id)] != kNone;
  }
  size_t count() const { return count_; }          // ids with a spelling
  size_t id_limit() const { return len_.size(); }  // 1 + the largest id

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  // A slot holds no spelling of its own: the id's (off_, len_) are compared on a tag match. 8 bytes
  // a slot, at a load factor <= 1/2, keep the table at 4 MiB for Qwen3's 151k tokens.
  struct Slot {
    uint32_t tag = 0;
    int32_t id = -1;  // -1: empty
  };
  std::string_view view(uint32_t off, uint32_t len) const {
    return std::string_view(arena_.data() + off, len);
  }
  void grow();
  std::string arena_;
  std::vector<uint32_t> off_, len_;
  std::vector<Slot> slots_;
  // Spellings whose id was set again to another one. They still find that id, as `tokenizers`
  // keeps a vocab entry an added token renames; a slot only knows its id's latest spelling.
  // Usually empty; hashed, since a hostile vocab can rename an id 150k times.
  std::unordered_map<std::string, int32_t> renamed_;
  size_t mask_ = 0, used_ = 0, count_ = 0;
};

// Open-addressing map from a pair of token ids to (merge rank, merged id).
class MergeMap {
 public:
  void reserve(size_t n);
  void set(int32_t a, int32_t b, int32_t rank, int32_t id);  // later entries overwrite, like HF
  // Returns false if the pair has no merge.
  bool get(int32_t a, int32_t b, int32_t* rank, int32_t* id) const {
    uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
    size_t i = size_t((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
    for (;;) {
      const Slot& s = slots_[i];
      if (s.key == key) {
        *rank = s.rank;
        *id = s.id;
        return true;
      }
      if (s.key == kEmpty) return false;
      i = (i + 1) & mask_;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  struct Slot {
    uint64_t key = kEmpty;
    int32_t rank = 0, id = 0;
  };
  std::vector<Slot> slots_ = std::vector<Slot>(1);
  size_t mask_ = 0;
  int shift_ = 63;  // Fibonacci hashing: the top bits of key * golden ratio pick the slot
};

// Bounded cache of BPE results per piece, split into independently locked shards so concurrent
// encodes rarely contend; a busy shard is skipped rather than waited for.
class PieceCache {
 public:
  PieceCache();
  ~PieceCache();
  // Appends the cached ids for `key` to `out`; false on a miss.
  bool lookup(uint64_t h, std::string_view key, std::vector<int32_t>& out);
  void insert(uint64_t h, std::string_view key, const int32_t* ids, size_t n);

 private:
  struct Shard;
  std::unique_ptr<Shard[]> shards_;
};

// Per-call scratch for the BPE merge loop, reused across pieces to avoid allocations.
struct BpeScratch {
  struct Sym {
    int32_t id, prev, next;
    int32_t merged;  // id of the merge of this symbol and the next, when there is one
  };
  std::vector<Sym> syms;
  std::vector<uint64_t> tree;  // tournament tree of rank << 32 | position
};

// ---- The loaded tokenizer ----

struct Model {
  // Every id must be below this: the model's vocab_size when known, else a limit far above any
  // real vocabulary. Tables are sized by the largest id, so an id of 2^31 - 1 must not get there.
  int64_t id_bound = int64_t(1) << 24;
  std::string id_bound_source = "the largest vocabulary hearth accepts";
  // Vocabulary and added tokens: spelling (byte-level mapped, as in tokenizer.json) <-> id.
  TokenTable tokens;
  // What decode emits for id i: bytes[bytes_off[i], bytes_off[i + 1]).
  std::string bytes;
  std::vector<uint32_t> bytes_off;
  std::vector<uint8_t> special;

  int32_t byte_id[256];  // id of each single byte, -1 if the vocab lacks it
  int32_t unk_id = -1;
  bool fuse_unk = false;
  bool ignore_merges = false;
  MergeMap merges;

  bool nfc = false;
  std::vector<Regex> splits;
  AddedTokenSplitter added_raw;         // normalized=false: matched in the raw input
  AddedTokenSplitter added_normalized;  // normalized=true: matched after NFC

  std::string chat_template, eos_token, bos_token;

  mutable PieceCache cache;

  // Appends the BPE ids of one pre-tokenized piece (raw bytes, before byte-level mapping).
  void bpe(std::string_view piece, std::vector<int32_t>& out, BpeScratch& s) const;
  void bpe_uncached(std::string_view piece, std::vector<int32_t>& out, BpeScratch& s) const;
};

}  // namespace hearth::tok
