// Function calling: the request's tools validated, the conversation as each kind of
// template sees it, the calls read out of replies in the formats open models write,
// a streamed reply's content held back only where a call may begin, and the schema
// that holds a constrained reply to a call.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/error.h"
#include "serve/api_error.h"
#include "serve/chat_template.h"
#include "serve/completion_request.h"
#include "serve/json_schema.h"
#include "serve/json_schema_prefix.h"
#include "serve/tool_calls.h"
#include "test_paths.h"

namespace moeflow::serve {
namespace {

using nlohmann::ordered_json;

std::vector<ToolFunction> weather_tools() {
  return {{"get_weather", "The weather in a city",
           ordered_json::parse(R"({"type":"object","properties":{"city":{"type":"string"},)"
                               R"("unit":{"enum":["c","f"]}},"required":["city"]})")},
          {"get_time", "", ordered_json()}};
}

ChatTemplate fixture_template(const std::string& name) {
  std::ifstream f(moeflow::testing::fixture_path("chat_templates/" + name + ".jinja"));
  std::stringstream ss;
  ss << f.rdbuf();
  return ChatTemplate::parse(ss.str());
}

// Whether the whole text is an instance the schema's prefix check accepts and closes.
bool accepts_whole(const JsonSchema& schema, const std::string& text) {
  JsonSchemaPrefix p(schema);
  for (const char c : text)
    if (!p.feed(static_cast<unsigned char>(c))) return false;
  return p.done();
}

TEST(ToolCalls, HermesBlocksWithTextAround) {
  const auto tools = weather_tools();
  const ParsedReply r = parse_tool_calls(
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n"
      "<tool_call>{\"name\":\"get_time\",\"arguments\":\"{}\"}</tool_call>",
      tools);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.content, "Let me look.");
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(r.calls[1].name, "get_time");
  EXPECT_EQ(r.calls[1].arguments, "{}");  // arguments given as a string holding an object
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
  for (const ToolCall& c : r.calls) {
    ASSERT_EQ(c.id.size(), 29u);
    EXPECT_EQ(c.id.rfind("call_", 0), 0u);
  }
  // parallel_tool_calls false: the first only.
  EXPECT_EQ(parse_tool_calls("<tool_call>{\"name\":\"get_time\"}</tool_call><tool_call>{\"name\":\"get_time\"}</tool_call>",
                             tools, false)
                .calls.size(),
            1u);
}

TEST(ToolCalls, DeepSeekSections) {
  const auto tools = weather_tools();
  // V3 and R1: the type, the name, the arguments fenced as JSON; two calls.
  ParsedReply r = parse_tool_calls(
      "I'll check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
      "{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      tools);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.content, "I'll check.");
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  // V3.1: the name, then the arguments as they are; the end cut off by the end of the reply.
  r = parse_tool_calls("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\":\"Rome\"}", tools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Rome"})");
  EXPECT_TRUE(r.content.empty()) << r.content;
  // An unknown function stays as written, tags and all.
  const std::string unknown = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>nope<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  r = parse_tool_calls(unknown, tools);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, unknown);
  // Streamed: held from the section's tag.
  ToolCallStream st;
  EXPECT_EQ(st.push("Sure<｜tool▁calls"), "Sure");
  EXPECT_EQ(st.push("▁begin｜><｜tool▁call▁begin｜>get_time"), "");
  EXPECT_EQ(st.held(), "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time");
}

TEST(ToolCalls, XmlArgumentsOfGlmAndQwen3CoderAndKimiSections) {
  const auto tools = weather_tools();  // get_weather: city a string, unit an enum
  // GLM-4.5: the name, then key/value pairs; a value is JSON unless the schema says string.
  ParsedReply r = parse_tool_calls(
      "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>42</arg_value>\n<arg_key>days</arg_key>\n"
      "<arg_value>3</arg_value>\n<arg_key>opts</arg_key>\n<arg_value>{\"a\": [1]}</arg_value>\n</tool_call>",
      tools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"42","days":3,"opts":{"a":[1]}})");
  r = parse_tool_calls("<tool_call>get_time\n</tool_call>", tools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
  // Qwen3-Coder: <function=NAME> with <parameter=KEY> blocks; one newline trimmed each side.
  r = parse_tool_calls(
      "Let me see.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Jose\n</parameter>\n"
      "<parameter=unit>\n\"c\"\n</parameter>\n</function>\n</tool_call>",
      tools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.content, "Let me see.");
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"San Jose","unit":"c"})");
  // A value pair cut off is no call.
  EXPECT_TRUE(parse_tool_calls("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_val", tools).calls.empty());
  // Kimi-K2: sections of functions.NAME:INDEX calls.
  r = parse_tool_calls(
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
      "{\"city\": \"Beijing\"}<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{}"
      "<|tool_call_end|><|tool_calls_section_end|>",
      tools);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Beijing"})");
  EXPECT_EQ(r.calls[1].name, "get_time");
  EXPECT_TRUE(r.content.empty()) << r.content;
  ToolCallStream st;
  EXPECT_EQ(st.push("ok <|tool_calls_sec"), "ok ");
}

