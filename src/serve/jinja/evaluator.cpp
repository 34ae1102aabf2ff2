#include "serve/jinja/evaluator.h"

#include <ctime>
#include <unordered_map>

#include "base/error.h"
#include "serve/jinja/builtins.h"

namespace moeflow::serve::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

class Evaluator final : public CallContext {
 public:
  Evaluator(const std::vector<std::pair<std::string, Value>>& variables, const RenderOptions& options)
      : options_(options), out_limit_(options.limits.max_output_bytes) {
    scopes_.emplace_back();
    for (auto& [name, fn] : global_functions()) scopes_.back()[name] = fn;
    for (const auto& [name, v] : variables) scopes_.back()[name] = v;
    scopes_.emplace_back();  // the template's top-level `{% set %}`s
  }

  std::string run(const Template& tpl) {
    exec_body(tpl.body);
    return std::move(out_);
  }

  // ---- CallContext ----
  std::string where() const override { return "chat template: " + to_string(pos_) + ": "; }
  void charge_string(size_t bytes) override {
    if (bytes > options_.limits.max_string_bytes)
      fail("a string of " + std::to_string(bytes) + " bytes exceeds the limit of " +
           std::to_string(options_.limits.max_string_bytes));
    bytes_built_ += bytes;
    if (bytes_built_ > options_.limits.max_bytes_built)
      fail("the template built more than " + std::to_string(options_.limits.max_bytes_built) +
           " bytes of values (limit)");
  }
  void charge_items(size_t items) override {
    if (items > options_.limits.max_list_items)
      fail("a list or dict of " + std::to_string(items) + " items exceeds the limit of " +
           std::to_string(options_.limits.max_list_items));
    charge_string(items * sizeof(Value));
  }
  Value call(const Value& callee, CallArgs& args) override {
    if (callee.is_undefined()) fail(undefined_message(callee) + " (called as a function)");
    if (!callee.is_callable()) fail(std::string("'") + callee.type_name() + "' object is not callable");
    return check_depth(callee.callable_data().call(args, *this));
  }
  const RenderLimits& limits() const override { return options_.limits; }
  int64_t now_seconds(bool* utc) const override {
    *utc = options_.now_unix_seconds.has_value();
    return options_.now_unix_seconds ? *options_.now_unix_seconds : static_cast<int64_t>(std::time(nullptr));
  }

  Value call_macro(const Stmt& m, CallArgs& args) {
    if (args.positional.size() > m.params.size())
      fail("macro '" + m.name + "' takes " + std::to_string(m.params.size()) + " arguments, " +
           std::to_string(args.positional.size()) + " given");
    std::unordered_map<std::string, Value> frame;
    for (size_t i = 0; i < args.positional.size(); ++i) frame[m.params[i].name] = args.positional[i];
    for (auto& [key, v] : args.keyword) {
      bool known = false;
      for (const MacroParam& p : m.params) known = known || p.name == key;
      if (!known) fail("macro '" + m.name + "' has no parameter '" + key + "'");
      if (frame.count(key)) fail("macro '" + m.name + "' got parameter '" + key + "' twice");
      frame[key] = v;
    }
    const size_t saved_base = frame_base_;
    frame_base_ = scopes_.size();
    scopes_.push_back(std::move(frame));
    for (const MacroParam& p : m.params) {
      if (scopes_.back().count(p.name)) continue;
      // jinja2 leaves a parameter without a default undefined when it is not passed.
      scopes_.back()[p.name] = p.default_value ? eval(*p.default_value) : Value::undefined("'" + p.name + "' is undefined");
    }
    std::string text = capture(m.body);
    scopes_.pop_back();
    frame_base_ = saved_base;
    return Value::string(std::move(text));
  }

 private:
  // Entered for every node: counts the step, bounds the depth, and keeps the node's
  // position for error messages (restored on the way out).
  struct Enter {
    Enter(Evaluator& e, SourcePos p) : e_(e), saved_(e.pos_) {
      e.pos_ = p;
      if (++e.steps_ > e.options_.limits.max_steps)
        e.fail("evaluation exceeded " + std::to_string(e.options_.limits.max_steps) + " steps (limit)");
      if (++e.depth_ > e.options_.limits.max_depth)
        e.fail("evaluation nested deeper than " + std::to_string(e.options_.limits.max_depth) +
               " levels (limit; recursive macros?)");
    }
    ~Enter() {
      --e_.depth_;
      e_.pos_ = saved_;
    }
    Evaluator& e_;
    SourcePos saved_;
  };

