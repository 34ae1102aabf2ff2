// A client of the public API (include/moeflow/): several prompts generated together,
// one engine step per token for all of them. Build: the `moeflow_example` target.
//
//   moeflow_example model.gguf "first prompt" "second prompt" ...
//
// Every sequence joins with its prompt as one chunk; after that each step carries one
// token per running sequence; a sequence leaves when it ends a sentence or has 32 tokens.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "moeflow/engine.h"
#include "moeflow/sampler.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s model.gguf PROMPT [PROMPT...]\n", argv[0]);
    return 2;
  }
  try {
    moeflow::EngineOptions opt;
    opt.model_path = argv[1];
    opt.n_parallel = argc - 2;
    opt.ctx_size = 256;
    auto engine = moeflow::Engine::open(opt);

    struct Running {
      moeflow::SeqId id;
      std::vector<int32_t> out;
      int32_t next = -1;
      bool done = false;
    };
    std::vector<Running> seqs;
    std::vector<moeflow::BatchToken> batch;
    for (int i = 2; i < argc; ++i) {
      const std::vector<int32_t> prompt = engine->tokenize(argv[i], engine->add_bos_default());
      const moeflow::SeqId id = engine->add_sequence({prompt, ""});
      for (size_t t = 0; t < prompt.size(); ++t)
        batch.push_back({id, prompt[t], static_cast<int64_t>(t), t + 1 == prompt.size()});
      seqs.push_back({id, {}});
    }
    for (int step = 0; !batch.empty(); ++step) {
      engine->step(batch);  // the first step: every prompt; later: one token each
      std::vector<moeflow::BatchToken> next;
      for (size_t k = 0; k < batch.size(); ++k) {
        if (!batch[k].logits) continue;
        Running& s = *std::find_if(seqs.begin(), seqs.end(), [&](const Running& r) { return r.id == batch[k].seq; });
        const int32_t tok = moeflow::argmax(engine->logits(k), engine->n_vocab());
        s.out.push_back(tok);
        const std::string piece = engine->detokenize({tok});
        if (engine->is_end_of_generation(tok) || piece.find('.') != std::string::npos || s.out.size() >= 32) {
          s.done = true;
          engine->remove_sequence(s.id);  // its KV blocks go back to the pool now
          continue;
        }
        next.push_back({s.id, tok, engine->sequence_length(s.id), true});
      }
      batch = std::move(next);
    }
    for (size_t i = 0; i < seqs.size(); ++i)
      std::printf("[%zu] %s%s\n", i, argv[i + 2], engine->detokenize(seqs[i].out).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
