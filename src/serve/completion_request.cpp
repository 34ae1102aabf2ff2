#include "serve/completion_request.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "serve/api_error.h"
#include "serve/json_depth.h"

namespace moeflow::serve {
namespace {

using nlohmann::json;

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "an unsupported value";
  }
}

[[noreturn]] void wrong_type(const std::string& field, const char* expected, const json& v) {
  throw ApiError::bad_request("'" + field + "' must be " + expected + ", not " + type_name(v), field);
}

double number_in(const json& v, const std::string& field, double lo, double hi) {
  if (!v.is_number()) wrong_type(field, "a number", v);
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    throw ApiError::bad_request("'" + field + "' must be between " + json(lo).dump() + " and " + json(hi).dump() +
                                    ", got " + v.dump(),
                                field);
  return x;
}

// A whole number written as a float (16.0, or 1e12 and 2^64, which no 64-bit integer
// holds) is a whole number: in range it is taken, out of range it is refused as such.
bool whole_float(const json& v) {
  return v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>());
}

int64_t integer_in(const json& v, const std::string& field, int64_t lo, int64_t hi) {
  if (whole_float(v)) {
    const double d = v.get<double>();
    if (d > static_cast<double>(hi) || d < static_cast<double>(lo))
      throw ApiError::bad_request("'" + field + "' must be between " + std::to_string(lo) + " and " +
                                      std::to_string(hi) + ", got " + v.dump(),
                                  field);
    return static_cast<int64_t>(d);
  }
  if (!v.is_number_integer()) wrong_type(field, "an integer", v);
  // Unsigned values past INT64_MAX read back negative; compare as unsigned first.
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
    throw ApiError::bad_request("'" + field + "' must be at most " + std::to_string(hi) + ", got " + v.dump(), field);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    throw ApiError::bad_request("'" + field + "' must be between " + std::to_string(lo) + " and " +
                                    std::to_string(hi) + ", got " + v.dump(),
                                field);
  return x;
}

bool boolean(const json& v, const std::string& field) {
  if (!v.is_boolean()) wrong_type(field, "a boolean", v);
  return v.get<bool>();
}

std::string string_of(const json& v, const std::string& field) {
  if (!v.is_string()) wrong_type(field, "a string", v);
  return v.get<std::string>();
}

// Content is a string or an array of parts, of which only {"type":"text","text":...}
// carry text the model can read.
std::string message_content(const json& c, const std::string& field) {
  if (c.is_null()) return "";
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) wrong_type(field, "a string or an array of content parts", c);
  std::string text;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string pf = field + "[" + std::to_string(i) + "]";
    const json& part = c[i];
    if (!part.is_object()) wrong_type(pf, "an object", part);
    const auto type = part.find("type");
    if (type == part.end()) throw ApiError::bad_request("'" + pf + ".type' is required", pf + ".type");
    const std::string t = string_of(*type, pf + ".type");
    if (t != "text")
      throw ApiError::bad_request("content part type '" + t + "' is not supported (text only)", pf + ".type");
    const auto tx = part.find("text");
    if (tx == part.end()) throw ApiError::bad_request("'" + pf + ".text' is required", pf + ".text");
    text += string_of(*tx, pf + ".text");
  }
  return text;
}

// {"50256": -100, ...}: token ids as decimal strings (JSON keys are strings), each with
// a bias from -100 to 100.
std::vector<std::pair<int32_t, float>> parse_logit_bias(const json& v) {
  if (!v.is_object()) wrong_type("logit_bias", "an object of token ids to biases", v);
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& [id, bias] : v.items()) {
    const std::string f = "logit_bias[\"" + id + "\"]";
    char* end = nullptr;
    errno = 0;
    const long long t = std::strtoll(id.c_str(), &end, 10);
    if (id.empty() || *end != '\0' || errno != 0 || t < 0 || t > INT32_MAX || !std::isdigit(static_cast<unsigned char>(id[0])))
      throw ApiError::bad_request("'logit_bias' keys are token ids (whole numbers as strings), got \"" + id + "\"",
                                  "logit_bias");
    out.emplace_back(static_cast<int32_t>(t), static_cast<float>(number_in(bias, f, -100.0, 100.0)));
  }
  return out;
}

