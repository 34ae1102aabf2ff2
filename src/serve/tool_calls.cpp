#include "serve/tool_calls.h"

#include <random>

#include "base/error.h"
#include "serve/json_depth.h"
#include "serve/partial_match.h"

namespace moeflow::serve {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
// DeepSeek-V3 / R1 / V3.1: calls between these, each in its own begin/end pair.
constexpr std::string_view kDeepSeekCallsOpen = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDeepSeekCallsClose = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDeepSeekOpen = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDeepSeekClose = "<｜tool▁call▁end｜>";
constexpr std::string_view kDeepSeekSep = "<｜tool▁sep｜>";
// Kimi-K2: "functions.NAME:INDEX<|tool_call_argument_begin|>ARGS" in each begin/end pair.
constexpr std::string_view kKimiCallsOpen = "<|tool_calls_section_begin|>";
constexpr std::string_view kKimiCallsClose = "<|tool_calls_section_end|>";
constexpr std::string_view kKimiOpen = "<|tool_call_begin|>";
constexpr std::string_view kKimiClose = "<|tool_call_end|>";
constexpr std::string_view kKimiArgs = "<|tool_call_argument_begin|>";
// Where a call may begin in a streamed reply.
constexpr std::string_view kCallStarts[] = {kCallOpen, kDeepSeekCallsOpen, kDeepSeekOpen, kKimiCallsOpen, kKimiOpen};

bool space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string trimmed(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && space(s[b])) ++b;
  while (e > b && space(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// Local references ("#/$defs/x") of a function's parameters point into the parameters;
// placed under `at` in the call's schema they must point there.
void rebase_refs(ojson& s, const std::string& at) {
  if (s.is_object()) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() == "$ref" && it.value().is_string()) {
        const std::string r = it.value().get<std::string>();
        if (!r.empty() && r[0] == '#') it.value() = "#" + at + r.substr(1);
      } else {
        rebase_refs(it.value(), at);
      }
    }
  } else if (s.is_array()) {
    for (ojson& v : s) rebase_refs(v, at);
  }
}

ojson one_call_schema(const ToolFunction& f, const std::string& at) {
  ojson args = f.parameters.is_null() ? ojson{{"type", "object"}} : f.parameters;
  rebase_refs(args, at + "/properties/arguments");
  ojson props = ojson::object();
  props["name"] = {{"const", f.name}};
  props["arguments"] = std::move(args);
  return {{"type", "object"}, {"properties", std::move(props)}, {"required", {"name", "arguments"}}};
}

// One call from its JSON: {"name": a function of the request, "arguments" (or Llama 3's
// "parameters"): an object, or a string holding one}; false for anything else.
bool call_from_json(const ojson& j, const std::vector<ToolFunction>& tools, ToolCall& out) {
  if (!j.is_object() || json_deeper_than(j, kMaxJsonDepth)) return false;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || !find_function(tools, name->get<std::string>())) return false;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  ojson a = ojson::object();
  if (args != j.end()) {
    a = *args;
    if (a.is_string()) a = ojson::parse(a.get<std::string>(), nullptr, false);
    if (!a.is_object() || json_deeper_than(a, kMaxJsonDepth)) return false;
  }
  out.id = new_call_id();
  out.name = name->get<std::string>();
  out.arguments = dump(a);
  return true;
}

// A text that is one JSON call or an array of calls, all of them valid; false otherwise.
bool bare_calls(const std::string& text, const std::vector<ToolFunction>& tools, std::vector<ToolCall>& out) {
  const ojson j = ojson::parse(text, nullptr, false);
  if (j.is_discarded()) return false;
  std::vector<ToolCall> calls;
  if (j.is_array() && !j.empty()) {
    for (const ojson& c : j) {
      ToolCall call;
      if (!call_from_json(c, tools, call)) return false;
      calls.push_back(std::move(call));
    }
  } else {
    ToolCall call;
    if (!call_from_json(j, tools, call)) return false;
    calls.push_back(std::move(call));
  }
  out = std::move(calls);
  return true;
}

// A function as the request gave it: {"type": "function", "function": {name,
// description, parameters}}.
ojson tool_json(const ToolFunction& f) {
  ojson fn = ojson::object();
  fn["name"] = f.name;
  if (!f.description.empty()) fn["description"] = f.description;
  if (!f.parameters.is_null()) fn["parameters"] = f.parameters;
  return {{"type", "function"}, {"function", std::move(fn)}};
}