  static std::string undefined_message(const Value& v) {
    return v.undefined_name().empty() ? "undefined value" : v.undefined_name();
  }

  Value check_depth(Value v) {
    if (v.depth() > options_.limits.max_value_depth)
      fail("lists and dicts nested deeper than " + std::to_string(options_.limits.max_value_depth) + " levels (limit)");
    return v;
  }

  void emit(const std::string& s) {
    if (out_.size() + s.size() > out_limit_)
      fail("the rendered text exceeds the limit of " + std::to_string(out_limit_) + " bytes");
    out_ += s;
  }

  std::string capture(const Body& body) {
    std::string saved;
    std::swap(saved, out_);
    const size_t saved_limit = out_limit_;
    out_limit_ = options_.limits.max_string_bytes;
    exec_body(body);
    out_limit_ = saved_limit;
    std::string text = std::move(out_);
    out_ = std::move(saved);
    charge_string(text.size());
    return text;
  }

  const Value* lookup(const std::string& name) const {
    for (size_t i = scopes_.size(); i-- > frame_base_;) {
      const auto it = scopes_[i].find(name);
      if (it != scopes_[i].end()) return &it->second;
    }
    if (frame_base_ > 0) {
      for (size_t i = 2; i-- > 0;) {
        const auto it = scopes_[i].find(name);
        if (it != scopes_[i].end()) return &it->second;
      }
    }
    return nullptr;
  }

