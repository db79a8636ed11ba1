// The jinja2 grammar as a recursive-descent parser; statements are in jinja_parser.cpp and
// expressions in jinja_parse_expr.cpp.
#pragma once
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "models/jinja_internal.h"

namespace hearth::jinja::detail {

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
  int depth_ = 0;

  // Bounds the parser's (and so the evaluator's) recursion, so that a hostile template cannot
  // exhaust the stack.
  struct Nest {
    Parser& p;
    Nest(Parser& parser, const Token& at) : p(parser) {
      if (++p.depth_ > 200) p.fail_at(at, "template nested too deeply");
    }
    ~Nest() { --p.depth_; }
  };

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

  static std::string describe(const Token& tk);
  [[noreturn]] void fail_at(const Token& tk, const std::string& msg) const;
  void expect_op(const char* op);
  void expect(Tok type, const char* what);
  std::string expect_name();
  void expect_block_end();

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

  static std::string join_tags(const std::vector<std::string>& tags);

  // Parses until one of `ends` opens a block tag; the tag name is consumed and stored in *found.
  Body subparse(const std::vector<std::string>& ends, std::string* found);
  Body block_body(const std::string& tag, const std::vector<std::string>& ends, std::string* found);
  Body body_until(const std::string& tag, const char* end);
  std::unique_ptr<Stmt> parse_statement();
  std::unique_ptr<Stmt> parse_if(std::unique_ptr<Stmt> s);
  std::unique_ptr<Stmt> parse_for(std::unique_ptr<Stmt> s);
  std::unique_ptr<Stmt> parse_set(std::unique_ptr<Stmt> s);
  void parse_signature(MacroDef& m);
  Body macro_body(MacroDef& m, const char* tag, const char* end);
  std::unique_ptr<Stmt> parse_macro(std::unique_ptr<Stmt> s);
  std::unique_ptr<Stmt> parse_call_block(std::unique_ptr<Stmt> s);

  // ---- expressions ----

  bool is_tuple_end(const std::vector<std::string>& extra) const;
  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string>& extra,
                      bool explicit_parens);
  ExprPtr parse_assign_target(bool with_tuple, bool with_namespace,
                              const std::vector<std::string>& extra);
  void check_assignable(const Expr& e, const Token& at) const;
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_condexpr();
  ExprPtr binary(ExprKind kind, ExprPtr l, ExprPtr r, const Token& at);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr arith(BinOp op, ExprPtr l, ExprPtr r, const Token& at);
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  void note_name(const std::string& name);
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_filter_expr(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr obj);

  // Returns a plain expression or a Slice whose object slot (kids[0]) is still empty.
  ExprPtr parse_subscribed();
  void parse_call_args(ExprArgs& a);
  ExprPtr parse_call(ExprPtr callee);
  std::string dotted_name();
  ExprPtr parse_filter(ExprPtr operand, bool start_inline);
  ExprPtr parse_test(ExprPtr operand);
};

}  // namespace hearth::jinja::detail
