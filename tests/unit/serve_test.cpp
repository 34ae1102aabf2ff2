// The server's parts without HTTP: request validation, stop strings, log-probabilities,
// Prometheus rendering, and the serving loop over a real engine (chunked prefill beside
// running decodes, cancellation, a full queue). tests/server drives the HTTP layer.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>

#include "base/error.h"
#include "engine/tokenizer.h"
#include "moeflow/engine.h"
#include "moeflow/sampler.h"
#include "serve/api_error.h"
#include "serve/api_keys.h"
#include "serve/completion_request.h"
#include "serve/json_prefix.h"
#include "serve/json_schema_prefix.h"
#include "serve/metrics.h"
#include "serve/openai_server.h"
#include "serve/prompt_cache.h"
#include "serve/serving_loop.h"
#include "serve/stop_strings.h"
#include "serve/token_logprobs.h"
#include "test_paths.h"

namespace moeflow::serve {
namespace {

using moeflow::testing::fixture_path;

ApiError error_of(const std::string& body, Endpoint ep = Endpoint::chat) {
  try {
    parse_completion_request(body, ep);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "");
}

TEST(CompletionRequest, ReadsEveryField) {
  const CompletionRequest r = parse_completion_request(
      R"({"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],
          "max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":5,"seed":3,"stop":["\n","END"],"stream":true,
          "stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":4,"slo_ms":250,"task":"code",
          "user":"u","presence_penalty":0.5,"frequency_penalty":-1,"repeat_penalty":1.1,"repeat_last_n":-1,"tools":[],
          "logit_bias":{"7":-100,"12":2.5},"response_format":{"type":"json_object"}})",
      Endpoint::chat);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "hi there");
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_EQ(r.temperature, 0.5);
  EXPECT_FLOAT_EQ(static_cast<float>(r.top_p), 0.9f);
  EXPECT_EQ(r.top_k, 5);
  EXPECT_EQ(*r.seed, 3u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r.stream && r.include_usage && r.logprobs);
  EXPECT_EQ(r.top_logprobs, 4);
  EXPECT_EQ(r.slo_ms, 250);
  EXPECT_EQ(r.task, "code");
  EXPECT_EQ(r.presence_penalty, 0.5);
  EXPECT_EQ(r.frequency_penalty, -1);
  EXPECT_DOUBLE_EQ(r.repeat_penalty, 1.1);
  EXPECT_EQ(r.repeat_last_n, -1);
  EXPECT_EQ(r.logit_bias, (std::vector<std::pair<int32_t, float>>{{12, 2.5f}, {7, -100.0f}}));  // by key text
  EXPECT_TRUE(r.json_object);

  // A schema keeps its properties in the order the body gives them.
  const CompletionRequest js = parse_completion_request(
      R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","strict":true,
          "schema":{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}},"required":["zeta","alpha"]}}}})",
      Endpoint::chat);
  ASSERT_TRUE(js.json_schema);
  const SchemaNode& root = js.json_schema->nodes[static_cast<size_t>(js.json_schema->root)];
  ASSERT_EQ(root.properties.size(), 2u);
  EXPECT_EQ(root.properties[0].key, "\"zeta\"");
  EXPECT_EQ(root.properties[1].key, "\"alpha\"");

  const CompletionRequest c = parse_completion_request(R"({"prompt":[1,2,3],"logprobs":2,"stop":"x"})",
                                                       Endpoint::completions);
  EXPECT_EQ(c.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(c.logprobs);
  EXPECT_EQ(c.top_logprobs, 2);
  EXPECT_FALSE(c.max_tokens.has_value());
  EXPECT_EQ(parse_completion_request(R"({"prompt":["one"]})", Endpoint::completions).prompt, "one");
}

TEST(CompletionRequest, RefusesBadBodiesNamingTheField) {
  struct Case { const char* body; Endpoint ep; const char* param; };
  const Case cases[] = {
      {R"({"messages": [)", Endpoint::chat, ""},
      {R"([1])", Endpoint::chat, ""},
      // A number no double holds is out_of_range, not parse_error, in nlohmann::json
      // (found by fuzz_completion_request): still a 400.
      {"   4444e4444444o ", Endpoint::chat, ""},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":1e400})", Endpoint::chat, ""},
      {R"({})", Endpoint::chat, "messages"},
      {R"({"messages":[]})", Endpoint::chat, "messages"},
      {R"({"messages":"hi"})", Endpoint::chat, "messages"},
      {R"({"messages":[{"content":"x"}]})", Endpoint::chat, "messages[0].role"},
      {R"({"messages":[{"role":"user"}]})", Endpoint::chat, "messages[0].content"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", Endpoint::chat, "messages[0].content[0].type"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})", Endpoint::chat, "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1.5})", Endpoint::chat, "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":18446744073709551615})", Endpoint::chat, "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})", Endpoint::chat, "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":3})", Endpoint::chat, "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_p":-1})", Endpoint::chat, "top_p"},
      {R"({"messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]})", Endpoint::chat, "stop"},
      {R"({"messages":[{"role":"user","content":"x"}],"stop":[""]})", Endpoint::chat, "stop"},
      {R"({"messages":[{"role":"user","content":"x"}],"n":17})", Endpoint::chat, "n"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":21,"logprobs":true})", Endpoint::chat, "top_logprobs"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", Endpoint::chat, "top_logprobs"},
      {R"({"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}})", Endpoint::chat, "stream_options"},
      {R"({"messages":[{"role":"user","content":"x"}],"seed":"s"})", Endpoint::chat, "seed"},
      {R"({"messages":[{"role":"user","content":"x"}],"presence_penalty":2.5})", Endpoint::chat, "presence_penalty"},
      {R"({"messages":[{"role":"user","content":"x"}],"frequency_penalty":"high"})", Endpoint::chat, "frequency_penalty"},
      {R"({"prompt":"x","repeat_penalty":0})", Endpoint::completions, "repeat_penalty"},
      {R"({"prompt":"x","repeat_last_n":-2})", Endpoint::completions, "repeat_last_n"},
      {R"({"prompt":"x","logit_bias":[1]})", Endpoint::completions, "logit_bias"},
      {R"({"prompt":"x","response_format":"json"})", Endpoint::completions, "response_format"},
      {R"({"prompt":"x","response_format":{}})", Endpoint::completions, "response_format.type"},
      {R"({"prompt":"x","response_format":{"type":"xml"}})", Endpoint::completions, "response_format.type"},
      {R"({"prompt":"x","response_format":{"type":"json_schema"}})", Endpoint::completions, "response_format.json_schema"},
      {R"({"prompt":"x","response_format":{"type":"json_schema","json_schema":{}}})", Endpoint::completions,
       "response_format.json_schema.schema"},
      {R"({"prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":3,"schema":{}}}})",
       Endpoint::completions, "response_format.json_schema.name"},
      {R"({"prompt":"x","response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object","properties":{"a":{"type":"string","format":"email"}}}}}})",
       Endpoint::completions, "response_format.json_schema.schema"},
      {R"({"prompt":"x","logit_bias":{"a1":1}})", Endpoint::completions, "logit_bias"},
      {R"({"prompt":"x","logit_bias":{"-1":1}})", Endpoint::completions, "logit_bias"},
      {R"({"prompt":"x","logit_bias":{"99999999999":1}})", Endpoint::completions, "logit_bias"},
      {R"({"prompt":"x","logit_bias":{"5":101}})", Endpoint::completions, "logit_bias[\"5\"]"},
      {R"({"prompt":""})", Endpoint::completions, "prompt"},
      {R"({"prompt":[]})", Endpoint::completions, "prompt"},
      {R"({"prompt":[1,-2]})", Endpoint::completions, "prompt[1]"},
      {R"({"prompt":["a","b"]})", Endpoint::completions, "prompt"},
      {R"({"prompt":"x","logprobs":6})", Endpoint::completions, "logprobs"},
      {R"({"prompt":"x","best_of":3})", Endpoint::completions, "best_of"},
  };
  for (const Case& c : cases) {
    const ApiError e = error_of(c.body, c.ep);
    EXPECT_EQ(e.status(), 400) << c.body;
    EXPECT_EQ(e.param(), c.param) << c.body << " -> " << e.what();
    EXPECT_EQ(e.to_json()["error"]["type"], "invalid_request_error");
  }
}

