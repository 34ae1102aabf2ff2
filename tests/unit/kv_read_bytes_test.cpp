// The KV cache bytes the benchmarks count beside the weights, against hand counts.
#include "cli/kv_read_bytes.h"

#include <gtest/gtest.h>

namespace moeflow::cli {
namespace {

TEST(KvReadBytes, CountsEveryLayersPositionsKeysAndValues) {
  ModelConfig c;
  c.n_layer = 4;
  c.n_head_kv = 2;
  c.head_dim = 8;
  // A position: 2 heads x (8 keys + 8 values) x 2 bytes (f16) or 4 (f32).
  EXPECT_EQ(kv_bytes_per_position(c, "f16"), 64u);
  EXPECT_EQ(kv_bytes_per_position(c, "f32"), 128u);
  // Position 9 attends to 10 positions in each of the 4 layers.
  EXPECT_EQ(kv_bytes_read(c, "f16", 9), 10u * 4u * 64u);
  EXPECT_EQ(kv_bytes_read(c, "f16", 0), 4u * 64u);
  // gpt-oss: the even layers see a window of 4 positions.
  c.sliding_window = 4;
  EXPECT_EQ(kv_bytes_read(c, "f16", 9), (4u + 10u + 4u + 10u) * 64u);
  EXPECT_EQ(kv_bytes_read(c, "f16", 2), 4u * 3u * 64u) << "a context shorter than the window";
}

TEST(KvReadBytes, DeepSeek2CachesOneLatentRowAndItsRopeKey) {
  ModelConfig c;
  c.arch = Arch::DeepSeek2;
  c.n_layer = 3;
  c.n_head_kv = 16;  // not what its cache holds
  c.head_dim = 192;
  c.mla.kv_lora_rank = 16;
  c.rot_dim = 4;
  // Keys: the latent and the rope key (20), values: the latent (16), f32.
  EXPECT_EQ(kv_bytes_per_position(c, "f32"), (20u + 16u) * 4u);
  EXPECT_EQ(kv_bytes_read(c, "f32", 4), 5u * 3u * 36u * 4u);
}

}  // namespace
}  // namespace moeflow::cli
