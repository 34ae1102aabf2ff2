// gpt-oss's Harmony replies read into reasoning, content and calls, whole and as a stream
// split anywhere.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "serve/harmony_reply.h"

namespace moeflow::serve {
namespace {

std::vector<ToolFunction> tools() { return {{"get_weather", "", nlohmann::ordered_json()}, {"get_time", "", {}}}; }

const std::string kReasonThenAnswer =
    "<|channel|>analysis<|message|>The user greets. Reply briefly.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?";

const std::string kCall =
    "<|channel|>analysis<|message|>Need the weather.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}";

TEST(HarmonyReply, ReasoningAndAnswerApart) {
  const HarmonyReply r = parse_harmony_reply(kReasonThenAnswer, tools());
  EXPECT_EQ(r.reasoning, "The user greets. Reply briefly.");
  EXPECT_EQ(r.content, "Hello! How can I help?");
  EXPECT_TRUE(r.calls.empty());
}

TEST(HarmonyReply, AMessageToAFunctionIsACall) {
  HarmonyReply r = parse_harmony_reply(kCall, tools());
  EXPECT_EQ(r.reasoning, "Need the weather.");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(r.calls[0].id.rfind("call_", 0), 0u);
  // The recipient may come before the channel; a preamble on commentary is content.
  r = parse_harmony_reply(
      "<|channel|>commentary<|message|>Checking the time.<|end|>"
      "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{}",
      tools());
  EXPECT_EQ(r.content, "Checking the time.");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_time");
  // Without the function among the request's tools (or with arguments that are no
  // object), the message is content as written.
  r = parse_harmony_reply(kCall, {});
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, R"({"city":"Oslo"})");
  r = parse_harmony_reply("<|channel|>commentary to=functions.get_time<|message|>{\"a\":" + std::string(100000, '[') +
                              std::string(100000, ']') + "}",
                          tools());
  EXPECT_TRUE(r.calls.empty());  // nested too deep to be written again safely
  r = parse_harmony_reply("<|channel|>commentary to=functions.get_time<|message|>not json", tools());
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "not json");
}

TEST(HarmonyReply, TextWithoutHeadersIsContent) {
  EXPECT_EQ(parse_harmony_reply("Just text <|end|> here", tools()).content, "Just text <|end|> here");
  EXPECT_EQ(parse_harmony_reply("<|cha", tools()).content, "<|cha");  // too short to say
  // A header cut off by the end of the reply adds nothing.
  const HarmonyReply r = parse_harmony_reply("<|channel|>analysis<|message|>x<|end|><|start|>assistant<|chan", tools());
  EXPECT_EQ(r.reasoning, "x");
  EXPECT_EQ(r.content, "");
}

// A stream split at a and b gives, joined, what the whole reply gives.
HarmonyReply streamed(const std::string& text, size_t a, size_t b) {
  HarmonyStream s;
  HarmonyReply out;
  for (const std::string& piece : {text.substr(0, a), text.substr(a, b - a), text.substr(b)}) {
    const HarmonyStream::Delta d = s.push(piece);
    out.reasoning += d.reasoning;
    out.content += d.content;
  }
  HarmonyReply end = s.finish(tools());
  out.reasoning += end.reasoning;
  out.content += end.content;
  out.calls = std::move(end.calls);
  return out;
}

TEST(HarmonyReply, StreamedAtEverySplitAsWhole) {
  for (const std::string& text : {kReasonThenAnswer, kCall, std::string("plain <|start|> text")}) {
    const HarmonyReply whole = parse_harmony_reply(text, tools());
    for (size_t a = 0; a <= text.size(); ++a)
      for (size_t b = a; b <= text.size(); b += 5) {
        const HarmonyReply s = streamed(text, a, b);
        ASSERT_EQ(s.reasoning, whole.reasoning) << a << " " << b;
        ASSERT_EQ(s.content, whole.content) << a << " " << b;
        ASSERT_EQ(s.calls.size(), whole.calls.size()) << a << " " << b;
        for (size_t i = 0; i < s.calls.size(); ++i) ASSERT_EQ(s.calls[i].arguments, whole.calls[i].arguments);
      }
  }
  // The answer goes out before the reply ends; no markup leaks into it.
  HarmonyStream s;
  const HarmonyStream::Delta d = s.push(kReasonThenAnswer);
  EXPECT_EQ(d.reasoning, "The user greets. Reply briefly.");
  EXPECT_EQ(d.content, "Hello! How can I help?");
}

}  // namespace
}  // namespace moeflow::serve