// A whole number written as a float is the number (Python's json writes 16.0).
TEST(CompletionRequest, WholeFloatsAreTheirIntegers) {
  const CompletionRequest r =
      parse_completion_request(R"({"prompt":"x","max_tokens":16.0,"seed":1.0,"top_k":4e1})", Endpoint::completions);
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_EQ(r.seed, 1u);
  EXPECT_EQ(r.top_k, 40);
}

// What a refusal says, where the type was right and the value was not: whole numbers
// past 64 bits parse as floats, an empty prompt array is empty, and a NUL byte ends no
// body early.
TEST(CompletionRequest, RefusalsSayWhatIsWrongWithTheValue) {
  struct Case { const char* body; Endpoint ep; const char* says; };
  const std::string nul_body = std::string(R"({"prompt":"hi"})") + '\0' + "{{{";
  const Case cases[] = {
      {R"({"prompt":"x","max_tokens":1e12})", Endpoint::completions, "'max_tokens' must be between 0 and 2147483647, got 1000000000000.0"},
      {R"({"prompt":"x","seed":18446744073709551616})", Endpoint::completions, "'seed' must fit in 64 bits"},
      {R"({"prompt":[]})", Endpoint::completions, "'prompt' is an empty array"},
      {nul_body.c_str(), Endpoint::completions, "a NUL byte at offset 15"},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    const std::string body = i + 1 == std::size(cases) ? nul_body : std::string(cases[i].body);
    const ApiError e = error_of(body, cases[i].ep);
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_NE(std::string(e.what()).find(cases[i].says), std::string::npos) << body << " -> " << e.what();
  }
}

// A parser error quotes the bytes it read: bytes that are not UTF-8 must not make the
// error object unserialisable (found by fuzz_completion_request).
TEST(CompletionRequest, ErrorsQuotingBadBytesStillSerialise) {
  const ApiError e = error_of(std::string("{\"prompt\":[1,2,3],\"stop\":\"x\",\xde") + "n\":1}", Endpoint::completions);
  EXPECT_EQ(e.status(), 400);
  EXPECT_NO_THROW(e.to_json().dump());
  EXPECT_NE(std::string(e.what()).find("\xEF\xBF\xBD"), std::string::npos) << "U+FFFD in place of 0xde";
}

TEST(StopStrings, HoldsBackWhatMayBecomeAStopString) {
  StopStrings s({"END", "\n\n"});
  EXPECT_EQ(s.push("Hello E"), "Hello ");  // "E" may start "END"
  EXPECT_EQ(s.push("N"), "");
  EXPECT_EQ(s.push("X"), "ENX");           // it did not
  EXPECT_EQ(s.push(" ok\n"), " ok");
  EXPECT_EQ(s.push("\nmore"), "");         // "\n\n" completed: nothing after it
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.push("later"), "");
  EXPECT_EQ(s.flush(), "");

  StopStrings t({"abc"});
  EXPECT_EQ(t.push("xxab"), "xx");
  EXPECT_EQ(t.flush(), "ab");  // generation ended for another reason: the held text is sent
  StopStrings u({"lo w"});
  EXPECT_EQ(u.push("hello world"), "hel");  // the stop string inside one piece
  EXPECT_TRUE(u.stopped());
  StopStrings none({});
  EXPECT_EQ(none.push("anything"), "anything");
}

TEST(TokenLogprobs, MatchesLogSoftmaxByHand) {
  const float logits[4] = {1.0f, 3.0f, 2.0f, 3.0f};
  const double z = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0));
  const TokenLogprob t = token_logprobs(logits, 4, 2, 3, [](int32_t id) { return "t" + std::to_string(id); });
  EXPECT_EQ(t.token, "t2");
  EXPECT_NEAR(t.logprob, 2.0 - z, 1e-12);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].first, "t1");  // ties go to the lower id
  EXPECT_EQ(t.top[1].first, "t3");
  EXPECT_EQ(t.top[2].first, "t2");
  EXPECT_NEAR(t.top[0].second, 3.0 - z, 1e-12);
  double p = 0;
  for (int i = 0; i < 4; ++i) p += std::exp(token_logprobs(logits, 4, i, 0, [](int32_t) { return ""; }).logprob);
  EXPECT_NEAR(p, 1.0, 1e-12);
}

