// The routing-trace reader: any bytes either group into a trace whose statistics and
// activation paths compute, or throw InputError naming file:line.
#include <cstdint>

#include "base/error.h"
#include "format/trace.h"
#include "fuzz_input.h"
#include "policy/duoserve_stats.h"
#include "sim/trace_stats.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moeflow;
  fuzz::MemFile f(data, size);
  MOEFLOW_FUZZ_BODY({
    const Trace t = load_trace(f.path());
    compute_trace_stats(t);
    activation_paths(t, true, true);
  })
  return 0;
}
