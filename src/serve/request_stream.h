// What the serving loop tells the HTTP handler of one request, in order: pieces of
// text (with their tokens' log-probabilities when asked for), then one final event
// that says how the request ended. The handler may cancel at any time (its client
// went away); the loop then frees the request's slot before its next step.
// Thread-safe: the loop pushes, the handler pops and cancels.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "serve/api_error.h"

namespace moeflow::serve {

struct TokenLogprob {
  std::string token;  // the token's bytes (may be part of a UTF-8 character)
  double logprob = 0;
  bool scored = true;  // false: a prompt's first token, which nothing predicts (null in JSON)
  std::vector<std::pair<std::string, double>> top;  // most likely tokens at this position, best first
};

struct StreamEvent {
  std::string text;
  std::vector<TokenLogprob> logprobs;
  bool finished = false;
  std::string finish_reason;  // on the final event: "stop" or "length"
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;  // of the prompt, positions taken from an earlier request's
  std::optional<ApiError> error;  // on the final event when the request failed
};

class RequestStream {
 public:
  void push(StreamEvent e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(e));
    }
    cv_.notify_all();
  }
  // Waits up to `timeout` for events and takes all there are (none on timeout).
  std::vector<StreamEvent> take(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
    std::vector<StreamEvent> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
    events_.clear();
    return out;
  }
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace moeflow::serve