TEST(ServerMetrics, RendersPrometheusText) {
  ServerMetrics m;
  m.generated_tokens += 5;
  m.time_to_first_token.observe(0.003);
  m.time_to_first_token.observe(0.2);
  m.time_to_first_token.observe(1000);
  m.set_expert_cache({10, 4, 4096, 3, 2, 1, 0.5, 7}, true);
  const std::string t = m.render();
  EXPECT_NE(t.find("# TYPE moeflow_generation_tokens_total counter\nmoeflow_generation_tokens_total 5\n"),
            std::string::npos);
  EXPECT_NE(t.find("moeflow_time_to_first_token_seconds_bucket{le=\"0.0025\"} 0\n"), std::string::npos);
  EXPECT_NE(t.find("moeflow_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("moeflow_time_to_first_token_seconds_bucket{le=\"0.2\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("moeflow_time_to_first_token_seconds_bucket{le=\"300\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("moeflow_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(t.find("moeflow_time_to_first_token_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(t.find("moeflow_expert_cache_misses_total 4\n"), std::string::npos);
  EXPECT_NE(t.find("moeflow_expert_stall_seconds_total 0.5\n"), std::string::npos);
  EXPECT_NE(t.find("moeflow_expert_rerouted_slots_total 7\n"), std::string::npos);
  // Every sample line is "name[{labels}] value".
  std::istringstream in(t);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    EXPECT_EQ(line.rfind("moeflow_", 0), 0u) << line;
    EXPECT_NE(line.find(' '), std::string::npos) << line;
  }
}

TEST(CompletionRequest, TokenizeAndDetokenizeBodies) {
  const TokenizeRequest t = parse_tokenize_request(R"({"content":"hi there","add_special":true})");
  EXPECT_EQ(t.content, "hi there");
  EXPECT_TRUE(t.add_special);
  EXPECT_FALSE(parse_tokenize_request(R"({"content":""})").add_special);
  EXPECT_EQ(parse_detokenize_request(R"({"tokens":[1,2.0,3]})"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(parse_detokenize_request(R"({"tokens":[]})").empty());
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({})", "content"}, {R"({"content":5})", "content"}, {R"({"content":"x","add_special":1})", "add_special"}}) {
    try {
      parse_tokenize_request(body);
      ADD_FAILURE() << "accepted: " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param(), param) << body;
    }
  }
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({})", "tokens"}, {R"({"tokens":"1 2"})", "tokens"}, {R"({"tokens":[1,-2]})", "tokens[1]"},
           {R"({"tokens":[1.5]})", "tokens[0]"}}) {
    try {
      parse_detokenize_request(body);
      ADD_FAILURE() << "accepted: " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param(), param) << body;
    }
  }
  EXPECT_THROW(parse_tokenize_request("[1]"), ApiError);
}

TEST(ApiKeys, BearerMatchesOnlyAKeyOfTheServer) {
  const std::vector<std::string> keys = {"sk-one", "sk-two-longer"};
  EXPECT_TRUE(authorized(keys, "Bearer sk-one"));
  EXPECT_TRUE(authorized(keys, "bearer  sk-two-longer "));  // scheme case-insensitive, spaces trimmed
  EXPECT_FALSE(authorized(keys, ""));
  EXPECT_FALSE(authorized(keys, "sk-one"));          // no scheme
  EXPECT_FALSE(authorized(keys, "Basic sk-one"));
  EXPECT_FALSE(authorized(keys, "Bearer sk-on"));    // a prefix
  EXPECT_FALSE(authorized(keys, "Bearer sk-one1"));  // longer
  EXPECT_FALSE(authorized(keys, "Bearer sk-onE"));
  EXPECT_FALSE(authorized(keys, "Bearer "));
  EXPECT_FALSE(authorized({}, "Bearer sk-one"));
}

TEST(ApiKeys, KeyFilesAreReadOrRefusedWithTheLine) {
  const std::string path = moeflow::testing::scratch_path("api-keys");
  auto write = [&](const std::string& text) { std::ofstream(path, std::ios::binary) << text; };
  write("# rotated monthly\n  sk-old \r\n\nsk-new\n");
  EXPECT_EQ(read_api_keys(path), (std::vector<std::string>{"sk-old", "sk-new"}));
  auto refused = [&](const std::string& text, const std::string& needle) {
    write(text);
    try {
      read_api_keys(path);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused("# only a comment\n\n", "holds no key");
  refused("sk-ok\nsk bad\n", "line 2: the API key has a space, control or non-ASCII byte at offset 2");
  refused("sk-\xc3\xa9\n", "line 1: the API key has a space, control or non-ASCII byte at offset 3");
  std::remove(path.c_str());
  EXPECT_THROW(read_api_keys(path), InputError);
  EXPECT_THROW(check_api_key("", "--api-key"), InputError);
  EXPECT_NO_THROW(check_api_key("sk-proj-AbC_123.~", "--api-key"));
}

// The serving loop over the q8_0 fixture: requests collected to the end.
struct Outcome {
  std::string text, reason;
  std::vector<TokenLogprob> lps;
  int64_t completion_tokens = 0, cached_tokens = 0;
  std::optional<ApiError> error;
};

Outcome wait_for(RequestStream& s) {
  Outcome o;
  for (;;)
    for (StreamEvent& e : s.take(std::chrono::milliseconds(5000))) {
      o.text += e.text;
      for (TokenLogprob& t : e.logprobs) o.lps.push_back(std::move(t));
      if (e.finished) {
        o.reason = e.finish_reason;
        o.completion_tokens = e.completion_tokens;
        o.cached_tokens = e.cached_tokens;
        o.error = e.error;
        return o;
      }
    }
}

GenerationJob job_of(std::vector<int32_t> prompt, int64_t max_tokens) {
  GenerationJob j;
  j.prompt = std::move(prompt);
  j.max_tokens = max_tokens;
  j.stop_at_eog = false;
  j.stream = std::make_shared<RequestStream>();
  return j;
}

std::unique_ptr<Engine> open_fixture(int n_parallel, int64_t ctx_size = 64, const char* fixture = "qwen3moe-q8_0.gguf") {
  EngineOptions o;
  o.model_path = fixture_path(fixture);
  o.threads = 2;
  o.ctx_size = ctx_size;
  o.n_parallel = n_parallel;
  return Engine::open(o);
}

std::vector<int32_t> prompt_of(int n, int seed) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((seed * 131 + i * 17) % 200 + 1));
  return p;
}

TEST(ServingLoop, ChunkedPrefillBesideDecodesChangesNoToken) {
  auto engine = open_fixture(4);
  ServerMetrics metrics;
  LoopOptions lo;
  lo.n_parallel = 4;
  lo.prefill_chunk = 5;  // prompts of 3-23 tokens take 1-5 chunks
  lo.step_tokens = 8;    // and no step holds two whole chunks beside decodes
  const int lens[] = {3, 23, 11, 17, 5, 9};
  std::vector<std::string> alone;
  {
    ServingLoop loop(*engine, lo, metrics);
    for (int i = 0; i < 6; ++i) {
      GenerationJob j = job_of(prompt_of(lens[i], i), 6 + i);
      auto s = j.stream;
      loop.submit(std::move(j));
      const Outcome o = wait_for(*s);
      EXPECT_EQ(o.completion_tokens, 6 + i);
      EXPECT_EQ(o.reason, "length");
      alone.push_back(o.text);
    }
  }
  ServingLoop loop(*engine, lo, metrics);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) {
    GenerationJob j = job_of(prompt_of(lens[i], i), 6 + i);
    streams.push_back(j.stream);
    loop.submit(std::move(j));
  }
  for (int i = 0; i < 6; ++i) EXPECT_EQ(wait_for(*streams[static_cast<size_t>(i)]).text, alone[static_cast<size_t>(i)]) << i;
  EXPECT_GT(metrics.steps.load(), 0u);
  while (!loop.idle()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(engine->kv_blocks_total() - engine->kv_blocks_free(), metrics.kv_blocks_parked.load())
      << "every block returned but those of the prompts kept for reuse";
}

// The prompt cache: a request whose prompt begins with an earlier one's continues from
// it and gets the tokens and log-probabilities it gets with the cache off. On f32
// weights (not split-invariant: a multi-token product rounds differently from one
// token's) only whole prefill chunks of the prompt are kept and continued, so that the
// prompt is split where it would be without the cache; on q8_0 weights on a CPU with
// the integer kernels (split-invariant) any prefix is. Both continue at the end of a
// KV block (32 positions), a chunk's too.
TEST(ServingLoop, APromptContinuedFromTheCacheGetsTheSameTokens) {
  for (const char* fixture : {"mixtral-f32.gguf", "qwen3moe-q8_0.gguf"}) {
    auto engine = open_fixture(2, 256, fixture);
    const bool exact = engine->split_invariant();
    LoopOptions lo;
    lo.n_parallel = 2;
    lo.prefill_chunk = 8;
    std::vector<int32_t> turn = prompt_of(40, 1);
    std::vector<std::vector<int32_t>> turns;
    for (int t = 0; t < 4; ++t) {  // each turn resends the conversation and adds to it
      turns.push_back(turn);
      for (int32_t x : prompt_of(30 + t, 20 + t)) turn.push_back(x);
    }
    auto run_all = [&](bool cache, ServerMetrics& metrics) {
      lo.cache_prompt = cache;
      ServingLoop loop(*engine, lo, metrics);
      std::vector<Outcome> out;
      for (const std::vector<int32_t>& p : turns) {
        GenerationJob j = job_of(p, 6);
        j.top_logprobs = 2;
        auto s = j.stream;
        loop.submit(std::move(j));
        out.push_back(wait_for(*s));
      }
      return out;
    };
    ServerMetrics with_m, without_m;
    const std::vector<Outcome> with = run_all(true, with_m), without = run_all(false, without_m);
    // Whole blocks of the turn before's 40, 70, 101 prompt tokens (and, exact, its reply:
    // no more blocks here).
    const int64_t expect_cached[] = {0, 32, 64, 96};
    std::printf("%s: split-invariant %d\n", fixture, exact);
    for (size_t t = 0; t < turns.size(); ++t) {
      const std::string where = std::string(fixture) + ", turn " + std::to_string(t);
      EXPECT_EQ(with[t].cached_tokens, expect_cached[t]) << where;
      EXPECT_EQ(without[t].cached_tokens, 0);
      EXPECT_EQ(with[t].text, without[t].text) << where;
      ASSERT_EQ(with[t].lps.size(), without[t].lps.size());
      for (size_t i = 0; i < with[t].lps.size(); ++i)
        EXPECT_EQ(with[t].lps[i].logprob, without[t].lps[i].logprob) << where << ", token " << i;
    }
    EXPECT_EQ(with_m.prompt_tokens.load() + with_m.prompt_tokens_cached.load(), without_m.prompt_tokens.load());
    EXPECT_EQ(engine->n_parked(), 0) << "a stopped loop gives its parked prompts back";
    EXPECT_EQ(engine->kv_blocks_free(), engine->kv_blocks_total());
  }
}

// Requests that arrive together and begin alike (a system prompt, an agent's
// instructions) read the shared part once: the first reads it and offers it as it
// goes, the others wait for the offer and continue from it, and each gets the tokens
// it gets without the cache. One asks for no cache and reads all its prompt; the fifth
// waits for a free slot and continues from what the first left.
TEST(ServingLoop, RequestsArrivingTogetherReadTheirSharedPromptOnce) {
  for (const char* fixture : {"mixtral-f32.gguf", "qwen3moe-q8_0.gguf"}) {
    auto engine = open_fixture(4, 128, fixture);
    LoopOptions lo;
    lo.n_parallel = 4;
    lo.prefill_chunk = 8;
    std::vector<std::vector<int32_t>> prompts;
    for (int k = 0; k < 5; ++k) {
      std::vector<int32_t> p = prompt_of(70, 5);
      for (int32_t x : prompt_of(10, 10 + k)) p.push_back(x);
      prompts.push_back(p);
    }
    auto run_all = [&](bool cache, ServerMetrics& metrics) {
      lo.cache_prompt = cache;
      ServingLoop loop(*engine, lo, metrics);
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (size_t k = 0; k < prompts.size(); ++k) {
        GenerationJob j = job_of(prompts[k], 6);
        j.top_logprobs = 2;
        j.cache_prompt = k != 2;
        streams.push_back(j.stream);
        loop.submit(std::move(j));
      }
      std::vector<Outcome> out;
      for (auto& st : streams) out.push_back(wait_for(*st));
      return out;
    };
    ServerMetrics with_m, without_m;
    const std::vector<Outcome> with = run_all(true, with_m), without = run_all(false, without_m);
    const int64_t expect_cached[] = {0, 64, 0, 64, 64};  // whole blocks (and chunks) of the shared 70
    for (size_t k = 0; k < prompts.size(); ++k) {
      const std::string where = std::string(fixture) + ", request " + std::to_string(k);
      ASSERT_FALSE(with[k].error) << where << ": " << with[k].error->what();
      EXPECT_EQ(with[k].cached_tokens, expect_cached[k]) << where;
      EXPECT_EQ(with[k].text, without[k].text) << where;
      ASSERT_EQ(with[k].lps.size(), without[k].lps.size()) << where;
      for (size_t i = 0; i < with[k].lps.size(); ++i)
        EXPECT_EQ(with[k].lps[i].logprob, without[k].lps[i].logprob) << where << ", token " << i;
    }
    EXPECT_EQ(with_m.prompt_tokens_cached.load(), 3 * 64);
    EXPECT_EQ(with_m.prompt_tokens.load() + with_m.prompt_tokens_cached.load(), without_m.prompt_tokens.load());
    EXPECT_EQ(engine->n_parked(), 0);
    EXPECT_EQ(engine->kv_blocks_free(), engine->kv_blocks_total());
  }
}

// Random bursts of requests that begin with random parts of three prompts, some asking
// for no cache, some scoring their prompt, some cancelled mid-burst (a leader among
// them, now and then): every request that is not cancelled gets the text and
// log-probabilities it gets alone without the cache, and the loop gives every block
// back. The interleavings differ from run to run; the tokens may not.
TEST(ServingLoop, RandomBurstsOfSharedPromptsKeepEveryRequestsTokens) {
  for (const char* fixture : {"mixtral-f32.gguf", "qwen3moe-q8_0.gguf", "gpt-oss-mxfp4.gguf"}) {
    auto engine = open_fixture(4, 128, fixture);  // 16 blocks: parked prompts must give way
    std::mt19937 rng(2026);
    const std::vector<std::vector<int32_t>> bases = {prompt_of(90, 1), prompt_of(90, 2), prompt_of(90, 3)};
    struct Spec {
      std::vector<int32_t> prompt;
      int64_t max_tokens;
      bool cache, echo, cancel;
    };
    std::vector<Spec> specs;
    for (int i = 0; i < 32; ++i) {
      Spec sp;
      const std::vector<int32_t>& base = bases[rng() % bases.size()];
      sp.prompt.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(1 + rng() % 80));
      for (int k = 0, n = 1 + static_cast<int>(rng() % 20); k < n; ++k) sp.prompt.push_back(static_cast<int32_t>(1 + rng() % 200));
      sp.max_tokens = 1 + static_cast<int64_t>(rng() % 6);
      sp.cache = rng() % 5 != 0;
      sp.echo = rng() % 8 == 0;
      sp.cancel = rng() % 6 == 0;
      specs.push_back(std::move(sp));
    }
    auto job_for = [](const Spec& sp) {
      GenerationJob j = job_of(sp.prompt, sp.max_tokens);
      j.top_logprobs = 1;
      j.cache_prompt = sp.cache;
      j.echo = sp.echo;
      return j;
    };
    LoopOptions lo;
    lo.n_parallel = 4;
    lo.prefill_chunk = 8;
    std::vector<Outcome> alone(specs.size());
    {
      lo.cache_prompt = false;
      ServerMetrics m;
      ServingLoop loop(*engine, lo, m);
      for (size_t i = 0; i < specs.size(); ++i) {
        if (specs[i].cancel) continue;
        GenerationJob j = job_for(specs[i]);
        auto st = j.stream;
        loop.submit(std::move(j));
        alone[i] = wait_for(*st);
      }
    }
    lo.cache_prompt = true;
    ServerMetrics m;
    {
      ServingLoop loop(*engine, lo, m);
      std::vector<std::shared_ptr<RequestStream>> streams(specs.size());
      for (size_t i = 0; i < specs.size();) {
        const size_t end = std::min(specs.size(), i + 1 + rng() % 8);
        for (size_t k = i; k < end; ++k) {
          GenerationJob j = job_for(specs[k]);
          streams[k] = j.stream;
          loop.submit(std::move(j));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
        for (size_t k = i; k < end; ++k)
          if (specs[k].cancel) streams[k]->cancel();
        i = end;
      }
      for (size_t i = 0; i < specs.size(); ++i) {
        if (specs[i].cancel) continue;
        const Outcome o = wait_for(*streams[i]);
        const std::string where = std::string(fixture) + ", request " + std::to_string(i);
        ASSERT_FALSE(o.error) << where << ": " << o.error->what();
        EXPECT_EQ(o.text, alone[i].text) << where;
        EXPECT_EQ(o.completion_tokens, alone[i].completion_tokens) << where;
        ASSERT_EQ(o.lps.size(), alone[i].lps.size()) << where;
        for (size_t t = 0; t < o.lps.size(); ++t) EXPECT_EQ(o.lps[t].logprob, alone[i].lps[t].logprob) << where << ", token " << t;
      }
      while (!loop.idle()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::printf("%s: prompt tokens: %llu computed, %llu continued from the cache\n", fixture,
                static_cast<unsigned long long>(m.prompt_tokens.load()),
                static_cast<unsigned long long>(m.prompt_tokens_cached.load()));
    EXPECT_GT(m.prompt_tokens_cached.load(), 0u);
    EXPECT_EQ(engine->n_parked(), 0);
    EXPECT_EQ(engine->n_sequences(), 0);
    EXPECT_EQ(engine->kv_blocks_free(), engine->kv_blocks_total());
  }
}

// Where the engine is split-invariant the cache keeps a request's reply too: a next
// turn that resends the reply (as a chat does) continues past it, mid-chunk, and gets
// the logits of the same prompt computed whole. The request is played by hand against
// the cache: its prompt in the loop's chunks, then greedy decode steps.
TEST(PromptCache, ASplitInvariantEngineContinuesPastTheReplyMidChunk) {
  auto engine = open_fixture(2, 256);
  if (!engine->split_invariant()) GTEST_SKIP() << "the q8_0 fixture is not split-invariant on this CPU";
  const int64_t chunk = 12;  // continuing at a block's end (64) lands inside a chunk
  PromptCache cache(*engine, chunk);
  ASSERT_TRUE(cache.exact());
  auto argmax = [&](const float* l) {
    return static_cast<int32_t>(std::max_element(l, l + engine->n_vocab()) - l);
  };
  // Feeds prompt[from, end) in the loop's chunks; the last position's logits.
  auto prefill = [&](SeqId s, const std::vector<int32_t>& prompt, int64_t from) {
    std::vector<float> last;
    for (int64_t p = from; p < static_cast<int64_t>(prompt.size());) {
      const int64_t end = std::min(static_cast<int64_t>(prompt.size()), (p / chunk + 1) * chunk);
      std::vector<BatchToken> b;
      for (int64_t q = p; q < end; ++q) b.push_back({s, prompt[static_cast<size_t>(q)], q, q == end - 1});
      engine->step(b);
      last.assign(engine->logits(b.size() - 1), engine->logits(b.size() - 1) + engine->n_vocab());
      p = end;
    }
    return last;
  };
  const std::vector<int32_t> p1 = prompt_of(60, 3);
  const PromptCache::Taken first = cache.take({p1, ""});
  EXPECT_EQ(first.cached, 0);
  std::vector<int32_t> tokens = p1;
  std::vector<float> l = prefill(first.seq, p1, 0);
  for (int i = 0; i < 6; ++i) {  // 6 sampled, the first 5 fed
    tokens.push_back(argmax(l.data()));
    if (i == 5) break;
    engine->step({{first.seq, tokens.back(), static_cast<int64_t>(tokens.size()) - 1, true}});
    l.assign(engine->logits(0), engine->logits(0) + engine->n_vocab());
  }
  cache.put(first.seq, tokens, 60);
  EXPECT_EQ(cache.size(), 1u);
  // The next turn: the prompt, the reply as fed, the sixth token, and more.
  std::vector<int32_t> p2 = tokens;
  for (int32_t x : prompt_of(9, 4)) p2.push_back(x);
  const PromptCache::Taken second = cache.take({p2, ""});
  EXPECT_EQ(second.cached, 64) << "of 60 prompt positions and 5 fed reply tokens, two whole blocks";
  const std::vector<float> continued = prefill(second.seq, p2, second.cached);
  engine->remove_sequence(second.seq);
  const SeqId fresh = engine->add_sequence({p2, ""});
  EXPECT_TRUE(prefill(fresh, p2, 0) == continued) << "continued at 64 (mid-chunk) against computed whole";
  engine->remove_sequence(fresh);
  // A parked prefix that a newer one extends is dropped; make_room gives back the rest.
  EXPECT_EQ(cache.size(), 1u) << "the prefix stays parked for others";
  EXPECT_TRUE(cache.make_room(engine->kv_blocks_total()));
  EXPECT_EQ(cache.size(), 0u);
  const SeqId a = engine->add_sequence({p1, ""}), b = engine->add_sequence({p2, ""});
  prefill(a, p1, 0);
  prefill(b, p2, 0);
  cache.put(a, p1, 60);
  EXPECT_EQ(cache.size(), 1u);
  cache.put(b, p2, static_cast<int64_t>(p2.size()));
  EXPECT_EQ(cache.size(), 1u) << "p1's positions are the start of p2's";
  EXPECT_GT(engine->kv_blocks_free(), 0);
  EXPECT_TRUE(cache.make_room(engine->kv_blocks_total()));
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(engine->kv_blocks_free(), engine->kv_blocks_total());
}

// A running request's offer shares its blocks with the request: make_room gives back
// prompts that free blocks first, and none when every parked block is a running
// sequence's too. An offer outlives its sequence and is continued like a parked prompt.
TEST(PromptCache, OffersOfRunningRequestsGoLastAndFreeNothingWhileTheyRun) {
  auto engine = open_fixture(2, 128);  // 8 blocks of 32
  PromptCache cache(*engine, 32);      // whole blocks either way
  auto prefill = [&](SeqId s, const std::vector<int32_t>& p) {
    std::vector<BatchToken> b;
    for (size_t q = 0; q < p.size(); ++q) b.push_back({s, p[q], static_cast<int64_t>(q), q + 1 == p.size()});
    engine->step(b);
  };
  const std::vector<int32_t> p1 = prompt_of(70, 1), p2 = prompt_of(40, 2);
  const SeqId a = cache.take({p1, ""}).seq;
  prefill(a, p1);
  EXPECT_EQ(cache.offer(a, p1, 70), 64);
  EXPECT_EQ(cache.offer(a, p1, 70), 64) << "offered again: already held";
  EXPECT_EQ(cache.size(), 1u);
  const SeqId b = cache.take({p2, ""}).seq;
  prefill(b, p2);
  cache.put(b, p2, 40);  // 32 positions of its own
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(engine->kv_blocks_free(), 8 - 3 - 1);
  EXPECT_TRUE(cache.make_room(5));
  EXPECT_EQ(cache.size(), 1u) << "b's prompt went, though a's offer was used less recently";
  EXPECT_FALSE(cache.make_room(6)) << "a's offer frees nothing while a runs";
  EXPECT_EQ(cache.size(), 1u);
  engine->remove_sequence(a);
  std::vector<int32_t> p3 = p1;
  p3.push_back(9);
  const PromptCache::Taken c = cache.take({p3, ""});
  EXPECT_EQ(c.cached, 64) << "continued from the offer of a request that has ended";
  engine->remove_sequence(c.seq);
  EXPECT_TRUE(cache.make_room(8));
  EXPECT_EQ(cache.size(), 0u);
}

// gpt-oss's sliding layers keeping only their window: a parked prompt continues from
// near its end (a chat's next turn) and from the points it was offered at while being
// read, but not from a block a window before the rows its sliding layers kept (a
// shared start under a different question), which takes a shorter prefix or a fresh
// sequence; with --swa-full it continues there too. A longer prompt that extends a
// parked one does not replace it where it cannot continue from the old one's end.
TEST(PromptCache, SlidingLayersKeepingTheirWindowContinueNearTheEndAndWhereOffered) {
  for (bool swa_full : {false, true}) {
    EngineOptions o;
    o.model_path = fixture_path("gpt-oss-mxfp4.gguf");
    o.threads = 2;
    o.ctx_size = 256;
    o.n_parallel = 2;
    o.swa_full = swa_full;
    auto engine = Engine::open(o);
    PromptCache cache(*engine, 32);
    const std::string what = swa_full ? "--swa-full" : "the window alone";
    auto prefill = [&](SeqId s, const std::vector<int32_t>& p, int64_t from) {
      std::vector<BatchToken> b;
      for (size_t q = static_cast<size_t>(from); q < p.size(); ++q)
        b.push_back({s, p[q], static_cast<int64_t>(q), q + 1 == p.size()});
      engine->step(b);
    };
    const std::vector<int32_t> p1 = prompt_of(40, 1);
    std::vector<int32_t> p2 = p1;
    for (int32_t x : prompt_of(60, 2)) p2.push_back(x);
    const PromptCache::Taken a = cache.take({p1, ""});
    prefill(a.seq, p1, 0);
    cache.put(a.seq, p1, 40);  // 32 kept
    const PromptCache::Taken b = cache.take({p2, ""});
    EXPECT_EQ(b.cached, 32) << what << ": p2 begins with p1's 40 tokens";
    prefill(b.seq, p2, b.cached);
    cache.put(b.seq, p2, 100);  // 96 kept; its sliding rows from 64 on, a window (8) back from 96
    EXPECT_EQ(cache.size(), swa_full ? 1u : 2u) << what << ": p1's prompt stays only where p2's cannot continue from 32";
    std::vector<int32_t> next_turn = p2;
    next_turn.push_back(7);
    const PromptCache::Taken c = cache.take({next_turn, ""});
    EXPECT_EQ(c.cached, 96) << what;
    engine->remove_sequence(c.seq);
    std::vector<int32_t> other_question(p2.begin(), p2.begin() + 70);
    other_question.push_back(9);
    const PromptCache::Taken d = cache.take({other_question, ""});
    EXPECT_EQ(d.cached, swa_full ? 64 : 32) << what << ": 70 tokens in common";
    // Offered as it is read, d's first 64 positions are parked for others, though p2's
    // prompt holds the same tokens (keeping the window, not continuable at 64).
    prefill(d.seq, other_question, d.cached);
    EXPECT_EQ(cache.offer(d.seq, other_question, 71), 64) << what;
    engine->remove_sequence(d.seq);
    std::vector<int32_t> third(other_question.begin(), other_question.begin() + 66);
    third.push_back(11);
    const PromptCache::Taken g = cache.take({third, ""});
    EXPECT_EQ(g.cached, 64) << what;
    engine->remove_sequence(g.seq);
    // A prompt offered as it is read (the serving loop does so after every chunk) stays
    // continuable from each point it was offered at.
    const std::vector<int32_t> p3 = prompt_of(100, 5);
    const PromptCache::Taken e = cache.take({p3, ""});
    for (int64_t from = 0; from < 96; from += 32) {
      prefill(e.seq, std::vector<int32_t>(p3.begin(), p3.begin() + from + 32), from);
      EXPECT_EQ(cache.offer(e.seq, p3, from + 32), from + 32) << what;
    }
    prefill(e.seq, p3, 96);
    cache.put(e.seq, p3, 100);
    std::vector<int32_t> shares_70(p3.begin(), p3.begin() + 70);
    shares_70.push_back(9);
    const PromptCache::Taken f = cache.take({shares_70, ""});
    EXPECT_EQ(f.cached, 64) << what << ": continued from where p3 was offered";
    engine->remove_sequence(f.seq);
    EXPECT_TRUE(cache.make_room(engine->kv_blocks_total()));
    EXPECT_EQ(engine->kv_blocks_free(), engine->kv_blocks_total());
  }
}

// Parked prompts give their blocks to running requests: a pool of one context (two
// blocks) holds a parked prompt of 40 positions, and the next, unrelated prompt still
// runs; the one after that continues from whichever prompt is parked then.
TEST(ServingLoop, ParkedPromptsGiveWayToRunningRequests) {
  auto engine = open_fixture(1, 64);
  ServerMetrics metrics;
  LoopOptions lo;
  lo.n_parallel = 1;
  lo.prefill_chunk = 8;
  ServingLoop loop(*engine, lo, metrics);
  auto run = [&](std::vector<int32_t> p, int64_t n) {
    GenerationJob j = job_of(std::move(p), n);
    auto s = j.stream;
    loop.submit(std::move(j));
    return wait_for(*s);
  };
  const Outcome a = run(prompt_of(40, 1), 20);
  EXPECT_EQ(a.completion_tokens, 20);
  while (!loop.idle()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(metrics.kv_blocks_parked.load(), 1) << "its first 32 positions";
  const Outcome b = run(prompt_of(40, 2), 20);  // needs both blocks: the parked prompt goes
  EXPECT_FALSE(b.error) << b.error->what();
  EXPECT_EQ(b.completion_tokens, 20);
  EXPECT_EQ(b.cached_tokens, 0);
  std::vector<int32_t> c = prompt_of(40, 2);
  c.push_back(7);
  EXPECT_EQ(run(c, 4).cached_tokens, 32);
}

// A token whose text lies wholly in a stop string gets no log-probability: the list
// covers the returned text's tokens and no more, streamed or not.
// A serving loop of one slot over the built-in model, whose tokens are text (the
// fixtures' random weights pick byte tokens that detokenize to U+FFFD, so their tokens
// do not spell their text).
struct BuiltinLoop {
  std::unique_ptr<Engine> engine;
  ServerMetrics metrics;
  std::unique_ptr<ServingLoop> loop;
  explicit BuiltinLoop(int64_t prefill_chunk = 128) {
    EngineOptions o;
    o.model_path = std::string(MOEFLOW_SOURCE_DIR_FOR_TESTS) + "/models/default.gguf";
    o.threads = 2;
    o.ctx_size = 256;
    o.n_parallel = 1;
    engine = Engine::open(o);
    LoopOptions lo;
    lo.n_parallel = 1;
    lo.prefill_chunk = prefill_chunk;
    loop = std::make_unique<ServingLoop>(*engine, lo, metrics);
  }
  Outcome run(GenerationJob j) {
    auto stream = j.stream;
    loop->submit(std::move(j));
    return wait_for(*stream);
  }
};

TEST(ServingLoop, LogprobsStopWithTheTextAtAStopString) {
  BuiltinLoop b;
  auto run = [&](std::vector<std::string> stop) {
    GenerationJob j = job_of(b.engine->tokenize("In the beginning", true), 24);
    j.top_logprobs = 1;
    j.stop = std::move(stop);
    return b.run(std::move(j));
  };
  const Outcome full = run({});
  ASSERT_EQ(static_cast<int64_t>(full.lps.size()), full.completion_tokens);
  // A stop string that is token j's whole text, where the tokens before it spell the text
  // up to there and it occurs nowhere earlier: the stopped run lists exactly j tokens.
  std::string spelled;
  size_t j = 0;
  for (; j < full.lps.size(); spelled += full.lps[j++].token) {
    const std::string& t = full.lps[j].token;
    if (j >= 3 && !t.empty() && full.text.compare(0, spelled.size(), spelled) == 0 &&
        full.text.find(t) == spelled.size())
      break;
  }
  ASSERT_LT(j, full.lps.size()) << "no token of the text serves as a stop string: " << full.text;
  const Outcome stopped = run({full.lps[j].token});
  EXPECT_EQ(stopped.text, spelled);
  ASSERT_EQ(stopped.lps.size(), j);
  for (size_t i = 0; i < j; ++i) {
    EXPECT_EQ(stopped.lps[i].token, full.lps[i].token) << i;
    EXPECT_EQ(stopped.lps[i].logprob, full.lps[i].logprob) << i;
  }
}

// echo: each prompt token's log-probability given the tokens before it, against the
// same tokens generated greedily one at a time through the engine itself.
TEST(ServingLoop, EchoScoresEachPromptTokenGivenThoseBefore) {
  BuiltinLoop bl(4);  // prefill chunks of 4: the prompt's scores gathered over several steps
  Engine* engine = bl.engine.get();
  const std::vector<int32_t> prompt = engine->tokenize("In the beginning", true);
  std::vector<int32_t> cont;
  std::vector<double> cont_lp;
  {
    const SeqId q = engine->add_sequence();
    std::vector<BatchToken> b;
    for (size_t p = 0; p < prompt.size(); ++p)
      b.push_back({q, prompt[p], static_cast<int64_t>(p), p + 1 == prompt.size()});
    engine->step(b);
    for (size_t i = 0, at = prompt.size() - 1; i < 6; ++i, at = 0) {
      const float* l = engine->logits(at);
      const int32_t id = argmax(l, engine->n_vocab());
      cont.push_back(id);
      cont_lp.push_back(token_logprobs(l, engine->n_vocab(), id, 0, [](int32_t) { return ""; }).logprob);
      engine->step({{q, id, static_cast<int64_t>(prompt.size() + cont.size() - 1), true}});
    }
    engine->remove_sequence(q);
  }
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), cont.begin(), cont.end());
  auto echo = [&](int64_t max_tokens) {
    GenerationJob j = job_of(all, max_tokens);
    j.echo = true;
    j.top_logprobs = 1;
    return bl.run(std::move(j));
  };
  const Outcome scored = echo(0);
  EXPECT_EQ(scored.reason, "length");
  EXPECT_EQ(scored.completion_tokens, 0);
  EXPECT_EQ(scored.text, engine->detokenize(all));
  ASSERT_EQ(scored.lps.size(), all.size());
  EXPECT_FALSE(scored.lps[0].scored);
  std::string spelled;
  for (size_t i = 0; i < all.size(); ++i) {
    spelled += scored.lps[i].token;
    if (i == 0) continue;
    EXPECT_TRUE(scored.lps[i].scored) << i;
    EXPECT_LE(scored.lps[i].logprob, 0) << i;
    ASSERT_EQ(scored.lps[i].top.size(), 1u);
  }
  EXPECT_EQ(spelled, scored.text);
  for (size_t k = 0; k < cont.size(); ++k) {
    const TokenLogprob& t = scored.lps[prompt.size() + k];
    // A prompt is computed in chunks, a generated token alone: the same floats to ~1e-5.
    EXPECT_NEAR(t.logprob, cont_lp[k], 1e-3) << k;
    EXPECT_EQ(t.top[0].first, t.token) << k;  // the greedy token was the most likely
  }
  // With a completion after it: the echo first, then the generated tokens.
  const Outcome more = echo(3);
  EXPECT_EQ(more.completion_tokens, 3);
  ASSERT_EQ(more.lps.size(), all.size() + 3) << [&] { std::string o; for (auto& l : more.lps) o += "[" + l.token + (l.scored ? "" : "*") + "]"; return o; }();
  EXPECT_EQ(more.text.rfind(scored.text, 0), 0u);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_NEAR(more.lps[i].logprob, scored.lps[i].logprob, 1e-9) << i;
}

// The built-in model going on from "In the beginning": greedy for seed 1, sampled at 0.9
// with the seed otherwise.
GenerationJob seeded_job(BuiltinLoop& b, uint64_t seed, int64_t max_tokens) {
  GenerationJob j = job_of(b.engine->tokenize("In the beginning", b.engine->add_bos_default()), max_tokens);
  j.sampler.temperature = seed == 1 ? 0.0f : 0.9f;
  j.sampler.seed = seed;
  return j;
}

// JSON mode: whatever the model prefers, it writes a prefix of one JSON object, and a
// request that ends with "stop" has written a whole one.
TEST(ServingLoop, JsonModeWritesOnlyAPrefixOfAnObject) {
  BuiltinLoop b;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    GenerationJob j = seeded_job(b, seed, 40);
    j.json_object = true;
    const Outcome o = b.run(std::move(j));
    JsonPrefix p;
    for (const char c : o.text) ASSERT_TRUE(p.feed(static_cast<unsigned char>(c))) << o.text;
    EXPECT_EQ(p.done(), o.reason == "stop") << o.text;
    if (o.reason == "stop") {
      EXPECT_TRUE(nlohmann::json::parse(o.text).is_object()) << o.text;
    }
  }
}

TEST(ServingLoop, JsonSchemaWritesOnlyAPrefixOfAnInstance) {
  BuiltinLoop b;
  const auto schema = std::make_shared<const JsonSchema>(JsonSchema::compile(nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"book":{"enum":["Genesis","Exodus"]},"chapter":{"type":"integer"},
          "words":{"type":"array","items":{"type":"string"},"maxItems":2},"ok":{"type":"boolean"}},
          "required":["book","chapter","ok"]})")));
  int closed = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    GenerationJob j = seeded_job(b, seed, 240);  // the tiny model idles in white space and strings
    j.json_schema = schema;
    const Outcome o = b.run(std::move(j));
    JsonSchemaPrefix p(*schema);
    for (const char c : o.text) ASSERT_TRUE(p.feed(static_cast<unsigned char>(c))) << o.text;
    EXPECT_EQ(p.done(), o.reason == "stop") << o.text;
    if (o.reason != "stop") continue;
    ++closed;
    const nlohmann::json v = nlohmann::json::parse(o.text);
    EXPECT_TRUE(v.at("book") == "Genesis" || v.at("book") == "Exodus") << o.text;
    EXPECT_TRUE(v.at("chapter").is_number_integer()) << o.text;
    EXPECT_TRUE(v.at("ok").is_boolean()) << o.text;
  }
  EXPECT_GT(closed, 0);
}

