#include "serve/jinja/tojson.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "serve/jinja/text.h"

namespace moeflow::serve::jinja {
namespace {

std::string quote(const std::string& s, bool ensure_ascii) {
  std::string q = text::json_quote(s);
  if (!ensure_ascii || text::is_ascii(q)) return q;
  // \uXXXX for every non-ASCII code point (UTF-16 surrogate pairs above U+FFFF).
  std::string out;
  const std::vector<size_t> off = text::code_point_offsets(q);
  for (size_t k = 0; k + 1 < off.size(); ++k) {
    const std::string_view cp_bytes(q.data() + off[k], off[k + 1] - off[k]);
    if (cp_bytes.size() == 1) {
      out += cp_bytes;
      continue;
    }
    uint32_t cp = static_cast<unsigned char>(cp_bytes[0]) & (cp_bytes.size() == 2 ? 0x1F : cp_bytes.size() == 3 ? 0x0F : 0x07);
    for (size_t i = 1; i < cp_bytes.size(); ++i) cp = (cp << 6) | (static_cast<unsigned char>(cp_bytes[i]) & 0x3F);
    char buf[16];
    if (cp >= 0x10000) {
      cp -= 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
    } else {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    }
    out += buf;
  }
  return out;
}

std::string key_string(const Value& k, const JsonStyle& style, CallContext& ctx) {
  switch (k.kind()) {
    case Value::Kind::kString: return quote(k.as_string(), style.ensure_ascii);
    case Value::Kind::kNone: return "\"null\"";
    case Value::Kind::kBool: return k.as_bool() ? "\"true\"" : "\"false\"";
    case Value::Kind::kInt: return text::json_quote(std::to_string(k.as_int()));
    case Value::Kind::kFloat: return text::json_quote(float_repr(k.as_float()));
    default: ctx.fail(std::string("tojson: keys must be str, int, float, bool or None, not ") + k.type_name());
  }
}

void dump(const Value& v, const JsonStyle& style, int level, std::string& out, CallContext& ctx) {
  if (out.size() > ctx.limits().max_string_bytes) ctx.fail("tojson: result exceeds the string limit");
  auto newline = [&](int lvl) {
    if (style.indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(style.indent) * static_cast<size_t>(lvl), ' ');
  };
  const std::string item_sep = style.indent >= 0 && style.item_separator == ", " ? "," : style.item_separator;
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: {
      const double d = v.as_float();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += float_repr(d);
      return;
    }
    case Value::Kind::kString: out += quote(v.as_string(), style.ensure_ascii); return;
    case Value::Kind::kList: {
      if (v.is_generator()) ctx.fail("tojson: object of type 'generator' is not JSON serializable");
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        dump(items[i], style, level + 1, out, ctx);
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      const auto& items = v.dict_data().items();
      if (items.empty()) {
        out += "{}";
        return;
      }
      std::vector<size_t> order(items.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      if (style.sort_keys) {
        std::stable_sort(order.begin(), order.end(), [&items, &ctx](size_t a, size_t b) {
          try {
            return less(items[a].first, items[b].first);
          } catch (const std::exception& e) {
            ctx.fail(std::string("tojson(sort_keys=true): ") + e.what());
          }
        });
      }
      out += '{';
      for (size_t n = 0; n < order.size(); ++n) {
        if (n) out += item_sep;
        newline(level + 1);
        const auto& kv = items[order[n]];
        out += key_string(kv.first, style, ctx);
        out += style.key_separator;
        dump(kv.second, style, level + 1, out, ctx);
      }
      newline(level);
      out += '}';
      return;
    }
    case Value::Kind::kUndefined: ctx.fail("tojson: an undefined value is not JSON serializable");
    default: ctx.fail(std::string("tojson: object of type '") + v.type_name() + "' is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style, CallContext& ctx) {
  std::string out;
  dump(v, style, 0, out, ctx);
  ctx.charge_string(out.size());
  return out;
}

}  // namespace moeflow::serve::jinja
