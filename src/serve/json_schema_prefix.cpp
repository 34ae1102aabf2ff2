#include "serve/json_schema_prefix.h"

#include <cstring>

#include "serve/json_lexer.h"

namespace moeflow::serve {

namespace {

using namespace json_lexer;

using Path = JsonSchemaPrefix::Path;
using Frame = JsonSchemaPrefix::Frame;
using Kind = SchemaNode::Kind;

// Frame phases of objects and arrays.
enum Phase : uint8_t {
  kOpen,        // after '{' or '[': a key / an item, or the end
  kKey,         // object: matching a key against the candidates lo..hi
  kColon,       // object: after a key
  kValue,       // object: after the colon
  kInValue,     // the child frame above is writing the value
  kAfterValue,  // ',' or the end
  kAfterComma,  // a key / an item
};

constexpr int kMaxAlternativeNesting = 8;  // anyOf inside anyOf (through references)

void copy_path(Path& to, const Path& from) {
  to.depth = from.depth;
  to.spaces = from.spaces;
  to.started = from.started;
  std::memcpy(to.frames, from.frames, sizeof(Frame) * from.depth);
}

bool same_path(const Path& a, const Path& b) {
  return a.depth == b.depth && a.spaces == b.spaces && a.started == b.started &&
         std::memcmp(a.frames, b.frames, sizeof(Frame) * a.depth) == 0;
}

class Stepper {
 public:
  Stepper(const JsonSchema& schema, Path* out) : s_(schema), out_(out) {}
  int n = 0;  // paths written to out

  // The paths p becomes by taking c.
  void step(const Path& p, unsigned char c) {
    if (!p.started) {
      if (is_space(c)) {
        space(p, c);
      } else {
        start_value(p, -1, s_.root, c, 0);
      }
      return;
    }
    if (p.depth == 0) return;  // the root closed: nothing follows
    const Frame& top = p.frames[p.depth - 1];
    const SchemaNode& node = s_.nodes[static_cast<size_t>(top.node)];
    switch (node.kind) {
      case Kind::string:
        return string_byte(p, top, c);
      case Kind::number:
      case Kind::integer:
        return number_byte(p, top, c, node.kind == Kind::integer);
      case Kind::literals:
        return literal_byte(p, top, node, c);
      case Kind::object:
        return object_byte(p, top, node, c);
      case Kind::array:
        return array_byte(p, top, node, c);
      case Kind::any_of:
        return;  // never a frame: resolved when the value starts
    }
  }

 private:
  Path* add(const Path& p) {
    if (n == JsonSchemaPrefix::kMaxPaths) return nullptr;
    copy_path(out_[n], p);
    return &out_[n++];
  }
  static Frame& top_of(Path& p) { return p.frames[p.depth - 1]; }

  // White space between tokens (json_lexer's rule).
  void space(const Path& p, unsigned char c) {
    const int next = space_next(p.spaces, c);
    if (next < 0) return;
    if (Path* q = add(p)) q->spaces = static_cast<uint8_t>(next);
  }

  // The top frame's value is complete: the frame goes, its parent moves past the value
  // (an object to the property after the one written, an array one item on).
  void complete(Path& p) const {
    --p.depth;
    p.spaces = 0;
    if (p.depth == 0) return;
    Frame& parent = top_of(p);
    parent.phase = kAfterValue;
    const bool object = s_.nodes[static_cast<size_t>(parent.node)].kind == Kind::object;
    if (object) {
      parent.count = static_cast<uint16_t>(parent.chosen + 1);
    } else if (parent.count < JsonSchema::kMaxItems) {
      ++parent.count;
    }
  }

