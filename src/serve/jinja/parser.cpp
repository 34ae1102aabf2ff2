#include "serve/jinja/parser.h"

#include <initializer_list>

#include "base/error.h"
#include "serve/jinja/builtins.h"

namespace moeflow::serve::jinja {
namespace {

using ExprPtr = std::unique_ptr<Expr>;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  std::shared_ptr<const Template> run() {
    auto tpl = std::make_shared<Template>();
    std::string end;
    tpl->body = parse_body({}, &end, SourcePos{});
    return tpl;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(const char* op) const { return cur().kind == TokenKind::kOperator && cur().text == op; }
  bool is_name(const char* n) const { return cur().kind == TokenKind::kName && cur().text == n; }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool accept_name(const char* n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }

  [[noreturn]] void fail(SourcePos p, const std::string& what) const {
    throw InputError("chat template: " + to_string(p) + ": " + what);
  }
  [[noreturn]] void fail_here(const std::string& what) const { fail(cur().pos, what + ", found " + describe(cur())); }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kText: return "text";
      case TokenKind::kVarBegin: return "'{{'";
      case TokenKind::kVarEnd: return "'}}'";
      case TokenKind::kBlockBegin: return "'{%'";
      case TokenKind::kBlockEnd: return "'%}'";
      case TokenKind::kName: return "'" + t.text + "'";
      case TokenKind::kString: return "a string";
      case TokenKind::kInt:
      case TokenKind::kFloat: return "'" + t.text + "'";
      case TokenKind::kOperator: return "'" + t.text + "'";
      case TokenKind::kEnd: return "the end of the template";
    }
    return "?";
  }

  void expect_op(const char* op) {
    if (!accept_op(op)) fail_here(std::string("expected '") + op + "'");
  }
  std::string expect_name(const char* what) {
    if (cur().kind != TokenKind::kName) fail_here(std::string("expected ") + what);
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_block_end(const char* tag) {
    if (cur().kind != TokenKind::kBlockEnd) fail_here(std::string("expected '%}' to end '{% ") + tag + " %}'");
    advance();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxParseDepth)
        p_.fail(p_.cur().pos, "nesting deeper than " + std::to_string(kMaxParseDepth) + " levels");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  // A left-associative chain (a + b + c, a.b.c, a | f | g) nests one level per link:
  // each link deepens the current level until the function returns (DepthRestore).
  void deepen() {
    if (++depth_ > kMaxParseDepth) fail(cur().pos, "nesting deeper than " + std::to_string(kMaxParseDepth) + " levels");
  }
  struct DepthRestore {
    explicit DepthRestore(Parser& p) : p_(p), saved_(p.depth_) {}
    ~DepthRestore() { p_.depth_ = saved_; }
    Parser& p_;
    int saved_;
  };

  ExprPtr node(ExprKind k, SourcePos p) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->pos = p;
    return e;
  }

  // ---- statements ----

