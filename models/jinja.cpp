// The tree-walking evaluator and the public Template API. Scoping follows jinja2: a for-loop
// iteration, macro call, with-block and captured block each get a child frame, `if` does not, and
// macros resolve free names when called (so a later top-level `set` is visible to them).
#include <cmath>

#include "core/error.h"
#include "models/jinja_internal.h"

namespace hearth::jinja {

namespace detail {

using K = Value::Kind;

namespace {

// Python arithmetic on ints is unbounded; we have 64 bits and refuse to wrap silently.
void check_overflow(bool overflow) {
  if (overflow) rt_fail("OverflowError: integer result does not fit in 64 bits");
}

[[noreturn]] void bad_operands(const char* op, const Value& a, const Value& b) {
  if (a.is_undefined()) rt_fail(a.undefined_hint());
  if (b.is_undefined()) rt_fail(b.undefined_hint());
  rt_fail("TypeError: unsupported operand type(s) for ", op, ": '", type_name(a), "' and '",
          type_name(b), "'");
}

Value repeat(const Value& seq, int64_t n) {
  // Python would try (and fail) to allocate; refuse early instead.
  size_t unit = seq.kind == K::String ? seq.str().size() : seq.items().size();
  if (n > 0 && unit > 0 && uint64_t(n) > uint64_t(Limits{}.max_value) / unit)
    rt_fail("MemoryError: repeated sequence too large");
  if (seq.kind == K::String) {
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.str();
    return make_str(std::move(out));
  }
  List out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.kind == K::Tuple ? make_tuple(std::move(out)) : make_list(std::move(out));
}

Value binop(BinOp op, const Value& a, const Value& b) {
  bool ints = a.is_int() && b.is_int();
  bool nums = a.is_number() && b.is_number();
  int64_t r = 0;
  switch (op) {
    case BinOp::Add:
      if (ints) {
        check_overflow(__builtin_add_overflow(a.as_int(), b.as_int(), &r));
        return make_int(r);
      }
      if (nums) return make_float(a.as_float() + b.as_float());
      if (a.kind == K::String && b.kind == K::String) return make_str(a.str() + b.str());
      if (a.is_seq() && a.kind == b.kind) {
        List out = a.items();
        out.insert(out.end(), b.items().begin(), b.items().end());
        return a.kind == K::Tuple ? make_tuple(std::move(out)) : make_list(std::move(out));
      }
      if (a.kind == K::String && !b.is_undefined())
        rt_fail("TypeError: can only concatenate str (not \"", type_name(b), "\") to str");
      bad_operands("+", a, b);
    case BinOp::Sub:
      if (ints) {
        check_overflow(__builtin_sub_overflow(a.as_int(), b.as_int(), &r));
        return make_int(r);
      }
      if (nums) return make_float(a.as_float() - b.as_float());
      bad_operands("-", a, b);
    case BinOp::Mul:
      if (ints) {
        check_overflow(__builtin_mul_overflow(a.as_int(), b.as_int(), &r));
        return make_int(r);
      }
      if (nums) return make_float(a.as_float() * b.as_float());
      if ((a.kind == K::String || a.is_seq()) && b.is_int()) return repeat(a, b.as_int());
      if (a.is_int() && (b.kind == K::String || b.is_seq())) return repeat(b, a.as_int());
      bad_operands("*", a, b);
    case BinOp::Div:
      if (!nums) bad_operands("/", a, b);
      if (b.as_float() == 0) rt_fail("ZeroDivisionError: division by zero");
      return make_float(a.as_float() / b.as_float());
    case BinOp::FloorDiv:
      if (!nums) bad_operands("//", a, b);
      if (b.as_float() == 0) rt_fail("ZeroDivisionError: integer division or modulo by zero");
      if (ints) {
        int64_t x = a.as_int(), y = b.as_int();
        if (y == -1) {  // INT64_MIN / -1 traps in hardware
          check_overflow(x == INT64_MIN);
          return make_int(-x);
        }
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
        return make_int(q);
      }
      return make_float(std::floor(a.as_float() / b.as_float()));
    case BinOp::Mod:
      if (a.kind == K::String) return make_str(percent_format(a.str(), b));
      if (!nums) bad_operands("%", a, b);
      if (b.as_float() == 0) rt_fail("ZeroDivisionError: integer division or modulo by zero");
      if (ints) {
        int64_t x = a.as_int(), y = b.as_int(), m = y == -1 ? 0 : x % y;
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return make_int(m);
      } else {
        double x = a.as_float(), y = b.as_float(), m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return make_float(m);
      }
    case BinOp::Pow:
      if (!nums) bad_operands("**", a, b);
      if (ints && b.as_int() >= 0) {
        int64_t base = a.as_int(), e = b.as_int(), acc = 1;
        if (base == 0 || base == 1) return make_int(e == 0 ? 1 : base);
        if (base == -1) return make_int(e % 2 ? -1 : 1);
        while (e-- > 0) check_overflow(__builtin_mul_overflow(acc, base, &acc));
        return make_int(acc);
      }
      if (a.as_float() == 0 && b.as_float() < 0)
        rt_fail("ZeroDivisionError: 0.0 cannot be raised to a negative power");
      return make_float(std::pow(a.as_float(), b.as_float()));
  }
  return Value();
}

bool compare(CmpOp op, const Value& a, const Value& b) {
  switch (op) {
    case CmpOp::Eq:
      return py_equal(a, b);
    case CmpOp::Ne:
      return !py_equal(a, b);
    case CmpOp::Lt:
      return py_compare(a, b, "<") < 0;
    case CmpOp::Le:
      return py_compare(a, b, "<=") <= 0;
    case CmpOp::Gt:
      return py_compare(a, b, ">") > 0;
    case CmpOp::Ge:
      return py_compare(a, b, ">=") >= 0;
    case CmpOp::In:
      return py_contains(b, a);
    case CmpOp::NotIn:
      return !py_contains(b, a);
  }
  return false;
}

const Value& defined(const Value& v) {
  if (v.is_undefined()) rt_fail(v.undefined_hint());
  return v;
}

}  // namespace

Value Interp::lookup(const std::string& name) const {
  if (const Value* v = frame->find(name)) return *v;
  Value g = lookup_global(name);
  if (!g.is_undefined()) return g;
  return make_undefined("'" + name + "' is undefined");
}

namespace {

size_t value_size(const Value& v) {
  switch (v.kind) {
    case K::String:
      return v.str().size();
    case K::List:
    case K::Tuple:
      return v.items().size();
    case K::Dict:
      return v.dict().entries.size();
    default:
      return 0;
  }
}

}  // namespace

void Interp::step() {
  if (++steps > limits.max_steps)
    rt_fail("the template ran past its budget of ", std::to_string(limits.max_steps),
            " steps (loops within loops?)");
}

Value Interp::eval(const Expr& e) {
  try {
    step();
    Value v = eval_inner(e);
    const size_t size = value_size(v);
    if (size > limits.max_value)
      rt_fail("a value of the template grew past ", std::to_string(limits.max_value),
              " bytes or items");
    // Each value costs what it holds, so a loop copying a large string is bounded too.
    work += size;
    if (work > limits.max_work)
      rt_fail("the template made more than ", std::to_string(limits.max_work),
              " bytes or items of values in all (a large value copied in a loop?)");
    return v;
  } catch (const RuntimeFail& f) {
    fail("template line ", e.line, " column ", e.col, ": ", f.what());
  }
}

CallArgs Interp::eval_args(const ExprArgs& a) {
  CallArgs out;
  for (const auto& p : a.pos) out.pos.push_back(eval(*p));
  if (a.star) {
    List extra = iterate(eval(*a.star));
    out.pos.insert(out.pos.end(), extra.begin(), extra.end());
  }
  for (const auto& kv : a.kw) out.kw.emplace_back(kv.first, eval(*kv.second));
  if (a.starstar) {
    Value d = eval(*a.starstar);
    if (d.kind != K::Dict)
      rt_fail("TypeError: argument after ** must be a mapping, not ", type_name(d));
    for (const auto& kv : d.dict().entries) out.kw.emplace_back(to_str(kv.first), kv.second);
  }
  return out;
}

Value Interp::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::Const:
      return e.value;
    case ExprKind::Name:
      return lookup(e.name);
    case ExprKind::Captured:
      return captured;
    case ExprKind::List:
    case ExprKind::Tuple: {
      List items;
      for (const auto& k : e.kids) items.push_back(eval(*k));
      return e.kind == ExprKind::List ? make_list(std::move(items)) : make_tuple(std::move(items));
    }
    case ExprKind::Dict: {
      Value d = make_dict();
      for (size_t k = 0; k + 1 < e.kids.size(); k += 2)
        d.dict().set(eval(*e.kids[k]), eval(*e.kids[k + 1]));
      return d;
    }
    case ExprKind::Attr:
      return get_attr(defined(eval(*e.kids[0])), e.name);
    case ExprKind::Item: {
      Value obj = eval(*e.kids[0]);
      return get_item(defined(obj), eval(*e.kids[1]));
    }
    case ExprKind::Slice: {
      Value obj = eval(*e.kids[0]);
      defined(obj);
      Value start = eval(*e.kids[1]), stop = eval(*e.kids[2]), step = eval(*e.kids[3]);
      return py_slice(obj, start, stop, step);
    }
    case ExprKind::Call: {
      Value callee = eval(*e.kids[0]);
      CallArgs args = eval_args(e.args);
      return call_value(*this, callee, args);
    }
    case ExprKind::Filter: {
      Value v = eval(*e.kids[0]);
      CallArgs args = eval_args(e.args);
      return apply_filter(*this, e.name, v, args);
    }
    case ExprKind::Test: {
      Value v = eval(*e.kids[0]);
      CallArgs args = eval_args(e.args);
      return make_bool(apply_test(*this, e.name, v, args));
    }
    case ExprKind::Not:
      return make_bool(!truthy(eval(*e.kids[0])));
    case ExprKind::Neg:
    case ExprKind::Pos: {
      Value v = eval(*e.kids[0]);
      if (!v.is_number()) {
        defined(v);
        rt_fail("TypeError: bad operand type for unary ", e.kind == ExprKind::Neg ? "-" : "+",
                ": '", type_name(v), "'");
      }
      if (e.kind == ExprKind::Pos) return v.kind == K::Bool ? make_int(v.as_int()) : v;
      if (v.kind == K::Float) return make_float(-v.f);
      if (v.as_int() == INT64_MIN) rt_fail("OverflowError: integer result does not fit in 64 bits");
      return make_int(-v.as_int());
    }
    case ExprKind::Binary: {
      Value a = eval(*e.kids[0]);
      Value b = eval(*e.kids[1]);
      return binop(e.bin, a, b);
    }
    case ExprKind::Compare: {
      Value left = eval(*e.kids[0]);
      for (size_t k = 0; k < e.cmp.size(); ++k) {
        Value right = eval(*e.kids[k + 1]);
        if (!compare(e.cmp[k], left, right)) return make_bool(false);
        left = std::move(right);
      }
      return make_bool(true);
    }
    case ExprKind::And: {
      Value a = eval(*e.kids[0]);
      return truthy(a) ? eval(*e.kids[1]) : a;
    }
    case ExprKind::Or: {
      Value a = eval(*e.kids[0]);
      return truthy(a) ? a : eval(*e.kids[1]);
    }
    case ExprKind::Concat: {
      std::string s;
      for (const auto& k : e.kids) s += to_str(eval(*k));
      return make_str(std::move(s));
    }
    case ExprKind::Cond:
      if (truthy(eval(*e.kids[1]))) return eval(*e.kids[0]);
      if (e.kids[2]) return eval(*e.kids[2]);
      return make_undefined("the inline if-expression on line " + std::to_string(e.line) +
                            " evaluated to false and no else section was defined.");
  }
  return Value();
}

