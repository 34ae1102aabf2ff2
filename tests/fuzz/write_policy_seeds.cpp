// Writes the seed corpus of fuzz_policy_state: each policy's saved state for the
// harness's model (4 layers x 8 experts, top-2), after three requests of routing, prefixed
// with the byte that selects the policy. Run by scripts/fuzz.sh when the seeds are
// missing: write_policy_seeds DIR.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "experts/expert_key.h"
#include "experts/expert_policy.h"
#include "policy/duoserve.h"
#include "policy/policy_factory.h"

int main(int argc, char** argv) {
  using namespace moeflow;
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_policy_seeds DIR\n");
    return 2;
  }
  const char* names[] = {"duoserve", "moe-infinity", "emoe", "fmoe"};
  const ExpertGeometry g = ExpertGeometry::uniform(4, 8, 2, 1 << 20);
  for (int i = 0; i < 4; ++i) {
    PolicyOptions o;
    o.budget_bytes = 16ull << 20;
    auto p = make_policy(names[i], g, o);
    // Three requests of routing (prefill of 3 tokens, 4 decode steps), so the states
    // hold learned counts, maps and tasks rather than empty tables.
    uint32_t rng = 1;
    auto next = [&rng](uint32_t n) {
      rng = rng * 1103515245u + 12345u;
      return static_cast<int32_t>((rng >> 16) % n);
    };
    for (int64_t rq = 0; rq < 3; ++rq) {
      RequestInfo info;
      info.id = rq;
      info.prompt = {1, 2, 3};
      info.prompt_embedding = {0.5f, -0.25f, 1.0f, 0.0f};
      info.task = rq % 2 ? "code" : "math";
      p->begin_request(info);
      for (int64_t it = 0; it < 5; ++it) {
        p->begin_iteration(it == 0 ? Phase::Prefill : Phase::Decode, it);
        const int64_t n_tok = it == 0 ? 3 : 1;
        for (int32_t l = 0; l < g.n_layer; ++l) {
          LayerRouting r;
          r.layer = l;
          r.n_tok = n_tok;
          r.n_expert = g.n_expert;
          r.top_k = g.top_k;
          r.requests.assign(static_cast<size_t>(n_tok), rq);
          for (int64_t t = 0; t < n_tok; ++t) {
            const int32_t a = next(8), b = (a + 1 + next(7)) % 8;
            r.experts.insert(r.experts.end(), {a, b});
            r.weights.insert(r.weights.end(), {0.6f, 0.4f});
            for (int32_t e = 0; e < g.n_expert; ++e) r.probs.push_back(e == a ? 0.5f : e == b ? 0.3f : 0.2f / 6);
          }
          p->routed(r);
        }
        p->end_iteration();
      }
      p->end_request(rq);
    }
    std::ostringstream out;
    if (i == 0) {
      // DuoServe trains its ExpertMLP at finish_learning() with the paper's widths (an
      // 11 MB state); the seed's network is 8 and 4 wide, which the loader accepts.
      DuoserveOptions opt;
      opt.mlp.widths = {8, 4};
      opt.epochs = 2;
      DuoservePredictor pred(g.n_layer, g.n_expert, g.top_k, opt);
      for (int t = 0; t < 16; ++t) {
        ActivationPath path;
        for (int32_t l = 0; l < g.n_layer; ++l) {
          const int32_t a = next(8);
          path.push_back({a, (a + 1 + next(7)) % 8});
        }
        pred.observe(path);
      }
      pred.train();
      pred.save(out);
    } else {
      p->finish_learning();
      p->save(out);
    }
    std::ofstream f(std::string(argv[1]) + "/" + names[i] + ".state", std::ios::binary);
    f << static_cast<char>(i) << out.str();
  }
  return 0;
}