TEST(ToolCalls, UnclosedLastBlockAndBareJson) {
  const auto tools = weather_tools();
  // The reply ended (end of generation) inside the block: read to the end.
  ParsedReply r = parse_tool_calls("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}", tools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_TRUE(r.content.empty());
  // Llama 3's "parameters"; one bare object.
  r = parse_tool_calls("  {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\", \"unit\": \"c\"}}\n", tools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Rome","unit":"c"})");
  // Mistral's array (after its [TOOL_CALLS] control token, which is not text).
  r = parse_tool_calls(R"([{"name":"get_time","arguments":{}},{"name":"get_weather","arguments":{"city":"Lima"}}])", tools);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[1].name, "get_weather");
  // Missing arguments are an empty object.
  r = parse_tool_calls(R"({"name":"get_time"})", tools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
}

TEST(ToolCalls, WhatIsNotACallStaysContentAsWritten) {
  const auto tools = weather_tools();
  // Arguments nested past kMaxJsonDepth (a model can write "[[[[..." for a long while).
  const std::string deep = R"({"name":"get_time","arguments":{"a":)" + std::string(100000, '[') +
                           std::string(100000, ']') + "}}";
  EXPECT_TRUE(parse_tool_calls(deep, tools).calls.empty());
  EXPECT_TRUE(parse_tool_calls("<tool_call>" + deep + "</tool_call>", tools).calls.empty());
  const std::string deep_args = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_TRUE(parse_tool_calls("<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>" + deep_args, tools).calls.empty());
  EXPECT_TRUE(parse_tool_calls("<|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>" + deep_args, tools)
                  .calls.empty());
  EXPECT_TRUE(parse_tool_calls("<tool_call>get_time\n<arg_key>a</arg_key><arg_value>" + deep_args + "</arg_value>", tools)
                  .calls.empty());
  const std::vector<std::string> texts = {
      "Plain prose.",
      R"({"name":"launch_rockets","arguments":{}})",          // not one of the request's functions
      R"({"name":"get_time","arguments":[1,2]})",             // arguments not an object
      R"({"name":"get_time","arguments":"not json"})",        // arguments a string holding no object
      R"([{"name":"get_time"},{"name":"nope"}])",             // one of the array is not a call
      R"({"answer": 42})",                                    // JSON, but no call
      "[1, 2, 3]",
      "{\"name\": \"get_time\", \"argu",                      // cut off
  };
  for (const std::string& t : texts) {
    const ParsedReply r = parse_tool_calls(t, tools);
    EXPECT_TRUE(r.calls.empty()) << t;
    EXPECT_EQ(r.content, t) << t;
  }
  // A block that does not hold a call is kept with its tags; a valid one beside it is read.
  const ParsedReply r = parse_tool_calls(
      "<tool_call>oops</tool_call> then <tool_call>{\"name\":\"get_time\"}</tool_call>", tools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.content, "<tool_call>oops</tool_call> then");
}

// Feeds the pieces; returns what went out at once and what was held at the end.
std::pair<std::string, std::string> stream(const std::vector<std::string>& pieces, bool hold_all = false) {
  ToolCallStream s(hold_all);
  std::string sent;
  for (const std::string& p : pieces) sent += s.push(p);
  return {sent, s.held()};
}

TEST(ToolCalls, StreamHoldsBackOnlyWhereACallMayBegin) {
  // Prose goes out as it comes, but a tail that may begin "<tool_call>" waits.
  EXPECT_EQ(stream({"Hello", " wor", "ld <to"}), std::make_pair(std::string("Hello world "), std::string("<to")));
  // It was not a call: released with what follows.
  EXPECT_EQ(stream({"a <to", "p> b"}), std::make_pair(std::string("a <top> b"), std::string()));
  // A call: everything from its tag on is held.
  EXPECT_EQ(stream({"Sure. <tool_", "call>{\"name\":", "\"x\"}</tool_call> after"}),
            std::make_pair(std::string("Sure. "), std::string("<tool_call>{\"name\":\"x\"}</tool_call> after")));
  // A reply that opens with '{' or '[' (after white space) may be a bare call: all held.
  EXPECT_EQ(stream({"\n ", " {\"na", "me\": 1} and more"}),
            std::make_pair(std::string(), std::string("\n  {\"name\": 1} and more")));
  EXPECT_EQ(stream({"[", "]"}), std::make_pair(std::string(), std::string("[]")));
  // Once prose has gone out, a later '{' is prose.
  EXPECT_EQ(stream({"x", "{}"}), std::make_pair(std::string("x{}"), std::string()));
  // A constrained reply is held whole.
  EXPECT_EQ(stream({"Hi", " there"}, true), std::make_pair(std::string(), std::string("Hi there")));
  // Every split of a call-bearing reply sends the same content and holds the same rest.
  const std::string reply = "Checking <tool_call>{\"name\":\"get_time\"}</tool_call>";
  for (size_t a = 0; a <= reply.size(); ++a)
    for (size_t b = a; b <= reply.size(); b += 3) {
      const auto [sent, held] = stream({reply.substr(0, a), reply.substr(a, b - a), reply.substr(b)});
      ASSERT_EQ(sent, "Checking ") << a << " " << b;
      ASSERT_EQ(held, "<tool_call>{\"name\":\"get_time\"}</tool_call>") << a << " " << b;
    }
}

TEST(ToolCalls, CallSchemaHoldsTheOutputToACallOfTheFunctions) {
  const auto tools = weather_tools();
  const JsonSchema any = JsonSchema::compile(tool_call_schema(tools));
  EXPECT_TRUE(accepts_whole(any, R"({"name":"get_weather","arguments":{"city":"Oslo","unit":"f"}})"));
  EXPECT_TRUE(accepts_whole(any, R"({"name":"get_time","arguments":{}})"));
  EXPECT_FALSE(accepts_whole(any, R"({"name":"get_weather","arguments":{"unit":"f"}})"));  // city is required
  EXPECT_FALSE(accepts_whole(any, R"({"name":"get_weather","arguments":{"city":"Oslo","unit":"k"}})"));
  EXPECT_FALSE(accepts_whole(any, R"({"name":"get_date","arguments":{}})"));
  EXPECT_FALSE(accepts_whole(any, R"({"arguments":{},"name":"get_time"})"));  // the name first
  // A named function admits only its own calls.
  const JsonSchema named = JsonSchema::compile(tool_call_schema(tools, "get_time"));
  EXPECT_TRUE(accepts_whole(named, R"({"name":"get_time","arguments":{}})"));
  EXPECT_FALSE(accepts_whole(named, R"({"name":"get_weather","arguments":{"city":"Oslo"}})"));
  // Local references of the parameters still resolve where the parameters now sit.
  const std::vector<ToolFunction> with_refs = {
      {"a", "", ordered_json::parse(R"({"type":"object","properties":{"p":{"$ref":"#/$defs/pt"}},"required":["p"],)"
                                    R"("$defs":{"pt":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}}})")},
      {"b", "", ordered_json::parse(R"({"type":"object","properties":{"q":{"$ref":"#/$defs/pt"}},"required":["q"],)"
                                    R"("$defs":{"pt":{"enum":["yes","no"]}}})")}};
  const JsonSchema refs = JsonSchema::compile(tool_call_schema(with_refs));
  EXPECT_TRUE(accepts_whole(refs, R"({"name":"a","arguments":{"p":{"x":3}}})"));
  EXPECT_TRUE(accepts_whole(refs, R"({"name":"b","arguments":{"q":"no"}})"));
  EXPECT_FALSE(accepts_whole(refs, R"({"name":"b","arguments":{"q":{"x":3}}})"));
  const JsonSchema one = JsonSchema::compile(tool_call_schema(with_refs, "b"));
  EXPECT_TRUE(accepts_whole(one, R"({"name":"b","arguments":{"q":"yes"}})"));
}

std::vector<ChatMessage> agent_turns() {
  std::vector<ChatMessage> turns = {{"user", "Weather in Oslo?"}, {"assistant", ""}, {"tool", "{\"temp\": 3}"},
                                    {"user", "And now?"}};
  turns[1].tool_calls = {{"call_1", "get_weather", R"({"city":"Oslo"})"}};
  turns[2].tool_call_id = "call_1";
  return turns;
}

TEST(ToolCalls, TemplateThatRendersToolsGetsThemAsVariablesAndFields) {
  const ChatTemplate qwen3 = fixture_template("qwen3");
  std::string tools_json;
  const auto msgs = messages_for_template(qwen3, agent_turns(), weather_tools(), true, tools_json);
  ASSERT_EQ(msgs.size(), 4u);
  EXPECT_EQ(msgs[1].tool_calls.size(), 1u);
  EXPECT_EQ(msgs[2].role, "tool");
  const auto tools = nlohmann::json::parse(tools_json);
  ASSERT_EQ(tools.size(), 2u);
  EXPECT_EQ(tools[0]["function"]["name"], "get_weather");
  ChatTemplateInput in;
  in.messages = msgs;
  in.tools_json = tools_json;
  const std::string text = qwen3.render(in);
  // Qwen3's own sections: the tools, the call with its arguments as an object, the result.
  EXPECT_NE(text.find("<tools>"), std::string::npos) << text;
  EXPECT_NE(text.find(R"({"name": "get_weather", "arguments": {"city": "Oslo"}})"), std::string::npos) << text;
  EXPECT_NE(text.find("<tool_response>\n{\"temp\": 3}\n</tool_response>"), std::string::npos) << text;
  // tool_choice "none": the functions are not offered.
  messages_for_template(qwen3, agent_turns(), weather_tools(), false, tools_json);
  EXPECT_TRUE(tools_json.empty());
}

TEST(ToolCalls, DeepSeekTemplatesGetACallsArgumentsAsTextAndItsContentAsNone) {
  std::vector<ChatMessage> turns = agent_turns();
  turns.pop_back();
  turns[1].null_content = true;  // the request's content: null
  for (const char* name : {"deepseek-v3", "deepseek-v3.1"}) {
    const ChatTemplate tpl = fixture_template(name);
    ChatTemplateInput in;
    in.messages = messages_for_template(tpl, turns, weather_tools(), true, in.tools_json);
    in.bos_token = "<｜begin▁of▁sentence｜>";
    EXPECT_THROW(tpl.render(in), InputError) << name;  // a string + a dict
    const std::string text = render_conversation(tpl, in);
    EXPECT_NE(text.find("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"), std::string::npos) << name << "\n" << text;
    EXPECT_NE(text.find(R"({"city":"Oslo"})"), std::string::npos) << name << "\n" << text;
    EXPECT_NE(text.find("{\"temp\": 3}"), std::string::npos) << name << "\n" << text;
  }
}

TEST(ToolCalls, TemplateWithoutToolsGetsThemWrittenIntoTheConversation) {
  for (const char* name : {"mixtral", "moeflow-default"}) {
    const ChatTemplate tpl = fixture_template(name);
    std::vector<ChatMessage> turns = agent_turns();
    turns.insert(turns.begin() + 3, ChatMessage("tool", "second result"));
    std::string tools_json = "stale";
    const auto msgs = messages_for_template(tpl, turns, weather_tools(), true, tools_json);
    EXPECT_TRUE(tools_json.empty());
    // system (the offer), user, assistant (its call as text), user (both results and
    // the user's next words: templates that check the turns alternate refuse two user
    // turns in a row).
    ASSERT_EQ(msgs.size(), 4u) << name;
    EXPECT_EQ(msgs[0].role, "system");
    EXPECT_EQ(msgs[0].content, hermes_tools_preamble(weather_tools()));
    EXPECT_NE(msgs[0].content.find(R"("name":"get_weather")"), std::string::npos);
    EXPECT_TRUE(msgs[2].tool_calls.empty());
    EXPECT_EQ(msgs[2].content, "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}\n</tool_call>");
    EXPECT_EQ(msgs[3].role, "user");
    EXPECT_EQ(msgs[3].content,
              "<tool_response>\n{\"temp\": 3}\n</tool_response>\n<tool_response>\nsecond result\n</tool_response>\n"
              "And now?");
    ChatTemplateInput in;
    in.messages = msgs;
    in.bos_token = "<s>";
    in.eos_token = "</s>";
    EXPECT_NO_THROW(tpl.render(in)) << name;  // Mixtral's alternation check passes
  }
  // An existing system message takes the offer after its own text.
  std::string tools_json;
  const auto msgs = messages_for_template(fixture_template("mixtral"), {{"system", "Be brief."}, {"user", "Hi"}},
                                          weather_tools(), true, tools_json);
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(msgs[0].content, "Be brief.\n\n" + hermes_tools_preamble(weather_tools()));
}

const char* kTools =
    R"("tools":[{"type":"function","function":{"name":"get_weather","description":"d","parameters":)"
    R"({"type":"object","properties":{"unit":{"enum":["c","f"]},"city":{"type":"string"}},"required":["city"]}}},)"
    R"({"type":"function","function":{"name":"get_time"}}])";

TEST(ToolCalls, RequestFields) {
  CompletionRequest r = parse_completion_request(
      std::string(R"({"messages":[{"role":"user","content":"x"}],)") + kTools + "}", Endpoint::chat);
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tool_choice, ToolChoice::automatic);
  EXPECT_FALSE(r.json_schema);
  EXPECT_TRUE(reads_tool_calls(r));
  // The parameters keep the body's key order (unit before city).
  EXPECT_EQ(r.tools[0].parameters["properties"].begin().key(), "unit");
  EXPECT_TRUE(r.tools[1].parameters.is_null());

  r = parse_completion_request(std::string(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required",)") +
                                   kTools + "}",
                               Endpoint::chat);
  ASSERT_TRUE(r.json_schema);
  EXPECT_TRUE(accepts_whole(*r.json_schema, R"({"name":"get_time","arguments":{}})"));
  r = parse_completion_request(std::string(R"({"messages":[{"role":"user","content":"x"}],)"
                                           R"("tool_choice":{"type":"function","function":{"name":"get_weather"}},)") +
                                   kTools + "}",
                               Endpoint::chat);
  EXPECT_EQ(r.tool_choice, ToolChoice::named);
  ASSERT_TRUE(r.json_schema);
  EXPECT_FALSE(accepts_whole(*r.json_schema, R"({"name":"get_time","arguments":{}})"));
  EXPECT_TRUE(accepts_whole(*r.json_schema, R"({"name":"get_weather","arguments":{"unit":"c","city":"x"}})"));
  r = parse_completion_request(std::string(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"none",)") +
                                   kTools + "}",
                               Endpoint::chat);
  EXPECT_FALSE(reads_tool_calls(r));
  // auto beside a response_format: the output is the format's, not read for calls.
  r = parse_completion_request(std::string(R"({"messages":[{"role":"user","content":"x"}],)"
                                           R"("response_format":{"type":"json_object"},)") +
                                   kTools + "}",
                               Endpoint::chat);
  EXPECT_FALSE(reads_tool_calls(r));

  // The history of an agent loop.
  r = parse_completion_request(
      R"({"messages":[{"role":"user","content":"x"},)"
      R"({"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},)"
      R"({"role":"assistant","tool_calls":[{"id":"c2","type":"function","function":{"name":"g","arguments":{"b":2}}}]},)"
      R"({"role":"tool","tool_call_id":"c1","content":"42"}]})",
      Endpoint::chat);
  ASSERT_EQ(r.messages.size(), 4u);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"a":1})");
  EXPECT_EQ(r.messages[2].tool_calls[0].arguments, R"({"b":2})");
  EXPECT_EQ(r.messages[3].tool_call_id, "c1");
  // /v1/completions has no tools: the field is ignored there, as before.
  EXPECT_NO_THROW(parse_completion_request(R"({"prompt":"x","tools":5})", Endpoint::completions));
}