void Interp::assign(const Expr& target, const Value& v, bool allow_ns) {
  if (target.kind == ExprKind::Name) {
    frame->set(target.name, v);
  } else if (target.kind == ExprKind::Tuple) {
    List items = iterate(v);
    if (items.size() != target.kids.size())
      rt_fail("ValueError: ", items.size() > target.kids.size() ? "too many" : "not enough",
              " values to unpack (expected ", std::to_string(target.kids.size()), ", got ",
              std::to_string(items.size()), ")");
    for (size_t k = 0; k < items.size(); ++k) assign(*target.kids[k], items[k], false);
  } else if (target.kind == ExprKind::Attr && allow_ns) {
    Value ns = lookup(target.kids[0]->name);
    if (ns.kind != K::Object || ns.object().type != "Namespace")
      rt_fail("cannot assign attribute on non-namespace object");
    ns.object().set(target.name, v);
  } else {
    rt_fail("cannot assign to this expression");
  }
}

std::string Interp::capture(const Body& body, std::shared_ptr<Frame> inner) {
  std::string buf;
  std::string* saved_out = out;
  std::shared_ptr<Frame> saved_frame = frame;
  out = &buf;
  frame = std::move(inner);
  try {
    exec(body);
  } catch (...) {
    out = saved_out;
    frame = saved_frame;
    throw;
  }
  out = saved_out;
  frame = saved_frame;
  return buf;
}

