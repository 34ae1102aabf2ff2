// Real models' chat templates rendered by moeflow's interpreter, compared byte for byte
// with Python's jinja2 under Hugging Face's settings: the expected texts come from
// tools/chat_template/render_expected.py (tests/fixtures/chat_templates/NAME.expected.json).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "base/error.h"
#include "serve/chat_template.h"

namespace moeflow::serve {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string fixture(const std::string& name) { return std::string(MOEFLOW_FIXTURES) + "/chat_templates/" + name; }

class RealChatTemplate : public ::testing::TestWithParam<const char*> {};

TEST_P(RealChatTemplate, MatchesJinja2ByteForByte) {
  const std::string name = GetParam();
  // Ordered: the tools' key order is part of what the templates print.
  const nlohmann::ordered_json expected = nlohmann::ordered_json::parse(read_file(fixture(name + ".expected.json")));
  const ChatTemplate tpl = ChatTemplate::parse(read_file(fixture(name + ".jinja")));
  int compared = 0, refused = 0;
  for (const auto& c : expected.at("cases")) {
    ChatTemplateInput in;
    for (const auto& m : c.at("messages")) in.messages.push_back({m.at("role"), m.at("content")});
    in.add_generation_prompt = c.at("add_generation_prompt");
    in.bos_token = expected.at("bos_token");
    in.eos_token = expected.at("eos_token");
    in.now_unix_seconds = expected.at("now_unix_seconds").get<int64_t>();
    if (c.contains("tools")) in.tools_json = c.at("tools").dump();
    if (c.contains("variables")) in.variables_json = c.at("variables").dump();
    const std::string case_name = c.at("name");
    if (c.contains("error")) {
      // The template refuses this conversation through raise_exception: same message.
      try {
        tpl.render(in);
        ADD_FAILURE() << name << "/" << case_name << ": rendered, but jinja2 raised: " << c.at("error");
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("raise_exception: " + c.at("error").get<std::string>()), std::string::npos)
            << name << "/" << case_name << ": " << e.what();
      }
      ++refused;
      continue;
    }
    EXPECT_EQ(tpl.render(in), c.at("expected").get<std::string>()) << name << "/" << case_name;
    ++compared;
  }
  std::printf("%s: %d conversations identical to jinja2, %d refused alike\n", name.c_str(), compared, refused);
  EXPECT_GE(compared, 5);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RealChatTemplate,
                         ::testing::Values("chatml", "deepseek-v2", "deepseek-v3", "deepseek-v3.1", "glm-4.5", "gpt-oss", "kimi-k2",
                                           "llama3", "llama3.3", "mixtral", "moeflow-default", "olmoe", "qwen2", "qwen3"));
// With gtest's index names, ctest names each case by its value ("chatml", ...). With a
// name generator, ctest's names would keep gtest's "# GetParam() = ..." comment, and
// ctest's cost file splits names at its spaces.

// A long conversation renders in time linear in its length: 2,000 turns of ~300 bytes.
TEST(ChatTemplate, LongConversationRendersInLinearTime) {
  for (const char* name : {"qwen3", "gpt-oss", "llama3.3", "deepseek-v3"}) {
    const ChatTemplate t = ChatTemplate::parse(read_file(fixture(std::string(name) + ".jinja")));
    ChatTemplateInput small, large;
    for (int i = 0; i < 2000; ++i) {
      ChatMessage m{i % 2 ? "assistant" : "user", "turn " + std::to_string(i) + ": " + std::string(290, 'x')};
      if (i < 200) small.messages.push_back(m);
      large.messages.push_back(std::move(m));
    }
    small.now_unix_seconds = large.now_unix_seconds = 0;
    // The fastest of three runs, so that a busy machine does not decide the ratio.
    auto time_ms = [&t](const ChatTemplateInput& in, size_t* bytes) {
      double best = 1e9;
      for (int run = 0; run < 3; ++run) {
        const auto t0 = std::chrono::steady_clock::now();
        *bytes = t.render(in).size();
        best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      return best;
    };
    size_t small_bytes = 0, large_bytes = 0;
    const double small_ms = time_ms(small, &small_bytes);
    const double large_ms = time_ms(large, &large_bytes);
    std::printf("%s: 200 turns %.2f ms (%zu bytes), 2000 turns %.2f ms (%zu bytes)\n", name, small_ms, small_bytes,
                large_ms, large_bytes);
    EXPECT_GT(large_bytes, 9 * small_bytes);
    // Linear: 10x the turns within 30x the time (quadratic would be 100x), and absolute
    // time far below a request's budget.
    EXPECT_LT(large_ms, 50 * small_ms + 20.0) << name;  // quadratic would be ~100x; loose for busy CI machines
    EXPECT_LT(large_ms, 2000.0) << name;
  }
}

TEST(ChatTemplate, RequestInputErrors) {
  const ChatTemplate t = ChatTemplate::parse("{{ tools|length }}{{ flag }}");
  ChatTemplateInput in;
  in.messages = {{"user", "x"}};
  in.tools_json = "[1, 2]";
  in.variables_json = R"({"flag": "F"})";
  EXPECT_EQ(t.render(in), "2F");
  auto error_of = [&t](const ChatTemplateInput& bad) -> std::string {
    try {
      t.render(bad);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  ChatTemplateInput bad = in;
  bad.tools_json = "[1,";
  EXPECT_NE(error_of(bad).find("tools is not valid JSON"), std::string::npos);
  bad = in;
  bad.variables_json = "[1]";
  EXPECT_NE(error_of(bad).find("variables must be a JSON object"), std::string::npos);
  bad.variables_json = R"({"messages": []})";
  EXPECT_NE(error_of(bad).find("variable 'messages' is set by the request itself"), std::string::npos);
  bad = in;
  bad.tools_json = std::string(100, '[') + std::string(100, ']');
  EXPECT_NE(error_of(bad).find("nested too deeply"), std::string::npos);
}

TEST(ChatTemplate, IsCopyableAndRendersOnCopies) {
  const ChatTemplate a = ChatTemplate::parse("{{ messages[0].content }}");
  ChatTemplate b = a;
  ChatTemplate c = std::move(b);
  ChatTemplateInput in;
  in.messages = {{"user", "x"}};
  EXPECT_EQ(a.render(in), "x");
  EXPECT_EQ(c.render(in), "x");
}

TEST(ChatTemplate, MixtralRefusesNonAlternatingRolesWithItsMessage) {
  const ChatTemplate t = ChatTemplate::parse(read_file(fixture("mixtral.jinja")));
  ChatTemplateInput in;
  in.messages = {{"user", "a"}, {"user", "b"}};
  try {
    t.render(in);
    FAIL() << "expected raise_exception";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("conversation roles must alternate user/assistant/user/assistant/..."),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace moeflow::serve
