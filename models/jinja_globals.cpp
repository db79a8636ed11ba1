// jinja2's builtin tests and the template globals: range, dict, namespace, joiner, plus
// transformers' raise_exception and strftime_now.
#include <algorithm>
#include <ctime>
#include <unordered_map>

#include "models/jinja_internal.h"

namespace hearth::jinja::detail {

using K = Value::Kind;

namespace {

using TestFn = bool (*)(Interp&, const Value&, CallArgs&);

// ---- tests ----

Value arg0(CallArgs& a, const char* fn) {
  Value v = a.take(0, "value");
  a.finish(fn);
  return v;
}

bool t_defined(Interp&, const Value& v, CallArgs& a) {
  a.finish("defined");
  return !v.is_undefined();
}
bool t_undefined(Interp&, const Value& v, CallArgs& a) {
  a.finish("undefined");
  return v.is_undefined();
}
bool t_none(Interp&, const Value& v, CallArgs& a) {
  a.finish("none");
  return v.is_none();
}
bool t_boolean(Interp&, const Value& v, CallArgs& a) {
  a.finish("boolean");
  return v.kind == K::Bool;
}
bool t_true(Interp&, const Value& v, CallArgs& a) {
  a.finish("true");
  return v.kind == K::Bool && v.b;
}
bool t_false(Interp&, const Value& v, CallArgs& a) {
  a.finish("false");
  return v.kind == K::Bool && !v.b;
}
bool t_integer(Interp&, const Value& v, CallArgs& a) {
  a.finish("integer");
  return v.kind == K::Int;
}
bool t_float(Interp&, const Value& v, CallArgs& a) {
  a.finish("float");
  return v.kind == K::Float;
}
bool t_number(Interp&, const Value& v, CallArgs& a) {
  a.finish("number");
  return v.is_number();
}
bool t_string(Interp&, const Value& v, CallArgs& a) {
  a.finish("string");
  return v.kind == K::String;
}
bool t_mapping(Interp&, const Value& v, CallArgs& a) {
  a.finish("mapping");
  return v.kind == K::Dict;
}
bool t_callable(Interp&, const Value& v, CallArgs& a) {
  a.finish("callable");
  return v.kind == K::Func;
}
bool t_escaped(Interp&, const Value& v, CallArgs& a) {
  a.finish("escaped");
  return v.kind == K::String && v.safe;
}
bool t_iterable(Interp&, const Value& v, CallArgs& a) {
  a.finish("iterable");
  return v.kind == K::String || v.is_seq() || v.kind == K::Iter || v.kind == K::Dict ||
         v.is_undefined();
}
bool t_sequence(Interp&, const Value& v, CallArgs& a) {
  a.finish("sequence");
  return v.kind == K::String || v.is_seq() || v.kind == K::Dict || v.is_undefined();
}
bool t_sameas(Interp&, const Value& v, CallArgs& a) {
  Value o = arg0(a, "sameas");
  if (v.kind != o.kind) return false;
  if (v.box && v.kind != K::String) return v.box == o.box;
  return py_equal(v, o);
}
bool t_in(Interp&, const Value& v, CallArgs& a) {
  return py_contains(arg0(a, "in"), v);
}
int64_t int_arg(const Value& v, const char* fn) {
  if (!v.is_number()) rt_fail("TypeError: '", fn, "' test needs a number, got ", type_name(v));
  return v.kind == K::Float ? int64_t(v.f) : v.as_int();
}
bool t_odd(Interp&, const Value& v, CallArgs& a) {
  a.finish("odd");
  return int_arg(v, "odd") % 2 != 0;
}
bool t_even(Interp&, const Value& v, CallArgs& a) {
  a.finish("even");
  return int_arg(v, "even") % 2 == 0;
}
bool t_divisibleby(Interp&, const Value& v, CallArgs& a) {
  int64_t n = int_arg(arg0(a, "divisibleby"), "divisibleby");
  if (n == 0) rt_fail("ZeroDivisionError: integer division or modulo by zero");
  return int_arg(v, "divisibleby") % n == 0;
}
bool t_lower(Interp&, const Value& v, CallArgs& a) {
  a.finish("lower");
  return v.kind == K::String && !v.str().empty() && py_lower(v.str()) == v.str() &&
         py_upper(v.str()) != v.str();
}
bool t_upper(Interp&, const Value& v, CallArgs& a) {
  a.finish("upper");
  return v.kind == K::String && !v.str().empty() && py_upper(v.str()) == v.str() &&
         py_lower(v.str()) != v.str();
}
bool t_eq(Interp&, const Value& v, CallArgs& a) {
  return py_equal(v, arg0(a, "eq"));
}
bool t_ne(Interp&, const Value& v, CallArgs& a) {
  return !py_equal(v, arg0(a, "ne"));
}
bool t_lt(Interp&, const Value& v, CallArgs& a) {
  return py_compare(v, arg0(a, "lt"), "<") < 0;
}
bool t_le(Interp&, const Value& v, CallArgs& a) {
  return py_compare(v, arg0(a, "le"), "<=") <= 0;
}
bool t_gt(Interp&, const Value& v, CallArgs& a) {
  return py_compare(v, arg0(a, "gt"), ">") > 0;
}
bool t_ge(Interp&, const Value& v, CallArgs& a) {
  return py_compare(v, arg0(a, "ge"), ">=") >= 0;
}
bool t_filter(Interp&, const Value& v, CallArgs& a) {
  a.finish("filter");
  return v.kind == K::String && has_filter(v.str());
}
bool t_test(Interp&, const Value& v, CallArgs& a) {
  a.finish("test");
  return v.kind == K::String && has_test(v.str());
}

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> m = {{"defined", t_defined},
                                                            {"undefined", t_undefined},
                                                            {"none", t_none},
                                                            {"boolean", t_boolean},
                                                            {"true", t_true},
                                                            {"false", t_false},
                                                            {"integer", t_integer},
                                                            {"float", t_float},
                                                            {"number", t_number},
                                                            {"string", t_string},
                                                            {"mapping", t_mapping},
                                                            {"callable", t_callable},
                                                            {"escaped", t_escaped},
                                                            {"iterable", t_iterable},
                                                            {"sequence", t_sequence},
                                                            {"sameas", t_sameas},
                                                            {"in", t_in},
                                                            {"odd", t_odd},
                                                            {"even", t_even},
                                                            {"divisibleby", t_divisibleby},
                                                            {"lower", t_lower},
                                                            {"upper", t_upper},
                                                            {"eq", t_eq},
                                                            {"equalto", t_eq},
                                                            {"==", t_eq},
                                                            {"ne", t_ne},
                                                            {"!=", t_ne},
                                                            {"lt", t_lt},
                                                            {"lessthan", t_lt},
                                                            {"<", t_lt},
                                                            {"le", t_le},
                                                            {"<=", t_le},
                                                            {"gt", t_gt},
                                                            {"greaterthan", t_gt},
                                                            {">", t_gt},
                                                            {"ge", t_ge},
                                                            {">=", t_ge},
                                                            {"filter", t_filter},
                                                            {"test", t_test}};
  return m;
}

// ---- globals ----

Value g_range(Interp&, CallArgs& a) {
  if (!a.kw.empty()) rt_fail("TypeError: range() takes no keyword arguments");
  if (a.pos.empty() || a.pos.size() > 3) rt_fail("TypeError: range expected 1 to 3 arguments");
  for (const Value& v : a.pos)
    if (!v.is_int())
      rt_fail("TypeError: '", type_name(v), "' object cannot be interpreted as an integer");
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1)
    stop = a.pos[0].as_int();
  else
    start = a.pos[0].as_int(), stop = a.pos[1].as_int();
  if (a.pos.size() == 3) step = a.pos[2].as_int();
  if (step == 0) rt_fail("ValueError: range() arg 3 must not be zero");
  int64_t n = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                       : (start > stop ? (start - stop - step - 1) / -step : 0);
  // The sandbox caps ranges to keep templates from allocating without bound.
  if (n > 100000)
    rt_fail(
        "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  List out;
  for (int64_t k = 0; k < n; ++k) out.push_back(make_int(start + k * step));
  return make_list(std::move(out));
}

std::vector<std::pair<Value, Value>> dict_args(CallArgs& a, const char* fn) {
  Value d = make_dict();
  if (a.pos.size() > 1) rt_fail("TypeError: ", fn, " expected at most 1 positional argument");
  if (!a.pos.empty()) {
    const Value& src = a.pos[0];
    if (src.kind == K::Dict) {
      d = make_dict(src.dict().entries);
    } else {
      for (const Value& pair : iterate(src)) {
        List kv = iterate(pair);
        if (kv.size() != 2) rt_fail("ValueError: ", fn, " sequence elements must have length 2");
        d.dict().set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& kv : a.kw) d.dict().set(make_str(kv.first), kv.second);
  return d.dict().entries;
}

Value g_dict(Interp&, CallArgs& a) {
  return make_dict(dict_args(a, "dict"));
}

Value g_namespace(Interp&, CallArgs& a) {
  std::vector<std::pair<std::string, Value>> attrs;
  for (auto& kv : dict_args(a, "namespace")) attrs.emplace_back(to_str(kv.first), kv.second);
  return make_object("Namespace", std::move(attrs));
}

Value g_raise_exception(Interp&, CallArgs& a) {
  Value msg = a.take(0, "message", make_str(""));
  a.finish("raise_exception");
  throw RuntimeFail(to_str(msg));
}

Value g_strftime_now(Interp&, CallArgs& a) {
  std::string fmt = to_str(a.take(0, "format"));
  a.finish("strftime_now");
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[512];
  size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
  return make_str(std::string(buf, n));
}

Value g_joiner(Interp&, CallArgs& a) {
  std::string sep = to_str(a.take(0, "sep", make_str(", ")));
  a.finish("joiner");
  auto used = std::make_shared<bool>(false);
  return make_func("joiner", [sep, used](Interp&, CallArgs&) {
    if (!*used) {
      *used = true;
      return make_str("");
    }
    return make_str(sep);
  });
}

}  // namespace

bool has_test(const std::string& name) {
  return tests().count(name) != 0;
}

bool apply_test(Interp& in, const std::string& name, const Value& v, CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) rt_fail("No test named '", name, "'.");
  return it->second(in, v, args);
}

Value lookup_global(const std::string& name) {
  if (name == "range") return make_func(name, g_range);
  if (name == "dict") return make_func(name, g_dict);
  if (name == "namespace") return make_func(name, g_namespace);
  if (name == "raise_exception") return make_func(name, g_raise_exception);
  if (name == "strftime_now") return make_func(name, g_strftime_now);
  if (name == "joiner") return make_func(name, g_joiner);
  return Value();
}

}  // namespace hearth::jinja::detail