static std::shared_ptr<Frame> child(const std::shared_ptr<Frame>& parent) {
  auto f = std::make_shared<Frame>();
  f->parent = parent;
  return f;
}

Value Interp::call_macro(const std::shared_ptr<MacroDef>& m, const std::shared_ptr<Frame>& closure,
                         CallArgs& args, const Value& caller) {
  if (depth > 200) rt_fail("RecursionError: maximum macro recursion depth exceeded");
  auto f = child(closure);
  size_t n = m->params.size();
  // Defaults may refer to earlier parameters, so they are evaluated in the macro's own frame.
  std::shared_ptr<Frame> saved = frame;
  frame = f;
  try {
    for (size_t k = 0; k < n; ++k) {
      const char* name = m->params[k].c_str();
      Value v = args.has(k, name) ? args.take(k, name)
                : m->defaults[k]
                    ? eval(*m->defaults[k])
                    : make_undefined("parameter '" + m->params[k] + "' was not provided");
      f->set(m->params[k], std::move(v));
    }
  } catch (...) {
    frame = saved;
    throw;
  }
  frame = saved;
  List extra(args.pos.size() > n ? args.pos.begin() + long(n) : args.pos.end(), args.pos.end());
  if (!extra.empty() && !m->uses_varargs)
    rt_fail("TypeError: macro '", m->name, "' takes not more than ", std::to_string(n),
            " argument(s)");
  std::vector<std::pair<Value, Value>> kwargs;
  for (size_t k = 0; k < args.kw.size(); ++k) {
    if (k < args.used.size() && args.used[k]) continue;
    if (!m->uses_kwargs)
      rt_fail("TypeError: macro '", m->name, "' takes no keyword argument '", args.kw[k].first,
              "'");
    kwargs.emplace_back(make_str(args.kw[k].first), args.kw[k].second);
  }
  if (m->uses_varargs) f->set("varargs", make_tuple(std::move(extra)));
  if (m->uses_kwargs) f->set("kwargs", make_dict(std::move(kwargs)));
  if (!caller.is_undefined()) f->set("caller", caller);
  ++depth;
  std::string text;
  try {
    text = capture(m->body, f);
  } catch (...) {
    --depth;
    throw;
  }
  --depth;
  return make_str(std::move(text));
}

