// The GGUF reader and model configuration: any byte string either loads as a model
// that passes every check `run` makes (check_loadable) or throws InputError.
#include <cstdint>

#include "base/error.h"
#include "engine/model_check.h"
#include "format/gguf.h"
#include "fuzz_input.h"
#include "model/model_config.h"
#include "model/model_weights.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moeflow;
  fuzz::MemFile f(data, size);
  MOEFLOW_FUZZ_BODY({
    auto file = gguf::GgufFile::open(f.path());
    for (const auto& k : file->metadata_order()) (void)file->get(k).to_display();
    read_model_config(*file);
    auto m = Model::load(f.path());
    check_loadable(*m, 1);
  })
  return 0;
}
