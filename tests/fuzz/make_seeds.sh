#!/usr/bin/env bash
# Regenerates the binary seed corpora of tests/fuzz (the text seeds are written by
# hand). Needs a release build (build/moeflow) and the fuzz build (build-fuzz).
set -euo pipefail
cd "$(dirname "$0")/../.."
tiny=(--layers 1 --experts 2 --top-k 1 --vocab 300 --embd 32 --ff 32 --heads 2 --kv-heads 1 --head-dim 16)
build/moeflow make-model -o tests/fuzz/gguf/tiny-q8_0.gguf --dtype q8_0 "${tiny[@]}"
build/moeflow make-model -o tests/fuzz/gguf/tiny-qwen3-f16.gguf --arch qwen3moe --dtype f16 "${tiny[@]}"
# A header the reader accepts and the model configuration rejects (no embedding_length).
python3 - <<'PY'
import struct
def s(x): b = x.encode(); return struct.pack('<Q', len(b)) + b
kv = [('general.architecture', 8, s('llama')), ('llama.block_count', 4, struct.pack('<I', 1)),
      ('llama.rope.freq_base', 6, struct.pack('<f', 10000.0)),
      ('tokenizer.ggml.tokens', 9, struct.pack('<IQ', 8, 2) + s('a') + s('b'))]
h = b'GGUF' + struct.pack('<IQQ', 3, 1, len(kv))
for k, t, v in kv: h += s(k) + struct.pack('<I', t) + v
h += s('token_embd.weight') + struct.pack('<I', 2) + struct.pack('<QQ', 32, 2) + struct.pack('<I', 0) + struct.pack('<Q', 0)
h += b'\0' * ((32 - len(h) % 32) % 32) + struct.pack('<64f', *([0.5] * 64))
open('tests/fuzz/gguf/header-only.gguf', 'wb').write(h)
PY
cmake --build build-fuzz --target write_policy_seeds >/dev/null
build-fuzz/write_policy_seeds tests/fuzz/policy_state
