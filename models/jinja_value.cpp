// Template values with Python's printing, equality, ordering, containment and slicing rules.
#include <algorithm>
#include <cmath>

#include "models/jinja_internal.h"

namespace hearth::jinja::detail {

using K = Value::Kind;

const std::string& Value::str() const {
  return static_cast<const StringBox&>(*box).s;
}
const List& Value::items() const {
  return static_cast<const ListBox&>(*box).items;
}
DictBox& Value::dict() const {
  return static_cast<DictBox&>(*box);
}
ObjectBox& Value::object() const {
  return static_cast<ObjectBox&>(*box);
}
FuncBox& Value::func() const {
  return static_cast<FuncBox&>(*box);
}
std::string Value::undefined_hint() const {
  return box ? str() : "value is undefined";
}

const Value* DictBox::find(const Value& key) const {
  for (const auto& kv : entries)
    if (py_equal(kv.first, key)) return &kv.second;
  return nullptr;
}
const Value* DictBox::find(std::string_view key) const {
  for (const auto& kv : entries)
    if (kv.first.kind == K::String && kv.first.str() == key) return &kv.second;
  return nullptr;
}
void DictBox::set(Value key, Value value) {
  for (auto& kv : entries)
    if (py_equal(kv.first, key)) {
      kv.second = std::move(value);
      return;
    }
  entries.emplace_back(std::move(key), std::move(value));
}

const Value* ObjectBox::find(std::string_view name) const {
  for (const auto& kv : attrs)
    if (kv.first == name) return &kv.second;
  return nullptr;
}
void ObjectBox::set(const std::string& name, Value value) {
  for (auto& kv : attrs)
    if (kv.first == name) {
      kv.second = std::move(value);
      return;
    }
  attrs.emplace_back(name, std::move(value));
}

const Value* Frame::find(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent.get())
    for (const auto& kv : f->vars)
      if (kv.first == name) return &kv.second;
  return nullptr;
}
void Frame::set(const std::string& name, Value v) {
  for (auto& kv : vars)
    if (kv.first == name) {
      kv.second = std::move(v);
      return;
    }
  vars.emplace_back(name, std::move(v));
}

Value make_undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.box = std::make_shared<StringBox>(std::move(hint));
  return v;
}
Value make_none() {
  Value v;
  v.kind = K::None;
  return v;
}
Value make_bool(bool b) {
  Value v;
  v.kind = K::Bool;
  v.b = b;
  return v;
}
Value make_int(int64_t i) {
  Value v;
  v.kind = K::Int;
  v.i = i;
  return v;
}
Value make_float(double f) {
  Value v;
  v.kind = K::Float;
  v.f = f;
  return v;
}
Value make_str(std::string s) {
  Value v;
  v.kind = K::String;
  v.box = std::make_shared<StringBox>(std::move(s));
  return v;
}
Value make_list(List items) {
  Value v;
  v.kind = K::List;
  v.box = std::make_shared<ListBox>(std::move(items));
  return v;
}
Value make_tuple(List items) {
  Value v = make_list(std::move(items));
  v.kind = K::Tuple;
  return v;
}
Value make_iter(ListBox::Flavor flavor, List items) {
  Value v = make_list(std::move(items));
  v.kind = K::Iter;
  iter_box(v).flavor = flavor;
  return v;
}
ListBox& iter_box(const Value& v) {
  return static_cast<ListBox&>(*v.box);
}

Value make_dict(std::vector<std::pair<Value, Value>> entries) {
  Value v;
  v.kind = K::Dict;
  auto d = std::make_shared<DictBox>();
  d->entries = std::move(entries);
  v.box = std::move(d);
  return v;
}
Value make_object(std::string type, std::vector<std::pair<std::string, Value>> attrs) {
  Value v;
  v.kind = K::Object;
  auto o = std::make_shared<ObjectBox>();
  o->type = std::move(type);
  o->attrs = std::move(attrs);
  v.box = std::move(o);
  return v;
}
Value make_func(std::string name, NativeFn fn) {
  Value v;
  v.kind = K::Func;
  auto f = std::make_shared<FuncBox>();
  f->name = std::move(name);
  f->fn = std::move(fn);
  v.box = std::move(f);
  return v;
}

