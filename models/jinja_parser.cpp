// Recursive-descent parser following jinja2's grammar and operator precedence (which differs
// from Python's: `is` tests and filters bind tighter than arithmetic, `**` is left-associative).
#include <algorithm>

#include "models/jinja_internal.h"

namespace hearth::jinja::detail {

namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  std::unique_ptr<Program> run() {
    auto prog = std::make_unique<Program>();
    prog->body = subparse({}, nullptr);
    return prog;
  }

 private:
  std::vector<Token> t_;
  size_t i_ = 0;
  int loop_depth_ = 0;
  std::vector<MacroDef*> macros_;
  std::vector<std::pair<std::string, std::vector<std::string>>> open_blocks_;

  const Token& cur() const { return t_[i_]; }
  const Token& look() const { return t_[std::min(i_ + 1, t_.size() - 1)]; }
  const Token& next() {
    const Token& tk = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return tk;
  }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().value == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& tk) {
    switch (tk.type) {
      case Tok::BlockEnd: return "end of statement block";
      case Tok::VarEnd: return "end of print statement";
      case Tok::BlockBegin: return "begin of statement block";
      case Tok::VarBegin: return "begin of print statement";
      case Tok::Eof: return "end of template";
      case Tok::Data: return "template data";
      case Tok::String: return "string";
      default: return tk.value;
    }
  }

  [[noreturn]] void fail_at(const Token& tk, const std::string& msg) const {
    syntax_fail(tk.line, tk.col, msg);
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail_at(cur(), std::string("expected '") + op + "', got '" + describe(cur()) + "'");
  }
  void expect(Tok type, const char* what) {
    if (cur().type != type) fail_at(cur(), std::string("expected ") + what + ", got '" + describe(cur()) + "'");
    next();
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail_at(cur(), "expected name, got '" + describe(cur()) + "'");
    return next().value;
  }
  void expect_block_end() {
    skip_op(":");
    expect(Tok::BlockEnd, "end of statement block");
  }

  template <typename T>
  static std::unique_ptr<T> node(const Token& at) {
    auto n = std::make_unique<T>();
    n->line = at.line;
    n->col = at.col;
    return n;
  }
  static ExprPtr expr(ExprKind kind, const Token& at) {
    auto e = node<Expr>(at);
    e->kind = kind;
    return e;
  }
  static ExprPtr expr_at(ExprKind kind, const Expr& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->col = at.col;
    return e;
  }

  // ---- statements ----

  static std::string join_tags(const std::vector<std::string>& tags) {
    std::string s;
    for (size_t k = 0; k < tags.size(); ++k) s += (k ? " or '" : "'") + tags[k] + "'";
    return s;
  }

  // Parses until one of `ends` opens a block tag; the tag name is consumed and stored in *found.
  Body subparse(const std::vector<std::string>& ends, std::string* found) {
    Body body;
    for (;;) {
      const Token& tk = cur();
      if (tk.type == Tok::Data) {
        auto s = node<Stmt>(tk);
        s->kind = StmtKind::Text;
        s->text = tk.value;
        body.push_back(std::move(s));
        next();
      } else if (tk.type == Tok::VarBegin) {
        next();
        auto s = node<Stmt>(tk);
        s->kind = StmtKind::Output;
        s->expr = parse_tuple(false, true, {}, false);
        expect(Tok::VarEnd, "end of print statement");
        body.push_back(std::move(s));
      } else if (tk.type == Tok::BlockBegin) {
        next();
        if (cur().type == Tok::Name && std::find(ends.begin(), ends.end(), cur().value) != ends.end()) {
          *found = next().value;
          return body;
        }
        body.push_back(parse_statement());
      } else if (tk.type == Tok::Eof) {
        if (!ends.empty())
          fail_at(tk, "Unexpected end of template. Jinja was looking for the following tags: " +
                          join_tags(ends) + ". The innermost block that needs to be closed is '" +
                          open_blocks_.back().first + "'.");
        return body;
      } else {
        fail_at(tk, "unexpected '" + describe(tk) + "'");
      }
    }
  }

  Body block_body(const std::string& tag, const std::vector<std::string>& ends, std::string* found) {
    open_blocks_.emplace_back(tag, ends);
    Body b = subparse(ends, found);
    open_blocks_.pop_back();
    return b;
  }

  Body body_until(const std::string& tag, const char* end) {
    std::string found;
    Body b = block_body(tag, {end}, &found);
    expect_block_end();
    return b;
  }

  std::unique_ptr<Stmt> parse_statement() {
    const Token& tk = cur();
    if (tk.type != Tok::Name) fail_at(tk, "tag name expected");
    const std::string name = tk.value;
    auto s = node<Stmt>(tk);
    next();
    if (name == "if") return parse_if(std::move(s));
    if (name == "for") return parse_for(std::move(s));
    if (name == "set") return parse_set(std::move(s));
    if (name == "macro") return parse_macro(std::move(s));
    if (name == "call") return parse_call_block(std::move(s));
    if (name == "filter") {
      s->kind = StmtKind::FilterBlock;
      s->expr = parse_filter(expr(ExprKind::Captured, tk), true);
      expect_block_end();
      s->body = body_until("filter", "endfilter");
      return s;
    }
    if (name == "with") {
      s->kind = StmtKind::With;
      while (cur().type != Tok::BlockEnd) {
        if (!s->assigns.empty()) expect_op(",");
        ExprPtr target = parse_assign_target(true, false, {});
        expect_op("=");
        s->assigns.emplace_back(std::move(target), parse_expression(true));
      }
      expect_block_end();
      s->body = body_until("with", "endwith");
      return s;
    }
    if (name == "generation") {
      // transformers' {% generation %} only records offsets for assistant masks; it renders its
      // body unchanged, which a `with` block without assignments does too.
      s->kind = StmtKind::With;
      expect_block_end();
      s->body = body_until("generation", "endgeneration");
      return s;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail_at(tk, "'" + name + "' outside of a loop");
      s->kind = name == "break" ? StmtKind::Break : StmtKind::Continue;
      expect_block_end();
      return s;
    }
    std::string msg = "Encountered unknown tag '" + name + "'.";
    if (!open_blocks_.empty())
      msg += " Jinja was looking for the following tags: " + join_tags(open_blocks_.back().second) +
             ". The innermost block that needs to be closed is '" + open_blocks_.back().first + "'.";
    fail_at(tk, msg);
  }

  std::unique_ptr<Stmt> parse_if(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::If;
    for (;;) {
      ExprPtr cond = parse_tuple(false, false, {}, false);
      expect_block_end();
      std::string found;
      Body b = block_body("if", {"elif", "else", "endif"}, &found);
      s->branches.emplace_back(std::move(cond), std::move(b));
      if (found == "elif") continue;
      expect_block_end();
      if (found == "else") s->else_body = body_until("if", "endif");
      return s;
    }
  }

  std::unique_ptr<Stmt> parse_for(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::For;
    s->target = parse_assign_target(true, false, {"in"});
    if (!skip_name("in")) fail_at(cur(), "expected 'in', got '" + describe(cur()) + "'");
    s->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->cond = parse_expression(true);
    if (is_name("recursive")) fail_at(cur(), "recursive loops are not supported");
    expect_block_end();
    ++loop_depth_;
    std::string found;
    s->body = block_body("for", {"endfor", "else"}, &found);
    --loop_depth_;
    expect_block_end();
    if (found == "else") s->else_body = body_until("for", "endfor");
    return s;
  }

  std::unique_ptr<Stmt> parse_set(std::unique_ptr<Stmt> s) {
    s->target = parse_assign_target(true, true, {});
    if (skip_op("=")) {
      s->kind = StmtKind::Set;
      s->expr = parse_tuple(false, true, {}, false);
      expect_block_end();
      return s;
    }
    s->kind = StmtKind::SetBlock;
    const Token& at = cur();
    if (is_op("|")) s->expr = parse_filter(expr(ExprKind::Captured, at), false);
    expect_block_end();
    s->body = body_until("set", "endset");
    return s;
  }

  void parse_signature(MacroDef& m) {
    expect_op("(");
    while (!is_op(")")) {
      if (!m.params.empty()) expect_op(",");
      m.params.push_back(expect_name());
      if (skip_op("=")) {
        m.defaults.push_back(parse_expression(true));
      } else {
        if (std::any_of(m.defaults.begin(), m.defaults.end(), [](const ExprPtr& d) { return d != nullptr; }))
          fail_at(cur(), "non-default argument follows default argument");
        m.defaults.push_back(nullptr);
      }
    }
    expect_op(")");
  }

  Body macro_body(MacroDef& m, const char* tag, const char* end) {
    // Loop controls do not cross a macro boundary.
    int saved = loop_depth_;
    loop_depth_ = 0;
    macros_.push_back(&m);
    Body b = body_until(tag, end);
    macros_.pop_back();
    loop_depth_ = saved;
    return b;
  }

  std::unique_ptr<Stmt> parse_macro(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::Macro;
    s->macro = std::make_shared<MacroDef>();
    s->macro->name = expect_name();
    parse_signature(*s->macro);
    expect_block_end();
    s->macro->body = macro_body(*s->macro, "macro", "endmacro");
    return s;
  }

  std::unique_ptr<Stmt> parse_call_block(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::CallBlock;
    s->macro = std::make_shared<MacroDef>();
    s->macro->name = "caller";
    if (is_op("(")) parse_signature(*s->macro);
    const Token& at = cur();
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::Call) fail_at(at, "expected call");
    expect_block_end();
    s->macro->body = macro_body(*s->macro, "call", "endcall");
    return s;
  }

  // ---- expressions ----

  bool is_tuple_end(const std::vector<std::string>& extra) const {
    const Token& tk = cur();
    if (tk.type == Tok::VarEnd || tk.type == Tok::BlockEnd || (tk.type == Tok::Op && tk.value == ")"))
      return true;
    return tk.type == Tok::Name && std::find(extra.begin(), extra.end(), tk.value) != extra.end();
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string>& extra,
                      bool explicit_parens) {
    const Token start = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    for (;;) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra)) break;
      items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail_at(cur(), "Expected an expression, got '" + describe(cur()) + "'");
    }
    ExprPtr e = expr(ExprKind::Tuple, start);
    e->kids = std::move(items);
    return e;
  }

  ExprPtr parse_assign_target(bool with_tuple, bool with_namespace, const std::vector<std::string>& extra) {
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

  void check_assignable(const Expr& e, const Token& at) const {
    if (e.kind == ExprKind::Name) return;
    if (e.kind == ExprKind::Tuple) {
      for (const auto& k : e.kids) check_assignable(*k, at);
      return;
    }
    fail_at(at, "can't assign to this expression");
  }

  ExprPtr parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
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

  ExprPtr binary(ExprKind kind, ExprPtr l, ExprPtr r, const Token& at) {
    ExprPtr e = expr(kind, at);
    e->kids.push_back(std::move(l));
    e->kids.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Token& at = next();
      e = binary(ExprKind::Or, std::move(e), parse_and(), at);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Token& at = next();
      e = binary(ExprKind::And, std::move(e), parse_not(), at);
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const Token& at = next();
      ExprPtr e = expr(ExprKind::Not, at);
      e->kids.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token start = cur();
    ExprPtr first = parse_math1();
    ExprPtr e;
    for (;;) {
      CmpOp op;
      const Token& tk = cur();
      if (tk.type == Tok::Op && tk.value == "==") op = CmpOp::Eq;
      else if (tk.type == Tok::Op && tk.value == "!=") op = CmpOp::Ne;
      else if (tk.type == Tok::Op && tk.value == "<") op = CmpOp::Lt;
      else if (tk.type == Tok::Op && tk.value == "<=") op = CmpOp::Le;
      else if (tk.type == Tok::Op && tk.value == ">") op = CmpOp::Gt;
      else if (tk.type == Tok::Op && tk.value == ">=") op = CmpOp::Ge;
      else if (is_name("in")) op = CmpOp::In;
      else if (is_name("not") && look().type == Tok::Name && look().value == "in") {
        next();
        op = CmpOp::NotIn;
      } else break;
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

  ExprPtr arith(BinOp op, ExprPtr l, ExprPtr r, const Token& at) {
    ExprPtr e = binary(ExprKind::Binary, std::move(l), std::move(r), at);
    e->bin = op;
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = next();
      e = arith(at.value == "+" ? BinOp::Add : BinOp::Sub, std::move(e), parse_concat(), at);
    }
    return e;
  }

  ExprPtr parse_concat() {
    const Token start = cur();
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    ExprPtr e = expr(ExprKind::Concat, start);
    e->kids.push_back(std::move(first));
    while (skip_op("~")) e->kids.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = next();
      BinOp op = at.value == "*" ? BinOp::Mul : at.value == "/" ? BinOp::Div
                                                : at.value == "//" ? BinOp::FloorDiv : BinOp::Mod;
      e = arith(op, std::move(e), parse_pow(), at);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const Token& at = next();
      e = arith(BinOp::Pow, std::move(e), parse_unary(true), at);
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& at = next();
      e = expr(at.value == "-" ? ExprKind::Neg : ExprKind::Pos, at);
      e->kids.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    return with_filter ? parse_filter_expr(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token& tk = cur();
    ExprPtr e;
    switch (tk.type) {
      case Tok::Name:
        e = expr(ExprKind::Const, tk);
        if (tk.value == "true" || tk.value == "True") e->value = make_bool(true);
        else if (tk.value == "false" || tk.value == "False") e->value = make_bool(false);
        else if (tk.value == "none" || tk.value == "None") e->value = make_none();
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
      default: break;
    }
    fail_at(tk, "unexpected '" + describe(tk) + "'");
  }

  void note_name(const std::string& name) {
    for (MacroDef* m : macros_) {
      if (name == "varargs") m->uses_varargs = true;
      if (name == "kwargs") m->uses_kwargs = true;
      if (name == "caller") m->uses_caller = true;
    }
  }

  ExprPtr parse_list() {
    ExprPtr e = expr(ExprKind::List, next());
    while (!is_op("]")) {
      if (!e->kids.empty()) expect_op(",");
      if (is_op("]")) break;
      e->kids.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }

  ExprPtr parse_dict() {
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

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".") || is_op("[")) e = parse_subscript(std::move(e));
      else if (is_op("(")) e = parse_call(std::move(e));
      else return e;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    for (;;) {
      if (is_op("|")) e = parse_filter(std::move(e), false);
      else if (is_name("is")) e = parse_test(std::move(e));
      else if (is_op("(")) e = parse_call(std::move(e));
      else return e;
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
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
    for (const auto& k : key->kids)
      if (k->kind == ExprKind::Slice && !k->kids[0]) fail_at(at, "slices inside a tuple subscript are not supported");
    ExprPtr e = expr(ExprKind::Item, at);
    e->kids.push_back(std::move(obj));
    e->kids.push_back(std::move(key));
    return e;
  }

  // Returns a plain expression or a Slice whose object slot (kids[0]) is still empty.
  ExprPtr parse_subscribed() {
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
    if (is_op(":") || is_op("]") || is_op(",")) e->kids.push_back(none_at());
    else e->kids.push_back(parse_expression(true));
    if (skip_op(":") && !is_op("]") && !is_op(",")) e->kids.push_back(parse_expression(true));
    else e->kids.push_back(none_at());
    return e;
  }

  void parse_call_args(ExprArgs& a) {
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

  ExprPtr parse_call(ExprPtr callee) {
    ExprPtr e = expr(ExprKind::Call, cur());
    e->kids.push_back(std::move(callee));
    parse_call_args(e->args);
    return e;
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (skip_op(".")) name += "." + expect_name();
    return name;
  }

  ExprPtr parse_filter(ExprPtr operand, bool start_inline) {
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

  ExprPtr parse_test(ExprPtr operand) {
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
};

}  // namespace

std::unique_ptr<Program> parse_program(const std::string& source) {
  return Parser(tokenize(source)).run();
}

}  // namespace hearth::jinja::detail
