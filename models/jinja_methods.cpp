// Attribute/item access and the Python str/list/dict methods templates call (message.content
// .split(...), tool.get(...)). Mutating methods are refused as in jinja2's ImmutableSandbox.
#include <algorithm>
#include <cstdio>
#include <unordered_set>

#include "models/jinja_internal.h"

namespace hearth::jinja::detail {

using K = Value::Kind;

namespace {

const std::unordered_set<std::string>& str_methods() {
  static const std::unordered_set<std::string> m = {
      "startswith", "endswith",     "split",       "rsplit",  "splitlines", "strip",    "lstrip",
      "rstrip",     "upper",        "lower",       "title",   "capitalize", "swapcase", "casefold",
      "replace",    "find",         "rfind",       "index",   "rindex",     "count",    "join",
      "format",     "isdigit",      "isalpha",     "isalnum", "isspace",    "isupper",  "islower",
      "isnumeric",  "isdecimal",    "zfill",       "center",  "ljust",      "rjust",    "partition",
      "rpartition", "removeprefix", "removesuffix"};
  return m;
}
const std::unordered_set<std::string> kListSafe = {"count", "index", "copy"};
const std::unordered_set<std::string> kListUnsafe = {"append", "extend",  "insert", "pop",
                                                     "remove", "reverse", "sort",   "clear"};
const std::unordered_set<std::string> kDictSafe = {"keys", "values", "items", "get", "copy"};
const std::unordered_set<std::string> kDictUnsafe = {"pop", "popitem", "setdefault", "update",
                                                     "clear"};

std::string arg_str(const Value& v, const char* fn) {
  if (v.kind != K::String)
    rt_fail("TypeError: ", fn, "() argument must be str, not ", type_name(v));
  return v.str();
}

int64_t arg_int(const Value& v, const char* fn) {
  if (!v.is_int()) rt_fail("TypeError: ", fn, "() argument must be int, not ", type_name(v));
  return v.as_int();
}

// The [start:end] window of a str method, in code points, as a sub-string plus its offset.
std::u32string window(const std::u32string& u, const Value& start, const Value& end, int64_t* off) {
  int64_t n = int64_t(u.size());
  auto fix = [n](const Value& v, int64_t def) {
    if (v.is_none() || v.is_undefined()) return def;
    int64_t i = v.as_int();
    if (i < 0) i = std::max<int64_t>(0, i + n);
    return std::min(i, n);
  };
  int64_t b = fix(start, 0), e = fix(end, n);
  *off = b;
  return e > b ? u.substr(size_t(b), size_t(e - b)) : std::u32string();
}

std::string pad(const std::string& s, int64_t width, char32_t fill, char align) {
  checked_width(width);
  int64_t len = utf8_length(s);
  if (width <= len) return s;
  int64_t total = width - len, left = 0;
  if (align == '>')
    left = total;
  else if (align == '^')
    left = total / 2;
  std::string f;
  utf8_append(f, fill);
  std::string out;
  for (int64_t k = 0; k < left; ++k) out += f;
  out += s;
  for (int64_t k = left; k < total; ++k) out += f;
  return out;
}

// A format spec of str.format: [[fill]align][sign][0][width][,][.precision][type].
std::string format_spec(const Value& v, const std::string& spec) {
  if (spec.empty()) return to_str(v);
  std::u32string u = utf8_decode(spec);
  size_t i = 0;
  char32_t fill = ' ';
  char align = 0;
  if (u.size() >= 2 && std::string("<>^=").find(char(u[1])) != std::string::npos && u[1] < 128) {
    fill = u[0];
    align = char(u[1]);
    i = 2;
  } else if (!u.empty() && u[0] < 128 &&
             std::string("<>^=").find(char(u[0])) != std::string::npos) {
    align = char(u[0]);
    i = 1;
  }
  std::string sign;
  if (i < u.size() && (u[i] == '+' || u[i] == '-' || u[i] == ' ')) sign = char(u[i++]);
  if (i < u.size() && u[i] == '0') {
    if (!align) {
      fill = '0';
      align = '=';
    }
    ++i;
  }
  int64_t width = 0;
  while (i < u.size() && u[i] >= '0' && u[i] <= '9') width = width_digit(width, char(u[i++]));
  int precision = -1;
  if (i < u.size() && u[i] == '.') {
    int64_t p = 0;
    for (++i; i < u.size() && u[i] >= '0' && u[i] <= '9';) p = width_digit(p, char(u[i++]));
    precision = int(p);
  }
  if (i < u.size() && (u[i] == ',' || u[i] == '_'))
    rt_fail("ValueError: format spec '", spec,
            "': the ',' and '_' grouping options are not supported");
  // The type is one ASCII letter (or '%') ending the spec: it is spliced into a printf format
  // below, so nothing else may reach it (fuzz_jinja: '{:t...}'.format(2) made "%.*t").
  if (i + 1 < u.size() || (i < u.size() && u[i] >= 128))
    rt_fail("ValueError: Invalid format specifier '", spec, "'");
  char type = i < u.size() ? char(u[i]) : 0;
  std::string body;
  if (v.kind == K::String || (!type && !v.is_number())) {
    body = to_str(v);
    if (precision >= 0) body = utf8_encode(utf8_decode(body).substr(0, size_t(precision)));
    return pad(body, width, fill, align ? align : '<');
  }
  if (!v.is_number()) rt_fail("ValueError: invalid format spec '", spec, "' for ", type_name(v));
  if (type == 'n') type = 'g';
  if (type && std::string("dxXob%eEfFgG").find(type) == std::string::npos)
    rt_fail("ValueError: Unknown format code '", std::string(1, type), "' for object of type '",
            type_name(v), "'");
  char buf[512];
  std::string flags = sign == "-" ? "" : sign;
  if (type == 'd' || (!type && v.is_int() && precision < 0)) {
    std::snprintf(buf, sizeof buf, ("%" + flags + "lld").c_str(), (long long)v.as_int());
  } else if (type == 'x' || type == 'X' || type == 'o' || type == 'b') {
    if (type == 'b') {
      uint64_t x = uint64_t(v.as_int() < 0 ? -v.as_int() : v.as_int());
      std::string bits;
      do bits.insert(bits.begin(), char('0' + (x & 1)));
      while (x >>= 1);
      std::snprintf(buf, sizeof buf, "%s%s", v.as_int() < 0 ? "-" : flags.c_str(), bits.c_str());
    } else {
      std::snprintf(buf, sizeof buf, ("%" + flags + "ll" + type).c_str(), (long long)v.as_int());
    }
  } else if (type == '%') {
    std::snprintf(buf, sizeof buf, ("%" + flags + ".*f%%").c_str(), precision < 0 ? 6 : precision,
                  v.as_float() * 100);
  } else if (!type && precision < 0) {
    snprintf(buf, sizeof buf, "%s%s", flags.c_str(), pyfmt::float_repr(v.as_float()).c_str());
  } else {
    char t = type ? type : 'g';
    std::snprintf(buf, sizeof buf, ("%" + flags + ".*" + t).c_str(), precision < 0 ? 6 : precision,
                  v.as_float());
  }
  body = buf;
  if (align == '=' && !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) {
    return body.substr(0, 1) + pad(body.substr(1), width - 1, fill, '>');
  }
  return pad(body, width, fill, align && align != '=' ? align : '>');
}

std::string str_format(Interp& in, const std::string& fmt, CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}')
        ++i;
      else
        rt_fail("ValueError: Single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) rt_fail("ValueError: Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    std::string spec, conv;
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field.resize(bang);
    }
    size_t name_end = std::min(field.find('.'), field.find('['));
    std::string head = field.substr(0, name_end);
    Value v;
    if (head.empty()) {
      if (auto_index >= a.pos.size())
        rt_fail("IndexError: Replacement index ", std::to_string(auto_index), " out of range");
      v = a.pos[auto_index++];
    } else if (std::all_of(head.begin(), head.end(), ::isdigit)) {
      size_t k = std::stoul(head);
      if (k >= a.pos.size()) rt_fail("IndexError: Replacement index ", head, " out of range");
      v = a.pos[k];
    } else {
      auto it =
          std::find_if(a.kw.begin(), a.kw.end(), [&](const auto& kv) { return kv.first == head; });
      if (it == a.kw.end()) rt_fail("KeyError: '", head, "'");
      v = it->second;
    }
    for (size_t p = name_end; p < field.size();) {
      if (field[p] == '.') {
        size_t e = std::min(field.find('.', p + 1), field.find('[', p + 1));
        v = get_attr(v, field.substr(p + 1, e - p - 1));
        p = e;
      } else {
        size_t e = field.find(']', p);
        std::string key = field.substr(p + 1, e - p - 1);
        bool digits = !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit);
        v = get_item(v, digits ? make_int(std::stoll(key)) : make_str(key));
        p = e == std::string::npos ? field.size() : e + 1;
      }
    }
    if (conv == "r")
      v = make_str(repr(v));
    else if (conv == "s")
      v = make_str(to_str(v));
    out += format_spec(v, spec);
  }
  (void)in;
  return out;
}

