// Choosing a backend by name: what a run asks for that this build or machine cannot
// give is refused with a message naming it (a GPU where none is, --mmap on a GPU,
// host-compute without one), before any model work.
#include "backend/backend_factory.h"

#include <gtest/gtest.h>

#include <string>

#include "input_error_of.h"
#include "moeflow/engine.h"
#include "engine_scripts.h"
#include "test_paths.h"

namespace moeflow {
namespace {

using moeflow::testing::input_error_of;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(BackendFactory, NamesWhatItCannotGive) {
  BackendOptions o;
  o.name = "tpu";
  EXPECT_TRUE(contains(input_error_of([&] { make_backend(o); }), "expected cpu or cuda[:N]"));
  o.name = "cuda:x";
  EXPECT_TRUE(contains(input_error_of([&] { make_backend(o); }), "expected cuda:N"));
  o.name = "cpu";
  EXPECT_EQ(make_backend(o)->name(), "cpu");
  o.name = "cuda";
  const std::string err = input_error_of([&] { make_backend(o); });
  if (err.empty()) GTEST_SKIP() << "this machine has a GPU: the CUDA backend opened";
  // Either this build has no CUDA backend, or the machine no GPU; each is said.
  EXPECT_TRUE(cuda_backend_built() ? contains(err, "no CUDA device") : contains(err, "no CUDA backend")) << err;
}

TEST(BackendFactory, RefusesWhatNeedsAnotherBackend) {
  EngineOptions o = moeflow::testing::options_for("mixtral-f32.gguf");
  o.backend = "cuda";
  o.mmap = true;
  EXPECT_TRUE(contains(input_error_of([&] { Engine::open(o); }), "--mmap")) << "the file mapping is host memory";
  EngineOptions h = moeflow::testing::options_for("mixtral-f32.gguf", "lru", "25%");
  h.on_miss = "host-compute";
  EXPECT_TRUE(contains(input_error_of([&] { Engine::open(h); }), "needs a GPU backend"));
  h.on_miss = "elsewhere";
  EXPECT_TRUE(contains(input_error_of([&] { Engine::open(h); }), "host-compute"));
}

}  // namespace
}  // namespace moeflow
