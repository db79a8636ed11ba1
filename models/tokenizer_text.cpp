// Text handling for the tokenizer: UTF-8 validation and lossy decoding, NFC, the pre-tokenizer
// regex, and added-token splitting.
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "models/tokenizer_impl.h"

namespace hearth::tok {

// ---- UTF-8 ----

// Rust's Utf8Chunks: after a lead byte, each following byte is accepted only while the sequence
// can still be valid, so an invalid run ends at the first byte that rules it out ("maximal
// subpart"), and the rejected byte starts the next chunk. Returns the end of the valid prefix of
// s[i..]; *bad_end is set past the invalid chunk that follows it (== return value at the end),
// and *truncated tells whether that chunk was cut short by the end of the input.
static size_t utf8_scan(std::string_view s, size_t i, size_t* bad_end, bool* truncated) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  auto at = [&](size_t k) -> unsigned { return k < n ? p[k] : 0u; };
  *truncated = false;
  while (i < n) {
    unsigned b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    bool ok = false;
    if (b >= 0xC2 && b <= 0xDF) {
      if ((at(j) & 0xC0) == 0x80) ++j, ok = true;
    } else if (b >= 0xE0 && b <= 0xEF) {
      unsigned c = at(j);
      bool second = (b == 0xE0)   ? (c >= 0xA0 && c <= 0xBF)
                    : (b == 0xED) ? (c >= 0x80 && c <= 0x9F)
                                  : (c >= 0x80 && c <= 0xBF);
      if (second) {
        ++j;
        if ((at(j) & 0xC0) == 0x80) ++j, ok = true;
      }
    } else if (b >= 0xF0 && b <= 0xF4) {
      unsigned c = at(j);
      bool second = (b == 0xF0)   ? (c >= 0x90 && c <= 0xBF)
                    : (b == 0xF4) ? (c >= 0x80 && c <= 0x8F)
                                  : (c >= 0x80 && c <= 0xBF);
      if (second) {
        ++j;
        if ((at(j) & 0xC0) == 0x80) {
          ++j;
          if ((at(j) & 0xC0) == 0x80) ++j, ok = true;
        }
      }
    }
    if (!ok) {
      *bad_end = j;
      *truncated = j >= n && b >= 0xC2 && b <= 0xF4;
      return i;
    }
    i = j;
  }
  *bad_end = n;
  return n;
}

bool utf8_valid(std::string_view s) {
  size_t bad_end;
  bool truncated;
  return utf8_scan(s, 0, &bad_end, &truncated) == s.size();
}

size_t utf8_lossy_append(std::string_view bytes, std::string& out, bool final) {
  size_t i = 0;
  while (i < bytes.size()) {
    size_t bad_end;
    bool truncated;
    size_t valid_end = utf8_scan(bytes, i, &bad_end, &truncated);
    out.append(bytes.data() + i, valid_end - i);
    if (valid_end == bytes.size()) return valid_end;
    if (truncated && !final) return valid_end;  // a later byte may still complete it
    out += "\xEF\xBF\xBD";
    i = bad_end;
  }
  return i;
}