// startswith, endswith
Value str_affix(const std::string& s, const std::string& name, CallArgs& a) {
  const char* fn = name.c_str();
  Value what = a.take(0, "prefix"), start = a.take(1, "start", make_none()),
        end = a.take(2, "end", make_none());
  a.finish(fn);
  int64_t off;
  std::string w = utf8_encode(window(utf8_decode(s), start, end, &off));
  List cands = what.kind == K::Tuple ? what.items() : List{what};
  for (const Value& c : cands) {
    if (c.kind != K::String)
      rt_fail("TypeError: ", fn, " first arg must be str or a tuple of str, not ", type_name(c));
    const std::string& p = c.str();
    bool hit = p.size() <= w.size() &&
               (name == "startswith" ? w.compare(0, p.size(), p) == 0
                                     : w.compare(w.size() - p.size(), p.size(), p) == 0);
    if (hit) return make_bool(true);
  }
  return make_bool(false);
}

// split, rsplit
Value str_split(const std::string& s, const std::string& name, CallArgs& a) {
  const char* fn = name.c_str();
  Value sep = a.take(0, "sep", make_none()), maxsplit = a.take(1, "maxsplit", make_int(-1));
  a.finish(fn);
  std::string sep_s;
  if (!sep.is_none()) sep_s = arg_str(sep, fn);
  int64_t ms = arg_int(maxsplit, fn);
  std::vector<std::string> parts;
  if (name == "split" || ms < 0) {
    parts = py_split(s, sep.is_none() ? nullptr : &sep_s, ms);
  } else {
    // rsplit with a limit is split on the reversed string with the separator reversed too.
    std::u32string r = utf8_decode(s);
    std::reverse(r.begin(), r.end());
    std::u32string rsep = utf8_decode(sep_s);
    std::reverse(rsep.begin(), rsep.end());
    std::string rsep_s = utf8_encode(rsep);
    parts = py_split(utf8_encode(r), sep.is_none() ? nullptr : &rsep_s, ms);
    std::reverse(parts.begin(), parts.end());
    for (auto& p : parts) {
      std::u32string u = utf8_decode(p);
      std::reverse(u.begin(), u.end());
      p = utf8_encode(u);
    }
  }
  List out;
  for (auto& p : parts) out.push_back(make_str(std::move(p)));
  return make_list(std::move(out));
}

