// Recursive-descent parser following jinja2's grammar and operator precedence (which differs
// from Python's: `is` tests and filters bind tighter than arithmetic, `**` is left-associative).
#include <algorithm>

#include "models/jinja_parser.h"

namespace hearth::jinja::detail {

std::string Parser::describe(const Token& tk) {
  switch (tk.type) {
    case Tok::BlockEnd:
      return "end of statement block";
    case Tok::VarEnd:
      return "end of print statement";
    case Tok::BlockBegin:
      return "begin of statement block";
    case Tok::VarBegin:
      return "begin of print statement";
    case Tok::Eof:
      return "end of template";
    case Tok::Data:
      return "template data";
    case Tok::String:
      return "string";
    default:
      return tk.value;
  }
}

[[noreturn]] void Parser::fail_at(const Token& tk, const std::string& msg) const {
  syntax_fail(tk.line, tk.col, msg);
}

void Parser::expect_op(const char* op) {
  if (!skip_op(op))
    fail_at(cur(), std::string("expected '") + op + "', got '" + describe(cur()) + "'");
}

void Parser::expect(Tok type, const char* what) {
  if (cur().type != type)
    fail_at(cur(), std::string("expected ") + what + ", got '" + describe(cur()) + "'");
  next();
}

std::string Parser::expect_name() {
  if (cur().type != Tok::Name) fail_at(cur(), "expected name, got '" + describe(cur()) + "'");
  return next().value;
}

void Parser::expect_block_end() {
  skip_op(":");
  expect(Tok::BlockEnd, "end of statement block");
}

std::string Parser::join_tags(const std::vector<std::string>& tags) {
  std::string s;
  for (size_t k = 0; k < tags.size(); ++k) s += (k ? " or '" : "'") + tags[k] + "'";
  return s;
}

Body Parser::subparse(const std::vector<std::string>& ends, std::string* found) {
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
      if (cur().type == Tok::Name &&
          std::find(ends.begin(), ends.end(), cur().value) != ends.end()) {
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

Body Parser::block_body(const std::string& tag, const std::vector<std::string>& ends,
                        std::string* found) {
  open_blocks_.emplace_back(tag, ends);
  Body b = subparse(ends, found);
  open_blocks_.pop_back();
  return b;
}

Body Parser::body_until(const std::string& tag, const char* end) {
  std::string found;
  Body b = block_body(tag, {end}, &found);
  expect_block_end();
  return b;
}

std::unique_ptr<Stmt> Parser::parse_statement() {
  const Token& tk = cur();
  Nest nest(*this, tk);
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

std::unique_ptr<Stmt> Parser::parse_if(std::unique_ptr<Stmt> s) {
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

std::unique_ptr<Stmt> Parser::parse_for(std::unique_ptr<Stmt> s) {
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

std::unique_ptr<Stmt> Parser::parse_set(std::unique_ptr<Stmt> s) {
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

void Parser::parse_signature(MacroDef& m) {
  expect_op("(");
  while (!is_op(")")) {
    if (!m.params.empty()) expect_op(",");
    m.params.push_back(expect_name());
    if (skip_op("=")) {
      m.defaults.push_back(parse_expression(true));
    } else {
      if (std::any_of(m.defaults.begin(), m.defaults.end(),
                      [](const ExprPtr& d) { return d != nullptr; }))
        fail_at(cur(), "non-default argument follows default argument");
      m.defaults.push_back(nullptr);
    }
  }
  expect_op(")");
}

Body Parser::macro_body(MacroDef& m, const char* tag, const char* end) {
  // Loop controls do not cross a macro boundary.
  int saved = loop_depth_;
  loop_depth_ = 0;
  macros_.push_back(&m);
  Body b = body_until(tag, end);
  macros_.pop_back();
  loop_depth_ = saved;
  return b;
}

std::unique_ptr<Stmt> Parser::parse_macro(std::unique_ptr<Stmt> s) {
  s->kind = StmtKind::Macro;
  s->macro = std::make_shared<MacroDef>();
  s->macro->name = expect_name();
  parse_signature(*s->macro);
  expect_block_end();
  s->macro->body = macro_body(*s->macro, "macro", "endmacro");
  return s;
}

std::unique_ptr<Stmt> Parser::parse_call_block(std::unique_ptr<Stmt> s) {
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

std::unique_ptr<Program> parse_program(const std::string& source) {
  return Parser(tokenize(source)).run();
}

}  // namespace hearth::jinja::detail
