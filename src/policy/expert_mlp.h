// ExpertMLP, DuoServe-MoE's next-layer expert predictor (duoserve-moe.txt §4.2), in
// plain C++: fully connected layers whose hidden widths shrink from 2048 to 64, each
// followed by batch normalisation, ReLU and dropout (0.1), then an output layer of one
// logit per expert; sigmoid outputs trained with binary cross-entropy (Eq. 6) by Adam.
// Single-threaded with its own seeded generator, so training is bit-for-bit repeatable.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace moeflow {

struct MlpConfig {
  // §4.2: "seven fully connected layers with intermediate hidden dimensions
  // progressively reduced from 2048 to 64, followed by a final output layer": six
  // hidden layers plus the output layer.
  std::vector<int32_t> widths = {2048, 1024, 512, 256, 128, 64};
  float dropout = 0.1f;  // §4.2 default rate
  float lr = 1e-3f;      // Adam step size (the paper does not give one)
  int32_t batch = 64;
  uint64_t seed = 1;
};

class ExpertMlp {
 public:
  ExpertMlp() = default;
  ExpertMlp(int32_t n_in, int32_t n_out, const MlpConfig& cfg = {});

  int32_t n_in() const { return n_in_; }
  int32_t n_out() const { return n_out_; }
  const MlpConfig& config() const { return cfg_; }

  // Inference mode (running batch-norm statistics, no dropout): sigmoid outputs,
  // [n][n_out] for inputs [n][n_in].
  std::vector<float> predict(const float* x, int64_t n) const;
  // One Adam step on a batch (n >= 2: batch norm needs a batch); returns the mean BCE.
  double train_step(const float* x, const float* y, int64_t n);
  // Trains for `epochs` passes over shuffled mini-batches; returns the last epoch's mean loss.
  double fit(const std::vector<float>& x, const std::vector<float>& y, int64_t n, int32_t epochs);

  // Training-mode mean BCE and its gradient with respect to every parameter, without
  // updating anything (gradient checks). `use_dropout` false makes it deterministic.
  double loss_and_grad(const float* x, const float* y, int64_t n, bool use_dropout);
  size_t n_params() const { return params_.size(); }
  float& param(size_t i) { return params_[i]; }
  float grad(size_t i) const { return grads_[i]; }

  // Exact binary form (widths, dropout, parameters, batch-norm running statistics).
  void save(std::ostream& out) const;
  // Reads a network with n_in inputs and n_out outputs. Throws InputError (naming
  // `what`) for another shape before allocating anything, for widths whose parameters
  // the stream cannot hold, and for a truncated or inconsistent stream.
  void load(std::istream& in, const std::string& what, int32_t n_in, int32_t n_out);

 private:
  struct Layer {
    int32_t in = 0, out = 0;
    size_t w = 0;            // params_ offset of W, stored [in][out]
    size_t gamma = 0, beta = 0;  // hidden layers: batch-norm scale and shift
    size_t bias = 0;         // output layer only (a bias before batch norm is redundant)
    size_t run = 0;          // running_ offset: mean [out], then variance [out]
  };
  void build();
  double forward_backward(const float* x, const float* y, int64_t n, bool use_dropout, bool update_stats);

  int32_t n_in_ = 0, n_out_ = 0;
  MlpConfig cfg_;
  std::vector<Layer> layers_;
  std::vector<float> params_, grads_, running_;
  std::vector<float> adam_m_, adam_v_;
  int64_t adam_t_ = 0;
  uint64_t rng_ = 0;
};

}  // namespace moeflow