  // The path where c begins a value of `node_id`; the parent (if any) then waits in
  // kInValue, or the root starts (parent_phase < 0).
  void start_value(const Path& base, int parent_phase, int32_t node_id, unsigned char c, int nesting) {
    const SchemaNode& node = s_.nodes[static_cast<size_t>(node_id)];
    Frame f{};
    f.node = node_id;
    switch (node.kind) {
      case Kind::any_of:
        if (nesting == kMaxAlternativeNesting) return;
        for (const int32_t alt : node.alternatives) start_value(base, parent_phase, alt, c, nesting + 1);
        return;
      case Kind::object:
        if (c != '{') return;
        f.phase = kOpen;
        break;
      case Kind::array:
        if (c != '[') return;
        f.phase = kOpen;
        break;
      case Kind::string:
        if (c != '"') return;
        break;
      case Kind::number:
      case Kind::integer: {
        const int n = number_start(c);
        if (n == kRefused) return;
        f.sub = static_cast<uint8_t>(n);
        break;
      }
      case Kind::literals: {
        int first = -1, last = -1;
        for (size_t i = 0; i < node.literals.size(); ++i)
          if (static_cast<unsigned char>(node.literals[i][0]) == c) {
            if (first < 0) first = static_cast<int>(i);
            last = static_cast<int>(i);
          }
        if (first < 0) return;
        f.lo = static_cast<uint16_t>(first);
        f.hi = static_cast<uint16_t>(last + 1);
        f.pos = 1;
        break;
      }
    }
    if (base.depth == JsonSchemaPrefix::kMaxDepth) return;
    Path* q = add(base);
    if (!q) return;
    if (parent_phase < 0) {
      q->started = true;
    } else {
      top_of(*q).phase = static_cast<uint8_t>(parent_phase);
    }
    q->spaces = 0;
    q->frames[q->depth++] = f;
  }

  // c after a complete value: the parent takes it.
  void after_complete(const Path& p, unsigned char c) {
    Path q;
    copy_path(q, p);
    complete(q);
    step(q, c);
  }

  void string_byte(const Path& p, const Frame& top, unsigned char c) {
    const int next = string_next(top.sub, c);
    if (next == kRefused) return;
    Path* q = add(p);
    if (!q) return;
    if (next == kEnded) {
      complete(*q);
    } else {
      top_of(*q).sub = static_cast<uint8_t>(next);
    }
  }

  void number_byte(const Path& p, const Frame& top, unsigned char c, bool integer) {
    const int next = number_next(top.sub, c, integer);
    if (next == kEnded) {
      after_complete(p, c);
    } else if (next != kRefused) {
      if (Path* q = add(p)) top_of(*q).sub = static_cast<uint8_t>(next);
    }
  }

  void literal_byte(const Path& p, const Frame& top, const SchemaNode& node, unsigned char c) {
    int first = -1, last = -1;
    for (int i = top.lo; i < top.hi; ++i) {
      const std::string& lit = node.literals[static_cast<size_t>(i)];
      if (lit.size() > top.pos && static_cast<unsigned char>(lit[top.pos]) == c) {
        if (first < 0) first = i;
        last = i;
      }
    }
    if (first >= 0) {
      if (Path* q = add(p)) {
        Frame& f = top_of(*q);
        f.lo = static_cast<uint16_t>(first);
        f.hi = static_cast<uint16_t>(last + 1);
        ++f.pos;
      }
    }
    // The candidates share their first pos bytes and are sorted, so a complete one is the
    // first; it ends at a byte that does not continue it (a number ends at its delimiter,
    // a string at its quote, which the literal holds).
    if (node.literals[top.lo].size() == top.pos) after_complete(p, c);
  }

  // A key byte: the candidates narrowed to the keys that go on with c, of which one must
  // be allowed here (no required property skipped).
  void key_byte(const Path& p, const Frame& top, const SchemaNode& node, unsigned char c) {
    int first = -1, last = -1;
    bool allowed = false;
    int complete_key = -1;
    for (int i = top.lo; i < top.hi; ++i) {
      const int j = node.keys_sorted[static_cast<size_t>(i)];
      const std::string& key = node.properties[static_cast<size_t>(j)].key;
      if (key.size() <= top.pos || static_cast<unsigned char>(key[top.pos]) != c) continue;
      const bool ok = j >= top.count && j <= node.next_required[top.count];
      if (first < 0) first = i;
      last = i;
      allowed |= ok;
      if (ok && key.size() == top.pos + 1u) complete_key = j;
    }
    if (!allowed) return;
    Path* q = add(p);
    if (!q) return;
    Frame& f = top_of(*q);
    q->spaces = 0;
    if (complete_key >= 0) {
      f.phase = kColon;
      f.chosen = static_cast<uint16_t>(complete_key);
    } else {
      f.lo = static_cast<uint16_t>(first);
      f.hi = static_cast<uint16_t>(last + 1);
      ++f.pos;
    }
  }

