// The chat-template interpreter: any bytes either parse and render (within the render
// limits) or throw InputError naming the problem; nothing may crash, hang, overflow the
// stack or exhaust memory. Limits are smaller than the server's so that each input runs
// in milliseconds; the bounds themselves are the same code.
#include <cstdint>
#include <string_view>

#include "base/error.h"
#include "fuzz_input.h"
#include "serve/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moeflow;
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  MOEFLOW_FUZZ_BODY({
    serve::ChatTemplate t = serve::ChatTemplate::parse(source);
    serve::ChatTemplate::Limits limits;
    limits.max_output_bytes = size_t{1} << 20;
    limits.max_string_bytes = size_t{1} << 20;
    limits.max_list_items = size_t{1} << 16;
    limits.max_bytes_built = uint64_t{32} << 20;
    limits.max_steps = 200'000;
    limits.max_loop_iterations = 20'000;
    t.set_limits(limits);
    serve::ChatTemplateInput in;
    in.messages = {{"system", "Be brief."}, {"user", "Hi \xC3\xA9 {{ x }}"}, {"assistant", "<think>r</think>ok"},
                   {"user", "again"}};
    in.bos_token = "<s>";
    in.eos_token = "</s>";
    in.now_unix_seconds = 0;
    t.render(in);
    // With a tools array (the templates' tool sections, gpt-oss's schema macros).
    in.tools_json =
        R"([{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object",)"
        R"( "properties": {"a": {"type": "array", "items": {"type": "object", "properties": {"b": {"type": "string",)"
        R"( "enum": ["x", "y"]}}}}, "c": {"oneOf": [{"type": "integer"}, {"type": "string"}], "default": 3}},)"
        R"( "required": ["a"]}}}])";
    in.variables_json = R"({"enable_thinking": false})";
    t.render(in);
    in.tools_json.clear();
    in.variables_json.clear();
    in.add_generation_prompt = false;
    in.messages.resize(1);
    t.render(in);
  })
  return 0;
}