// splitlines
Value str_splitlines(const std::string& s, const std::string& name, CallArgs& a) {
  const char* fn = name.c_str();
  bool keep = truthy(a.take(0, "keepends", make_bool(false)));
  a.finish(fn);
  List out;
  for (auto& p : py_splitlines(s, keep)) out.push_back(make_str(std::move(p)));
  return make_list(std::move(out));
}

// strip, lstrip, rstrip
Value str_strip(const std::string& s, const std::string& name, CallArgs& a) {
  const char* fn = name.c_str();
  Value chars = a.take(0, "chars", make_none());
  a.finish(fn);
  std::string cs;
  if (!chars.is_none()) cs = arg_str(chars, fn);
  return make_str(py_strip(s, chars.is_none() ? nullptr : &cs, name != "rstrip", name != "lstrip"));
}

// upper, lower, title, capitalize, casefold, swapcase
Value str_case(const std::string& s, const std::string& name, CallArgs& a) {
  const char* fn = name.c_str();
  a.finish(fn);
  if (name == "upper") return make_str(py_upper(s));
  if (name == "lower" || name == "casefold") return make_str(py_lower(s));
  if (name == "title") return make_str(py_title(s));
  if (name == "capitalize") return make_str(py_capitalize(s));
  std::string out;
  for (char32_t c : utf8_decode(s))
    utf8_append(out, to_upper_cp(c) != c ? to_upper_cp(c) : to_lower_cp(c));
  return make_str(out);
}

