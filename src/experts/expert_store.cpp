#include "experts/expert_store.h"

#include <vector>

#include "tensor/rows_x4.h"

namespace moeflow {

namespace {
uint64_t align_down(uint64_t x) { return x & ~(kDirectIoAlign - 1); }
uint64_t align_up(uint64_t x) { return (x + kDirectIoAlign - 1) & ~(kDirectIoAlign - 1); }
}  // namespace

ExpertStore::ExpertStore(const Model& model, const WeightPlacer* placer)
    : model_(model), placer_(placer), path_(model.file().path()) {
  const ModelConfig& c = model.config();
  // MoE layers only (deepseek2's leading dense layers have no experts): expert layer l
  // is model layer l + n_dense_lead.
  geometry_.n_layer = static_cast<int32_t>(c.n_moe_layer());
  geometry_.n_expert = static_cast<int32_t>(c.n_expert);
  geometry_.top_k = static_cast<int32_t>(c.n_expert_used);
  const size_t n = static_cast<size_t>(c.n_moe_layer() * c.n_expert);
  geometry_.bytes.resize(n);
  parts_.resize(n);
  for (int32_t l = 0; l < geometry_.n_layer; ++l) {
    const LayerWeights& L = model.weights().layers[static_cast<size_t>(l + c.n_dense_lead)];
    const StackedExperts* stacks[3] = {&L.gate_exps, &L.up_exps, &L.down_exps};
    for (int32_t e = 0; e < geometry_.n_expert; ++e) {
      const ExpertKey key{l, e};
      auto& ps = parts_[static_cast<size_t>(geometry_.index(key))];
      uint64_t at = 0;
      for (int p = 0; p < 3; ++p) {
        const StackedExperts& s = *stacks[p];
        ExpertPart& part = ps[static_cast<size_t>(p)];
        part.shape = s.first;
        part.shape.data = nullptr;
        // Read from the file, then put in the placer's layout.
        part.shape.layout = placer ? placer->layout_for(s.first.dtype, s.first.rows, s.first.cols) : RowLayout::gguf;
        part.bytes = s.first.bytes();
        part.file_offset = s.file_offset + static_cast<uint64_t>(e) * s.step();
        part.span_begin = align_down(part.file_offset);
        part.span_end = align_up(part.file_offset + part.bytes);
        part.buffer_offset = at;
        at += part.span_end - part.span_begin;
        total_file_bytes_ += part.bytes;
      }
      geometry_.bytes[static_cast<size_t>(geometry_.index(key))] = at;
    }
  }
}

uint64_t ExpertStore::file_bytes(const ExpertKey& k) const {
  uint64_t s = 0;
  for (const ExpertPart& p : parts(k)) s += p.bytes;
  return s;
}

void ExpertStore::prepare(const ExpertKey& k, uint8_t* buf) const {
  // A quad keeps the bytes its four rows had, so each is repacked in place through a
  // scratch of one quad (KiBs), not of the whole part (tens of MiB per I/O thread on
  // large models, outside the budget).
  thread_local std::vector<uint8_t> scratch;
  for (const ExpertPart& p : parts(k)) {
    if (p.shape.layout == RowLayout::gguf) continue;
    const size_t qb = static_cast<size_t>(kRowsX4) * row_bytes(p.shape.dtype, p.shape.cols);
    uint8_t* data = buf + p.data_offset();
    for (int64_t q = 0; q < p.shape.rows / kRowsX4; ++q) {
      uint8_t* quad = data + static_cast<size_t>(q) * qb;
      scratch.assign(quad, quad + qb);
      placer_->place(p.shape.layout, p.shape.dtype, scratch.data(), kRowsX4, p.shape.cols, quad);
    }
  }
}

ExpertMatrices ExpertStore::matrices(const ExpertKey& k, const uint8_t* buf) const {
  const auto& ps = parts(k);
  ExpertMatrices m{ps[0].shape, ps[1].shape, ps[2].shape};
  m.gate.data = buf + ps[0].data_offset();
  m.up.data = buf + ps[1].data_offset();
  m.down.data = buf + ps[2].data_offset();
  return m;
}

ExpertMatrices ExpertStore::mapped(const ExpertKey& k) const {
  const LayerWeights& L = model_.weights().layers[static_cast<size_t>(k.layer + model_.config().n_dense_lead)];
  return {L.gate_exps.expert(k.expert), L.up_exps.expert(k.expert), L.down_exps.expert(k.expert)};
}

}  // namespace moeflow