Value from_json(const Json& j) {
  switch (j.type()) {
    case Json::Type::Null:
      return make_none();
    case Json::Type::Bool:
      return make_bool(j.as_bool());
    case Json::Type::Int:
      return make_int(j.as_int());
    case Json::Type::Float:
      return make_float(j.as_double());
    case Json::Type::String:
      return make_str(j.as_string());
    case Json::Type::Array: {
      List items;
      items.reserve(j.size());
      for (const Json& e : j.as_array()) items.push_back(from_json(e));
      return make_list(std::move(items));
    }
    case Json::Type::Object: {
      std::vector<std::pair<Value, Value>> entries;
      entries.reserve(j.size());
      for (const auto& kv : j.as_object())
        entries.emplace_back(make_str(kv.first), from_json(kv.second));
      return make_dict(std::move(entries));
    }
  }
  return make_none();
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case K::Undefined:
    case K::None:
      return false;
    case K::Bool:
      return v.b;
    case K::Int:
      return v.i != 0;
    case K::Float:
      return v.f != 0;
    case K::String:
      return !v.str().empty();
    case K::List:
    case K::Tuple:
      return !v.items().empty();
    case K::Dict:
      return !v.dict().entries.empty();
    case K::Iter:
      return iter_box(v).flavor == ListBox::Flavor::Generator || !v.items().empty();
    case K::Object:
    case K::Func:
      return true;
  }
  return false;
}

namespace {

std::string join_repr(const List& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += repr(items[i]);
  }
  return out;
}

std::string dict_repr(const std::vector<std::pair<Value, Value>>& entries) {
  std::string out = "{";
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i) out += ", ";
    out += repr(entries[i].first) + ": " + repr(entries[i].second);
  }
  return out + "}";
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind) {
    case K::Undefined:
      return "";
    case K::None:
      return "None";
    case K::Bool:
      return v.b ? "True" : "False";
    case K::Int:
      return std::to_string(v.i);
    case K::Float:
      return pyfmt::float_repr(v.f);
    case K::String:
      return v.str();
    case K::List:
      return "[" + join_repr(v.items()) + "]";
    case K::Tuple:
      return "(" + join_repr(v.items()) + (v.items().size() == 1 ? ",)" : ")");
    case K::Dict:
      return dict_repr(v.dict().entries);
    case K::Iter:
      if (iter_box(v).flavor == ListBox::Flavor::Generator) return "<generator object>";
      return type_name(v) + "([" + join_repr(v.items()) + "])";
    case K::Object: {
      const ObjectBox& o = v.object();
      if (o.type == "LoopContext") {
        const Value* index = o.find("index");
        const Value* length = o.find("length");
        return "<LoopContext " + (index ? to_str(*index) : "?") + "/" +
               (length ? to_str(*length) : "?") + ">";
      }
      std::vector<std::pair<Value, Value>> entries;
      for (const auto& kv : o.attrs) entries.emplace_back(make_str(kv.first), kv.second);
      return "<" + o.type + " " + dict_repr(entries) + ">";
    }
    case K::Func:
      return "<function " + v.func().name + ">";
  }
  return "";
}

std::string repr(const Value& v) {
  if (v.kind == K::String) return py_repr_str(v.str());
  if (v.kind == K::Undefined) return "Undefined";
  return to_str(v);
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case K::Undefined:
      return "Undefined";
    case K::None:
      return "NoneType";
    case K::Bool:
      return "bool";
    case K::Int:
      return "int";
    case K::Float:
      return "float";
    case K::String:
      return "str";
    case K::List:
      return "list";
    case K::Tuple:
      return "tuple";
    case K::Iter:
      switch (iter_box(v).flavor) {
        case ListBox::Flavor::DictKeys:
          return "dict_keys";
        case ListBox::Flavor::DictValues:
          return "dict_values";
        case ListBox::Flavor::DictItems:
          return "dict_items";
        default:
          return "generator";
      }
    case K::Dict:
      return "dict";
    case K::Object:
      return v.object().type;
    case K::Func:
      return "function";
  }
  return "object";
}

std::string object_repr(const Value& v) {
  if (v.kind == K::None) return "None";
  return type_name(v) + " object";
}

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == K::Float || b.kind == K::Float) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::Undefined:
    case K::None:
      return true;
    case K::String:
      return a.str() == b.str();
    case K::List:
    case K::Tuple: {
      const List &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!py_equal(x[i], y[i])) return false;
      return true;
    }
    case K::Dict: {
      const auto &x = a.dict().entries, &y = b.dict().entries;
      if (x.size() != y.size()) return false;
      for (const auto& kv : x) {
        const Value* other = b.dict().find(kv.first);
        if (!other || !py_equal(kv.second, *other)) return false;
      }
      return true;
    }
    default:
      return a.box == b.box;
  }
}