// replace
Value str_replace(const std::string& s, const std::string& name, CallArgs& a) {
  const char* fn = name.c_str();
  Value o = a.take(0, "old"), n = a.take(1, "new"), c = a.take(2, "count", make_int(-1));
  a.finish(fn);
  return make_str(py_replace(s, arg_str(o, fn), arg_str(n, fn), arg_int(c, fn)));
}

// find, rfind, index, rindex, count
Value str_search(const std::string& s, const std::string& name, CallArgs& a) {
  const char* fn = name.c_str();
  Value sub = a.take(0, "sub"), start = a.take(1, "start", make_none()),
        end = a.take(2, "end", make_none());
  a.finish(fn);
  int64_t off;
  std::u32string w = window(utf8_decode(s), start, end, &off);
  std::u32string needle = utf8_decode(arg_str(sub, fn));
  if (name == "count") {
    if (needle.empty()) return make_int(int64_t(w.size()) + 1);
    int64_t n = 0;
    for (size_t p = w.find(needle); p != std::u32string::npos;
         p = w.find(needle, p + needle.size()))
      ++n;
    return make_int(n);
  }
  size_t p = name[0] == 'r' ? w.rfind(needle) : w.find(needle);
  if (p == std::u32string::npos) {
    if (name == "index" || name == "rindex") rt_fail("ValueError: substring not found");
    return make_int(-1);
  }
  return make_int(int64_t(p) + off);
}

// join
Value str_join(const std::string& s, const std::string& name, CallArgs& a) {
  const char* fn = name.c_str();
  List items = iterate(a.take(0, "iterable"));
  a.finish(fn);
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) {
    if (items[k].kind != K::String)
      rt_fail("TypeError: sequence item ", std::to_string(k), ": expected str instance, ",
              type_name(items[k]), " found");
    if (k) out += s;
    out += items[k].str();
  }
  return make_str(std::move(out));
}

// isdigit, isdecimal, isnumeric, isalpha, isalnum, isspace, isupper, islower
Value str_is(const std::string& s, const std::string& name, CallArgs& a) {
  const char* fn = name.c_str();
  a.finish(fn);
  std::u32string u = utf8_decode(s);
  if (u.empty()) return make_bool(false);
  bool cased = false, ok = true;
  for (char32_t c : u) {
    if (name == "isdigit" || name == "isdecimal" || name == "isnumeric")
      ok &= is_digit_cp(c);
    else if (name == "isalpha")
      ok &= is_alpha_cp(c);
    else if (name == "isalnum")
      ok &= is_alnum_cp(c);
    else if (name == "isspace")
      ok &= py_isspace(c);
    else if (name == "isupper")
      ok &= !(is_cased_cp(c) && to_upper_cp(c) != c), cased |= is_cased_cp(c);
    else if (name == "islower")
      ok &= !(is_cased_cp(c) && to_lower_cp(c) != c), cased |= is_cased_cp(c);
  }
  if (name == "isupper" || name == "islower") ok &= cased;
  return make_bool(ok);
}

// zfill
Value str_zfill(const std::string& s, const std::string& name, CallArgs& a) {
  const char* fn = name.c_str();
  int64_t width = arg_int(a.take(0, "width"), fn);
  a.finish(fn);
  int64_t len = utf8_length(s);
  if (width <= len) return make_str(s);
  checked_width(width);
  size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
  return make_str(s.substr(0, sign) + std::string(size_t(width - len), '0') + s.substr(sign));
}