// [{"id": ..., "type": "function", "function": {"name": ..., "arguments": JSON text}}]
std::vector<ChatToolCall> parse_message_tool_calls(const json& v, const std::string& field) {
  if (!v.is_array()) wrong_type(field, "an array", v);
  std::vector<ChatToolCall> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string f = field + "[" + std::to_string(i) + "]";
    const json& c = v[i];
    if (!c.is_object()) wrong_type(f, "an object", c);
    ChatToolCall call;
    if (const auto id = c.find("id"); id != c.end() && !id->is_null()) call.id = string_of(*id, f + ".id");
    if (const auto type = c.find("type"); type != c.end() && !type->is_null() &&
                                          string_of(*type, f + ".type") != "function")
      throw ApiError::bad_request("'" + f + ".type' must be \"function\"", f + ".type");
    const auto fn = c.find("function");
    if (fn == c.end() || !fn->is_object())
      throw ApiError::bad_request("'" + f + ".function' must be an object with the name and arguments", f + ".function");
    const auto name = fn->find("name");
    if (name == fn->end()) throw ApiError::bad_request("'" + f + ".function.name' is required", f + ".function.name");
    call.name = string_of(*name, f + ".function.name");
    if (const auto args = fn->find("arguments"); args != fn->end() && !args->is_null()) {
      const std::string af = f + ".function.arguments";
      const bool deep = args->is_string()
                            ? json_deeper_than(json::parse(args->get<std::string>(), nullptr, false), kMaxJsonDepth)
                            : json_deeper_than(*args, kMaxJsonDepth);
      if (deep)
        throw ApiError::bad_request("'" + af + "' nests deeper than " + std::to_string(kMaxJsonDepth) + " levels", af);
      call.arguments = args->is_object() ? args->dump() : string_of(*args, af);
    }
    out.push_back(std::move(call));
  }
  return out;
}

std::vector<ChatMessage> parse_messages(const json& v) {
  if (!v.is_array()) wrong_type("messages", "an array", v);
  if (v.empty()) throw ApiError::bad_request("'messages' must hold at least one message", "messages");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string f = "messages[" + std::to_string(i) + "]";
    const json& m = v[i];
    if (!m.is_object()) wrong_type(f, "an object", m);
    const auto role = m.find("role");
    if (role == m.end()) throw ApiError::bad_request("'" + f + ".role' is required", f + ".role");
    ChatMessage msg;
    msg.role = string_of(*role, f + ".role");
    static const char* kRoles[] = {"system", "developer", "user", "assistant", "tool"};
    bool known = false;
    for (const char* r : kRoles) known = known || msg.role == r;
    if (!known)
      throw ApiError::bad_request("'" + f + ".role' must be one of system, developer, user, assistant, tool; got '" +
                                      msg.role + "'",
                                  f + ".role");
    if (const auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
      if (msg.role != "assistant")
        throw ApiError::bad_request("'" + f + ".tool_calls' is for assistant messages", f + ".tool_calls");
      msg.tool_calls = parse_message_tool_calls(*calls, f + ".tool_calls");
    }
    if (const auto id = m.find("tool_call_id"); id != m.end() && !id->is_null())
      msg.tool_call_id = string_of(*id, f + ".tool_call_id");
    if (const auto name = m.find("name"); name != m.end() && !name->is_null()) msg.name = string_of(*name, f + ".name");
    // An assistant turn that only called functions has no content.
    const auto content = m.find("content");
    if (content == m.end() && msg.tool_calls.empty())
      throw ApiError::bad_request("'" + f + ".content' is required", f + ".content");
    if (content != m.end()) msg.content = message_content(*content, f + ".content");
    msg.null_content = !msg.tool_calls.empty() && (content == m.end() || content->is_null());
    out.push_back(std::move(msg));
  }
  return out;
}