TEST(ServingLoop, CancelledRequestsFreeTheirSlotAndAFullQueueRefuses) {
  auto engine = open_fixture(1, 4096);
  ServerMetrics metrics;
  LoopOptions lo;
  lo.n_parallel = 1;
  lo.max_waiting = 1;
  ServingLoop loop(*engine, lo, metrics);
  GenerationJob a = job_of(prompt_of(4, 1), 4000);  // runs until cancelled
  auto sa = a.stream;
  loop.submit(std::move(a));
  ASSERT_FALSE(sa->take(std::chrono::milliseconds(5000)).empty());  // a holds the slot
  GenerationJob b = job_of(prompt_of(4, 2), 3);  // waits for the slot
  auto sb = b.stream;
  loop.submit(std::move(b));
  try {
    loop.submit(job_of(prompt_of(4, 3), 3));
    ADD_FAILURE() << "a third request fitted a queue of 1";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 503);
    EXPECT_EQ(e.code(), "queue_full");
  }
  sa->cancel();
  const Outcome ob = wait_for(*sb);
  EXPECT_EQ(ob.completion_tokens, 3);
  EXPECT_EQ(metrics.finished_cancelled.load(), 1u);
  loop.drain();
  try {
    loop.submit(job_of(prompt_of(4, 4), 3));
    ADD_FAILURE() << "a draining loop took a request";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), "shutting_down");
  }
}

TEST(OpenAiServer, AnswersLoadingUntilTheModelIsReady) {
  ServerMetrics metrics;
  ServerOptions so;
  so.port = 0;
  OpenAiServer server(so, metrics);
  const int port = server.bind();
  std::thread http([&] { server.listen(); });
  httplib::Client c("127.0.0.1", port);
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  EXPECT_NE(health->body.find("loading"), std::string::npos);
  auto chat = c.Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})", "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 503);
  EXPECT_EQ(chat->get_header_value("Retry-After"), "1");
  EXPECT_EQ(nlohmann::json::parse(chat->body)["error"]["code"], "loading");
  auto metrics_page = c.Get("/metrics");
  ASSERT_TRUE(metrics_page);
  EXPECT_EQ(metrics_page->status, 200);
  auto unknown = c.Delete("/v1/models");
  ASSERT_TRUE(unknown);
  EXPECT_GE(unknown->status, 400);
  EXPECT_TRUE(nlohmann::json::parse(unknown->body).contains("error"));
  server.set_draining();
  EXPECT_EQ(c.Get("/health")->status, 503);
  server.stop();
  http.join();
}

}  // namespace
}  // namespace moeflow::serve
