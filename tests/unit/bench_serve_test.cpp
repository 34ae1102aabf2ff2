// moeflow bench-serve's parts (cli/bench_serve.h): the SSE parser, the statistics by
// hand, and a whole run against a fake OpenAI server started here that streams known
// chunks with known pauses.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "base/error.h"
#include "cli/bench_serve.h"
#include "test_paths.h"

namespace moeflow::cli {
namespace {

TEST(BenchServe, SseParserTakesEventsInAnyPieces) {
  const std::string stream =
      ": keep-alive\n\ndata: {\"a\":1}\n\ndata: two\r\ndata: lines\r\n\r\nevent: x\ndata: [DONE]\n\n";
  for (size_t piece : {1u, 2u, 7u, 1000u}) {
    SseParser p;
    std::vector<std::string> got;
    for (size_t i = 0; i < stream.size(); i += piece) {
      const auto ev = p.feed(stream.data() + i, std::min(piece, stream.size() - i));
      got.insert(got.end(), ev.begin(), ev.end());
    }
    EXPECT_EQ(got, (std::vector<std::string>{"{\"a\":1}", "two\nlines", "[DONE]"})) << "pieces of " << piece;
  }
}

TEST(BenchServe, PercentilesAndSummaryByHand) {
  const Percentiles p = percentiles({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(p.mean, 2.5);
  EXPECT_DOUBLE_EQ(p.p50, 2.5);
  EXPECT_DOUBLE_EQ(p.p90, 3.7);
  EXPECT_NEAR(p.p99, 3.97, 1e-12);
  // Two requests: 0.1 s to the first of 5 tokens, 0.5 s in all: TPOT (0.5 - 0.1) / 4
  // = 100 ms; 0.2 s to the first of 3, 0.4 s in all: 100 ms. One failure.
  RequestTiming a{true, "", 0, 0.1, 0.5, 10, 5, {0.1, 0.1, 0.1, 0.1}, 0.45};
  RequestTiming b{true, "", 0, 0.2, 0.4, 20, 3, {0.1, 0.1}, 0.45};
  RequestTiming c;
  c.error = "HTTP 503";
  const BenchServeResult r = summarize({a, b, c}, 2.0);
  EXPECT_EQ(r.completed, 2);
  EXPECT_EQ(r.failed, 1);
  EXPECT_EQ(r.errors, (std::vector<std::string>{"HTTP 503"}));
  EXPECT_DOUBLE_EQ(r.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(r.output_throughput, 4.0);
  EXPECT_DOUBLE_EQ(r.total_token_throughput, 19.0);
  EXPECT_NEAR(r.ttft_ms.mean, 150, 1e-9);
  EXPECT_NEAR(r.tpot_ms.mean, 100, 1e-9);
  EXPECT_NEAR(r.itl_ms.p50, 100, 1e-9);
  EXPECT_NEAR(r.e2e_ms.mean, 450, 1e-9);
  EXPECT_DOUBLE_EQ(r.slo_attainment, 0.5) << "0.5 s misses 0.45 s, 0.4 s meets it";
}

TEST(BenchServe, PromptsFromAFile) {
  const std::string path = testing::scratch_path("prompts") + ".jsonl";
  {
    std::ofstream f(path);
    f << "plain line\n\n{\"prompt\": \"from json\"}\n";
  }
  EXPECT_EQ(load_prompts(path), (std::vector<std::string>{"plain line", "from json"}));
  {
    std::ofstream f(path);
    f << "ok\n{\"text\": 1}\n";
  }
  try {
    load_prompts(path);
    ADD_FAILURE() << "accepted a JSON line without a prompt";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(":2:"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_prompts(path + ".missing"), InputError);
  const auto p = random_prompts(3, 5, 7);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(std::count(p[0].begin(), p[0].end(), ' '), 4);
  EXPECT_EQ(p, random_prompts(3, 5, 7)) << "seeded";
  const auto q = with_shared_prefix(p, 4, 7);
  ASSERT_EQ(q.size(), 3u);
  const std::string prefix = q[0].substr(0, q[0].size() - p[0].size());
  EXPECT_EQ(std::count(prefix.begin(), prefix.end(), ' '), 4) << "four words and the space after them";
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(q[i], prefix + p[i]);
  EXPECT_EQ(with_shared_prefix(p, 0, 7), p);
}

// A fake server: 4 content chunks 20 ms apart after a 50 ms wait, then usage and
// [DONE]; every fourth request is refused with 503.
TEST(BenchServe, MeasuresAFakeServerItKnowsTheTimingsOf) {
  httplib::Server fake;
  std::atomic<int> calls{0};
  fake.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})", "application/json");
  });
  fake.Post("/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res) {
    if (++calls % 4 == 0) {
      res.status = 503;
      res.set_content(R"({"error":{"message":"full","type":"server_error","param":null,"code":"queue_full"}})",
                      "application/json");
      return;
    }
    const bool model_ok = req.body.find("\"model\":\"fake-model\"") != std::string::npos &&
                          req.body.find("\"stream\":true") != std::string::npos;
    res.set_chunked_content_provider("text/event-stream", [model_ok](size_t, httplib::DataSink& sink) {
      auto send = [&](const std::string& s) { sink.write(s.data(), s.size()); };
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      for (int i = 0; i < 4; ++i) {
        if (i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        send(std::string("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"") + (model_ok ? "tok" : "") +
             "\"},\"finish_reason\":null}]}\n\n");
      }
      send("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":4,\"total_tokens\":11,"
           "\"prompt_tokens_details\":{\"cached_tokens\":5}}}\n\n");
      send("data: [DONE]\n\n");
      sink.done();
      return true;
    });
  });
  const int port = fake.bind_to_any_port("127.0.0.1");
  std::thread t([&] { fake.listen_after_bind(); });
  BenchServeOptions o;
  o.port = port;
  o.prompts = {"hello"};
  o.num_prompts = 8;
  o.concurrency = 2;
  o.max_tokens = 4;
  o.slo_ms = 5000;  // ~110 ms per request: met even on a loaded machine
  const BenchServeResult r = run_bench_serve(o);
  fake.stop();
  t.join();
  EXPECT_EQ(r.completed, 6);
  EXPECT_EQ(r.failed, 2);
  ASSERT_FALSE(r.errors.empty());
  EXPECT_EQ(r.errors[0], "HTTP 503: full");  // the server's message, not only the status
  EXPECT_EQ(r.output_tokens, 24);
  EXPECT_EQ(r.prompt_tokens, 42);
  EXPECT_EQ(r.cached_tokens, 30);
  std::printf("  fake server: TTFT p50 %.1f ms (50 planned), ITL p50 %.1f ms (20), TPOT mean %.1f ms (20)\n",
              r.ttft_ms.p50, r.itl_ms.p50, r.tpot_ms.mean);
  EXPECT_GE(r.ttft_ms.p50, 45);
  EXPECT_LT(r.ttft_ms.p50, 500);
  EXPECT_GE(r.itl_ms.p50, 15);
  EXPECT_LT(r.itl_ms.p50, 300);
  EXPECT_GE(r.tpot_ms.mean, 15);
  EXPECT_DOUBLE_EQ(r.slo_attainment, 1.0) << "failed requests do not count";
}

TEST(BenchServe, AnUnreachableServerIsAnInputError) {
  BenchServeOptions o;
  o.port = 1;  // nothing listens there
  o.prompts = {"x"};
  EXPECT_THROW(run_bench_serve(o), InputError);
}

}  // namespace
}  // namespace moeflow::cli
