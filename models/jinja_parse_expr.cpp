// Expressions, with jinja2's precedence from loosest to tightest: conditional, or, and, not,
// comparisons (chained, plus in / not in), + -, ~, * / // %, **, unary - +, then postfix
// subscripts, calls, filters and `is` tests.
#include "models/jinja_parser.h"

namespace hearth::jinja::detail {

bool Parser::is_tuple_end(const std::vector<std::string>& extra) const {
  const Token& tk = cur();
  if (tk.type == Tok::VarEnd || tk.type == Tok::BlockEnd || (tk.type == Tok::Op && tk.value == ")"))
    return true;
  return tk.type == Tok::Name && std::find(extra.begin(), extra.end(), tk.value) != extra.end();
}

ExprPtr Parser::parse_tuple(bool simplified, bool with_condexpr,
                            const std::vector<std::string>& extra, bool explicit_parens) {
  const Token start = cur();
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  for (;;) {
    if (!items.empty()) expect_op(",");
    if (is_tuple_end(extra)) break;
    items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
    if (is_op(","))
      is_tuple = true;
    else
      break;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) fail_at(cur(), "Expected an expression, got '" + describe(cur()) + "'");
  }
  ExprPtr e = expr(ExprKind::Tuple, start);
  e->kids = std::move(items);
  return e;
}

ExprPtr Parser::parse_assign_target(bool with_tuple, bool with_namespace,
                                    const std::vector<std::string>& extra) {
  const Token& at = cur();
  ExprPtr target;
  if (with_namespace && at.type == Tok::Name && look().type == Tok::Op && look().value == ".") {
    target = expr(ExprKind::Attr, at);
    ExprPtr ns = expr(ExprKind::Name, at);
    ns->name = next().value;
    next();
    target->name = expect_name();
    target->kids.push_back(std::move(ns));
    return target;
  }
  target = with_tuple ? parse_tuple(true, false, extra, false) : parse_primary();
  check_assignable(*target, at);
  return target;
}

void Parser::check_assignable(const Expr& e, const Token& at) const {
  if (e.kind == ExprKind::Name) return;
  if (e.kind == ExprKind::Tuple) {
    for (const auto& k : e.kids) check_assignable(*k, at);
    return;
  }
  fail_at(at, "can't assign to this expression");
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
  Nest nest(*this, cur());
  ExprPtr e = parse_or();
  while (is_name("if")) {
    const Token& at = next();
    ExprPtr cond = parse_or();
    ExprPtr other = skip_name("else") ? parse_condexpr() : nullptr;
    ExprPtr c = expr(ExprKind::Cond, at);
    c->kids.push_back(std::move(e));
    c->kids.push_back(std::move(cond));
    c->kids.push_back(std::move(other));
    e = std::move(c);
  }
  return e;
}

ExprPtr Parser::binary(ExprKind kind, ExprPtr l, ExprPtr r, const Token& at) {
  ExprPtr e = expr(kind, at);
  e->kids.push_back(std::move(l));
  e->kids.push_back(std::move(r));
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr e = parse_and();
  while (is_name("or")) {
    const Token& at = next();
    e = binary(ExprKind::Or, std::move(e), parse_and(), at);
  }
  return e;
}

ExprPtr Parser::parse_and() {
  ExprPtr e = parse_not();
  while (is_name("and")) {
    const Token& at = next();
    e = binary(ExprKind::And, std::move(e), parse_not(), at);
  }
  return e;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    Nest nest(*this, cur());
    const Token& at = next();
    ExprPtr e = expr(ExprKind::Not, at);
    e->kids.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const Token start = cur();
  ExprPtr first = parse_math1();
  ExprPtr e;
  for (;;) {
    CmpOp op;
    const Token& tk = cur();
    if (tk.type == Tok::Op && tk.value == "==")
      op = CmpOp::Eq;
    else if (tk.type == Tok::Op && tk.value == "!=")
      op = CmpOp::Ne;
    else if (tk.type == Tok::Op && tk.value == "<")
      op = CmpOp::Lt;
    else if (tk.type == Tok::Op && tk.value == "<=")
      op = CmpOp::Le;
    else if (tk.type == Tok::Op && tk.value == ">")
      op = CmpOp::Gt;
    else if (tk.type == Tok::Op && tk.value == ">=")
      op = CmpOp::Ge;
    else if (is_name("in"))
      op = CmpOp::In;
    else if (is_name("not") && look().type == Tok::Name && look().value == "in") {
      next();
      op = CmpOp::NotIn;
    } else
      break;
    next();
    if (!e) {
      e = expr(ExprKind::Compare, start);
      e->kids.push_back(std::move(first));
    }
    e->cmp.push_back(op);
    e->kids.push_back(parse_math1());
  }
  return e ? std::move(e) : std::move(first);
}