void parse_prompt(const json& v, CompletionRequest& r) {
  if (v.is_string()) {
    r.prompt = v.get<std::string>();
  } else if (v.is_array() && !v.empty() && v[0].is_string()) {
    if (v.size() != 1)
      throw ApiError::bad_request("'prompt' as an array of strings must hold exactly one (batches are not supported)",
                                  "prompt");
    r.prompt = v[0].get<std::string>();
  } else if (v.is_array() && v.empty()) {
    throw ApiError::bad_request("'prompt' is an empty array (give a string, one string in an array, or token ids)",
                                "prompt");
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i)
      r.prompt_tokens.push_back(
          static_cast<int32_t>(integer_in(v[i], "prompt[" + std::to_string(i) + "]", 0, INT32_MAX)));
  } else {
    wrong_type("prompt", "a non-empty string, array of one string or array of token ids", v);
  }
  if (r.prompt.empty() && r.prompt_tokens.empty()) throw ApiError::bad_request("'prompt' is empty", "prompt");
}

void parse_stop(const json& v, CompletionRequest& r) {
  if (v.is_null()) return;
  if (v.is_string()) {
    r.stop.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > 4) throw ApiError::bad_request("'stop' holds at most 4 strings", "stop");
    for (size_t i = 0; i < v.size(); ++i) r.stop.push_back(string_of(v[i], "stop[" + std::to_string(i) + "]"));
  } else {
    wrong_type("stop", "a string or an array of strings", v);
  }
  for (const std::string& s : r.stop)
    if (s.empty()) throw ApiError::bad_request("'stop' strings must not be empty", "stop");
}

// {"type": "text"}, {"type": "json_object"}, or {"type": "json_schema", "json_schema":
// {"name": ..., "schema": {...}, "strict": ...}}: the schema compiled (serve/json_schema.h)
// from the body parsed again with its keys in order, since the order of properties is
// the order the model writes them in.
void parse_response_format(const json& v, const std::string& body, CompletionRequest& r) {
  if (!v.is_object()) wrong_type("response_format", "an object", v);
  const auto type = v.find("type");
  if (type == v.end()) throw ApiError::bad_request("'response_format.type' is required", "response_format.type");
  const std::string t = string_of(*type, "response_format.type");
  if (t == "text") return;
  if (t == "json_object") {
    r.json_object = true;
    return;
  }
  if (t != "json_schema")
    throw ApiError::bad_request("'response_format.type' '" + t + "' is not supported (text, json_object or json_schema)",
                                "response_format.type");
  const auto js = v.find("json_schema");
  if (js == v.end() || !js->is_object())
    throw ApiError::bad_request("'response_format.json_schema' must be an object holding 'schema'",
                                "response_format.json_schema");
  for (const char* key : {"name", "description"})
    if (js->contains(key) && !js->at(key).is_null()) string_of(js->at(key), std::string("response_format.json_schema.") + key);
  if (js->contains("strict") && !js->at("strict").is_null()) boolean(js->at("strict"), "response_format.json_schema.strict");
  if (!js->contains("schema"))
    throw ApiError::bad_request("'response_format.json_schema.schema' is required", "response_format.json_schema.schema");
  try {
    const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body);
    r.json_schema = std::make_shared<const JsonSchema>(
        JsonSchema::compile(ordered.at("response_format").at("json_schema").at("schema")));
  } catch (const InputError& e) {
    throw ApiError::bad_request(std::string("'response_format.json_schema.schema': ") + e.what(),
                                "response_format.json_schema.schema");
  }
}

// OpenAI's rule for a function's name.
bool valid_function_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (const unsigned char c : n)
    if (!std::isalnum(c) && c != '_' && c != '-') return false;
  return true;
}