// center, ljust, rjust
Value str_pad(const std::string& s, const std::string& name, CallArgs& a) {
  const char* fn = name.c_str();
  int64_t width = arg_int(a.take(0, "width"), fn);
  std::u32string fill = utf8_decode(arg_str(a.take(1, "fillchar", make_str(" ")), fn));
  a.finish(fn);
  if (fill.size() != 1) rt_fail("TypeError: The fill character must be exactly one character long");
  // str.center puts the extra character on the left only when the padding and width are odd.
  if (name == "center") {
    int64_t total = width - utf8_length(s);
    if (total <= 0) return make_str(s);
    checked_width(width);
    int64_t left = total / 2 + (total & width & 1);
    std::string f = utf8_encode(fill), out;
    for (int64_t k = 0; k < left; ++k) out += f;
    out += s;
    for (int64_t k = left; k < total; ++k) out += f;
    return make_str(out);
  }
  return make_str(pad(s, width, fill[0], name == "ljust" ? '<' : '>'));
}

// partition, rpartition
Value str_partition(const std::string& s, const std::string& name, CallArgs& a) {
  const char* fn = name.c_str();
  std::string sep = arg_str(a.take(0, "sep"), fn);
  a.finish(fn);
  if (sep.empty()) rt_fail("ValueError: empty separator");
  size_t p = name == "partition" ? s.find(sep) : s.rfind(sep);
  if (p == std::string::npos)
    return name == "partition" ? make_tuple({make_str(s), make_str(""), make_str("")})
                               : make_tuple({make_str(""), make_str(""), make_str(s)});
  return make_tuple({make_str(s.substr(0, p)), make_str(sep), make_str(s.substr(p + sep.size()))});
}

// removeprefix, removesuffix
Value str_remove_fix(const std::string& s, const std::string& name, CallArgs& a) {
  const char* fn = name.c_str();
  std::string fix = arg_str(a.take(0, "prefix"), fn);
  a.finish(fn);
  if (name == "removeprefix" && s.compare(0, fix.size(), fix) == 0)
    return make_str(s.substr(fix.size()));
  if (name == "removesuffix" && fix.size() <= s.size() && !fix.empty() &&
      s.compare(s.size() - fix.size(), fix.size(), fix) == 0)
    return make_str(s.substr(0, s.size() - fix.size()));
  return make_str(s);
}

// Python's str methods that chat templates call.
Value str_method(Interp& in, const std::string& s, const std::string& name, CallArgs& a) {
  if (name == "startswith" || name == "endswith") return str_affix(s, name, a);
  if (name == "split" || name == "rsplit") return str_split(s, name, a);
  if (name == "splitlines") return str_splitlines(s, name, a);
  if (name == "strip" || name == "lstrip" || name == "rstrip") return str_strip(s, name, a);
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
      name == "casefold" || name == "swapcase")
    return str_case(s, name, a);
  if (name == "replace") return str_replace(s, name, a);
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count")
    return str_search(s, name, a);
  if (name == "join") return str_join(s, name, a);
  if (name == "format") return make_str(str_format(in, s, a));
  if (name.compare(0, 2, "is") == 0) return str_is(s, name, a);
  if (name == "zfill") return str_zfill(s, name, a);
  if (name == "center" || name == "ljust" || name == "rjust") return str_pad(s, name, a);
  if (name == "partition" || name == "rpartition") return str_partition(s, name, a);
  if (name == "removeprefix" || name == "removesuffix") return str_remove_fix(s, name, a);
  rt_fail("AttributeError: 'str' object has no attribute '", name, "'");
}

Value list_method(const Value& self, const std::string& name, CallArgs& a) {
  const char* fn = name.c_str();
  if (name == "copy") {
    a.finish(fn);
    return make_list(self.items());
  }
  Value x = a.take(0, "value");
  a.finish(fn);
  int64_t n = 0;
  for (size_t k = 0; k < self.items().size(); ++k) {
    if (!py_equal(self.items()[k], x)) continue;
    if (name == "index") return make_int(int64_t(k));
    ++n;
  }
  if (name == "index") rt_fail("ValueError: ", repr(x), " is not in list");
  return make_int(n);
}