int py_compare(const Value& a, const Value& b, const char* op) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == K::Float || b.kind == K::Float) {
      double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.kind == K::String && b.kind == K::String) {
    // Byte order of UTF-8 is code point order, which is what Python compares.
    int c = a.str().compare(b.str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_seq() && a.kind == b.kind) {
    const List &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!py_equal(x[i], y[i])) return py_compare(x[i], y[i], op);
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  if (a.is_undefined() || b.is_undefined())
    rt_fail(a.is_undefined() ? a.undefined_hint() : b.undefined_hint());
  rt_fail("TypeError: '", op, "' not supported between instances of '", type_name(a), "' and '",
          type_name(b), "'");
}

bool py_contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case K::String:
      if (item.kind != K::String)
        rt_fail("TypeError: 'in <string>' requires string as left operand, not ", type_name(item));
      return container.str().find(item.str()) != std::string::npos;
    case K::List:
    case K::Tuple:
      for (const Value& e : container.items())
        if (py_equal(e, item)) return true;
      return false;
    case K::Dict:
      if (item.is_seq() && item.kind == K::List) rt_fail("TypeError: unhashable type: 'list'");
      if (item.kind == K::Dict) rt_fail("TypeError: unhashable type: 'dict'");
      return container.dict().find(item) != nullptr;
    case K::Iter: {
      // Membership consumes a generator up to the match, as Python's `in` does.
      ListBox& b = iter_box(container);
      bool gen = b.flavor == ListBox::Flavor::Generator;
      for (size_t k = gen ? b.consumed : 0; k < b.items.size(); ++k)
        if (py_equal(b.items[k], item)) {
          if (gen) b.consumed = k + 1;
          return true;
        }
      if (gen) b.consumed = b.items.size();
      return false;
    }
    case K::Undefined:
      return false;  // jinja2's Undefined iterates as empty
    default:
      rt_fail("TypeError: argument of type '", type_name(container), "' is not iterable");
  }
}

int64_t py_len(const Value& v) {
  switch (v.kind) {
    case K::String:
      return utf8_length(v.str());
    case K::List:
    case K::Tuple:
      return int64_t(v.items().size());
    case K::Dict:
      return int64_t(v.dict().entries.size());
    case K::Iter:
      if (iter_box(v).flavor == ListBox::Flavor::Generator)
        rt_fail("TypeError: object of type 'generator' has no len()");
      return int64_t(v.items().size());
    case K::Undefined:
      return 0;
    default:
      rt_fail("TypeError: object of type '", type_name(v), "' has no len()");
  }
}

List iterate(const Value& v) {
  switch (v.kind) {
    case K::List:
    case K::Tuple:
      return v.items();
    case K::Iter: {
      ListBox& b = iter_box(v);
      if (b.flavor != ListBox::Flavor::Generator) return b.items;
      List rest(b.items.begin() + long(b.consumed), b.items.end());
      b.consumed = b.items.size();
      return rest;
    }
    case K::Dict: {
      List keys;
      for (const auto& kv : v.dict().entries) keys.push_back(kv.first);
      return keys;
    }
    case K::String: {
      List chars;
      std::u32string u = utf8_decode(v.str());
      for (char32_t c : u) {
        std::string s;
        utf8_append(s, c);
        chars.push_back(make_str(std::move(s)));
      }
      return chars;
    }
    case K::Undefined:
      return {};
    default:
      rt_fail("TypeError: '", type_name(v), "' object is not iterable");
  }
}

Value py_slice(const Value& v, const Value& start_v, const Value& stop_v, const Value& step_v) {
  // jinja2 compiles a slice to a plain Python subscript, so unlike item access it raises.
  for (const Value* x : {&start_v, &stop_v, &step_v})
    if (!x->is_none() && !x->is_int())
      rt_fail("TypeError: slice indices must be integers or None or have an __index__ method");
  if (v.kind == K::Dict) rt_fail("TypeError: unhashable type: 'slice'");
  if (v.kind != K::String && !v.is_seq())
    rt_fail("TypeError: '", type_name(v), "' object is not subscriptable");
  auto index_of = [](const Value& x, int64_t def) { return x.is_none() ? def : x.as_int(); };
  int64_t step = index_of(step_v, 1);
  if (step == 0) rt_fail("ValueError: slice step cannot be zero");
  std::u32string u;
  bool is_str = v.kind == K::String;
  if (is_str) u = utf8_decode(v.str());
  int64_t len = is_str ? int64_t(u.size()) : int64_t(v.items().size());
  auto adjust = [&](const Value& x, bool is_start) {
    int64_t i = index_of(x, INT64_MIN);
    if (i == INT64_MIN) return step > 0 ? (is_start ? 0 : len) : (is_start ? len - 1 : -1);
    if (i < 0) {
      i += len;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= len) {
      i = step < 0 ? len - 1 : len;
    }
    return i;
  };
  int64_t start = adjust(start_v, true), stop = adjust(stop_v, false);
  std::vector<int64_t> picks;
  if (step > 0)
    for (int64_t i = start; i < stop; i += step) picks.push_back(i);
  else
    for (int64_t i = start; i > stop; i += step) picks.push_back(i);
  if (is_str) {
    std::u32string r;
    for (int64_t i : picks) r += u[size_t(i)];
    return make_str(utf8_encode(r));
  }
  List r;
  for (int64_t i : picks) r.push_back(v.items()[size_t(i)]);
  return v.kind == K::Tuple ? make_tuple(std::move(r)) : make_list(std::move(r));
}