// [{"type": "function", "function": {"name", "description", "parameters", "strict"}}];
// the parameters taken from `ordered` (the body with its keys in order: properties are
// written in the order the schema gives them).
std::vector<ToolFunction> parse_tools(const json& v, const nlohmann::ordered_json& ordered) {
  if (!v.is_array()) wrong_type("tools", "an array", v);
  std::vector<ToolFunction> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string f = "tools[" + std::to_string(i) + "]";
    const json& t = v[i];
    if (!t.is_object()) wrong_type(f, "an object", t);
    const auto type = t.find("type");
    if (type == t.end()) throw ApiError::bad_request("'" + f + ".type' is required", f + ".type");
    if (string_of(*type, f + ".type") != "function")
      throw ApiError::bad_request("'" + f + ".type' must be \"function\" (the only kind of tool)", f + ".type");
    const auto fn = t.find("function");
    if (fn == t.end()) throw ApiError::bad_request("'" + f + ".function' is required", f + ".function");
    if (!fn->is_object()) wrong_type(f + ".function", "an object", *fn);
    ToolFunction tf;
    const auto name = fn->find("name");
    if (name == fn->end()) throw ApiError::bad_request("'" + f + ".function.name' is required", f + ".function.name");
    tf.name = string_of(*name, f + ".function.name");
    if (!valid_function_name(tf.name))
      throw ApiError::bad_request("'" + f + ".function.name' must be 1 to 64 letters, digits, '_' or '-', got \"" +
                                      tf.name + "\"",
                                  f + ".function.name");
    for (const ToolFunction& other : out)
      if (other.name == tf.name)
        throw ApiError::bad_request("'" + f + ".function.name' \"" + tf.name + "\" names two functions",
                                    f + ".function.name");
    if (const auto d = fn->find("description"); d != fn->end() && !d->is_null())
      tf.description = string_of(*d, f + ".function.description");
    if (const auto strict = fn->find("strict"); strict != fn->end() && !strict->is_null())
      boolean(*strict, f + ".function.strict");
    if (const auto p = fn->find("parameters"); p != fn->end() && !p->is_null()) {
      if (!p->is_object()) wrong_type(f + ".function.parameters", "an object (a JSON schema)", *p);
      if (json_deeper_than(*p, kMaxJsonDepth))
        throw ApiError::bad_request("'" + f + ".function.parameters' nests deeper than " +
                                        std::to_string(kMaxJsonDepth) + " levels",
                                    f + ".function.parameters");
      tf.parameters = ordered.at("tools").at(i).at("function").at("parameters");
    }
    out.push_back(std::move(tf));
  }
  return out;
}

// "none", "auto", "required", or {"type": "function", "function": {"name": ...}}.
void parse_tool_choice(const json& v, CompletionRequest& r) {
  if (v.is_string()) {
    const std::string c = v.get<std::string>();
    if (c == "none") r.tool_choice = ToolChoice::none;
    else if (c == "auto") r.tool_choice = ToolChoice::automatic;
    else if (c == "required") r.tool_choice = ToolChoice::required;
    else
      throw ApiError::bad_request("'tool_choice' must be \"none\", \"auto\", \"required\" or a function, got \"" + c +
                                      "\"",
                                  "tool_choice");
    return;
  }
  if (!v.is_object()) wrong_type("tool_choice", "a string or an object naming a function", v);
  const auto fn = v.find("function");
  if (fn == v.end() || !fn->is_object() || !fn->contains("name"))
    throw ApiError::bad_request("'tool_choice.function.name' is required", "tool_choice.function.name");
  r.tool_choice = ToolChoice::named;
  r.tool_choice_name = string_of(fn->at("name"), "tool_choice.function.name");
}

// With tool_choice "required" or a named function the output is held to a call: each
// function's parameters compiled on their own first, so that an unsupported keyword is
// named at its own place.
void constrain_to_tool_call(CompletionRequest& r) {
  if (r.json_object || r.json_schema)
    throw ApiError::bad_request("'tool_choice' \"required\" or a named function holds the output to a call; it "
                                "cannot also follow 'response_format'",
                                "tool_choice");
  for (size_t i = 0; i < r.tools.size(); ++i) {
    const ToolFunction& f = r.tools[i];
    if (f.parameters.is_null() || (r.tool_choice == ToolChoice::named && f.name != r.tool_choice_name)) continue;
    const std::string field = "tools[" + std::to_string(i) + "].function.parameters";
    try {
      JsonSchema::compile(f.parameters);
    } catch (const InputError& e) {
      throw ApiError::bad_request("'" + field + "': " + e.what(), field);
    }
  }
  r.json_schema = std::make_shared<const JsonSchema>(
      JsonSchema::compile(tool_call_schema(r.tools, r.tool_choice == ToolChoice::named ? r.tool_choice_name : "")));
}

