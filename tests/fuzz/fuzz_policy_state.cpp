// Every policy-state loader: the first byte picks the policy, the rest is its saved
// state, loaded into a policy for a fixed small model (4 layers x 8 experts, top-2).
// A bad state throws InputError; a good one loads and saves again.
#include <cstdint>
#include <sstream>
#include <string>

#include "base/error.h"
#include "experts/expert_key.h"
#include "fuzz_input.h"
#include "policy/policy_factory.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moeflow;
  if (size < 1) return 0;
  static const char* kNames[] = {"duoserve", "moe-infinity", "emoe", "fmoe"};
  static const ExpertGeometry g = ExpertGeometry::uniform(4, 8, 2, 1 << 20);
  const std::string name = kNames[data[0] % 4];
  MOEFLOW_FUZZ_BODY({
    PolicyOptions o;
    o.budget_bytes = 16ull << 20;
    auto p = make_policy(name, g, o);
    std::istringstream in(std::string(reinterpret_cast<const char*>(data + 1), size - 1));
    p->load(in);
    std::ostringstream out;
    p->save(out);
  })
  return 0;
}