namespace {

std::string json_key(const Value& k) {
  switch (k.kind) {
    case K::String:
      return k.str();
    case K::Int:
      return std::to_string(k.i);
    case K::Bool:
      return k.b ? "true" : "false";
    case K::None:
      return "null";
    case K::Float:
      if (std::isnan(k.f)) return "NaN";
      if (std::isinf(k.f)) return k.f > 0 ? "Infinity" : "-Infinity";
      return pyfmt::float_repr(k.f);
    default:
      rt_fail("TypeError: keys must be str, int, float, bool or None, not ", type_name(k));
  }
}

}  // namespace

void dump_json(const Value& v, std::string& out, const JsonDumpOptions& opt, int depth) {
  // Each line repeats the indent once per level: bounded like any other string value.
  auto newline = [&](int d) {
    if (out.size() + 1 + size_t(d) * opt.indent.size() > Limits{}.max_value)
      rt_fail("MemoryError: tojson's output grew past ", std::to_string(Limits{}.max_value),
              " bytes");
    out += '\n';
    for (int i = 0; i < d; ++i) out += opt.indent;
  };
  switch (v.kind) {
    case K::None:
      out += "null";
      return;
    case K::Bool:
      out += v.b ? "true" : "false";
      return;
    case K::Int:
      out += std::to_string(v.i);
      return;
    case K::Float:
      if (std::isnan(v.f))
        out += "NaN";
      else if (std::isinf(v.f))
        out += v.f > 0 ? "Infinity" : "-Infinity";
      else
        out += pyfmt::float_repr(v.f);
      return;
    case K::String:
      pyfmt::append_json_string(out, v.str(), opt.ensure_ascii);
      return;
    case K::List:
    case K::Tuple: {
      const List& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += opt.item_sep;
        if (opt.has_indent) newline(depth + 1);
        dump_json(items[i], out, opt, depth + 1);
      }
      if (opt.has_indent) newline(depth);
      out += ']';
      return;
    }
    case K::Dict: {
      std::vector<std::pair<Value, Value>> entries = v.dict().entries;
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (opt.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
          return py_compare(a.first, b.first, "<") < 0;
        });
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += opt.item_sep;
        if (opt.has_indent) newline(depth + 1);
        pyfmt::append_json_string(out, json_key(entries[i].first), opt.ensure_ascii);
        out += opt.key_sep;
        dump_json(entries[i].second, out, opt, depth + 1);
      }
      if (opt.has_indent) newline(depth);
      out += '}';
      return;
    }
    default:
      rt_fail("TypeError: Object of type ", type_name(v), " is not JSON serializable");
  }
}

Value CallArgs::take(size_t index, const char* name, Value def) {
  if (used.size() != kw.size()) used.assign(kw.size(), false);
  if (index < pos.size()) {
    taken_pos = std::max(taken_pos, index + 1);
    return pos[index];
  }
  for (size_t k = 0; k < kw.size(); ++k)
    if (!used[k] && kw[k].first == name) {
      used[k] = true;
      return kw[k].second;
    }
  return def;
}

bool CallArgs::has(size_t index, const char* name) const {
  if (index < pos.size()) return true;
  for (const auto& kv : kw)
    if (kv.first == name) return true;
  return false;
}

void CallArgs::finish(const char* fn) const {
  if (pos.size() > taken_pos)
    rt_fail("TypeError: ", fn, "() takes at most ", std::to_string(taken_pos),
            " positional arguments (", std::to_string(pos.size()), " given)");
  for (size_t k = 0; k < kw.size(); ++k)
    if (k >= used.size() || !used[k])
      rt_fail("TypeError: ", fn, "() got an unexpected keyword argument '", kw[k].first, "'");
}

}  // namespace hearth::jinja::detail
