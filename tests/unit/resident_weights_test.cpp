// Model::make_resident: the copied weights give bit-identical logits to the file
// mapping, for every dtype, with and without the experts.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/transformer.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model_weights.h"
#include "test_paths.h"

namespace moeflow {
namespace {

std::vector<float> logits_of(const Model& m, ThreadPool& pool) {
  Transformer tf(m, &pool, 32);
  const std::vector<int32_t> prompt = {1, 5, 9, 3, 7, 2, 8, 4};
  std::vector<float> all, step;
  tf.eval(prompt.data(), static_cast<int64_t>(prompt.size()), true, all);  // prefill (matmul)
  int32_t tok = 6;
  for (int i = 0; i < 3; ++i) {  // decode (batched mat-vecs)
    tf.eval(&tok, 1, false, step);
    all.insert(all.end(), step.begin(), step.end());
  }
  return all;
}

TEST(ResidentWeights, CopiedWeightsGiveTheLogitsOfTheMapping) {
  ThreadPool pool(2);
  for (const char* name : {"mixtral-f32.gguf", "mixtral-bf16.gguf", "qwen3moe-q8_0.gguf", "olmoe-q4_0.gguf"}) {
    const std::string path = testing::fixture_path(name);
    auto mapped = Model::load(path);
    const std::vector<float> want = logits_of(*mapped, pool);
    for (bool experts : {true, false}) {
      auto resident = Model::load(path);
      resident->make_resident(experts);
      const ModelWeights& w = resident->weights();
      // Everything the forward pass reads moved: the dense matrices always, the experts
      // when asked (norm vectors are f32 copies from the start).
      const gguf::GgufFile& f = resident->file();
      EXPECT_NE(w.layers[0].wq.data, f.tensor("blk.0.attn_q.weight").data) << name;
      EXPECT_EQ(w.layers[0].gate_exps.first.data != f.tensor("blk.0.ffn_gate_exps.weight").data, experts) << name;
      EXPECT_GE(resident->resident_bytes(), experts ? w.expert_bytes : 0) << name;
      EXPECT_EQ(logits_of(*resident, pool), want) << name << (experts ? " (all weights)" : " (dense only)");
    }
  }
}

}  // namespace
}  // namespace moeflow