uint32_t utf8_next(std::string_view s, size_t& i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  uint32_t b = p[i];
  if (b < 0x80) return ++i, b;
  if (b < 0xE0) {
    uint32_t cp = ((b & 0x1F) << 6) | (p[i + 1] & 0x3F);
    i += 2;
    return cp;
  }
  if (b < 0xF0) {
    uint32_t cp = ((b & 0x0F) << 12) | ((p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F);
    i += 3;
    return cp;
  }
  uint32_t cp =
      ((b & 0x07) << 18) | ((p[i + 1] & 0x3F) << 12) | ((p[i + 2] & 0x3F) << 6) | (p[i + 3] & 0x3F);
  i += 4;
  return cp;
}

void utf8_append(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// ---- NFC ----

// True when NFC can neither reorder, decompose nor compose `cp`, whatever surrounds it. That holds
// for code points with combining class 0, no canonical decomposition, and which are never the
// second half of a canonical composition. The second-half starters with class 0 (NFC_QC=Maybe) are
// Hangul jamo vowels/trailing consonants and a few vowel signs in the ranges excluded below; the
// supplementary planes below the emoji blocks are excluded wholesale to stay safe across Unicode
// versions.
static bool nfc_stable(uint32_t cp) {
  if (cp < 0x300) return true;
  if ((cp >= 0x0900 && cp <= 0x0DFF) || (cp >= 0x1000 && cp <= 0x109F) ||
      (cp >= 0x1100 && cp <= 0x11FF) || (cp >= 0x1B00 && cp <= 0x1B7F) ||
      (cp >= 0x10000 && cp <= 0x1EFFF)) {
    return false;
  }
  if (cp >= 0xAC00 && cp <= 0xD7A3) return true;  // Hangul syllables: composed already
  const utf8proc_property_t* p = utf8proc_get_property(utf8proc_int32_t(cp));
  if (p->combining_class != 0) return false;
  if (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) return false;  // canonical
  return true;
}

// A stable code point is also a normalization boundary: nothing before it can compose with it or
// anything after it, and it is never reordered. So only the runs from the last stable code point
// before an unstable one up to the next stable one need utf8proc; the rest is copied.
std::string_view nfc(std::string_view s, std::string& buf) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, last_stable = 0, copied = 0;
  bool changed = false;
  while (i < s.size()) {
    if (p[i] < 0x80) {
      last_stable = i++;
      continue;
    }
    size_t start = i;
    if (nfc_stable(utf8_next(s, i))) {
      last_stable = start;
      continue;
    }
    // Unstable: extend to the next stable code point (or the end) and normalize that run.
    size_t run_end = i;
    while (run_end < s.size()) {
      size_t k = run_end;
      if (p[k] < 0x80 || nfc_stable(utf8_next(s, k))) break;
      run_end = k;
    }
    size_t run_begin = std::max(last_stable, copied);
    if (!changed) buf.clear(), changed = true;
    buf.append(s.data() + copied, run_begin - copied);
    utf8proc_uint8_t* out = nullptr;
    utf8proc_ssize_t n = utf8proc_map(p + run_begin, utf8proc_ssize_t(run_end - run_begin), &out,
                                      utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n < 0) fail("tokenizer: NFC normalization failed: ", utf8proc_errmsg(n));
    buf.append(reinterpret_cast<const char*>(out), size_t(n));
    std::free(out);
    copied = i = run_end;
  }
  if (!changed) return s;
  buf.append(s.data() + copied, s.size() - copied);
  return buf;
}

// ---- Regex ----

// Unicode White_Space, the set Rust's `char::is_whitespace` and the reference regex use for \s.
static const char kWhiteSpaceBody[] =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

static bool is_white_space(uint32_t c) {
  return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

std::string rewrite_whitespace(const std::string& p, const std::string& where) {
  std::string out;
  bool in_class = false;
  size_t i = 0;
  while (i < p.size()) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char d = p[i + 1];
      if (d == 's') {
        out += in_class ? std::string(kWhiteSpaceBody) : "[" + std::string(kWhiteSpaceBody) + "]";
      } else if (d == 'S') {
        if (in_class) fail(where, ": \\S inside a character class is not supported");
        out += "[^" + std::string(kWhiteSpaceBody) + "]";
      } else if (d == 'Q') {  // \Q...\E quotes everything up to \E verbatim
        size_t e = p.find("\\E", i + 2);
        size_t stop = e == std::string::npos ? p.size() : e + 2;
        out.append(p, i, stop - i);
        i = stop;
        continue;
      } else {
        out += c;
        out += d;
      }
      i += 2;
      continue;
    }
    if (in_class) {
      if (c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // POSIX [:name:]
        size_t e = p.find(":]", i + 2);
        size_t stop = e == std::string::npos ? p.size() : e + 2;
        out.append(p, i, stop - i);
        i = stop;
        continue;
      }
      if (c == ']') in_class = false;
      out += c;
      ++i;
      continue;
    }
    out += c;
    ++i;
    if (c == '[') {
      in_class = true;
      if (i < p.size() && p[i] == '^') out += p[i++];
      if (i < p.size() && p[i] == ']') out += p[i++];  // a leading ] is literal
    }
  }
  return out;
}

Regex::Regex(const std::string& pattern, const std::string& where) {
  std::string pat = rewrite_whitespace(pattern, where);
  int err = 0;
  PCRE2_SIZE off = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(), PCRE2_UTF | PCRE2_UCP,
                        &err, &off, nullptr);
  if (!code_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail(where, ": cannot compile regex at offset ", off, ": ", reinterpret_cast<char*>(msg));
  }
  // JIT is an optimisation only: without it (unsupported platform) the interpreter is used.
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() {
  if (code_) pcre2_code_free(code_);
}

