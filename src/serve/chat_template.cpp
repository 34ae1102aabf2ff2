#include "serve/chat_template.h"

#include "base/error.h"
#include "serve/jinja/evaluator.h"
#include "serve/jinja/json_value.h"
#include "serve/jinja/parser.h"

namespace moeflow::serve {
namespace {

nlohmann::ordered_json parse_json(const std::string& text, const char* what) {
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("chat template input: ") + what + " is not valid JSON: " + e.what());
  }
}

}  // namespace

ChatTemplate ChatTemplate::parse(std::string_view source) {
  ChatTemplate t;
  t.tpl_ = jinja::parse_template(source);
  t.source_ = std::make_shared<const std::string>(source);
  return t;
}

std::string ChatTemplate::render(const ChatTemplateInput& input) const {
  using jinja::Value;
  std::vector<Value> messages;
  messages.reserve(input.messages.size());
  for (const ChatMessage& m : input.messages) {
    jinja::DictData d;
    d.set(Value::string("role"), Value::string(m.role));
    d.set(Value::string("content"), m.null_content && m.content.empty() ? Value::none() : Value::string(m.content));
    if (!m.tool_calls.empty()) {
      std::vector<Value> calls;
      for (const ChatToolCall& c : m.tool_calls) {
        // Templates write the arguments with tojson, as Hugging Face's messages hold a dict.
        nlohmann::ordered_json args = c.arguments;
        if (input.tool_arguments_as_objects) {
          nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(c.arguments, nullptr, false);
          if (parsed.is_object()) args = std::move(parsed);
        }
        const nlohmann::ordered_json call = {{"id", c.id},
                                             {"type", "function"},
                                             {"function", {{"name", c.name}, {"arguments", std::move(args)}}}};
        calls.push_back(jinja::value_from_json(call, limits_.max_value_depth));
      }
      d.set(Value::string("tool_calls"), Value::list(std::move(calls)));
    }
    if (!m.tool_call_id.empty()) d.set(Value::string("tool_call_id"), Value::string(m.tool_call_id));
    if (!m.name.empty()) d.set(Value::string("name"), Value::string(m.name));
    messages.push_back(Value::dict(std::move(d)));
  }
  Value tools = Value::none();
  if (!input.tools_json.empty()) tools = jinja::value_from_json(parse_json(input.tools_json, "tools"), limits_.max_value_depth);
  std::vector<std::pair<std::string, Value>> variables = {
      {"messages", Value::list(std::move(messages))},
      {"add_generation_prompt", Value::boolean(input.add_generation_prompt)},
      {"bos_token", Value::string(input.bos_token)},
      {"eos_token", Value::string(input.eos_token)},
      {"tools", tools},
      {"documents", Value::none()},
  };
  if (!input.variables_json.empty()) {
    const nlohmann::ordered_json extra = parse_json(input.variables_json, "variables");
    if (!extra.is_object()) throw InputError("chat template input: variables must be a JSON object");
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      for (const auto& v : variables)
        if (v.first == it.key())
          throw InputError("chat template input: variable '" + it.key() + "' is set by the request itself");
      variables.emplace_back(it.key(), jinja::value_from_json(it.value(), limits_.max_value_depth));
    }
  }
  jinja::RenderOptions options;
  options.limits = limits_;
  options.now_unix_seconds = input.now_unix_seconds;
  return jinja::render_template(*tpl_, variables, options);
}

}  // namespace moeflow::serve