TEST(ToolCalls, RequestErrorsNameTheField) {
  const std::string user = R"({"messages":[{"role":"user","content":"x"}],)";
  std::vector<std::pair<std::string, std::string>> cases = {
      {user + R"("tools":{}})", "tools"},
      {user + R"("tools":[{"function":{"name":"f"}}]})", "tools[0].type"},
      {user + R"("tools":[{"type":"retrieval","function":{"name":"f"}}]})", "tools[0].type"},
      {user + R"("tools":[{"type":"function"}]})", "tools[0].function"},
      {user + R"("tools":[{"type":"function","function":{}}]})", "tools[0].function.name"},
      {user + R"("tools":[{"type":"function","function":{"name":"a b"}}]})", "tools[0].function.name"},
      {user + R"("tools":[{"type":"function","function":{"name":")" + std::string(65, 'x') + R"("}}]})",
       "tools[0].function.name"},
      {user + R"("tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]})",
       "tools[1].function.name"},
      {user + R"("tools":[{"type":"function","function":{"name":"f","parameters":"x"}}]})", "tools[0].function.parameters"},
      {user + R"("tools":[{"type":"function","function":{"name":"f","description":1}}]})", "tools[0].function.description"},
      {user + R"("tool_choice":"sometimes"})", "tool_choice"},
      {user + R"("tool_choice":5})", "tool_choice"},
      {user + R"("tool_choice":"required"})", "tool_choice"},
      {user + R"("tool_choice":{"type":"function"},)" + kTools + "}", "tool_choice.function.name"},
      {user + R"("tool_choice":{"type":"function","function":{"name":"nope"}},)" + kTools + "}",
       "tool_choice.function.name"},
      {user + R"("tool_choice":"required","response_format":{"type":"json_object"},)" + kTools + "}", "tool_choice"},
      {user + R"("parallel_tool_calls":"yes"})", "parallel_tool_calls"},
      {user + R"("reasoning_format":"hidden"})", "reasoning_format"},
      // A keyword the constrained output cannot honour is named at its own place...
      {user + R"("tool_choice":"required","tools":[{"type":"function","function":{"name":"f","parameters":)"
              R"({"type":"object","properties":{"d":{"type":"string","format":"date"}}}}}]})",
       "tools[0].function.parameters"},
      {R"({"messages":[{"role":"user","content":"x","tool_calls":[]}]})", "messages[0].tool_calls"},
      {R"({"messages":[{"role":"assistant","tool_calls":[{"type":"function"}]}]})", "messages[0].tool_calls[0].function"},
      {R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}}]}]})",
       "messages[0].tool_calls[0].function.name"},
      {R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":5}}]}]})",
       "messages[0].tool_calls[0].function.arguments"},
      {R"({"messages":[{"role":"tool","content":"x","tool_call_id":5}]})", "messages[0].tool_call_id"},
      {R"({"messages":[{"role":"assistant"}]})", "messages[0].content"},
  };
  // Values nested past what is walked or written again without recursion's risk.
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  cases.push_back({user + R"("tools":[{"type":"function","function":{"name":"f","parameters":{"default":)" + deep + "}}}]}",
                   "tools[0].function.parameters"});
  cases.push_back({R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{"a":)" + deep +
                       "}}}]}]}",
                   "messages[0].tool_calls[0].function.arguments"});
  for (const auto& [body, param] : cases) {
    try {
      parse_completion_request(body, Endpoint::chat);
      ADD_FAILURE() << "accepted: " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << body;
      EXPECT_EQ(e.param(), param) << body << ": " << e.what();
    }
  }
  // ...but only when the output is constrained: "auto" leaves the model free.
  EXPECT_NO_THROW(parse_completion_request(
      user + R"("tools":[{"type":"function","function":{"name":"f","parameters":)"
             R"({"type":"object","properties":{"d":{"type":"string","format":"date"}}}}}]})",
      Endpoint::chat));
}

}  // namespace
}  // namespace moeflow::serve
