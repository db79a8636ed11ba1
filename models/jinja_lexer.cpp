// The lexer reproduces jinja2's whitespace handling as transformers configures it: trim_blocks
// (drop the first newline after a block or comment tag), lstrip_blocks (drop spaces and tabs before
// a block or comment tag that starts its line), `-`/`+` modifiers, newline normalisation and the
// removal of one trailing newline (keep_trailing_newline=False).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "models/jinja_internal.h"

namespace hearth::jinja::detail {

void syntax_fail(int line, int col, const std::string& msg) {
  fail("template line ", line, " column ", col, ": ", msg);
}

namespace {

class Lexer {
 public:
  explicit Lexer(const std::string& source) {
    // jinja2 splits on \r\n, \r and \n and joins with \n before lexing.
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0, n = src_.size();
    while (pos < n) {
      size_t idx = find_open(pos);
      if (idx == std::string::npos) {
        emit(Tok::Data, src_.substr(pos), pos);
        break;
      }
      char kind = src_[idx + 1];
      size_t p = idx + 2;
      char sign = 0;
      if (p < n && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      std::string text = src_.substr(pos, idx - pos);
      size_t after_raw = 0;
      if (kind == '%' && raw_begin(p, &after_raw)) {
        emit(Tok::Data, lstrip(std::move(text), sign, false), pos);
        pos = after_raw;
        lex_raw(&pos, idx);
        continue;
      }
      emit(Tok::Data, lstrip(std::move(text), sign, kind == '{'), pos);
      if (kind == '#') {
        pos = lex_comment(p, idx);
      } else {
        emit(kind == '{' ? Tok::VarBegin : Tok::BlockBegin, "", idx);
        pos = lex_tag(p, kind == '%', idx);
      }
      line_starting_ = pos > 0 && src_[pos - 1] == '\n';
    }
    Token eof;
    eof.type = Tok::Eof;
    locate(src_.size(), &eof.line, &eof.col);
    toks_.push_back(std::move(eof));
    return std::move(toks_);
  }

 private:
  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> toks_;
  // Whether the previous tag ended a line; lstrip_blocks also applies at the start of the text.
  bool line_starting_ = true;

  void locate(size_t off, int* line, int* col) const {
    size_t l = size_t(std::upper_bound(line_starts_.begin(), line_starts_.end(), off) -
                      line_starts_.begin()) -
               1;
    *line = int(l + 1);
    // Tokens come in order, so a column counts on from the previous one on the same line: counting
    // from the line's start each time made a one-line template quadratic to lex.
    size_t from = line_starts_[l], base = 0;
    if (last_line_ == l && last_off_ <= off && last_off_ >= from)
      from = last_off_, base = last_col_;
    last_col_ = base + utf8_length(std::string_view(src_).substr(from, off - from));
    last_off_ = off;
    last_line_ = l;
    *col = int(last_col_) + 1;
  }
  mutable size_t last_off_ = 0, last_col_ = 0, last_line_ = SIZE_MAX;

  [[noreturn]] void error(size_t off, const std::string& msg) const {
    int line, col;
    locate(off, &line, &col);
    syntax_fail(line, col, msg);
  }

  void emit(Tok type, std::string value, size_t off) {
    if (type == Tok::Data && value.empty()) return;
    Token t;
    t.type = type;
    t.value = std::move(value);
    locate(off, &t.line, &t.col);
    toks_.push_back(std::move(t));
  }

  size_t find_open(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    return std::string::npos;
  }

  // Byte length of the Python whitespace character at `p`, 0 if there is none.
  size_t ws_at(size_t p) const {
    if (p >= src_.size()) return 0;
    unsigned char c = static_cast<unsigned char>(src_[p]);
    if (c < 0x80) return py_isspace(c) ? 1 : 0;
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    std::u32string u = utf8_decode(std::string_view(src_).substr(p, len));
    return u.size() == 1 && py_isspace(u[0]) ? len : 0;
  }
  size_t skip_ws(size_t p) const {
    while (size_t k = ws_at(p)) p += k;
    return p;
  }
  bool at(size_t p, const char* s) const {
    return src_.compare(p, std::char_traits<char>::length(s), s) == 0;
  }

  static std::string rstrip(const std::string& text) {
    std::u32string u = utf8_decode(text);
    while (!u.empty() && py_isspace(u.back())) u.pop_back();
    return utf8_encode(u);
  }

  // The text before a tag: `-` strips all whitespace, lstrip_blocks strips the indentation of a
  // block or comment tag that has only whitespace before it on its line.
  std::string lstrip(std::string text, char sign, bool is_variable) const {
    if (sign == '-') return rstrip(text);
    if (sign == '+' || is_variable) return text;
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting_) return text;
    std::u32string tail = utf8_decode(std::string_view(text).substr(l_pos));
    if (!tail.empty() && std::all_of(tail.begin(), tail.end(), py_isspace)) text.resize(l_pos);
    return text;
  }