ExprPtr Parser::arith(BinOp op, ExprPtr l, ExprPtr r, const Token& at) {
  ExprPtr e = binary(ExprKind::Binary, std::move(l), std::move(r), at);
  e->bin = op;
  return e;
}

ExprPtr Parser::parse_math1() {
  ExprPtr e = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& at = next();
    e = arith(at.value == "+" ? BinOp::Add : BinOp::Sub, std::move(e), parse_concat(), at);
  }
  return e;
}

ExprPtr Parser::parse_concat() {
  const Token start = cur();
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  ExprPtr e = expr(ExprKind::Concat, start);
  e->kids.push_back(std::move(first));
  while (skip_op("~")) e->kids.push_back(parse_math2());
  return e;
}

ExprPtr Parser::parse_math2() {
  ExprPtr e = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& at = next();
    BinOp op = at.value == "*"    ? BinOp::Mul
               : at.value == "/"  ? BinOp::Div
               : at.value == "//" ? BinOp::FloorDiv
                                  : BinOp::Mod;
    e = arith(op, std::move(e), parse_pow(), at);
  }
  return e;
}

ExprPtr Parser::parse_pow() {
  ExprPtr e = parse_unary(true);
  while (is_op("**")) {
    const Token& at = next();
    e = arith(BinOp::Pow, std::move(e), parse_unary(true), at);
  }
  return e;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    Nest nest(*this, cur());
    const Token& at = next();
    e = expr(at.value == "-" ? ExprKind::Neg : ExprKind::Pos, at);
    e->kids.push_back(parse_unary(false));
  } else {
    e = parse_primary();
  }
  e = parse_postfix(std::move(e));
  return with_filter ? parse_filter_expr(std::move(e)) : std::move(e);
}

ExprPtr Parser::parse_primary() {
  const Token& tk = cur();
  ExprPtr e;
  switch (tk.type) {
    case Tok::Name:
      e = expr(ExprKind::Const, tk);
      if (tk.value == "true" || tk.value == "True")
        e->value = make_bool(true);
      else if (tk.value == "false" || tk.value == "False")
        e->value = make_bool(false);
      else if (tk.value == "none" || tk.value == "None")
        e->value = make_none();
      else {
        e->kind = ExprKind::Name;
        e->name = tk.value;
        note_name(tk.value);
      }
      next();
      return e;
    case Tok::String: {
      e = expr(ExprKind::Const, tk);
      std::string s;
      while (cur().type == Tok::String) s += next().value;  // adjacent literals concatenate
      e->value = make_str(std::move(s));
      return e;
    }
    case Tok::Int:
      e = expr(ExprKind::Const, tk);
      e->value = make_int(tk.ival);
      next();
      return e;
    case Tok::Float:
      e = expr(ExprKind::Const, tk);
      e->value = make_float(tk.fval);
      next();
      return e;
    case Tok::Op:
      if (tk.value == "(") {
        next();
        e = parse_tuple(false, true, {}, true);
        expect_op(")");
        return e;
      }
      if (tk.value == "[") return parse_list();
      if (tk.value == "{") return parse_dict();
      break;
    default:
      break;
  }
  fail_at(tk, "unexpected '" + describe(tk) + "'");
}

void Parser::note_name(const std::string& name) {
  for (MacroDef* m : macros_) {
    if (name == "varargs") m->uses_varargs = true;
    if (name == "kwargs") m->uses_kwargs = true;
    if (name == "caller") m->uses_caller = true;
  }
}

ExprPtr Parser::parse_list() {
  ExprPtr e = expr(ExprKind::List, next());
  while (!is_op("]")) {
    if (!e->kids.empty()) expect_op(",");
    if (is_op("]")) break;
    e->kids.push_back(parse_expression(true));
  }
  expect_op("]");
  return e;
}