// The body as a JSON object, or ApiError 400 saying why not.
json parse_body_object(const std::string& body) {
  // JSON text holds no NUL byte, and the parser would take one for the end of the input
  // (what follows it would be ignored, not refused).
  if (const size_t nul = body.find('\0'); nul != std::string::npos)
    throw ApiError::bad_request("the body is not valid JSON: a NUL byte at offset " + std::to_string(nul));
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number past double (1e400)
    throw ApiError::bad_request(std::string("the body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw ApiError::bad_request(std::string("the body must be a JSON object, not ") + type_name(j));
  return j;
}

}  // namespace

bool reads_tool_calls(const CompletionRequest& r) {
  if (r.tools.empty() || r.tool_choice == ToolChoice::none) return false;
  return r.tool_choice != ToolChoice::automatic || (!r.json_object && !r.json_schema);
}

TokenizeRequest parse_tokenize_request(const std::string& body) {
  const json j = parse_body_object(body);
  const auto content = j.find("content");
  if (content == j.end()) throw ApiError::bad_request("'content' is required", "content");
  TokenizeRequest r;
  r.content = string_of(*content, "content");
  if (const auto s = j.find("add_special"); s != j.end() && !s->is_null()) r.add_special = boolean(*s, "add_special");
  return r;
}

std::vector<int32_t> parse_detokenize_request(const std::string& body) {
  const json j = parse_body_object(body);
  const auto tokens = j.find("tokens");
  if (tokens == j.end()) throw ApiError::bad_request("'tokens' is required", "tokens");
  if (!tokens->is_array()) wrong_type("tokens", "an array of token ids", *tokens);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens->size(); ++i)
    ids.push_back(static_cast<int32_t>(integer_in((*tokens)[i], "tokens[" + std::to_string(i) + "]", 0, INT32_MAX)));
  return ids;
}