Value dict_method(const Value& self, const std::string& name, CallArgs& a) {
  const char* fn = name.c_str();
  const auto& entries = self.dict().entries;
  if (name == "get") {
    Value key = a.take(0, "key"), def = a.take(1, "default", make_none());
    a.finish(fn);
    const Value* v = self.dict().find(key);
    return v ? *v : def;
  }
  a.finish(fn);
  if (name == "copy") return make_dict(entries);
  List out;
  for (const auto& kv : entries) {
    if (name == "keys")
      out.push_back(kv.first);
    else if (name == "values")
      out.push_back(kv.second);
    else
      out.push_back(make_tuple({kv.first, kv.second}));
  }
  using F = ListBox::Flavor;
  return make_iter(name == "keys"     ? F::DictKeys
                   : name == "values" ? F::DictValues
                                      : F::DictItems,
                   std::move(out));
}

Value bound(const Value& self, const std::string& name) {
  return make_func(name, [self, name](Interp& in, CallArgs& a) -> Value {
    switch (self.kind) {
      case K::String:
        return str_method(in, self.str(), name, a);
      case K::List:
      case K::Tuple:
        return list_method(self, name, a);
      default:
        return dict_method(self, name, a);
    }
  });
}

Value unsafe(const Value& obj, const std::string& name) {
  return make_undefined("access to attribute '" + name + "' of '" + type_name(obj) +
                        "' object is unsafe.");
}

Value missing_attr(const Value& obj, const std::string& name) {
  return make_undefined("'" + object_repr(obj) + "' has no attribute '" + name + "'");
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  if (name.compare(0, 2, "__") == 0) return unsafe(obj, name);
  switch (obj.kind) {
    case K::String:
      if (str_methods().count(name)) return bound(obj, name);
      break;
    case K::List:
    case K::Tuple:
      if (kListSafe.count(name) && (obj.kind == K::List || name != "copy")) return bound(obj, name);
      if (kListUnsafe.count(name) && obj.kind == K::List) return unsafe(obj, name);
      break;
    case K::Dict:
      if (kDictSafe.count(name)) return bound(obj, name);
      if (kDictUnsafe.count(name)) return unsafe(obj, name);
      if (const Value* v = obj.dict().find(std::string_view(name))) return *v;
      break;
    case K::Object:
      if (const Value* v = obj.object().find(name)) return *v;
      break;
    case K::Undefined:
      rt_fail(obj.undefined_hint());
    default:
      break;
  }
  return missing_attr(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind) {
    case K::Dict:
      if (const Value* v = obj.dict().find(key)) return *v;
      break;
    case K::List:
    case K::Tuple:
    case K::String:
      if (key.is_int()) {
        int64_t n = obj.kind == K::String ? utf8_length(obj.str()) : int64_t(obj.items().size());
        int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i < 0 || i >= n)
          return make_undefined("'" + object_repr(obj) + "' has no element " + to_str(key));
        if (obj.kind != K::String) return obj.items()[size_t(i)];
        if (n == int64_t(obj.str().size())) return make_str(obj.str().substr(size_t(i), 1));
        std::string s;
        utf8_append(s, utf8_decode(obj.str())[size_t(i)]);
        return make_str(std::move(s));
      }
      break;
    case K::Undefined:
      rt_fail(obj.undefined_hint());
    default:
      break;
  }
  // jinja2 retries a failed string subscript as an attribute (so d['items'] finds no method
  // only when the dict lacks the key).
  if (key.kind == K::String) {
    if (obj.kind == K::Dict) {
      if (kDictSafe.count(key.str())) return bound(obj, key.str());
      return missing_attr(obj, key.str());
    }
    return get_attr(obj, key.str());
  }
  return make_undefined("'" + object_repr(obj) + "' has no element " + repr(key));
}

Value call_value(Interp& in, const Value& callee, CallArgs& args) {
  if (callee.kind == K::Func) return callee.func().fn(in, args);
  if (callee.is_undefined()) rt_fail(callee.undefined_hint());
  rt_fail("TypeError: '", type_name(callee), "' object is not callable");
}

}  // namespace hearth::jinja::detail