std::string calls_as_hermes(const std::vector<ChatToolCall>& calls) {
  std::string text;
  for (const ChatToolCall& c : calls) {
    ojson args = ojson::parse(c.arguments, nullptr, false);
    if (args.is_discarded()) args = c.arguments;
    const ojson call = {{"name", c.name}, {"arguments", std::move(args)}};
    if (!text.empty()) text += "\n";
    text += std::string(kCallOpen) + "\n" + dump(call) + "\n" + std::string(kCallClose);
  }
  return text;
}

// {"name": name, "arguments": the JSON of `args` (none: {})}; discarded when `args`
// is not JSON.
ojson named_call(const std::string& name, std::string_view args) {
  const std::string a = trimmed(args);
  ojson parsed = a.empty() ? ojson::object() : ojson::parse(a, nullptr, false);
  if (parsed.is_discarded()) return parsed;
  return {{"name", name}, {"arguments", std::move(parsed)}};
}

// A DeepSeek call's body as JSON: "function<｜tool▁sep｜>NAME\n```json\nARGS\n```" (V3,
// R1) or "NAME<｜tool▁sep｜>ARGS" (V3.1); discarded when it is neither.
ojson deepseek_call(std::string_view body) {
  const size_t sep = body.find(kDeepSeekSep);
  if (sep == std::string_view::npos) return ojson(ojson::value_t::discarded);
  std::string name = trimmed(body.substr(0, sep));
  std::string_view args = body.substr(sep + kDeepSeekSep.size());
  if (name == "function") {
    const size_t nl = args.find('\n');
    name = trimmed(args.substr(0, nl == std::string_view::npos ? args.size() : nl));
    args = nl == std::string_view::npos ? std::string_view() : args.substr(nl + 1);
    const size_t fence = args.find("```");
    if (fence != std::string_view::npos) {
      const size_t start = args.find('\n', fence);
      const size_t end = args.rfind("```");
      if (start == std::string_view::npos) args = std::string_view();
      else args = end > start ? args.substr(start + 1, end - start - 1) : args.substr(start + 1);
    }
  }
  return named_call(name, args);
}

// Kimi's call body: "functions.NAME:INDEX<|tool_call_argument_begin|>ARGS".
ojson kimi_call(std::string_view body) {
  const size_t sep = body.find(kKimiArgs);
  if (sep == std::string_view::npos) return ojson(ojson::value_t::discarded);
  std::string name = trimmed(body.substr(0, sep));
  if (name.rfind("functions.", 0) == 0) name.erase(0, 10);
  if (const size_t colon = name.rfind(':'); colon != std::string::npos) name.erase(colon);
  return named_call(name, body.substr(sep + kKimiArgs.size()));
}

// The text between `open` and `close` from `at`, moving `at` past `close`; false when
// there is no such pair.
bool between(std::string_view s, size_t& at, std::string_view open, std::string_view close, std::string_view& out) {
  const size_t o = s.find(open, at);
  if (o == std::string_view::npos) return false;
  const size_t c = s.find(close, o + open.size());
  if (c == std::string_view::npos) return false;
  out = s.substr(o + open.size(), c - o - open.size());
  at = c + close.size();
  return true;
}

// An argument's value written as text: a string where the function's schema says so,
// otherwise the JSON it spells (a number, an object, ...) or, failing that, the string.
ojson xml_value(const ToolFunction* f, const std::string& key, const std::string& text) {
  if (f && f->parameters.is_object()) {
    const auto props = f->parameters.find("properties");
    if (props != f->parameters.end() && props->is_object()) {
      const auto p = props->find(key);
      if (p != props->end() && p->is_object() && p->value("type", ojson()) == "string") return text;
    }
  }
  ojson v = ojson::parse(text, nullptr, false);
  if (v.is_discarded()) return text;
  return v;  // moved: a conditional expression would copy it, recursing once per level
}

