// Internals of the Jinja interpreter shared by its lexer, parser, evaluator and builtins.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/jinja.h"
#include "models/json_value.h"

namespace hearth::jinja::detail {

// Thrown by helpers that do not know where in the template they are; the evaluator catches it at
// the innermost expression or statement and rethrows hearth::Error with that node's line/column.
struct RuntimeFail : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void rt_fail(const Args&... args) {
  std::string msg;
  ((msg += args), ...);
  throw RuntimeFail(msg);
}

// A width or precision of a format (`'%999999999d' % x`, `'{:>999999999}'`, `s.center(n)`)
// beyond the largest value a template may build would only allocate for nothing: refused before
// any padding is made, as Python would fail with a MemoryError. Returns n.
inline int64_t checked_width(int64_t n) {
  if (n > int64_t(Limits{}.max_value))
    rt_fail("MemoryError: a format width or precision of ", std::to_string(n), " (at most ",
            std::to_string(Limits{}.max_value), ")");
  return n;
}
// Appends a decimal digit to a width or precision being parsed, refusing it once too large.
inline int64_t width_digit(int64_t n, char digit) {
  return checked_width(n * 10 + (digit - '0'));
}

// ---- values ------------------------------------------------------------------------------------

struct Value;
using List = std::vector<Value>;
struct Interp;
struct CallArgs;

struct Box {
  virtual ~Box() = default;
};

struct Value {
  // Tuple is kept apart from List only because Python prints and compares them differently.
  // Iter stands for Python's generators and dict views (what map/select return, dict.items()):
  // iterable but not indexable; a generator is truthy even when empty and runs only once.
  // Object covers jinja2's namespace() and the loop variable: attribute bags, not mappings.
  enum class Kind : uint8_t {
    Undefined,
    None,
    Bool,
    Int,
    Float,
    String,
    List,
    Tuple,
    Iter,
    Dict,
    Object,
    Func
  };
  Kind kind = Kind::Undefined;
  bool safe = false;  // a Markup string: escape leaves it alone
  bool b = false;
  int64_t i = 0;
  double f = 0;
  // String text (or an Undefined's explanation), List/Tuple items, Dict, Object or Func payload.
  std::shared_ptr<Box> box;

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_int() const { return kind == Kind::Int || kind == Kind::Bool; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_seq() const { return kind == Kind::List || kind == Kind::Tuple; }
  int64_t as_int() const { return kind == Kind::Bool ? int64_t(b) : i; }
  double as_float() const { return kind == Kind::Float ? f : double(as_int()); }
  const std::string& str() const;  // String only
  const List& items() const;       // List/Tuple/Iter only
  struct DictBox& dict() const;
  struct ObjectBox& object() const;
  struct FuncBox& func() const;
  std::string undefined_hint() const;
};

struct StringBox : Box {
  std::string s;
  explicit StringBox(std::string v) : s(std::move(v)) {}
};
struct ListBox : Box {
  enum class Flavor : uint8_t { Plain, Generator, DictKeys, DictValues, DictItems };
  List items;
  Flavor flavor = Flavor::Plain;
  size_t consumed = 0;  // a generator's items before this index have been taken
  explicit ListBox(List v) : items(std::move(v)) {}
};
// Keys are values because Python dict literals may use numbers; lookups use Python equality.
struct DictBox : Box {
  std::vector<std::pair<Value, Value>> entries;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
};
struct ObjectBox : Box {
  std::string type;  // "Namespace" or "LoopContext"
  std::vector<std::pair<std::string, Value>> attrs;
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value value);
};
using NativeFn = std::function<Value(Interp&, CallArgs&)>;
struct FuncBox : Box {
  std::string name;
  NativeFn fn;
};

Value make_undefined(std::string hint = {});
Value make_none();
Value make_bool(bool b);
Value make_int(int64_t i);
Value make_float(double f);
Value make_str(std::string s);
Value make_list(List items);
Value make_tuple(List items);
Value make_iter(ListBox::Flavor flavor, List items);
ListBox& iter_box(const Value& v);
Value make_dict(std::vector<std::pair<Value, Value>> entries = {});
Value make_object(std::string type, std::vector<std::pair<std::string, Value>> attrs = {});
Value make_func(std::string name, NativeFn fn);
Value from_json(const Json& j);

bool truthy(const Value& v);
std::string to_str(const Value& v);       // Python str(); Undefined prints as ""
std::string repr(const Value& v);         // Python repr()
std::string type_name(const Value& v);    // Python type name: "str", "dict", "NoneType"
std::string object_repr(const Value& v);  // jinja2's "'dict object'" form for messages
bool py_equal(const Value& a, const Value& b);
int py_compare(const Value& a, const Value& b, const char* op);  // <0, 0, >0 or TypeError
bool py_contains(const Value& container, const Value& item);
int64_t py_len(const Value& v);
List iterate(const Value& v);
Value py_slice(const Value& v, const Value& start, const Value& stop, const Value& step);

struct JsonDumpOptions {
  std::string indent;  // used when has_indent
  bool has_indent = false;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};
void dump_json(const Value& v, std::string& out, const JsonDumpOptions& opt, int depth = 0);

// ---- UTF-8 and Python string helpers ----------------------------------------------------------

std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t c);
int64_t utf8_length(std::string_view s);
bool py_isspace(char32_t c);
std::string py_repr_str(std::string_view s);
char32_t to_upper_cp(char32_t c);
char32_t to_lower_cp(char32_t c);
char32_t to_title_cp(char32_t c);
bool is_cased_cp(char32_t c);
bool is_alnum_cp(char32_t c);
bool is_alpha_cp(char32_t c);
bool is_digit_cp(char32_t c);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);
std::string py_capitalize(std::string_view s);
// str.strip family: chars == nullptr strips Python whitespace.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count);
std::string percent_format(const std::string& fmt, const Value& args);