CompletionRequest parse_completion_request(const std::string& body, Endpoint endpoint) {
  const json j = parse_body_object(body);
  CompletionRequest r;
  r.endpoint = endpoint;
  const bool chat = endpoint == Endpoint::chat;
  bool tool_choice_given = false;
  if (chat) {
    if (!j.contains("messages")) throw ApiError::bad_request("'messages' is required", "messages");
  } else if (!j.contains("prompt")) {
    throw ApiError::bad_request("'prompt' is required", "prompt");
  }
  for (const auto& [key, v] : j.items()) {
    if (key == "model") {
      r.model = string_of(v, key);
    } else if (chat && key == "messages") {
      r.messages = parse_messages(v);
    } else if (!chat && key == "prompt") {
      parse_prompt(v, r);
    } else if (key == "max_tokens" || (chat && key == "max_completion_tokens")) {
      if (!v.is_null()) r.max_tokens = integer_in(v, key, 0, INT32_MAX);
    } else if (key == "temperature") {
      if (!v.is_null()) r.temperature = number_in(v, key, 0.0, 2.0);
    } else if (key == "top_p") {
      if (!v.is_null()) r.top_p = number_in(v, key, 0.0, 1.0);
    } else if (key == "top_k") {
      if (!v.is_null()) r.top_k = static_cast<int32_t>(integer_in(v, key, 0, INT32_MAX));
    } else if (key == "seed") {
      if (!v.is_null()) {
        // Any 64-bit integer seeds (OpenAI's clients send negative ones too); past that
        // the value is out of range, not of the wrong type.
        if (whole_float(v)) {
          const double d = v.get<double>();
          if (d >= 18446744073709551616.0 || d < -9223372036854775808.0)
            throw ApiError::bad_request("'seed' must fit in 64 bits, got " + v.dump(), key);
          r.seed = d >= 0 ? static_cast<uint64_t>(d) : static_cast<uint64_t>(static_cast<int64_t>(d));
          continue;
        }
        if (!v.is_number_integer()) wrong_type(key, "an integer", v);
        r.seed = v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>());
      }
    } else if (key == "stop") {
      parse_stop(v, r);
    } else if (key == "n") {
      if (!v.is_null()) r.n = static_cast<int>(integer_in(v, key, 1, kMaxChoices));
    } else if (key == "best_of") {
      // Several candidates, the best returned: not done here, and not to be ignored.
      if (!v.is_null() && integer_in(v, key, 1, INT32_MAX) != 1)
        throw ApiError::bad_request("'best_of' must be 1 (one candidate per request)", key);
    } else if (key == "stream") {
      if (!v.is_null()) r.stream = boolean(v, key);
    } else if (key == "stream_options") {
      if (v.is_null()) continue;
      if (!v.is_object()) wrong_type(key, "an object", v);
      for (const auto& [k2, v2] : v.items())
        if (k2 == "include_usage") r.include_usage = boolean(v2, "stream_options.include_usage");
    } else if (key == "logprobs") {
      if (v.is_null()) continue;
      if (chat) {
        r.logprobs = boolean(v, key);
      } else {
        r.top_logprobs = static_cast<int>(integer_in(v, key, 0, 5));
        r.logprobs = true;
      }
    } else if (chat && key == "top_logprobs") {
      if (!v.is_null()) r.top_logprobs = static_cast<int>(integer_in(v, key, 0, 20));
    } else if (key == "slo_ms") {
      if (!v.is_null()) r.slo_ms = number_in(v, key, 0.0, 86400e3);
    } else if (key == "task") {
      if (!v.is_null()) r.task = string_of(v, key);
    } else if (key == "ignore_eos") {
      if (!v.is_null()) r.ignore_eos = boolean(v, key);
    } else if (key == "presence_penalty") {
      if (!v.is_null()) r.presence_penalty = number_in(v, key, -2.0, 2.0);
    } else if (key == "frequency_penalty") {
      if (!v.is_null()) r.frequency_penalty = number_in(v, key, -2.0, 2.0);
    } else if (key == "response_format") {
      if (!v.is_null()) parse_response_format(v, body, r);
    } else if (key == "logit_bias") {
      if (!v.is_null()) r.logit_bias = parse_logit_bias(v);
    } else if (key == "repeat_penalty") {
      if (!v.is_null()) r.repeat_penalty = number_in(v, key, 1e-3, 100.0);
    } else if (key == "repeat_last_n") {
      if (!v.is_null()) r.repeat_last_n = static_cast<int32_t>(integer_in(v, key, -1, INT32_MAX));
    } else if (key == "user") {
      if (!v.is_null()) string_of(v, key);
    } else if (chat && key == "tools") {
      if (!v.is_null()) r.tools = parse_tools(v, nlohmann::ordered_json::parse(body));
    } else if (chat && key == "tool_choice") {
      if (!v.is_null()) {
        parse_tool_choice(v, r);
        tool_choice_given = true;
      }
    } else if (chat && key == "parallel_tool_calls") {
      if (!v.is_null()) r.parallel_tool_calls = boolean(v, key);
    } else if (chat && key == "reasoning_format") {
      if (v.is_null()) continue;
      const std::string f = string_of(v, key);
      if (f != "none" && f != "auto" && f != "deepseek")
        throw ApiError::bad_request("'reasoning_format' must be \"none\", \"auto\" or \"deepseek\", got \"" + f + "\"",
                                    key);
      r.split_reasoning = f != "none";
    } else if (key == "cache_prompt") {
      if (!v.is_null()) r.cache_prompt = boolean(v, key);
    } else if (key == "echo") {
      if (!v.is_null()) r.echo = boolean(v, key);
      if (r.echo && chat) throw ApiError::bad_request("'echo' is for /v1/completions only", key);
    }
    // Other fields are not implemented and are ignored, so that stock clients keep
    // working.
  }
  if (!tool_choice_given && !r.tools.empty()) r.tool_choice = ToolChoice::automatic;
  if (r.tool_choice == ToolChoice::required || r.tool_choice == ToolChoice::named) {
    if (r.tools.empty())
      throw ApiError::bad_request("'tool_choice' asks for a call, but 'tools' names no function", "tool_choice");
    if (r.tool_choice == ToolChoice::named && !find_function(r.tools, r.tool_choice_name))
      throw ApiError::bad_request("'tool_choice.function.name' \"" + r.tool_choice_name +
                                      "\" is not one of the request's tools",
                                  "tool_choice.function.name");
    constrain_to_tool_call(r);
  }
  if (chat && r.top_logprobs > 0 && !r.logprobs)
    throw ApiError::bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  if (r.max_tokens && *r.max_tokens == 0 && !r.echo)
    throw ApiError::bad_request("'max_tokens' must be at least 1 (0 only with 'echo', to score the prompt)",
                                chat && j.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens");
  if (r.include_usage && !r.stream)
    throw ApiError::bad_request("'stream_options' is only allowed with 'stream': true", "stream_options");
  return r;
}

}  // namespace moeflow::serve