// The XML call bodies of GLM-4.5 ("NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>...")
// and Qwen3-Coder ("<function=NAME>\n<parameter=K>\nV\n</parameter>\n</function>").
ojson xml_call(std::string_view body, const std::vector<ToolFunction>& tools) {
  const std::string b = trimmed(body);
  std::string name;
  ojson args = ojson::object();
  if (b.rfind("<function=", 0) == 0) {
    const size_t gt = b.find('>');
    if (gt == std::string::npos) return ojson(ojson::value_t::discarded);
    name = trimmed(std::string_view(b).substr(10, gt - 10));
    const ToolFunction* f = find_function(tools, name);
    size_t at = gt + 1;
    for (;;) {
      const size_t p = b.find("<parameter=", at);
      if (p == std::string::npos) break;
      const size_t pg = b.find('>', p);
      const size_t end = pg == std::string::npos ? std::string::npos : b.find("</parameter>", pg);
      if (end == std::string::npos) return ojson(ojson::value_t::discarded);
      const std::string key = trimmed(std::string_view(b).substr(p + 11, pg - p - 11));
      std::string value = b.substr(pg + 1, end - pg - 1);
      if (!value.empty() && value.front() == '\n') value.erase(0, 1);
      if (!value.empty() && value.back() == '\n') value.pop_back();
      args[key] = xml_value(f, key, value);
      at = end + 12;
    }
  } else {
    const size_t first = b.find('<');
    name = trimmed(std::string_view(b).substr(0, first));
    if (name.empty() || name.find_first_of(" \n\t{[\"") != std::string::npos) return ojson(ojson::value_t::discarded);
    const ToolFunction* f = find_function(tools, name);
    size_t at = first == std::string::npos ? b.size() : first;
    std::string_view key, value;
    while (between(b, at, "<arg_key>", "</arg_key>", key)) {
      if (!between(b, at, "<arg_value>", "</arg_value>", value)) return ojson(ojson::value_t::discarded);
      args[std::string(key)] = xml_value(f, std::string(key), std::string(value));
    }
  }
  return {{"name", name}, {"arguments", std::move(args)}};
}

// The first of the call syntaxes to begin at or after `at`: its open and close tags.
struct Block {
  size_t open = std::string::npos;
  std::string_view open_tag, close_tag;
};
Block next_block(const std::string& text, size_t at) {
  Block b;
  for (const auto& [o, c] : {std::pair{kCallOpen, kCallClose}, std::pair{kDeepSeekOpen, kDeepSeekClose},
                             std::pair{kKimiOpen, kKimiClose}}) {
    const size_t p = text.find(o, at);
    if (p < b.open) b = {p, o, c};
  }
  return b;
}

// Removes every `tag` from `s`.
void erase_all(std::string& s, std::string_view tag) {
  for (size_t p = s.find(tag); p != std::string::npos; p = s.find(tag, p)) s.erase(p, tag.size());
}

}  // namespace

const ToolFunction* find_function(const std::vector<ToolFunction>& tools, const std::string& name) {
  for (const ToolFunction& f : tools)
    if (f.name == name) return &f;
  return nullptr;
}

std::string new_call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[rng() % (sizeof(kChars) - 1)];
  return id;
}

ojson tool_call_schema(const std::vector<ToolFunction>& tools, const std::string& only) {
  if (!only.empty()) {
    for (const ToolFunction& f : tools)
      if (f.name == only) return one_call_schema(f, "");
  }
  if (tools.size() == 1) return one_call_schema(tools[0], "");
  ojson alternatives = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i)
    alternatives.push_back(one_call_schema(tools[i], "/anyOf/" + std::to_string(i)));
  return {{"anyOf", std::move(alternatives)}};
}

std::string render_conversation(const ChatTemplate& tpl, ChatTemplateInput in) {
  try {
    return tpl.render(in);
  } catch (const InputError&) {
    bool any_calls = false;
    for (const ChatMessage& m : in.messages) any_calls = any_calls || !m.tool_calls.empty();
    if (!any_calls || !in.tool_arguments_as_objects) throw;
    in.tool_arguments_as_objects = false;
    return tpl.render(in);
  }
}

std::string hermes_tools_preamble(const std::vector<ToolFunction>& tools) {
  std::string text =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const ToolFunction& f : tools) {
    text += '\n';
    text += dump(tool_json(f));
  }
  text +=
      "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
      "<args-json-object>}\n</tool_call>";
  return text;
}

