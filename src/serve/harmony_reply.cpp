#include "serve/harmony_reply.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>

#include "serve/json_depth.h"
#include "serve/partial_match.h"

namespace moeflow::serve {
namespace {

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kFunctions = "functions.";
// What ends a message's body: <|end|>, the next message's <|start|>, or the reply's end
// (<|call|>, <|return|>: end-of-generation tokens, in the text only when a client asked
// for special tokens).
constexpr std::string_view kBodyEnds[] = {"<|end|>", kStart, "<|call|>", "<|return|>"};

// The word after `key` in a header (up to white space or the next tag); empty: none.
std::string word_after(std::string_view header, std::string_view key) {
  const size_t at = header.find(key);
  if (at == std::string_view::npos) return "";
  size_t b = at + key.size(), e = b;
  while (e < header.size() && header[e] != ' ' && header[e] != '<' && header[e] != '\n') ++e;
  return std::string(header.substr(b, e - b));
}

}  // namespace

void HarmonyStream::emit(const std::string& text, Delta& d) {
  if (text.empty()) return;
  if (recipient_.rfind(kFunctions, 0) == 0) call_args_ += text;
  else if (channel_ == "analysis") d.reasoning += text;
  else d.content += text;
}

void HarmonyStream::end_message() {
  if (recipient_.rfind(kFunctions, 0) == 0) pending_.push_back({recipient_, call_args_});
  call_args_.clear();
  channel_.clear();
  recipient_.clear();
  mode_ = Mode::header;
}

HarmonyStream::Delta HarmonyStream::push(const std::string& text) {
  Delta d;
  buf_ += text;
  for (;;) {
    const std::string_view rest = std::string_view(buf_).substr(pos_);
    if (mode_ == Mode::start) {
      // A reply opens with a header, or it is plain text.
      static constexpr std::string_view kOpeners[] = {kChannel, kStart};
      bool header = false, undecided = false;
      for (const std::string_view o : kOpeners) {
        header = header || rest.substr(0, o.size()) == o;
        undecided = undecided || (rest.size() < o.size() && o.substr(0, rest.size()) == rest);
      }
      if (header) mode_ = Mode::header;
      else if (undecided) return d;
      else mode_ = Mode::plain;
      continue;
    }
    if (mode_ == Mode::plain) {
      d.content += std::string(rest);
      pos_ = buf_.size();
      return d;
    }
    if (mode_ == Mode::header) {
      const size_t m = rest.find(kMessage);
      if (m == std::string_view::npos) return d;
      const std::string_view header = rest.substr(0, m);
      channel_ = word_after(header, kChannel);
      recipient_ = word_after(header, "to=");
      pos_ += m + kMessage.size();
      mode_ = Mode::body;
      continue;
    }
    // Body: up to the first tag that ends it; a tail that may begin one waits.
    size_t end = std::string_view::npos;
    std::string_view tag;
    for (const std::string_view t : kBodyEnds)
      if (const size_t e = rest.find(t); e < end) {
        end = e;
        tag = t;
      }
    if (end == std::string_view::npos) {
      const size_t keep = partial_marker_tail(rest, kBodyEnds);
      emit(std::string(rest.substr(0, rest.size() - keep)), d);
      pos_ += rest.size() - keep;
      return d;
    }
    emit(std::string(rest.substr(0, end)), d);
    pos_ += end + (tag == kStart ? 0 : tag.size());  // <|start|> opens the next header
    end_message();
  }
}

HarmonyReply HarmonyStream::finish(const std::vector<ToolFunction>& tools) {
  HarmonyReply r;
  Delta d;
  const std::string_view rest = std::string_view(buf_).substr(pos_);
  if (mode_ == Mode::body) {
    emit(std::string(rest), d);
    end_message();
  } else if (mode_ == Mode::start || mode_ == Mode::plain) {
    d.content += std::string(rest);  // too short to say: text
  }  // a header cut off by the end of the reply says nothing
  pos_ = buf_.size();
  r.reasoning = std::move(d.reasoning);
  r.content = std::move(d.content);
  for (const PendingCall& p : pending_) {
    const std::string name = p.recipient.substr(kFunctions.size());
    const nlohmann::json args = nlohmann::json::parse(p.args, nullptr, false);
    if (find_function(tools, name) && args.is_object() && !json_deeper_than(args, kMaxJsonDepth)) {
      ToolCall c;
      c.id = new_call_id();
      c.name = name;
      c.arguments = args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      r.calls.push_back(std::move(c));
    } else {
      r.content += p.args;
    }
  }
  pending_.clear();
  return r;
}

HarmonyReply parse_harmony_reply(const std::string& text, const std::vector<ToolFunction>& tools) {
  HarmonyStream s;
  const HarmonyStream::Delta d = s.push(text);
  HarmonyReply r = s.finish(tools);
  r.reasoning = d.reasoning + r.reasoning;
  r.content = d.content + r.content;
  return r;
}

}  // namespace moeflow::serve
