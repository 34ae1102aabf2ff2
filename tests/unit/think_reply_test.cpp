// Replies that think between <think> and </think>, split into reasoning and answer,
// whole and streamed at every split.
#include <gtest/gtest.h>

#include "serve/think_reply.h"

namespace moeflow::serve {
namespace {

TEST(ThinkReply, ReasoningAndAnswerApart) {
  ThinkStream::Delta d = split_thinking("<think>\nThe user asks x.\n</think>\n\nThe answer is 4.", false);
  EXPECT_EQ(d.reasoning, "The user asks x.\n");
  EXPECT_EQ(d.content, "The answer is 4.");
  // DeepSeek-R1: the prompt opened the block.
  d = split_thinking("\nHmm.</think>Four.", true);
  EXPECT_EQ(d.reasoning, "Hmm.");
  EXPECT_EQ(d.content, "Four.");
  // Cut off while thinking: all reasoning.
  d = split_thinking("  <think>still going", false);
  EXPECT_EQ(d.reasoning, "still going");
  EXPECT_EQ(d.content, "");
  // A reply that does not think is answer as written, leading space and all.
  d = split_thinking(" Plain <think> text", false);
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, " Plain <think> text");
  EXPECT_EQ(split_thinking("<thi", false).content, "<thi");
}

TEST(ThinkReply, PromptOpensThinking) {
  EXPECT_TRUE(prompt_opens_thinking("<｜Assistant｜><think>\n"));
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n"));
}

TEST(ThinkReply, StreamedAtEverySplitAsWhole) {
  const std::string texts[] = {"<think>\nA < B </thin then </think>\n\nDone <think> x", " hi", "\n\n<think></think>"};
  for (const std::string& text : texts)
    for (bool opened : {false, true}) {
      const ThinkStream::Delta whole = split_thinking(text, opened);
      for (size_t a = 0; a <= text.size(); ++a)
        for (size_t b = a; b <= text.size(); b += 3) {
          ThinkStream s(opened);
          std::string reasoning, content;
          for (const std::string& piece : {text.substr(0, a), text.substr(a, b - a), text.substr(b)}) {
            const ThinkStream::Delta d = s.push(piece);
            reasoning += d.reasoning;
            content += d.content;
          }
          const ThinkStream::Delta end = s.finish();
          ASSERT_EQ(reasoning + end.reasoning, whole.reasoning) << text << " " << a << " " << b;
          ASSERT_EQ(content + end.content, whole.content) << text << " " << a << " " << b;
        }
    }
}

}  // namespace
}  // namespace moeflow::serve
