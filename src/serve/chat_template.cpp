#include "serve/chat_template.h"

#include "base/error.h"
#include "serve/jinja/evaluator.h"
#include "serve/jinja/json_value.h"
#include "serve/jinja/parser.h"

namespace moeflow::serve {

ChatTemplate ChatTemplate::parse(std::string_view source) {
  ChatTemplate t;
  t.tpl_ = jinja::parse_template(source);
  return t;
}

std::string ChatTemplate::render(const ChatTemplateInput& input) const {
  using jinja::Value;
  std::vector<Value> messages;
  messages.reserve(input.messages.size());
  for (const ChatMessage& m : input.messages) {
    jinja::DictData d;
    d.set(Value::string("role"), Value::string(m.role));
    d.set(Value::string("content"), Value::string(m.content));
    messages.push_back(Value::dict(std::move(d)));
  }
  Value tools = Value::none();
  if (!input.tools_json.empty()) {
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(input.tools_json);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(std::string("chat template input: tools is not valid JSON: ") + e.what());
    }
    tools = jinja::value_from_json(j, limits_.max_value_depth);
  }
  const std::vector<std::pair<std::string, Value>> variables = {
      {"messages", Value::list(std::move(messages))},
      {"add_generation_prompt", Value::boolean(input.add_generation_prompt)},
      {"bos_token", Value::string(input.bos_token)},
      {"eos_token", Value::string(input.eos_token)},
      {"tools", tools},
      {"documents", Value::none()},
  };
  jinja::RenderOptions options;
  options.limits = limits_;
  options.now_unix_seconds = input.now_unix_seconds;
  return jinja::render_template(*tpl_, variables, options);
}

}  // namespace moeflow::serve