  void object_byte(const Path& p, const Frame& top, const SchemaNode& node, unsigned char c) {
    const size_t n_props = node.properties.size();
    if (top.phase == kKey) return key_byte(p, top, node, c);
    if (top.phase == kInValue) return;
    if (is_space(c)) return space(p, c);
    switch (top.phase) {
      case kOpen:
        if (c == '}' && node.next_required[0] == n_props) {
          if (Path* q = add(p)) complete(*q);
          return;
        }
        [[fallthrough]];
      case kAfterComma:
        if (c != '"' || top.count >= n_props) return;
        if (Path* q = add(p)) {
          Frame& f = top_of(*q);
          f.phase = kKey;
          f.lo = 0;
          f.hi = static_cast<uint16_t>(n_props);
          f.pos = 1;
          q->spaces = 0;
        }
        return;
      case kColon:
        if (c != ':') return;
        if (Path* q = add(p)) {
          top_of(*q).phase = kValue;
          q->spaces = 0;
        }
        return;
      case kValue:
        return start_value(p, kInValue, node.properties[top.chosen].node, c, 0);
      case kAfterValue:
        // count is the property after the one just written.
        if (c == ',' && top.count < n_props) {
          if (Path* q = add(p)) {
            top_of(*q).phase = kAfterComma;
            q->spaces = 0;
          }
        } else if (c == '}' && node.next_required[top.count] == n_props) {
          if (Path* q = add(p)) complete(*q);
        }
        return;
      default:
        return;
    }
  }

  void array_byte(const Path& p, const Frame& top, const SchemaNode& node, unsigned char c) {
    if (top.phase == kInValue) return;
    if (is_space(c)) return space(p, c);
    switch (top.phase) {
      case kOpen:
        if (c == ']' && node.min_items == 0) {
          if (Path* q = add(p)) complete(*q);
          return;
        }
        if (node.max_items != 0) start_value(p, kInValue, node.items, c, 0);
        return;
      case kAfterComma:
        return start_value(p, kInValue, node.items, c, 0);
      case kAfterValue:
        if (c == ',' && (node.max_items < 0 || top.count < node.max_items)) {
          if (Path* q = add(p)) {
            top_of(*q).phase = kAfterComma;
            q->spaces = 0;
          }
        } else if (c == ']' && top.count >= node.min_items) {
          if (Path* q = add(p)) complete(*q);
        }
        return;
      default:
        return;
    }
  }

  const JsonSchema& s_;
  Path* out_;
};

}  // namespace

JsonSchemaPrefix::JsonSchemaPrefix(const JsonSchema& schema) : schema_(&schema), n_paths_(1) {
  paths_[0].depth = 0;
  paths_[0].spaces = 0;
  paths_[0].started = false;
}

void JsonSchemaPrefix::copy_from(const JsonSchemaPrefix& o) {
  schema_ = o.schema_;
  n_paths_ = o.n_paths_;
  for (int i = 0; i < n_paths_; ++i) copy_path(paths_[i], o.paths_[i]);
}

bool JsonSchemaPrefix::feed(unsigned char c) {
  Path next[kMaxPaths];
  Stepper st(*schema_, next);
  for (int i = 0; i < n_paths_; ++i) st.step(paths_[i], c);
  if (st.n == 0) return false;
  n_paths_ = 0;
  for (int i = 0; i < st.n; ++i) {
    bool seen = false;
    for (int j = 0; j < n_paths_ && !seen; ++j) seen = same_path(paths_[j], next[i]);
    if (!seen) copy_path(paths_[n_paths_++], next[i]);
  }
  return true;
}

bool JsonSchemaPrefix::accepts(std::string_view bytes) const { return accepts_on_copy(*this, bytes); }

bool JsonSchemaPrefix::done() const {
  for (int i = 0; i < n_paths_; ++i)
    if (paths_[i].started && paths_[i].depth == 0) return true;
  return false;
}

bool JsonSchemaPrefix::in_string_body() const {
  for (int i = 0; i < n_paths_; ++i) {
    const Path& p = paths_[i];
    if (!p.started || p.depth == 0) return false;
    const Frame& top = p.frames[p.depth - 1];
    if (schema_->nodes[static_cast<size_t>(top.node)].kind != Kind::string || top.sub != 0) return false;
  }
  return true;
}

}  // namespace moeflow::serve
