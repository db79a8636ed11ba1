// jinja2's builtin filters plus transformers' tojson (Python's json.dumps, no HTML escaping).
// Filters that give a generator in jinja2 (map, select, unique, ...) give an Iter value, which is
// computed eagerly; only a template that relies on an error inside a never-consumed generator can
// tell the difference.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "models/jinja_internal.h"

namespace hearth::jinja::detail {

using K = Value::Kind;

namespace {

using FilterFn = Value (*)(Interp&, const Value&, CallArgs&);

// make_attrgetter: "a.b.0" looks up each part with item-first access, digits as indices.
Value attr_path(const Value& item, const Value& attribute) {
  if (attribute.is_int()) return get_item(item, attribute);
  std::string path = to_str(attribute);
  Value cur = item;
  size_t start = 0;
  for (;;) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = get_item(cur, digits ? make_int(std::stoll(part)) : make_str(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// What jinja2 returns as a Python generator.
Value make_gen(List items) {
  return make_iter(ListBox::Flavor::Generator, std::move(items));
}

Value fold_case(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.kind == K::String ? make_str(py_lower(v.str())) : v;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Value safe_str(std::string s) {
  Value v = make_str(std::move(s));
  v.safe = true;
  return v;
}

// Python float(str): surrounding whitespace allowed, underscores between digits, inf/nan words.
bool parse_float(const std::string& text, double* out) {
  std::string s = py_strip(text, nullptr, true, true);
  std::string t;
  for (size_t k = 0; k < s.size(); ++k)
    if (s[k] != '_') t += s[k];
  std::string low = py_lower(t);
  std::string body = low.size() && (low[0] == '+' || low[0] == '-') ? low.substr(1) : low;
  if (body == "inf" || body == "infinity" || body == "nan") {
    double v = body == "nan" ? NAN : INFINITY;
    *out = low[0] == '-' ? -v : v;
    return true;
  }
  if (t.empty() || t.find_first_not_of("0123456789+-.eE") != std::string::npos) return false;
  char* end = nullptr;
  *out = std::strtod(t.c_str(), &end);
  return end && *end == '\0';
}

bool parse_int(const std::string& text, int base, int64_t* out) {
  std::string s = py_strip(text, nullptr, true, true);
  bool neg = false;
  size_t k = 0;
  if (k < s.size() && (s[k] == '+' || s[k] == '-')) neg = s[k++] == '-';
  if (base == 16 && s.compare(k, 2, "0x") == 0) k += 2;
  if (base == 8 && s.compare(k, 2, "0o") == 0) k += 2;
  if (base == 2 && s.compare(k, 2, "0b") == 0) k += 2;
  if (k >= s.size()) return false;
  int64_t v = 0;
  for (; k < s.size(); ++k) {
    char c = s[k];
    if (c == '_') continue;
    int d = std::isdigit(static_cast<unsigned char>(c))   ? c - '0'
            : std::isalpha(static_cast<unsigned char>(c)) ? std::tolower(c) - 'a' + 10
                                                          : 99;
    if (d >= base) return false;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return false;
  }
  *out = neg ? -v : v;
  return true;
}

// Python's round(x, n) rounds the exact binary value half-to-even; printf does the same.
double py_round(double x, int64_t n) {
  if (!std::isfinite(x)) return x;
  if (n == 0) return std::nearbyint(x);
  char buf[512];
  if (n > 0) {
    std::snprintf(buf, sizeof buf, "%.*f", int(std::min<int64_t>(n, 300)), x);
    return std::strtod(buf, nullptr);
  }
  double p = std::pow(10.0, double(-n));
  return std::nearbyint(x / p) * p;
}

std::vector<std::pair<Value, Value>> sorted_items(const List& items, const Value& attribute,
                                                  bool case_sensitive, bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& v : items)
    keyed.emplace_back(fold_case(attribute.is_none() ? v : attr_path(v, attribute), case_sensitive),
                       v);
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& x, const auto& y) {
    return reverse ? py_compare(y.first, x.first, "<") < 0 : py_compare(x.first, y.first, "<") < 0;
  });
  return keyed;
}

Value f_tojson(Interp&, const Value& v, CallArgs& a) {
  Value ensure_ascii = a.take(0, "ensure_ascii", make_bool(false));
  Value indent = a.take(1, "indent", make_none());
  Value separators = a.take(2, "separators", make_none());
  Value sort_keys = a.take(3, "sort_keys", make_bool(false));
  a.finish("tojson");
  JsonDumpOptions opt;
  opt.ensure_ascii = truthy(ensure_ascii);
  opt.sort_keys = truthy(sort_keys);
  if (!indent.is_none()) {
    opt.has_indent = true;
    opt.item_sep = ",";
    if (indent.kind == K::String)
      opt.indent = indent.str();
    else if (indent.is_int() && indent.as_int() > int64_t(Limits{}.max_value))
      rt_fail("MemoryError: a tojson indent of ", std::to_string(indent.as_int()), " (at most ",
              std::to_string(Limits{}.max_value), ")");
    else if (indent.is_int())
      opt.indent = std::string(size_t(std::max<int64_t>(0, indent.as_int())), ' ');
    else
      rt_fail("TypeError: tojson indent must be an int or a string");
  }
  if (!separators.is_none()) {
    if (!separators.is_seq() || separators.items().size() != 2)
      rt_fail("ValueError: tojson separators must be an (item_separator, key_separator) pair");
    opt.item_sep = to_str(separators.items()[0]);
    opt.key_sep = to_str(separators.items()[1]);
  }
  std::string out;
  dump_json(v, out, opt);
  return make_str(std::move(out));
}

Value f_default(Interp&, const Value& v, CallArgs& a) {
  Value def = a.take(0, "default_value", make_str(""));
  bool boolean = truthy(a.take(1, "boolean", make_bool(false)));
  a.finish("default");
  return v.is_undefined() || (boolean && !truthy(v)) ? def : v;
}

Value f_length(Interp&, const Value& v, CallArgs& a) {
  a.finish("length");
  return make_int(py_len(v));
}

Value f_join(Interp&, const Value& v, CallArgs& a) {
  std::string sep = to_str(a.take(0, "d", make_str("")));
  Value attribute = a.take(1, "attribute", make_none());
  a.finish("join");
  std::string out;
  List items = iterate(v);
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) out += sep;
    out += to_str(attribute.is_none() ? items[k] : attr_path(items[k], attribute));
  }
  return make_str(std::move(out));
}

Value f_first(Interp&, const Value& v, CallArgs& a) {
  a.finish("first");
  if (v.is_seq())
    return v.items().empty() ? make_undefined("No first item, sequence was empty.")
                             : v.items().front();
  if (v.kind == K::Iter && iter_box(v).flavor == ListBox::Flavor::Generator) {
    ListBox& b = iter_box(v);  // next(generator) takes a single item
    if (b.consumed >= b.items.size()) return make_undefined("No first item, sequence was empty.");
    return b.items[b.consumed++];
  }
  List items = iterate(v);
  return items.empty() ? make_undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Interp&, const Value& v, CallArgs& a) {
  a.finish("last");
  if (v.is_seq())
    return v.items().empty() ? make_undefined("No last item, sequence was empty.")
                             : v.items().back();
  if (v.kind == K::Iter && iter_box(v).flavor == ListBox::Flavor::Generator)
    rt_fail("TypeError: 'generator' object is not reversible");
  List items = iterate(v);
  return items.empty() ? make_undefined("No last item, sequence was empty.") : items.back();
}

Value f_list(Interp&, const Value& v, CallArgs& a) {
  a.finish("list");
  return make_list(iterate(v));
}

Value f_items(Interp&, const Value& v, CallArgs& a) {
  a.finish("items");
  if (v.is_undefined()) return make_gen({});
  if (v.kind != K::Dict) rt_fail("Can only get item pairs from a mapping.");
  List out;
  for (const auto& kv : v.dict().entries) out.push_back(make_tuple({kv.first, kv.second}));
  return make_gen(std::move(out));
}

Value f_string(Interp&, const Value& v, CallArgs& a) {
  a.finish("string");
  return v.kind == K::String ? v : make_str(to_str(v));
}

Value f_int(Interp&, const Value& v, CallArgs& a) {
  Value def = a.take(0, "default", make_int(0));
  int64_t base = a.take(1, "base", make_int(10)).as_int();
  a.finish("int");
  int64_t i;
  double d;
  if (v.kind == K::String) {
    if (parse_int(v.str(), int(base), &i)) return make_int(i);
    if (parse_float(v.str(), &d) && std::isfinite(d)) return make_int(int64_t(d));
    return def;
  }
  if (v.is_int()) return make_int(v.as_int());
  if (v.kind == K::Float && std::isfinite(v.f)) return make_int(int64_t(v.f));
  return def;
}

Value f_float(Interp&, const Value& v, CallArgs& a) {
  Value def = a.take(0, "default", make_float(0.0));
  a.finish("float");
  double d;
  if (v.is_number()) return make_float(v.as_float());
  if (v.kind == K::String && parse_float(v.str(), &d)) return make_float(d);
  return def;
}

Value f_abs(Interp&, const Value& v, CallArgs& a) {
  a.finish("abs");
  if (v.kind == K::Float) return make_float(std::fabs(v.f));
  if (v.is_int()) return make_int(std::llabs(v.as_int()));
  rt_fail("TypeError: bad operand type for abs(): '", type_name(v), "'");
}

Value f_round(Interp&, const Value& v, CallArgs& a) {
  int64_t precision = a.take(0, "precision", make_int(0)).as_int();
  std::string method = to_str(a.take(1, "method", make_str("common")));
  a.finish("round");
  if (!v.is_number()) rt_fail("TypeError: type ", type_name(v), " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_int() && precision >= 0) return make_int(v.as_int());
    if (v.is_int() && precision > -19) {
      // round(int, -n) stays an int, rounding half to even.
      int64_t p = 1;
      for (int64_t k = 0; k < -precision; ++k) p *= 10;
      int64_t x = v.as_int(), q = x / p, r = x % p;
      if (r < 0) r += p, --q;
      if (2 * r > p || (2 * r == p && (q & 1))) ++q;
      return make_int(q * p);
    }
    return make_float(py_round(v.as_float(), precision));
  }
  if (method != "ceil" && method != "floor") rt_fail("method must be common, ceil or floor");
  double p = std::pow(10.0, double(precision));
  double x = v.as_float() * p;
  return make_float((method == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}

Value f_trim(Interp&, const Value& v, CallArgs& a) {
  Value chars = a.take(0, "chars", make_none());
  a.finish("trim");
  std::string cs = chars.is_none() ? "" : to_str(chars);
  return make_str(py_strip(to_str(v), chars.is_none() ? nullptr : &cs, true, true));
}

Value f_upper(Interp&, const Value& v, CallArgs& a) {
  a.finish("upper");
  return make_str(py_upper(to_str(v)));
}
Value f_lower(Interp&, const Value& v, CallArgs& a) {
  a.finish("lower");
  return make_str(py_lower(to_str(v)));
}
Value f_capitalize(Interp&, const Value& v, CallArgs& a) {
  a.finish("capitalize");
  return make_str(py_capitalize(to_str(v)));
}

// jinja2's title filter: every word after whitespace, '-', '(', '{', '[' or '<' starts upper.
Value f_title(Interp&, const Value& v, CallArgs& a) {
  a.finish("title");
  std::u32string u = utf8_decode(to_str(v));
  auto is_sep = [](char32_t c) {
    return py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  std::string out;
  bool word_start = true;
  for (char32_t c : u) {
    if (is_sep(c)) {
      word_start = true;
      utf8_append(out, c);
    } else {
      out += word_start ? py_upper(utf8_encode(std::u32string(1, c)))
                        : py_lower(utf8_encode(std::u32string(1, c)));
      word_start = false;
    }
  }
  return make_str(std::move(out));
}

Value f_replace(Interp&, const Value& v, CallArgs& a) {
  std::string old = to_str(a.take(0, "old")), repl = to_str(a.take(1, "new"));
  Value count = a.take(2, "count", make_none());
  a.finish("replace");
  return make_str(py_replace(to_str(v), old, repl, count.is_none() ? -1 : count.as_int()));
}

Value select_or_reject(Interp& in, const Value& v, CallArgs& a, bool select, bool by_attr,
                       const char* fn) {
  if (!truthy(v)) return make_gen({});
  size_t off = 0;
  Value attribute;
  if (by_attr) {
    if (a.pos.empty()) rt_fail("TypeError: ", fn, "() requires an attribute name");
    attribute = a.pos[0];
    off = 1;
  }
  std::string test;
  bool has_test = a.pos.size() > off;
  if (has_test) test = to_str(a.pos[off]);
  CallArgs rest;
  if (has_test) rest.pos.assign(a.pos.begin() + long(off) + 1, a.pos.end());
  rest.kw = a.kw;
  List out;
  for (const Value& item : iterate(v)) {
    Value x = by_attr ? attr_path(item, attribute) : item;
    bool ok;
    if (has_test) {
      CallArgs args = rest;
      ok = apply_test(in, test, x, args);
    } else {
      ok = truthy(x);
    }
    if (ok == select) out.push_back(item);
  }
  return make_gen(std::move(out));
}

Value f_select(Interp& in, const Value& v, CallArgs& a) {
  return select_or_reject(in, v, a, true, false, "select");
}
Value f_reject(Interp& in, const Value& v, CallArgs& a) {
  return select_or_reject(in, v, a, false, false, "reject");
}
Value f_selectattr(Interp& in, const Value& v, CallArgs& a) {
  return select_or_reject(in, v, a, true, true, "selectattr");
}
Value f_rejectattr(Interp& in, const Value& v, CallArgs& a) {
  return select_or_reject(in, v, a, false, true, "rejectattr");
}

Value f_map(Interp& in, const Value& v, CallArgs& a) {
  if (!truthy(v)) return make_gen({});
  List out;
  if (a.pos.empty() && a.has(SIZE_MAX, "attribute")) {
    Value attribute = a.take(SIZE_MAX, "attribute");
    Value def = a.take(SIZE_MAX, "default", make_none());
    a.finish("map");
    for (const Value& item : iterate(v)) {
      Value x = attr_path(item, attribute);
      out.push_back(x.is_undefined() && !def.is_none() ? def : x);
    }
    return make_gen(std::move(out));
  }
  if (a.pos.empty()) rt_fail("map requires a filter argument");
  std::string filter = to_str(a.pos[0]);
  CallArgs rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (const Value& item : iterate(v)) {
    CallArgs args = rest;
    out.push_back(apply_filter(in, filter, item, args));
  }
  return make_gen(std::move(out));
}

Value f_unique(Interp&, const Value& v, CallArgs& a) {
  bool cs = truthy(a.take(0, "case_sensitive", make_bool(false)));
  Value attribute = a.take(1, "attribute", make_none());
  a.finish("unique");
  List out, seen;
  for (const Value& item : iterate(v)) {
    Value key = fold_case(attribute.is_none() ? item : attr_path(item, attribute), cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, key); }))
      continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return make_gen(std::move(out));
}

Value f_reverse(Interp&, const Value& v, CallArgs& a) {
  a.finish("reverse");
  if (v.kind == K::String) {
    std::u32string u = utf8_decode(v.str());
    std::reverse(u.begin(), u.end());
    return make_str(utf8_encode(u));
  }
  // reversed() gives an iterator; a generator cannot be reversed, so jinja2 makes it a list.
  bool gen = v.kind == K::Iter && iter_box(v).flavor == ListBox::Flavor::Generator;
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return gen ? make_list(std::move(items)) : make_gen(std::move(items));
}

Value f_sort(Interp&, const Value& v, CallArgs& a) {
  bool reverse = truthy(a.take(0, "reverse", make_bool(false)));
  bool cs = truthy(a.take(1, "case_sensitive", make_bool(false)));
  Value attribute = a.take(2, "attribute", make_none());
  a.finish("sort");
  List out;
  for (auto& kv : sorted_items(iterate(v), attribute, cs, reverse)) out.push_back(kv.second);
  return make_list(std::move(out));
}

Value min_max(const Value& v, CallArgs& a, bool want_max, const char* fn) {
  bool cs = truthy(a.take(0, "case_sensitive", make_bool(false)));
  Value attribute = a.take(1, "attribute", make_none());
  a.finish(fn);
  List items = iterate(v);
  if (items.empty()) return make_undefined("No aggregated item, sequence was empty.");
  auto keyed = sorted_items(items, attribute, cs, false);
  // Python's min/max keep the first of equal items.
  if (!want_max) return keyed.front().second;
  size_t best = 0;
  for (size_t k = 1; k < items.size(); ++k) {
    Value kk = fold_case(attribute.is_none() ? items[k] : attr_path(items[k], attribute), cs);
    Value kb = fold_case(attribute.is_none() ? items[best] : attr_path(items[best], attribute), cs);
    if (py_compare(kk, kb, ">") > 0) best = k;
  }
  return items[best];
}
Value f_min(Interp&, const Value& v, CallArgs& a) {
  return min_max(v, a, false, "min");
}
Value f_max(Interp&, const Value& v, CallArgs& a) {
  return min_max(v, a, true, "max");
}

Value f_sum(Interp&, const Value& v, CallArgs& a) {
  Value attribute = a.take(0, "attribute", make_none());
  Value total = a.take(1, "start", make_int(0));
  a.finish("sum");
  for (const Value& item : iterate(v)) {
    Value x = attribute.is_none() ? item : attr_path(item, attribute);
    if (!x.is_number() || !total.is_number())
      rt_fail("TypeError: unsupported operand type(s) for +: '", type_name(total), "' and '",
              type_name(x), "'");
    if (x.is_int() && total.is_int())
      total = make_int(total.as_int() + x.as_int());
    else
      total = make_float(total.as_float() + x.as_float());
  }
  return total;
}

Value f_dictsort(Interp&, const Value& v, CallArgs& a) {
  bool cs = truthy(a.take(0, "case_sensitive", make_bool(false)));
  std::string by = to_str(a.take(1, "by", make_str("key")));
  bool reverse = truthy(a.take(2, "reverse", make_bool(false)));
  a.finish("dictsort");
  if (v.kind != K::Dict) rt_fail("TypeError: dictsort expects a mapping");
  if (by != "key" && by != "value") rt_fail("You can only sort by either \"key\" or \"value\"");
  List pairs;
  for (const auto& kv : v.dict().entries) pairs.push_back(make_tuple({kv.first, kv.second}));
  List out;
  for (auto& kv : sorted_items(pairs, make_int(by == "key" ? 0 : 1), cs, reverse))
    out.push_back(kv.second);
  return make_list(std::move(out));
}

Value f_batch(Interp&, const Value& v, CallArgs& a) {
  int64_t n = a.take(0, "linecount").as_int();
  Value fill = a.take(1, "fill_with", make_none());
  a.finish("batch");
  if (n <= 0) rt_fail("batch size must be positive");
  List out, cur;
  for (const Value& item : iterate(v)) {
    cur.push_back(item);
    if (int64_t(cur.size()) == n) out.push_back(make_list(std::move(cur))), cur.clear();
  }
  if (!cur.empty()) {
    if (!fill.is_none())
      while (int64_t(cur.size()) < n) cur.push_back(fill);
    out.push_back(make_list(std::move(cur)));
  }
  return make_gen(std::move(out));
}

Value f_safe(Interp&, const Value& v, CallArgs& a) {
  a.finish("safe");
  return safe_str(to_str(v));
}

Value f_escape(Interp&, const Value& v, CallArgs& a) {
  a.finish("escape");
  if (v.kind == K::String && v.safe) return v;
  return safe_str(html_escape(to_str(v)));
}

Value f_forceescape(Interp&, const Value& v, CallArgs& a) {
  a.finish("forceescape");
  return safe_str(html_escape(to_str(v)));
}

Value f_indent(Interp&, const Value& v, CallArgs& a) {
  Value width = a.take(0, "width", make_int(4));
  bool first = truthy(a.take(1, "first", make_bool(false)));
  bool blank = truthy(a.take(2, "blank", make_bool(false)));
  a.finish("indent");
  // jinja2 appends "\n" to the value itself, which only works for strings.
  if (v.kind != K::String) rt_fail("TypeError: indent expects a string, got ", type_name(v));
  std::string pad =
      width.kind == K::String
          ? width.str()
          : std::string(size_t(checked_width(std::max<int64_t>(0, width.as_int()))), ' ');
  // jinja2 appends a newline first so that splitlines keeps a trailing empty line.
  std::vector<std::string> lines = py_splitlines(to_str(v) + "\n", false);
  if (!pad.empty() && lines.size() > Limits{}.max_value / pad.size())
    rt_fail("MemoryError: indenting ", std::to_string(lines.size()), " lines by ",
            std::to_string(pad.size()), " bytes each");
  std::string rv;
  for (size_t k = 0; k < lines.size(); ++k) {
    if (k) rv += "\n";
    if (k && (blank || !lines[k].empty())) rv += pad;
    rv += lines[k];
  }
  return make_str(first ? pad + rv : rv);
}

Value f_wordcount(Interp&, const Value& v, CallArgs& a) {
  a.finish("wordcount");
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8_decode(to_str(v))) {
    bool w = c == '_' || is_alnum_cp(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return make_int(n);
}

Value f_center(Interp& in, const Value& v, CallArgs& a) {
  Value width = a.take(0, "width", make_int(80));
  a.finish("center");
  CallArgs args;
  args.pos.push_back(width);
  return call_value(in, get_attr(make_str(to_str(v)), "center"), args);
}

Value f_truncate(Interp&, const Value& v, CallArgs& a) {
  int64_t length = a.take(0, "length", make_int(255)).as_int();
  bool killwords = truthy(a.take(1, "killwords", make_bool(false)));
  std::string end = to_str(a.take(2, "end", make_str("...")));
  Value leeway_v = a.take(3, "leeway", make_none());
  a.finish("truncate");
  int64_t leeway = leeway_v.is_none() ? 5 : leeway_v.as_int();
  std::u32string u = utf8_decode(to_str(v));
  int64_t end_len = utf8_length(end);
  if (length < end_len)
    rt_fail("expected length >= ", std::to_string(end_len), ", got ", std::to_string(length));
  if (int64_t(u.size()) <= length + leeway) return make_str(utf8_encode(u));
  std::u32string head = u.substr(0, size_t(length - end_len));
  if (!killwords) {
    size_t sp = head.rfind(U' ');
    if (sp != std::u32string::npos) head.resize(sp);
  }
  return make_str(utf8_encode(head) + end);
}

Value f_format(Interp&, const Value& v, CallArgs& a) {
  if (!a.pos.empty() && !a.kw.empty())
    rt_fail("can't handle positional and keyword arguments at the same time");
  if (!a.kw.empty()) {
    std::vector<std::pair<Value, Value>> entries;
    for (const auto& kv : a.kw) entries.emplace_back(make_str(kv.first), kv.second);
    return make_str(percent_format(to_str(v), make_dict(std::move(entries))));
  }
  return make_str(percent_format(to_str(v), make_tuple(a.pos)));
}

// Python getattr without the item fallback: on a dict only its methods are attributes.
Value f_attr(Interp&, const Value& v, CallArgs& a) {
  std::string name = to_str(a.take(0, "name"));
  a.finish("attr");
  if (v.kind == K::Dict && get_attr(make_dict(), name).is_undefined())
    return make_undefined("'dict object' has no attribute '" + name + "'");
  return get_attr(v, name);
}

Value f_pprint(Interp&, const Value& v, CallArgs& a) {
  a.finish("pprint");
  return make_str(repr(v));
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> m = {{"abs", f_abs},
                                                              {"attr", f_attr},
                                                              {"batch", f_batch},
                                                              {"capitalize", f_capitalize},
                                                              {"center", f_center},
                                                              {"count", f_length},
                                                              {"d", f_default},
                                                              {"default", f_default},
                                                              {"dictsort", f_dictsort},
                                                              {"e", f_escape},
                                                              {"escape", f_escape},
                                                              {"first", f_first},
                                                              {"float", f_float},
                                                              {"forceescape", f_forceescape},
                                                              {"format", f_format},
                                                              {"indent", f_indent},
                                                              {"int", f_int},
                                                              {"items", f_items},
                                                              {"join", f_join},
                                                              {"last", f_last},
                                                              {"length", f_length},
                                                              {"list", f_list},
                                                              {"lower", f_lower},
                                                              {"map", f_map},
                                                              {"max", f_max},
                                                              {"min", f_min},
                                                              {"pprint", f_pprint},
                                                              {"reject", f_reject},
                                                              {"rejectattr", f_rejectattr},
                                                              {"replace", f_replace},
                                                              {"reverse", f_reverse},
                                                              {"round", f_round},
                                                              {"safe", f_safe},
                                                              {"select", f_select},
                                                              {"selectattr", f_selectattr},
                                                              {"sort", f_sort},
                                                              {"string", f_string},
                                                              {"sum", f_sum},
                                                              {"title", f_title},
                                                              {"tojson", f_tojson},
                                                              {"trim", f_trim},
                                                              {"truncate", f_truncate},
                                                              {"unique", f_unique},
                                                              {"upper", f_upper},
                                                              {"wordcount", f_wordcount}};
  return m;
}

}  // namespace

bool has_filter(const std::string& name) {
  return filters().count(name) != 0;
}

Value apply_filter(Interp& in, const std::string& name, const Value& v, CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) rt_fail("No filter named '", name, "'.");
  return it->second(in, v, args);
}

}  // namespace hearth::jinja::detail
