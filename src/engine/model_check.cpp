#include "engine/model_check.h"

#include <algorithm>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/parallel_for.h"

namespace moeflow {

std::unique_ptr<Tokenizer> load_checked_tokenizer(const Model& m) {
  auto tok = std::make_unique<Tokenizer>(tokenizer_data_from_gguf(m.file()));
  if (static_cast<int64_t>(tok->vocab_size()) != m.config().n_vocab)
    throw InputError(m.file().path() + ": tokenizer has " + std::to_string(tok->vocab_size()) +
                     " tokens but token_embd.weight has " + std::to_string(m.config().n_vocab) + " rows");
  return tok;
}

void check_loadable(const Model& m, int threads) {
  load_checked_tokenizer(m);
  // Every tensor in pieces of whole blocks (about 4 MiB) on `threads` threads: reading
  // a file of tens of GB is the whole cost, and one thread faults its pages in at a
  // fraction of what the storage or the page cache gives.
  struct Piece {
    const gguf::TensorInfo* t;
    int64_t first, n;
  };
  std::vector<Piece> pieces;
  for (const gguf::TensorInfo& t : m.file().tensors()) {
    const DTypeInfo& d = dtype_info(t.dtype);
    const int64_t total = static_cast<int64_t>(t.n_elements());
    const int64_t per = std::max<int64_t>(1, static_cast<int64_t>((size_t{4} << 20) / d.type_size)) * d.block_size;
    for (int64_t first = 0; first < total; first += per) pieces.push_back({&t, first, std::min(per, total - first)});
  }
  parallel_for(static_cast<int64_t>(pieces.size()), threads, [&](int64_t i) {
    const Piece& p = pieces[static_cast<size_t>(i)];
    check_finite_weights(m.file(), *p.t, p.first, p.n);
  });
}

}  // namespace moeflow