  // `{% raw %}`: on a match, moves *pos past the opening tag.
  bool raw_begin(size_t p, size_t* pos) const {
    size_t q = skip_ws(p);
    if (!at(q, "raw")) return false;
    q = skip_ws(q + 3);
    if (at(q, "-%}")) {
      *pos = skip_ws(q + 3);
      return true;
    }
    if (at(q, "%}")) {
      *pos = q + 2;  // jinja2 applies no trim_blocks to the raw opening tag
      return true;
    }
    return false;
  }

  void lex_raw(size_t* pos, size_t open) {
    size_t start = *pos;
    for (size_t i = src_.find("{%", start); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t p = i + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      p = skip_ws(p);
      if (!at(p, "endraw")) continue;
      p = skip_ws(p + 6);
      size_t end;
      if (at(p, "+%}"))
        end = p + 3;
      else if (at(p, "-%}"))
        end = skip_ws(p + 3);
      else if (at(p, "%}"))
        end = p + 2 + (at(p + 2, "\n") ? 1 : 0);
      else
        continue;
      line_starting_ = start > 0 && src_[start - 1] == '\n';
      emit(Tok::Data, lstrip(src_.substr(start, i - start), sign, false), start);
      *pos = end;
      line_starting_ = src_[end - 1] == '\n';
      return;
    }
    error(open, "Missing end of raw directive");
  }

  size_t lex_comment(size_t p, size_t open) const {
    size_t q = src_.find("#}", p);
    if (q == std::string::npos) error(open, "Missing end of comment tag");
    char sign = q > p && (src_[q - 1] == '-' || src_[q - 1] == '+') ? src_[q - 1] : 0;
    size_t end = q + 2;
    if (sign == '-')
      end = skip_ws(end);
    else if (!sign && at(end, "\n"))
      ++end;
    return end;
  }

  size_t lex_tag(size_t p, bool block, size_t open) {
    std::string stack;  // open brackets; an end delimiter only counts when it is empty
    for (;;) {
      p = skip_ws(p);
      if (p >= src_.size())
        error(open, block ? "unexpected end of template, expected end of statement block"
                          : "unexpected end of template, expected end of print statement");
      if (stack.empty()) {
        if (block) {
          if (at(p, "-%}")) return end_tag(Tok::BlockEnd, p, skip_ws(p + 3));
          if (at(p, "+%}")) return end_tag(Tok::BlockEnd, p, p + 3);
          if (at(p, "%}")) return end_tag(Tok::BlockEnd, p, p + 2 + (at(p + 2, "\n") ? 1 : 0));
        } else {
          if (at(p, "-}}")) return end_tag(Tok::VarEnd, p, skip_ws(p + 3));
          if (at(p, "}}")) return end_tag(Tok::VarEnd, p, p + 2);
        }
      }
      p = lex_token(p, &stack);
    }
  }

  size_t end_tag(Tok type, size_t p, size_t end) {
    emit(type, "", p);
    return end;
  }