void Regex::split(std::string_view s, size_t begin, size_t end, pcre2_match_data* md,
                  std::vector<std::pair<uint32_t, uint32_t>>& out) const {
  const auto* subj = reinterpret_cast<PCRE2_SPTR>(s.data() + begin);
  const size_t len = end - begin;
  size_t start = 0, prev = 0;
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  while (start <= len) {
    int rc =
        jit_ ? pcre2_jit_match(code_, subj, len, start, 0, md, nullptr) : PCRE2_ERROR_JIT_BADOPTION;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_JIT_BADOPTION) {
      // Very long runs can exhaust the JIT stack; the interpreter keeps its frames on the heap.
      rc = pcre2_match(code_, subj, len, start, PCRE2_NO_JIT | PCRE2_NO_UTF_CHECK, md, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail("tokenizer: pre-tokenizer regex failed: ", reinterpret_cast<char*>(msg));
    }
    size_t ms = ov[0], me = ov[1];
    if (ms > prev) out.emplace_back(uint32_t(begin + prev), uint32_t(begin + ms));
    if (me > ms) {
      out.emplace_back(uint32_t(begin + ms), uint32_t(begin + me));
      start = me;
    } else {  // an empty match: step over one character so the search makes progress
      if (me >= len) break;
      start = me;
      utf8_next(std::string_view(s.data() + begin, len), start);
    }
    prev = me;
  }
  if (prev < len) out.emplace_back(uint32_t(begin + prev), uint32_t(end));
}

// ---- Added tokens ----

// Rust's char::is_alphanumeric plus '_', the "word" test of `single_word` tokens.
static bool is_word_char(uint32_t c) {
  if (c == '_') return true;
  utf8proc_category_t cat = utf8proc_category(utf8proc_int32_t(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

static uint32_t last_cp(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i > 0) --i;
  return utf8_next(s, i);
}

void AddedTokenSplitter::add(const AddedToken& t, std::string match_text) {
  if (match_text.empty()) return;  // can never match, as in `tokenizers`
  tokens_.push_back({std::move(match_text), t});
  unsigned char first = static_cast<unsigned char>(tokens_.back().text[0]);
  single_first_ = (tokens_.size() == 1 || single_first_ == first) ? first : -1;
  auto& list = by_first_[first];
  list.push_back(uint32_t(tokens_.size() - 1));
  // Longest first, so the first hit at a position is the leftmost-longest match.
  for (size_t k = list.size() - 1; k > 0; --k) {
    if (tokens_[list[k]].text.size() <= tokens_[list[k - 1]].text.size()) break;
    std::swap(list[k], list[k - 1]);
  }
}

void AddedTokenSplitter::split(std::string_view s, uint32_t begin, uint32_t end,
                               std::vector<Segment>& out) const {
  uint32_t pos = begin, text_start = begin;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  if (tokens_.empty()) pos = end;
  while (pos < end) {
    if (single_first_ >= 0) {  // the common case (all Qwen tokens start with '<'): use memchr
      const void* hit = std::memchr(p + pos, single_first_, end - pos);
      if (!hit) break;
      pos = uint32_t(static_cast<const unsigned char*>(hit) - p);
    }
    const auto& list = by_first_[p[pos]];
    const Entry* hit = nullptr;
    for (uint32_t k : list) {
      const Entry& e = tokens_[k];
      if (e.text.size() <= end - pos &&
          std::memcmp(s.data() + pos, e.text.data(), e.text.size()) == 0) {
        hit = &e;
        break;
      }
    }
    if (!hit) {
      ++pos;
      continue;
    }
    uint32_t ms = pos, me = pos + uint32_t(hit->text.size());
    pos = me;  // like find_iter, the search resumes after this match even if it is discarded
    const AddedToken& t = hit->tok;
    if (t.single_word) {
      bool left_ok = ms == begin || !is_word_char(last_cp(s.substr(begin, ms - begin)));
      size_t k = me;
      bool right_ok = me == end || !is_word_char(utf8_next(s.substr(0, end), k));
      if (!left_ok || !right_ok) continue;
    }
    if (t.lstrip) {
      uint32_t ns = ms;
      while (ns > text_start) {
        std::string_view left = s.substr(text_start, ns - text_start);
        uint32_t c = last_cp(left);
        if (!is_white_space(c)) break;
        size_t w = 1;
        while ((static_cast<unsigned char>(left[left.size() - w]) & 0xC0) == 0x80) ++w;
        ns -= uint32_t(w);
      }
      ms = ns;
    }
    if (t.rstrip) {
      size_t k = me;
      while (k < end) {
        size_t next = k;
        if (!is_white_space(utf8_next(s.substr(0, end), next))) break;
        k = next;
      }
      me = uint32_t(k);
      pos = me;
    }
    if (ms > text_start) out.push_back({text_start, ms, -1});
    out.push_back({ms, me, t.id});
    text_start = me;
  }
  if (end > text_start) out.push_back({text_start, end, -1});
}

}  // namespace hearth::tok
