// Writes the seed corpus of fuzz_policy_state: each policy's saved state for the
// harness's model (4 layers x 8 experts, top-2), after a few routed tokens, prefixed
// with the byte that selects the policy. Run by scripts/fuzz.sh when the seeds are
// missing: write_policy_seeds DIR.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "experts/expert_key.h"
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
    std::ostringstream out;
    p->save(out);
    std::ofstream f(std::string(argv[1]) + "/" + names[i] + ".state", std::ios::binary);
    f << static_cast<char>(i) << out.str();
  }
  return 0;
}