  // ---- statements ----
  Flow exec_body(const Body& body) {
    for (const auto& s : body) {
      const Flow f = exec(*s);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s) {
    Enter enter(*this, s.pos);
    switch (s.kind) {
      case StmtKind::kText: emit(s.text); return Flow::kNormal;
      case StmtKind::kOutput: emit(eval(*s.expr).str()); return Flow::kNormal;
      case StmtKind::kIf:
        for (const IfBranch& b : s.branches)
          if (eval(*b.condition).truthy()) return exec_body(b.body);
        return exec_body(s.else_body);
      case StmtKind::kFor: exec_for(s); return Flow::kNormal;
      case StmtKind::kSet: assign(s, eval(*s.expr)); return Flow::kNormal;
      case StmtKind::kSetBlock: {
        Value v = Value::string(capture(s.body));
        if (s.expr) v = eval_filter(*s.expr, &v);
        assign(s, std::move(v));
        return Flow::kNormal;
      }
      case StmtKind::kMacro: {
        const Stmt* m = &s;
        scopes_.back()[s.name] = Value::callable(s.name, [m](CallArgs& args, CallContext& ctx) {
          return static_cast<Evaluator&>(ctx).call_macro(*m, args);
        });
        return Flow::kNormal;
      }
      case StmtKind::kFilterBlock: {
        const Value body = Value::string(capture(s.body));
        emit(eval_filter(*s.expr, &body).str());
        return Flow::kNormal;
      }
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  void bind_targets(std::unordered_map<std::string, Value>& scope, const std::vector<std::string>& targets,
                    const Value& v) {
    if (targets.size() == 1) {
      scope[targets[0]] = v;
      return;
    }
    // Python unpacks any iterable: a pair, but also a dict's keys or a string's characters.
    if (!v.is_list() && !v.is_dict() && !v.is_string())
      fail(std::string("cannot unpack a '") + v.type_name() + "' into " + std::to_string(targets.size()) + " names");
    const std::vector<Value> items = v.is_list() ? v.items() : iterate(v, *this);
    if (items.size() != targets.size())
      fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i) scope[targets[i]] = items[i];
  }

  void assign(const Stmt& s, Value v) {
    v = check_depth(std::move(v));
    if (!s.attribute.empty()) {
      const Value* ns = lookup(s.targets[0]);
      if (!ns || !ns->is_namespace())
        fail("cannot assign attribute '" + s.attribute + "' on '" + s.targets[0] + "': not a namespace()");
      if (v.contains_namespace()) fail("a namespace cannot hold another namespace");
      ns->namespace_data().attrs.set(Value::string(s.attribute), std::move(v));
      return;
    }
    bind_targets(scopes_.back(), s.targets, v);
  }

  void exec_for(const Stmt& s) {
    std::vector<Value> items = iterate(eval(*s.expr), *this);
    if (s.condition) {
      std::vector<Value> kept;
      for (Value& item : items) {
        scopes_.emplace_back();
        bind_targets(scopes_.back(), s.targets, item);
        const bool keep = eval(*s.condition).truthy();
        scopes_.pop_back();
        if (keep) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    // jinja2 runs the else block unless some iteration reached the end of the body (an
    // iteration left by break or continue does not count), which for an empty sequence
    // is the documented rule.
    bool body_completed = false;
    const int64_t n = static_cast<int64_t>(items.size());
    // One loop.cycle for the whole loop, reading the current index (as jinja2's loop
    // object does), rather than a new function per iteration.
    auto current = std::make_shared<int64_t>(0);
    const Value cycle = Value::callable("loop.cycle", [current](CallArgs& args, CallContext& ctx) -> Value {
      if (args.positional.empty()) ctx.fail("loop.cycle() needs at least one value");
      return args.positional[static_cast<size_t>(*current) % args.positional.size()];
    });
    for (int64_t i = 0; i < n; ++i) {
      *current = i;
      if (++loop_iterations_ > options_.limits.max_loop_iterations)
        fail("loops ran more than " + std::to_string(options_.limits.max_loop_iterations) + " iterations (limit)");
      scopes_.emplace_back();
      auto& scope = scopes_.back();
      bind_targets(scope, s.targets, items[static_cast<size_t>(i)]);
      DictData loop;
      loop.set(Value::string("index"), Value::integer(i + 1));
      loop.set(Value::string("index0"), Value::integer(i));
      loop.set(Value::string("revindex"), Value::integer(n - i));
      loop.set(Value::string("revindex0"), Value::integer(n - i - 1));
      loop.set(Value::string("first"), Value::boolean(i == 0));
      loop.set(Value::string("last"), Value::boolean(i == n - 1));
      loop.set(Value::string("length"), Value::integer(n));
      loop.set(Value::string("depth"), Value::integer(1));
      loop.set(Value::string("depth0"), Value::integer(0));
      if (i > 0) loop.set(Value::string("previtem"), items[static_cast<size_t>(i - 1)]);
      if (i + 1 < n) loop.set(Value::string("nextitem"), items[static_cast<size_t>(i + 1)]);
      loop.set(Value::string("cycle"), cycle);
      scope["loop"] = Value::dict(std::move(loop));
      const Flow f = exec_body(s.body);
      scopes_.pop_back();
      if (f == Flow::kNormal) body_completed = true;
      if (f == Flow::kBreak) break;
    }
    if (!body_completed) exec_body(s.else_body);
  }

  // ---- expressions ----
  Value eval(const Expr& e) {
    Enter enter(*this, e.pos);
    switch (e.kind) {
      case ExprKind::kLiteral: return e.literal;
      case ExprKind::kName: {
        const Value* v = lookup(e.name);
        return v ? *v : Value::undefined("'" + e.name + "' is undefined");
      }
      case ExprKind::kGetAttr: {
        const Value obj = eval(*e.a);
        pos_ = e.pos;
        return get_attribute(obj, e.name, *this);
      }
      case ExprKind::kGetItem: {
        const Value obj = eval(*e.a);
        const Value key = eval(*e.b);
        pos_ = e.pos;
        return get_item(obj, key, *this);
      }
      case ExprKind::kSlice: {
        const Value obj = eval(*e.a);
        const Value start = e.b ? eval(*e.b) : Value::none();
        const Value stop = e.c ? eval(*e.c) : Value::none();
        const Value step = e.d ? eval(*e.d) : Value::none();
        pos_ = e.pos;
        return slice(obj, start, stop, step, *this);
      }
      case ExprKind::kCall: {
        const Value callee = eval(*e.a);
        CallArgs args = eval_args(e);
        pos_ = e.pos;
        return call(callee, args);
      }
      case ExprKind::kFilter: return eval_filter(e, nullptr);
      case ExprKind::kTest: {
        const Value v = eval(*e.a);
        CallArgs args = eval_args(e);
        pos_ = e.pos;
        return Value::boolean(apply_test(e.name, v, args, *this) != e.negated);
      }
      case ExprKind::kNeg: {
        const Value v = eval(*e.a);
        pos_ = e.pos;
        return negate(v, *this);
      }
      case ExprKind::kPos: {
        const Value v = eval(*e.a);
        pos_ = e.pos;
        if (!v.is_number()) fail(std::string("bad operand type for unary +: '") + v.type_name() + "'");
        return v.is_bool() ? Value::integer(v.as_bool()) : v;
      }
      case ExprKind::kNot: return Value::boolean(!eval(*e.a).truthy());
      case ExprKind::kBinary: {
        const Value a = eval(*e.a);
        const Value b = eval(*e.b);
        pos_ = e.pos;
        return check_depth(binary_op(e.name, a, b, *this));
      }
      case ExprKind::kAnd: {
        Value a = eval(*e.a);
        return a.truthy() ? eval(*e.b) : a;
      }
      case ExprKind::kOr: {
        Value a = eval(*e.a);
        return a.truthy() ? a : eval(*e.b);
      }
      case ExprKind::kCompare: {
        Value left = eval(*e.a);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i]);
          pos_ = e.pos;
          if (!compare(e.ops[i], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case ExprKind::kCond:
        if (eval(*e.a).truthy()) return eval(*e.b);
        return e.c ? eval(*e.c) : Value::undefined("the 'else' of a conditional expression without one");
      case ExprKind::kList:
      case ExprKind::kTuple: {
        std::vector<Value> items;
        items.reserve(e.args.size());
        for (const auto& a : e.args) items.push_back(eval(*a));
        pos_ = e.pos;
        charge_items(items.size());
        return check_depth(Value::list(std::move(items), e.kind == ExprKind::kTuple));
      }
      case ExprKind::kDict: {
        DictData d;
        for (size_t i = 0; i < e.args.size(); ++i) {
          Value k = eval(*e.args[i]);
          Value v = eval(*e.values[i]);
          pos_ = e.pos;
          if (!k.is_string() && !k.is_number() && !k.is_none())
            fail(std::string("unhashable type: '") + k.type_name() + "' as a dict key");
          d.set(k, std::move(v));
        }
        charge_items(d.size());
        return check_depth(Value::dict(std::move(d)));
      }
    }
    return Value();
  }

  CallArgs eval_args(const Expr& e) {
    CallArgs args;
    for (const auto& a : e.args) args.positional.push_back(eval(*a));
    for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v));
    return args;
  }

  // A filter node; the innermost operand of a filter block's chain is `base`.
  Value eval_filter(const Expr& e, const Value* base) {
    Enter enter(*this, e.pos);
    Value v;
    if (e.a) v = e.a->kind == ExprKind::kFilter ? eval_filter(*e.a, base) : eval(*e.a);
    else if (base) v = *base;
    CallArgs args = eval_args(e);
    pos_ = e.pos;
    return check_depth(apply_filter(e.name, v, args, *this));
  }

  bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "in") return contains(b, a, *this);
    if (op == "not in") return !contains(b, a, *this);
    try {
      if (op == "<") return less(a, b);
      if (op == ">") return less(b, a);
      if (op == "<=") return less(a, b) || equal(a, b);
      if (op == ">=") return less(b, a) || equal(a, b);
    } catch (const InputError& err) {
      fail(std::string(err.what()) + " ('" + op + "')");
    }
    fail("unknown comparison '" + op + "'");
  }

  const RenderOptions& options_;
  std::vector<std::unordered_map<std::string, Value>> scopes_;
  size_t frame_base_ = 0;
  std::string out_;
  size_t out_limit_;
  SourcePos pos_;
  uint64_t steps_ = 0, bytes_built_ = 0, loop_iterations_ = 0;
  int depth_ = 0;
};

}  // namespace

std::string render_template(const Template& tpl, const std::vector<std::pair<std::string, Value>>& variables,
                            const RenderOptions& options) {
  Evaluator ev(variables, options);
  return ev.run(tpl);
}

}  // namespace moeflow::serve::jinja