Value Interp::make_macro(const std::shared_ptr<MacroDef>& m) {
  // A weak reference: the macro usually lives in the very frame it closes over.
  std::weak_ptr<Frame> weak = frame;
  return make_func(m->name, [m, weak](Interp& in, CallArgs& args) {
    std::shared_ptr<Frame> closure = weak.lock();
    if (!closure) rt_fail("macro '", m->name, "' called after its scope ended");
    Value caller;
    for (size_t k = 0; k < args.kw.size(); ++k)
      if (args.kw[k].first == "caller") {
        caller = args.kw[k].second;
        args.kw.erase(args.kw.begin() + long(k));
        break;
      }
    return in.call_macro(m, closure, args, caller);
  });
}

Flow Interp::exec(const Body& body) {
  for (const auto& s : body) {
    Flow f = exec_stmt(*s);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Flow Interp::exec_for(const Stmt& s) {
  List items = iterate(eval(*s.expr));
  std::shared_ptr<Frame> outer = frame;
  if (s.cond) {
    List kept;
    for (const Value& item : items) {
      frame = child(outer);
      try {
        assign(*s.target, item, false);
        if (truthy(eval(*s.cond))) kept.push_back(item);
      } catch (...) {
        frame = outer;
        throw;
      }
    }
    frame = outer;
    items = std::move(kept);
  }
  if (items.empty()) {
    if (!s.else_body.empty()) {
      frame = child(outer);
      Flow f = Flow::Normal;
      try {
        f = exec(s.else_body);
      } catch (...) {
        frame = outer;
        throw;
      }
      frame = outer;
      return f;
    }
    return Flow::Normal;
  }
  int64_t n = int64_t(items.size());
  auto changed_state = std::make_shared<std::pair<bool, List>>(false, List());
  for (int64_t k = 0; k < n; ++k) {
    step();  // an empty body costs its iterations too
    frame = child(outer);
    Flow f = Flow::Normal;
    try {
      assign(*s.target, items[size_t(k)], false);
      std::vector<std::pair<std::string, Value>> attrs = {
          {"index", make_int(k + 1)},
          {"index0", make_int(k)},
          {"revindex", make_int(n - k)},
          {"revindex0", make_int(n - k - 1)},
          {"first", make_bool(k == 0)},
          {"last", make_bool(k == n - 1)},
          {"length", make_int(n)},
          {"depth", make_int(1)},
          {"depth0", make_int(0)},
          {"previtem", k > 0 ? items[size_t(k - 1)] : make_undefined("there is no previous item")},
          {"nextitem", k + 1 < n ? items[size_t(k + 1)] : make_undefined("there is no next item")},
      };
      attrs.emplace_back("cycle", make_func("cycle", [k](Interp&, CallArgs& a) {
                           if (a.pos.empty()) rt_fail("TypeError: no items for cycling given");
                           return a.pos[size_t(k) % a.pos.size()];
                         }));
      attrs.emplace_back("changed", make_func("changed", [changed_state](Interp&, CallArgs& a) {
                           List now = a.pos;
                           bool differs =
                               !changed_state->first ||
                               !py_equal(make_list(now), make_list(changed_state->second));
                           changed_state->first = true;
                           changed_state->second = std::move(now);
                           return make_bool(differs);
                         }));
      frame->set("loop", make_object("LoopContext", std::move(attrs)));
      f = exec(s.body);
    } catch (...) {
      frame = outer;
      throw;
    }
    frame = outer;
    if (f == Flow::Break) break;
  }
  return Flow::Normal;
}

Flow Interp::exec_stmt(const Stmt& s) {
  try {
    step();
    if (out->size() > limits.max_output)
      rt_fail("the template's output grew past ", std::to_string(limits.max_output), " bytes");
    switch (s.kind) {
      case StmtKind::Text:
        *out += s.text;
        break;
      case StmtKind::Output:
        *out += to_str(eval(*s.expr));
        break;
      case StmtKind::If:
        for (const auto& br : s.branches)
          if (truthy(eval(*br.first))) return exec(br.second);
        return exec(s.else_body);
      case StmtKind::For:
        return exec_for(s);
      case StmtKind::Set:
        assign(*s.target, eval(*s.expr), true);
        break;
      case StmtKind::SetBlock: {
        Value v = make_str(capture(s.body, child(frame)));
        if (s.expr) {
          captured = v;
          v = eval(*s.expr);
        }
        assign(*s.target, v, true);
        break;
      }
      case StmtKind::Macro:
        frame->set(s.macro->name, make_macro(s.macro));
        break;
      case StmtKind::CallBlock: {
        const Expr& call = *s.expr;
        Value callee = eval(*call.kids[0]);
        CallArgs args = eval_args(call.args);
        args.kw.emplace_back("caller", make_macro(s.macro));
        *out += to_str(call_value(*this, callee, args));
        break;
      }
      case StmtKind::FilterBlock:
        captured = make_str(capture(s.body, child(frame)));
        *out += to_str(eval(*s.expr));
        break;
      case StmtKind::With: {
        auto inner = child(frame);
        std::vector<Value> values;
        for (const auto& a : s.assigns) values.push_back(eval(*a.second));
        std::shared_ptr<Frame> saved = frame;
        frame = inner;
        Flow f = Flow::Normal;
        try {
          for (size_t k = 0; k < values.size(); ++k) assign(*s.assigns[k].first, values[k], false);
          f = exec(s.body);
        } catch (...) {
          frame = saved;
          throw;
        }
        frame = saved;
        return f;
      }
      case StmtKind::Break:
        return Flow::Break;
      case StmtKind::Continue:
        return Flow::Continue;
    }
  } catch (const RuntimeFail& f) {
    fail("template line ", s.line, " column ", s.col, ": ", f.what());
  }
  return Flow::Normal;
}

}  // namespace detail

Template::Template() : program_(std::make_shared<detail::Program>()) {}

Template Template::parse(const std::string& source) {
  Template t;
  t.program_ = detail::parse_program(source);
  return t;
}

std::string Template::render(const Json& context, const Limits& limits) const {
  using namespace detail;
  auto root = std::make_shared<Frame>();
  if (context.is_object()) {
    for (const auto& kv : context.as_object()) root->set(kv.first, from_json(kv.second));
  } else if (!context.is_null()) {
    fail("template context must be a JSON object");
  }
  std::string out;
  Interp in;
  in.limits = limits;
  in.out = &out;
  in.frame = root;
  in.exec(program_->body);
  if (out.size() > limits.max_output)
    fail("the template's output grew past ", limits.max_output, " bytes");
  return out;
}

}  // namespace hearth::jinja