ExprPtr Parser::parse_dict() {
  ExprPtr e = expr(ExprKind::Dict, next());
  while (!is_op("}")) {
    if (!e->kids.empty()) expect_op(",");
    if (is_op("}")) break;
    e->kids.push_back(parse_expression(true));
    expect_op(":");
    e->kids.push_back(parse_expression(true));
  }
  expect_op("}");
  return e;
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
  for (;;) {
    if (is_op(".") || is_op("["))
      e = parse_subscript(std::move(e));
    else if (is_op("("))
      e = parse_call(std::move(e));
    else
      return e;
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr e) {
  for (;;) {
    if (is_op("|"))
      e = parse_filter(std::move(e), false);
    else if (is_name("is"))
      e = parse_test(std::move(e));
    else if (is_op("("))
      e = parse_call(std::move(e));
    else
      return e;
  }
}

ExprPtr Parser::parse_subscript(ExprPtr obj) {
  const Token& at = next();
  if (at.value == ".") {
    const Token& attr = cur();
    if (attr.type == Tok::Name) {
      ExprPtr e = expr(ExprKind::Attr, at);
      e->name = next().value;
      e->kids.push_back(std::move(obj));
      return e;
    }
    if (attr.type != Tok::Int) fail_at(attr, "expected name or number");
    ExprPtr key = expr(ExprKind::Const, attr);
    key->value = make_int(next().ival);
    ExprPtr e = expr(ExprKind::Item, at);
    e->kids.push_back(std::move(obj));
    e->kids.push_back(std::move(key));
    return e;
  }
  std::vector<ExprPtr> args;
  while (!is_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  if (args.size() == 1 && args[0]->kind == ExprKind::Slice && !args[0]->kids[0]) {
    args[0]->kids[0] = std::move(obj);
    return std::move(args[0]);
  }
  ExprPtr key;
  if (args.size() == 1 && !(args[0]->kind == ExprKind::Slice && !args[0]->kids[0])) {
    key = std::move(args[0]);
  } else {
    key = expr(ExprKind::Tuple, at);
    key->kids = std::move(args);
  }
  // Only a tuple's kids are subscripts; a single key's kids may be null (`x[0 if c]` has no else).
  if (key->kind == ExprKind::Tuple)
    for (const auto& k : key->kids)
      if (k->kind == ExprKind::Slice && !k->kids[0])
        fail_at(at, "slices inside a tuple subscript are not supported");
  ExprPtr e = expr(ExprKind::Item, at);
  e->kids.push_back(std::move(obj));
  e->kids.push_back(std::move(key));
  return e;
}

ExprPtr Parser::parse_subscribed() {
  const Token start = cur();
  ExprPtr first;
  if (!is_op(":")) {
    first = parse_expression(true);
    if (!is_op(":")) return first;
  }
  next();
  auto none_at = [&]() {
    ExprPtr n = expr(ExprKind::Const, start);
    n->value = make_none();
    return n;
  };
  ExprPtr e = expr(ExprKind::Slice, start);
  e->kids.push_back(nullptr);
  e->kids.push_back(first ? std::move(first) : none_at());
  if (is_op(":") || is_op("]") || is_op(","))
    e->kids.push_back(none_at());
  else
    e->kids.push_back(parse_expression(true));
  if (skip_op(":") && !is_op("]") && !is_op(","))
    e->kids.push_back(parse_expression(true));
  else
    e->kids.push_back(none_at());
  return e;
}

void Parser::parse_call_args(ExprArgs& a) {
  const Token open = cur();
  expect_op("(");
  bool need_comma = false;
  auto ensure = [&](bool ok) {
    if (!ok) fail_at(open, "invalid syntax for function call expression");
  };
  while (!is_op(")")) {
    if (need_comma) {
      expect_op(",");
      if (is_op(")")) break;
    }
    if (skip_op("*")) {
      ensure(!a.star && !a.starstar);
      a.star = parse_expression(true);
    } else if (skip_op("**")) {
      ensure(!a.starstar);
      a.starstar = parse_expression(true);
    } else if (cur().type == Tok::Name && look().type == Tok::Op && look().value == "=") {
      ensure(!a.starstar);
      std::string key = next().value;
      next();
      a.kw.emplace_back(std::move(key), parse_expression(true));
    } else {
      ensure(!a.star && !a.starstar && a.kw.empty());
      a.pos.push_back(parse_expression(true));
    }
    need_comma = true;
  }
  expect_op(")");
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  ExprPtr e = expr_at(ExprKind::Call, *callee);  // errors point at what is called
  e->kids.push_back(std::move(callee));
  parse_call_args(e->args);
  return e;
}

std::string Parser::dotted_name() {
  std::string name = expect_name();
  while (skip_op(".")) name += "." + expect_name();
  return name;
}

ExprPtr Parser::parse_filter(ExprPtr operand, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    ExprPtr e = expr(ExprKind::Filter, cur());
    e->name = dotted_name();
    if (is_op("(")) parse_call_args(e->args);
    e->kids.push_back(std::move(operand));
    operand = std::move(e);
  }
  return operand;
}

ExprPtr Parser::parse_test(ExprPtr operand) {
  const Token& at = next();  // `is`
  bool negated = skip_name("not");
  ExprPtr e = expr(ExprKind::Test, at);
  e->name = dotted_name();
  const Token& tk = cur();
  if (is_op("(")) {
    parse_call_args(e->args);
  } else if ((tk.type == Tok::Name || tk.type == Tok::String || tk.type == Tok::Int ||
              tk.type == Tok::Float || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail_at(tk, "You cannot chain multiple tests with is");
    e->args.pos.push_back(parse_postfix(parse_primary()));
  }
  e->kids.push_back(std::move(operand));
  if (!negated) return e;
  ExprPtr n = expr_at(ExprKind::Not, *e);
  n->kids.push_back(std::move(e));
  return n;
}

}  // namespace hearth::jinja::detail