  // Parses statements until a `{% name %}` with name in `ends` (left unconsumed after the
  // name: *end_found holds it) or, for the top level (ends empty), the end of input.
  Body parse_body(std::initializer_list<const char*> ends, std::string* end_found, SourcePos opened, const char* opener = "") {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& tok = cur();
      if (tok.kind == TokenKind::kEnd) {
        if (ends.size() == 0) return body;
        fail(opened, std::string("'{% ") + opener + " %}' is never closed (expected '{% " + *ends.begin() + " %}')");
      }
      if (tok.kind == TokenKind::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->pos = tok.pos;
        s->text = tok.text;
        body.push_back(std::move(s));
        advance();
        continue;
      }
      if (tok.kind == TokenKind::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->pos = tok.pos;
        advance();
        s->expr = parse_tuple(true, false, {});
        if (cur().kind != TokenKind::kVarEnd) fail_here("expected '}}'");
        advance();
        body.push_back(std::move(s));
        continue;
      }
      if (tok.kind != TokenKind::kBlockBegin) fail_here("expected text or a tag");
      const SourcePos tag_pos = tok.pos;
      advance();
      if (cur().kind != TokenKind::kName) fail_here("expected a tag name after '{%'");
      const std::string name = cur().text;
      for (const char* e : ends) {
        if (name == e) {
          *end_found = name;
          advance();
          return body;
        }
      }
      advance();
      body.push_back(parse_statement(name, tag_pos));
    }
  }

  std::unique_ptr<Stmt> parse_statement(const std::string& name, SourcePos pos) {
    auto s = std::make_unique<Stmt>();
    s->pos = pos;
    if (name == "if") return parse_if(std::move(s));
    if (name == "for") return parse_for(std::move(s));
    if (name == "set") return parse_set(std::move(s));
    if (name == "macro") return parse_macro(std::move(s));
    if (name == "filter") {
      s->kind = StmtKind::kFilterBlock;
      s->expr = parse_filter_chain(nullptr);
      expect_block_end("filter");
      std::string end;
      s->body = parse_body({"endfilter"}, &end, pos, "filter");
      expect_block_end("endfilter");
      return s;
    }
    if (name == "generation") {
      // Hugging Face's AssistantTracker tag: it marks assistant text and renders its body.
      expect_block_end("generation");
      s->kind = StmtKind::kIf;
      IfBranch b;
      b.condition = node(ExprKind::kLiteral, pos);
      b.condition->literal = Value::boolean(true);
      std::string end;
      b.body = parse_body({"endgeneration"}, &end, pos, "generation");
      expect_block_end("endgeneration");
      s->branches.push_back(std::move(b));
      return s;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail(pos, "'{% " + name + " %}' outside a loop");
      s->kind = name == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      expect_block_end(name.c_str());
      return s;
    }
    static const char* const kUnsupported[] = {"include", "import", "from", "extends", "block", "call",
                                               "with", "do", "autoescape", "trans", "raw"};
    for (const char* u : kUnsupported)
      if (name == u) fail(pos, "'{% " + name + " %}' is not supported by moeflow's chat-template interpreter");
    static const char* const kEnds[] = {"endif", "endfor", "endset", "endmacro", "endfilter", "endgeneration",
                                        "elif", "else", "endraw", "endcall", "endblock", "endwith"};
    for (const char* u : kEnds)
      if (name == u) fail(pos, "unexpected '{% " + name + " %}' (no block open that it ends)");
    fail(pos, "unknown tag '{% " + name + " %}'");
  }

  std::unique_ptr<Stmt> parse_if(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::kIf;
    const SourcePos pos = s->pos;
    while (true) {
      IfBranch b;
      b.condition = parse_tuple(false, false, {});
      expect_block_end("if");
      std::string end;
      b.body = parse_body({"elif", "else", "endif"}, &end, pos, "if");
      s->branches.push_back(std::move(b));
      if (end == "elif") continue;
      if (end == "else") {
        expect_block_end("else");
        s->else_body = parse_body({"endif"}, &end, pos, "if");
      }
      expect_block_end("endif");
      return s;
    }
  }

  std::unique_ptr<Stmt> parse_for(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::kFor;
    const SourcePos pos = s->pos;
    s->targets = parse_targets("for");
    if (!accept_name("in")) fail_here("expected 'in' in '{% for %}'");
    s->expr = parse_tuple(false, false, {"recursive"});
    if (accept_name("if")) s->condition = parse_expression(true);
    if (is_name("recursive")) fail(cur().pos, "recursive loops ('{% for ... recursive %}') are not supported");
    expect_block_end("for");
    ++loop_depth_;
    std::string end;
    s->body = parse_body({"else", "endfor"}, &end, pos, "for");
    --loop_depth_;
    if (end == "else") {
      expect_block_end("else");
      s->else_body = parse_body({"endfor"}, &end, pos, "for");
    }
    expect_block_end("endfor");
    return s;
  }

  // A name, or names separated by commas (optionally in parentheses).
  std::vector<std::string> parse_targets(const char* tag) {
    std::vector<std::string> names;
    const bool paren = accept_op("(");
    do {
      if (cur().kind != TokenKind::kName) fail_here(std::string("expected a variable name in '{% ") + tag + " %}'");
      names.push_back(cur().text);
      advance();
    } while (accept_op(","));
    if (paren) expect_op(")");
    return names;
  }

  std::unique_ptr<Stmt> parse_set(std::unique_ptr<Stmt> s) {
    const SourcePos pos = s->pos;
    if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == ".") {
      s->targets.push_back(cur().text);
      advance();
      advance();
      s->attribute = expect_name("an attribute name after '.' in '{% set %}'");
    } else {
      s->targets = parse_targets("set");
    }
    if (accept_op("=")) {
      s->kind = StmtKind::kSet;
      s->expr = parse_tuple(true, false, {});
      expect_block_end("set");
      return s;
    }
    if (s->targets.size() != 1) fail_here("expected '=' in '{% set %}'");
    s->kind = StmtKind::kSetBlock;
    if (accept_op("|")) s->expr = parse_filter_chain(nullptr);
    expect_block_end("set");
    std::string end;
    s->body = parse_body({"endset"}, &end, pos, "set");
    expect_block_end("endset");
    return s;
  }

  std::unique_ptr<Stmt> parse_macro(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::kMacro;
    const SourcePos pos = s->pos;
    s->name = expect_name("a macro name");
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name("a parameter name");
      if (accept_op("=")) p.default_value = parse_expression(true);
      else if (!s->params.empty() && s->params.back().default_value)
        fail(cur().pos, "macro '" + s->name + "': a parameter without a default follows one with a default");
      s->params.push_back(std::move(p));
    }
    expect_op(")");
    expect_block_end("macro");
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    s->body = parse_body({"endmacro"}, &end, pos, "macro");
    loop_depth_ = saved_loops;
    if (cur().kind == TokenKind::kName && cur().text == s->name) advance();  // {% endmacro name %}
    expect_block_end("endmacro");
    return s;
  }

  // ---- expressions ----

  // A comma-separated list of expressions is a tuple; one without a comma is itself.
  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens, std::initializer_list<const char*> extra_ends) {
    const SourcePos pos = cur().pos;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (tuple_end(extra_ends)) break;
      args.push_back(parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail_here("expected an expression");
    }
    auto t = node(ExprKind::kTuple, pos);
    t->args = std::move(args);
    return t;
  }

  bool tuple_end(std::initializer_list<const char*> extra) const {
    const Token& t = cur();
    if (t.kind == TokenKind::kVarEnd || t.kind == TokenKind::kBlockEnd || t.kind == TokenKind::kEnd) return true;
    if (t.kind == TokenKind::kOperator && t.text == ")") return true;
    if (t.kind == TokenKind::kName)
      for (const char* e : extra)
        if (t.text == e) return true;
    return false;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    DepthRestore restore(*this);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      deepen();
      const SourcePos pos = cur().pos;
      advance();
      auto c = node(ExprKind::kCond, pos);
      c->a = parse_or();
      c->b = std::move(e);
      if (accept_name("else")) c->c = parse_condexpr_guarded();
      e = std::move(c);
    }
    return e;
  }
  ExprPtr parse_condexpr_guarded() {
    DepthGuard guard(*this);
    return parse_condexpr();
  }

  ExprPtr parse_or() {
    DepthRestore restore(*this);
    ExprPtr e = parse_and();
    while (is_name("or")) {
      deepen();
      auto o = node(ExprKind::kOr, cur().pos);
      advance();
      o->a = std::move(e);
      o->b = parse_and();
      e = std::move(o);
    }
    return e;
  }

  ExprPtr parse_and() {
    DepthRestore restore(*this);
    ExprPtr e = parse_not();
    while (is_name("and")) {
      deepen();
      auto o = node(ExprKind::kAnd, cur().pos);
      advance();
      o->a = std::move(e);
      o->b = parse_not();
      e = std::move(o);
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto n = node(ExprKind::kNot, cur().pos);
      advance();
      n->a = parse_not();
      return n;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    DepthRestore restore(*this);
    const SourcePos pos = cur().pos;
    ExprPtr first = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      std::string op;
      if (cur().kind == TokenKind::kOperator &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" || cur().text == ">" ||
           cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      deepen();
      ops.push_back(op);
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto c = node(ExprKind::kCompare, pos);
    c->a = std::move(first);
    c->ops = std::move(ops);
    c->args = std::move(operands);
    return c;
  }

  ExprPtr binary(const std::string& op, SourcePos pos, ExprPtr l, ExprPtr r) {
    auto b = node(ExprKind::kBinary, pos);
    b->name = op;
    b->a = std::move(l);
    b->b = std::move(r);
    return b;
  }

  ExprPtr parse_math1() {
    DepthRestore restore(*this);
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      deepen();
      const std::string op = cur().text;
      const SourcePos pos = cur().pos;
      advance();
      e = binary(op, pos, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    DepthRestore restore(*this);
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      deepen();
      const SourcePos pos = cur().pos;
      advance();
      e = binary("~", pos, std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    DepthRestore restore(*this);
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      deepen();
      const std::string op = cur().text;
      const SourcePos pos = cur().pos;
      advance();
      e = binary(op, pos, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    DepthRestore restore(*this);
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      deepen();
      const SourcePos pos = cur().pos;
      advance();
      e = binary("**", pos, std::move(e), parse_unary(true));
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(is_op("-") ? ExprKind::kNeg : ExprKind::kPos, cur().pos);
      advance();
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const SourcePos pos = t.pos;
    switch (t.kind) {
      case TokenKind::kName: {
        auto e = node(ExprKind::kLiteral, pos);
        if (t.text == "true" || t.text == "True") e->literal = Value::boolean(true);
        else if (t.text == "false" || t.text == "False") e->literal = Value::boolean(false);
        else if (t.text == "none" || t.text == "None") e->literal = Value::none();
        else {
          e->kind = ExprKind::kName;
          e->name = t.text;
        }
        advance();
        return e;
      }
      case TokenKind::kString: {
        std::string s;
        while (cur().kind == TokenKind::kString) {  // adjacent literals concatenate
          s += cur().text;
          advance();
        }
        auto e = node(ExprKind::kLiteral, pos);
        e->literal = Value::string(std::move(s));
        return e;
      }
      case TokenKind::kInt: {
        auto e = node(ExprKind::kLiteral, pos);
        e->literal = Value::integer(t.int_value);
        advance();
        return e;
      }
      case TokenKind::kFloat: {
        auto e = node(ExprKind::kLiteral, pos);
        e->literal = Value::floating(t.float_value);
        advance();
        return e;
      }
      case TokenKind::kOperator:
        if (t.text == "(") {
          advance();
          ExprPtr e = parse_tuple(true, true, {});
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          advance();
          auto e = node(ExprKind::kList, pos);
          while (!is_op("]")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("]")) break;
            e->args.push_back(parse_expression(true));
          }
          expect_op("]");
          return e;
        }
        if (t.text == "{") {
          advance();
          auto e = node(ExprKind::kDict, pos);
          while (!is_op("}")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("}")) break;
            e->args.push_back(parse_expression(true));
            expect_op(":");
            e->values.push_back(parse_expression(true));
          }
          expect_op("}");
          return e;
        }
        break;
      default: break;
    }
    fail_here("expected an expression");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    DepthRestore restore(*this);
    while (true) {
      deepen();
      if (is_op(".")) {
        const SourcePos pos = cur().pos;
        advance();
        if (cur().kind == TokenKind::kName) {
          auto g = node(ExprKind::kGetAttr, pos);
          g->a = std::move(e);
          g->name = cur().text;
          advance();
          e = std::move(g);
        } else if (cur().kind == TokenKind::kInt) {
          auto g = node(ExprKind::kGetItem, pos);
          g->a = std::move(e);
          g->b = node(ExprKind::kLiteral, cur().pos);
          g->b->literal = Value::integer(cur().int_value);
          advance();
          e = std::move(g);
        } else {
          fail_here("expected an attribute name after '.'");
        }
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target) {
    const SourcePos pos = cur().pos;
    advance();  // [
    ExprPtr start, stop, step;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (is_op(",")) fail(cur().pos, "tuple subscripts (a[x, y]) are not supported");
      if (accept_op("]")) {
        auto g = node(ExprKind::kGetItem, pos);
        g->a = std::move(target);
        g->b = std::move(start);
        return g;
      }
    }
    expect_op(":");
    if (!is_op("]") && !is_op(":")) stop = parse_expression(true);
    if (accept_op(":")) {
      if (!is_op("]")) step = parse_expression(true);
    }
    expect_op("]");
    auto s = node(ExprKind::kSlice, pos);
    s->a = std::move(target);
    s->b = std::move(start);
    s->c = std::move(stop);
    s->d = std::move(step);
    return s;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail(cur().pos, "'*args' and '**kwargs' in a call are not supported");
      if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == "=") {
        std::string key = cur().text;
        advance();
        advance();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail(cur().pos, "a positional argument follows a keyword argument");
        e.args.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto c = node(ExprKind::kCall, cur().pos);
    c->a = std::move(callee);
    parse_call_args(*c);
    return c;
  }

  std::string dotted_name(const char* what) {
    std::string n = expect_name(what);
    while (is_op(".") && peek().kind == TokenKind::kName) {
      advance();
      n += "." + cur().text;
      advance();
    }
    return n;
  }

  void check_filter(const Expr& f) const {
    if (!is_known_filter(f.name)) fail(f.pos, "unknown filter '" + f.name + "' (not in moeflow's chat-template subset)");
  }

  ExprPtr parse_filter_chain(ExprPtr e) {
    DepthRestore restore(*this);
    do {
      deepen();
      auto f = node(ExprKind::kFilter, cur().pos);
      f->name = dotted_name("a filter name");
      check_filter(*f);
      if (is_op("(")) parse_call_args(*f);
      f->a = std::move(e);
      e = std::move(f);
    } while (accept_op("|"));
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    DepthRestore restore(*this);
    while (true) {
      deepen();
      if (accept_op("|")) {
        auto f = node(ExprKind::kFilter, cur().pos);
        f->name = dotted_name("a filter name after '|'");
        check_filter(*f);
        if (is_op("(")) parse_call_args(*f);
        f->a = std::move(e);
        e = std::move(f);
      } else if (is_name("is")) {
        auto t = node(ExprKind::kTest, cur().pos);
        advance();
        if (accept_name("not")) t->negated = true;
        t->name = dotted_name("a test name after 'is'");
        if (!is_known_test(t->name)) fail(t->pos, "unknown test '" + t->name + "' (not in moeflow's chat-template subset)");
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((cur().kind == TokenKind::kName || cur().kind == TokenKind::kString || cur().kind == TokenKind::kInt ||
                    cur().kind == TokenKind::kFloat || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail(cur().pos, "'is' cannot follow a test's argument");
          DepthGuard guard(*this);
          t->args.push_back(parse_postfix(parse_primary()));
        }
        t->a = std::move(e);
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

std::shared_ptr<const Template> parse_template(std::string_view source) { return Parser(tokenize(source)).run(); }

}  // namespace moeflow::serve::jinja