std::vector<ChatMessage> messages_for_template(const ChatTemplate& tpl, const std::vector<ChatMessage>& messages,
                                               const std::vector<ToolFunction>& tools, bool offer_tools,
                                               std::string& tools_json) {
  tools_json.clear();
  const bool renders_tools = tpl.mentions("tools");
  const bool renders_calls = tpl.mentions("tool_calls");
  const bool renders_results = tpl.mentions("'tool'") || tpl.mentions("\"tool\"");
  if (offer_tools && !tools.empty() && renders_tools) {
    ojson arr = ojson::array();
    for (const ToolFunction& f : tools) arr.push_back(tool_json(f));
    tools_json = dump(arr);
  }
  std::vector<ChatMessage> out;
  bool last_is_results = false;  // out.back() is a user turn made of tool results
  for (const ChatMessage& m : messages) {
    ChatMessage msg = m;
    if (!renders_calls && !msg.tool_calls.empty()) {
      const std::string calls = calls_as_hermes(msg.tool_calls);
      msg.content = msg.content.empty() ? calls : msg.content + "\n" + calls;
      msg.tool_calls.clear();
      msg.null_content = false;
    }
    if (!renders_results && msg.role == "tool") {
      // A result as a user turn; results in a row, and a user turn after them, share
      // one (templates that check the turns alternate refuse two user turns in a row).
      msg = ChatMessage("user", "<tool_response>\n" + msg.content + "\n</tool_response>");
      if (last_is_results) {
        out.back().content += "\n" + msg.content;
        continue;
      }
      out.push_back(std::move(msg));
      last_is_results = true;
      continue;
    }
    if (last_is_results && msg.role == "user") {
      out.back().content += "\n" + msg.content;
      last_is_results = false;
      continue;
    }
    last_is_results = false;
    out.push_back(std::move(msg));
  }
  if (offer_tools && !tools.empty() && !renders_tools) {
    const std::string preamble = hermes_tools_preamble(tools);
    if (!out.empty() && (out[0].role == "system" || out[0].role == "developer"))
      out[0].content = out[0].content.empty() ? preamble : out[0].content + "\n\n" + preamble;
    else
      out.insert(out.begin(), ChatMessage("system", preamble));
  }
  return out;
}

ParsedReply parse_tool_calls(const std::string& text, const std::vector<ToolFunction>& tools, bool parallel) {
  ParsedReply r;
  const std::string whole = trimmed(text);
  if (!whole.empty() && (whole[0] == '{' || whole[0] == '[') && bare_calls(whole, tools, r.calls)) {
    if (!parallel && r.calls.size() > 1) r.calls.resize(1);
    return r;
  }
  // Hermes or DeepSeek blocks; an unclosed last one (the reply ended inside it) is read
  // to the end.
  std::string content;
  size_t at = 0;
  while (at < text.size()) {
    const Block b = next_block(text, at);
    if (b.open == std::string::npos) break;
    const size_t open = b.open;
    const size_t body = open + b.open_tag.size();
    const size_t close = text.find(b.close_tag, body);
    const size_t end = close == std::string::npos ? text.size() : close;
    const std::string_view inside = std::string_view(text).substr(body, end - body);
    ojson j;
    if (b.open_tag == kDeepSeekOpen) {
      j = deepseek_call(inside);
    } else if (b.open_tag == kKimiOpen) {
      j = kimi_call(inside);
    } else {
      j = ojson::parse(trimmed(inside), nullptr, false);
      if (j.is_discarded()) j = xml_call(inside, tools);
    }
    ToolCall call;
    const size_t next = close == std::string::npos ? text.size() : close + b.close_tag.size();
    if (!j.is_discarded() && call_from_json(j, tools, call)) {
      content += text.substr(at, open - at);
      r.calls.push_back(std::move(call));
    } else {
      content += text.substr(at, next - at);  // not a call: kept as written
    }
    at = next;
  }
  if (at < text.size()) content += text.substr(at);
  if (!r.calls.empty()) {  // DeepSeek's and Kimi's section tags around their calls
    for (const std::string_view tag : {kDeepSeekCallsOpen, kDeepSeekCallsClose, kKimiCallsOpen, kKimiCallsClose})
      erase_all(content, tag);
  }
  r.content = trimmed(content);
  if (!parallel && r.calls.size() > 1) r.calls.resize(1);
  return r;
}

std::string ToolCallStream::push(const std::string& text) {
  held_ += text;
  if (holding_) return "";
  if (hold_all_) {
    holding_ = true;
    return "";
  }
  if (!sent_any_) {
    // Until the reply shows its first character, it may still open a bare JSON call.
    size_t first = 0;
    while (first < held_.size() && space(held_[first])) ++first;
    if (first == held_.size()) return "";
    if (held_[first] == '{' || held_[first] == '[') {
      holding_ = true;
      return "";
    }
  }
  std::string out;
  if (const size_t open = find_first_marker(held_, kCallStarts); open != std::string::npos) {
    out = held_.substr(0, open);
    held_.erase(0, open);
    holding_ = true;
  } else {
    // Keep back the longest tail that could begin a call.
    const size_t keep = partial_marker_tail(held_, kCallStarts);
    out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
  }
  if (!out.empty()) sent_any_ = true;
  return out;
}

}  // namespace moeflow::serve