  size_t lex_token(size_t p, std::string* stack_ptr) {
    std::string& stack = *stack_ptr;
    char c = src_[p];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = p;
      while (e < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
        ++e;
      emit(Tok::Name, src_.substr(p, e - p), p);
      return e;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number(p);
    if (c == '\'' || c == '"') return lex_string(p);
    static const char* ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};
    for (const char* op : ops) {
      if (!at(p, op)) continue;
      std::string s = op;
      if (s == "(" || s == "[" || s == "{") {
        stack += s;
      } else if (s == ")" || s == "]" || s == "}") {
        char want = s == ")" ? '(' : s == "]" ? '[' : '{';
        if (stack.empty()) error(p, "unexpected '" + s + "'");
        if (stack.back() != want)
          error(p, "unexpected '" + s + "', expected '" +
                       (stack.back() == '('   ? ")"
                        : stack.back() == '[' ? "]"
                                              : "}") +
                       "'");
        stack.pop_back();
      }
      emit(Tok::Op, s, p);
      return p + s.size();
    }
    error(p, std::string("unexpected char '") + c + "'");
  }

  size_t digits(size_t p) const {
    // digits with single underscores between them, as Python number literals allow
    size_t e = p;
    while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
      ++e;
      if (e + 1 < src_.size() && src_[e] == '_' &&
          std::isdigit(static_cast<unsigned char>(src_[e + 1])))
        ++e;
    }
    return e;
  }

  size_t lex_number(size_t p) {
    auto strip = [](std::string s) {
      s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
      return s;
    };
    if (src_[p] == '0' && p + 1 < src_.size() && std::strchr("xXoObB", src_[p + 1])) {
      int base = std::strchr("xX", src_[p + 1]) ? 16 : std::strchr("oO", src_[p + 1]) ? 8 : 2;
      size_t e = p + 2;
      while (e < src_.size() &&
             (std::isxdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
        ++e;
      std::string body = strip(src_.substr(p + 2, e - p - 2));
      emit(Tok::Int, src_.substr(p, e - p), p);
      toks_.back().ival = std::strtoll(body.c_str(), nullptr, base);
      return e;
    }
    size_t e = digits(p);
    bool is_float = false;
    // jinja2 refuses a float right after a dot so that `x.0.1` is two item lookups.
    bool after_dot = p > 0 && src_[p - 1] == '.';
    if (!after_dot && e + 1 < src_.size() && src_[e] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      e = digits(e + 1);
      is_float = true;
    }
    if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t q = e + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        e = digits(q);
        is_float = true;
      }
    }
    std::string text = strip(src_.substr(p, e - p));
    if (is_float) {
      emit(Tok::Float, text, p);
      toks_.back().fval = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      long long v = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) error(p, "integer literal too large: " + text);
      emit(Tok::Int, text, p);
      toks_.back().ival = v;
    }
    return e;
  }

  // Decodes like Python's unicode-escape codec, which jinja2 applies to string literals.
  size_t lex_string(size_t p) {
    char quote = src_[p];
    std::string out;
    size_t i = p + 1;
    auto hex = [&](size_t at_, int count) {
      if (at_ + size_t(count) > src_.size()) error(at_, "truncated escape in string literal");
      uint32_t v = 0;
      for (int k = 0; k < count; ++k) {
        char h = src_[at_ + size_t(k)];
        if (!std::isxdigit(static_cast<unsigned char>(h)))
          error(at_, "truncated escape in string literal");
        v = v * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(h))
                                  ? h - '0'
                                  : (std::tolower(h) - 'a' + 10));
      }
      return v;
    };
    for (;; ++i) {
      if (i >= src_.size()) error(p, std::string("unexpected char '") + quote + "'");
      char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (++i >= src_.size()) error(p, std::string("unexpected char '") + quote + "'");
      char e = src_[i];
      switch (e) {
        case '\n':
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'v':
          out += '\v';
          break;
        case 'x':
          utf8_append(out, hex(i + 1, 2));
          i += 2;
          break;
        case 'u':
          utf8_append(out, hex(i + 1, 4));
          i += 4;
          break;
        case 'U':
          utf8_append(out, hex(i + 1, 8));
          i += 8;
          break;
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = 0;
            int k = 0;
            while (k < 3 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7')
              v = v * 8 + uint32_t(src_[i++] - '0'), ++k;
            --i;
            utf8_append(out, v);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    emit(Tok::String, std::move(out), p);
    return i + 1;
  }
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) {
  return Lexer(source).run();
}

}  // namespace hearth::jinja::detail