// ---- calls ----------------------------------------------------------------------------------

struct CallArgs {
  List pos;
  std::vector<std::pair<std::string, Value>> kw;
  // The argument at position `index`, else the keyword `name` (marked used), else `def`.
  // Pass index SIZE_MAX for keyword-only parameters.
  Value take(size_t index, const char* name, Value def = Value());
  bool has(size_t index, const char* name) const;
  // Fails, naming the function, if an argument was given that no take() asked for.
  void finish(const char* fn) const;
  size_t taken_pos = 0;
  std::vector<bool> used;
};

// Attribute and item access with jinja2's sandbox rules (methods first for `.`, items first
// for `[]`, a missing member is Undefined, mutating methods are refused).
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);

bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value apply_filter(Interp& in, const std::string& name, const Value& v, CallArgs& args);
bool apply_test(Interp& in, const std::string& name, const Value& v, CallArgs& args);
// Template globals (range, namespace, dict, raise_exception, strftime_now, ...) or Undefined.
Value lookup_global(const std::string& name);
Value call_value(Interp& in, const Value& callee, CallArgs& args);

// ---- syntax tree ------------------------------------------------------------------------------

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  Const,
  Name,
  List,
  Tuple,
  Dict,
  Attr,
  Item,
  Slice,
  Call,
  Filter,
  Test,
  Not,
  Neg,
  Pos,
  Binary,
  Compare,
  And,
  Or,
  Concat,
  Cond,
  Captured
};
enum class BinOp { Add, Sub, Mul, Div, FloorDiv, Mod, Pow };
enum class CmpOp { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct ExprArgs {
  std::vector<ExprPtr> pos;
  std::vector<std::pair<std::string, ExprPtr>> kw;
  ExprPtr star, starstar;
};

struct Expr {
  ExprKind kind;
  int line = 0, col = 0;
  Value value;       // Const
  std::string name;  // Name, Attr, Filter, Test
  BinOp bin = BinOp::Add;
  std::vector<CmpOp> cmp;
  // Operands. Item: obj, key. Slice: obj, start, stop, step (None if omitted).
  // Dict: k0, v0, k1, v1, ... Cond: value, condition, else (may be null).
  // Compare: the first operand, then one per cmp entry.
  std::vector<ExprPtr> kids;
  ExprArgs args;  // Call, Filter, Test
};

enum class StmtKind {
  Text,
  Output,
  If,
  For,
  Set,
  SetBlock,
  Macro,
  CallBlock,
  FilterBlock,
  With,
  Break,
  Continue
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // aligned with params; null where there is none
  Body body;
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
};

struct Stmt {
  StmtKind kind;
  int line = 0, col = 0;
  std::string text;  // Text
  ExprPtr target;    // For, Set, SetBlock
  ExprPtr expr;      // Output; For iterable; Set value; CallBlock call; Set/FilterBlock filters
  ExprPtr cond;      // For `if` filter
  std::vector<std::pair<ExprPtr, Body>> branches;  // If/elif
  Body body, else_body;
  std::shared_ptr<MacroDef> macro;                   // Macro; the CallBlock's caller
  std::vector<std::pair<ExprPtr, ExprPtr>> assigns;  // With
};

struct Program {
  Body body;
};

// ---- lexer and parser ---------------------------------------------------------------------------

enum class Tok { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type;
  std::string value;  // Data text, name, decoded string literal, operator
  int64_t ival = 0;
  double fval = 0;
  int line = 0, col = 0;
};

std::vector<Token> tokenize(const std::string& source);
std::unique_ptr<Program> parse_program(const std::string& source);
[[noreturn]] void syntax_fail(int line, int col, const std::string& msg);

// ---- evaluation -------------------------------------------------------------------------------

struct Frame {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Frame> parent;
  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value v);
};

enum class Flow { Normal, Break, Continue };

struct Interp {
  std::string* out = nullptr;
  Limits limits;
  uint64_t steps = 0;
  uint64_t work = 0;  // bytes and items of the values evaluated so far
  std::shared_ptr<Frame> frame;
  Value captured;  // the text a set-block or filter-block hands to its filter chain
  int depth = 0;

  void step();  // one more statement or expression: fails past limits.max_steps
  Value eval(const Expr& e);
  Flow exec(const Body& body);
  Flow exec_stmt(const Stmt& s);
  Value lookup(const std::string& name) const;
  std::string capture(const Body& body, std::shared_ptr<Frame> frame);
  CallArgs eval_args(const ExprArgs& a);
  Value call_macro(const std::shared_ptr<MacroDef>& m, const std::shared_ptr<Frame>& closure,
                   CallArgs& args, const Value& caller);

 private:
  Value eval_inner(const Expr& e);
  Flow exec_for(const Stmt& s);
  void assign(const Expr& target, const Value& v, bool allow_ns);
  Value make_macro(const std::shared_ptr<MacroDef>& m);
};

}  // namespace hearth::jinja::detail
