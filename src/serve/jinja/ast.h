// The parsed form of a template: statements (text, output, if, for, set, macro, filter
// blocks, break/continue) over expressions. Every node keeps its source position so that
// runtime errors name line and column.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "serve/jinja/lexer.h"
#include "serve/jinja/value.h"

namespace moeflow::serve::jinja {

enum class ExprKind {
  kLiteral,  // literal
  kName,     // name
  kGetAttr,  // a.name
  kGetItem,  // a[b]
  kSlice,    // a[b:c:d], each bound may be null
  kCall,     // a(args, kwargs)
  kFilter,   // a | name(args, kwargs); a is null in a filter block's chain start
  kTest,     // a is [not] name(args)
  kNeg,      // -a
  kPos,      // +a
  kNot,      // not a
  kBinary,   // a <name> b for + - * / // % ** ~
  kAnd,      // a and b
  kOr,       // a or b
  kCompare,  // a ops[0] args[0] ops[1] args[1] ... (chained, as Python)
  kCond,     // b if a else c (c may be null)
  kList,     // [args]
  kTuple,    // (args)
  kDict,     // {args[i]: values[i]}
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  SourcePos pos;
  Value literal;
  std::string name;
  std::unique_ptr<Expr> a, b, c, d;
  std::vector<std::unique_ptr<Expr>> args, values;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

enum class StmtKind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kFilterBlock, kBreak, kContinue };

struct IfBranch {
  std::unique_ptr<Expr> condition;
  Body body;
};

struct MacroParam {
  std::string name;
  std::unique_ptr<Expr> default_value;  // null: required
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  SourcePos pos;
  std::string text;                    // kText
  std::unique_ptr<Expr> expr;          // kOutput, kFor (iterable), kSet (value), kFilterBlock (filter chain)
  std::unique_ptr<Expr> condition;     // kFor: `if` filter (may be null)
  std::vector<IfBranch> branches;      // kIf: if and elif branches
  Body body, else_body;                // kIf else, kFor body/else, kSetBlock, kMacro, kFilterBlock
  std::vector<std::string> targets;    // kFor/kSet/kSetBlock names (several: unpacking)
  std::string attribute;               // kSet/kSetBlock: `set ns.attribute`, targets[0] = ns
  std::string name;                    // kMacro
  std::vector<MacroParam> params;      // kMacro
  bool loop_has_controls = false;      // kFor: break/continue inside
};

struct Template {
  Body body;
};

}  // namespace moeflow::serve::jinja
