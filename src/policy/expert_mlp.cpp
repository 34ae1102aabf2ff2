#include "policy/expert_mlp.h"

#include <algorithm>
#include <cmath>
#include <istream>
#include <numeric>
#include <ostream>

#include "base/error.h"
#include "policy/binary_io.h"

namespace moeflow {

namespace {

constexpr float kBnEps = 1e-5f;
constexpr float kBnMomentum = 0.1f;  // PyTorch's default, which the paper's MLP would use

// splitmix64: the same sequence on every platform (std distributions are not).
uint64_t next_u64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
float next_unit(uint64_t& s) { return static_cast<float>(next_u64(s) >> 40) * (1.0f / 16777216.0f); }

// Y[n][out] += X[n][in] * W[in][out]; zero inputs (one-hot paths, ReLU) are skipped.
// Rows are the inner loop so that each row of W is read once per batch (the 2048x1024
// layer does not fit in cache); every sum still runs in the same order.
void matmul_acc(const float* x, int64_t n, int32_t in, const float* w, int32_t out, float* y) {
  for (int32_t i = 0; i < in; ++i) {
    const float* wi = w + static_cast<size_t>(i) * out;
    for (int64_t r = 0; r < n; ++r) {
      const float a = x[r * in + i];
      if (a == 0.0f) continue;
      float* yr = y + r * out;
      for (int32_t j = 0; j < out; ++j) yr[j] += a * wi[j];
    }
  }
}

// dW[in][out] += X^T dZ and, when dx is given, dX[n][in] = dZ W^T.
void matmul_back(const float* x, const float* dz, int64_t n, int32_t in, const float* w, int32_t out, float* dw,
                 float* dx) {
  for (int32_t i = 0; i < in; ++i) {
    const float* wi = w + static_cast<size_t>(i) * out;
    float* dwi = dw + static_cast<size_t>(i) * out;
    for (int64_t r = 0; r < n; ++r) {
      const float* dzr = dz + r * out;
      if (dx) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int32_t j = 0;
        for (; j + 8 <= out; j += 8)
          for (int k = 0; k < 8; ++k) acc[k] += dzr[j + k] * wi[j + k];
        float s = 0;
        for (; j < out; ++j) s += dzr[j] * wi[j];
        for (float v : acc) s += v;
        dx[r * in + i] = s;
      }
      const float a = x[r * in + i];
      if (a == 0.0f) continue;
      for (int32_t j = 0; j < out; ++j) dwi[j] += a * dzr[j];
    }
  }
}

using binio::get;
using binio::put;

}  // namespace

ExpertMlp::ExpertMlp(int32_t n_in, int32_t n_out, const MlpConfig& cfg) : n_in_(n_in), n_out_(n_out), cfg_(cfg) {
  build();
  // He initialisation for the ReLU layers; batch-norm scale 1, shift 0.
  rng_ = cfg_.seed;
  for (const Layer& ly : layers_) {
    const float bound = std::sqrt(6.0f / static_cast<float>(ly.in));
    for (size_t i = 0; i < static_cast<size_t>(ly.in) * ly.out; ++i)
      params_[ly.w + i] = (2.0f * next_unit(rng_) - 1.0f) * bound;
    if (&ly != &layers_.back()) std::fill_n(params_.begin() + static_cast<std::ptrdiff_t>(ly.gamma), ly.out, 1.0f);
  }
}

void ExpertMlp::build() {
  layers_.clear();
  size_t p = 0, r = 0;
  int32_t in = n_in_;
  std::vector<int32_t> outs = cfg_.widths;
  outs.push_back(n_out_);
  for (size_t i = 0; i < outs.size(); ++i) {
    Layer ly;
    ly.in = in;
    ly.out = outs[i];
    ly.w = p;
    p += static_cast<size_t>(ly.in) * ly.out;
    if (i + 1 < outs.size()) {
      ly.gamma = p;
      ly.beta = p + ly.out;
      p += 2 * static_cast<size_t>(ly.out);
      ly.run = r;
      r += 2 * static_cast<size_t>(ly.out);
    } else {
      ly.bias = p;
      p += ly.out;
    }
    layers_.push_back(ly);
    in = ly.out;
  }
  params_.assign(p, 0.0f);
  grads_.assign(p, 0.0f);
  running_.assign(r, 0.0f);
  for (size_t i = 0; i + 1 < layers_.size(); ++i)  // running variance starts at 1
    std::fill_n(running_.begin() + static_cast<std::ptrdiff_t>(layers_[i].run + layers_[i].out), layers_[i].out, 1.0f);
  adam_m_.assign(p, 0.0f);
  adam_v_.assign(p, 0.0f);
  adam_t_ = 0;
}

std::vector<float> ExpertMlp::predict(const float* x, int64_t n) const {
  std::vector<float> a(x, x + n * n_in_);
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& ly = layers_[li];
    std::vector<float> z(static_cast<size_t>(n) * ly.out, 0.0f);
    matmul_acc(a.data(), n, ly.in, &params_[ly.w], ly.out, z.data());
    const bool last = li + 1 == layers_.size();
    for (int64_t r = 0; r < n; ++r)
      for (int32_t j = 0; j < ly.out; ++j) {
        float& v = z[static_cast<size_t>(r * ly.out + j)];
        if (last) {
          v = 1.0f / (1.0f + std::exp(-(v + params_[ly.bias + j])));
        } else {
          const float mean = running_[ly.run + j], var = running_[ly.run + ly.out + j];
          v = params_[ly.gamma + j] * (v - mean) / std::sqrt(var + kBnEps) + params_[ly.beta + j];
          v = std::max(v, 0.0f);
        }
      }
    a.swap(z);
  }
  return a;
}

double ExpertMlp::forward_backward(const float* x, const float* y, int64_t n, bool use_dropout, bool update_stats) {
  const size_t nl = layers_.size();
  const float keep = 1.0f - cfg_.dropout;
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  // Per hidden layer: its input, the normalised pre-activation, 1/std, and the mask
  // that folds ReLU and dropout (0, or 1/keep).
  std::vector<std::vector<float>> in(nl), xhat(nl), mask(nl), inv_std(nl);
  in[0].assign(x, x + n * n_in_);
  for (size_t li = 0; li + 1 < nl; ++li) {
    const Layer& ly = layers_[li];
    const size_t m = static_cast<size_t>(ly.out);
    std::vector<float> z(static_cast<size_t>(n) * m, 0.0f);
    matmul_acc(in[li].data(), n, ly.in, &params_[ly.w], ly.out, z.data());
    xhat[li].resize(z.size());
    mask[li].resize(z.size());
    inv_std[li].resize(m);
    in[li + 1].resize(z.size());
    for (size_t j = 0; j < m; ++j) {
      double s = 0, s2 = 0;
      for (int64_t r = 0; r < n; ++r) s += z[r * m + j];
      const double mean = s / static_cast<double>(n);
      for (int64_t r = 0; r < n; ++r) s2 += (z[r * m + j] - mean) * (z[r * m + j] - mean);
      const double var = s2 / static_cast<double>(n);  // biased, as batch norm normalises
      const float is = static_cast<float>(1.0 / std::sqrt(var + kBnEps));
      inv_std[li][j] = is;
      if (update_stats) {
        float& rm = running_[ly.run + j];
        float& rv = running_[ly.run + m + j];
        rm = (1 - kBnMomentum) * rm + kBnMomentum * static_cast<float>(mean);
        rv = (1 - kBnMomentum) * rv + kBnMomentum * static_cast<float>(s2 / static_cast<double>(std::max<int64_t>(n - 1, 1)));
      }
      for (int64_t r = 0; r < n; ++r) {
        const float xh = (z[r * m + j] - static_cast<float>(mean)) * is;
        xhat[li][r * m + j] = xh;
        const float v = params_[ly.gamma + j] * xh + params_[ly.beta + j];
        float k = v > 0 ? 1.0f : 0.0f;
        if (use_dropout && cfg_.dropout > 0) k = next_unit(rng_) < keep ? k / keep : 0.0f;
        mask[li][r * m + j] = k;
        in[li + 1][r * m + j] = v * k;
      }
    }
  }
  // Output layer, BCE with logits (Eq. 6, averaged over samples and experts).
  const Layer& out = layers_.back();
  const size_t m = static_cast<size_t>(out.out);
  std::vector<float> d(static_cast<size_t>(n) * m, 0.0f);
  matmul_acc(in[nl - 1].data(), n, out.in, &params_[out.w], out.out, d.data());
  double loss = 0;
  const float scale = 1.0f / static_cast<float>(static_cast<size_t>(n) * m);
  for (int64_t r = 0; r < n; ++r)
    for (size_t j = 0; j < m; ++j) {
      const float zl = d[r * m + j] + params_[out.bias + j], t = y[r * m + j];
      loss += std::max(zl, 0.0f) - zl * t + std::log1p(std::exp(-std::fabs(zl)));
      d[r * m + j] = (1.0f / (1.0f + std::exp(-zl)) - t) * scale;
      grads_[out.bias + j] += d[r * m + j];
    }
  // Backward through the layers, `d` holding dLoss/dz of the current layer.
  for (size_t li = nl; li-- > 0;) {
    const Layer& ly = layers_[li];
    if (li + 1 < nl) {  // d holds dLoss/d(output of this hidden layer): undo ReLU/dropout, batch norm
      const size_t mm = static_cast<size_t>(ly.out);
      for (size_t j = 0; j < mm; ++j) {
        double sdx = 0, sdxx = 0;
        for (int64_t r = 0; r < n; ++r) {
          const float dv = d[r * mm + j] * mask[li][r * mm + j];
          grads_[ly.gamma + j] += dv * xhat[li][r * mm + j];
          grads_[ly.beta + j] += dv;
          const float dxh = dv * params_[ly.gamma + j];
          d[r * mm + j] = dxh;
          sdx += dxh;
          sdxx += dxh * xhat[li][r * mm + j];
        }
        const float fn = static_cast<float>(n);
        for (int64_t r = 0; r < n; ++r)
          d[r * mm + j] = inv_std[li][j] / fn *
                          (fn * d[r * mm + j] - static_cast<float>(sdx) - xhat[li][r * mm + j] * static_cast<float>(sdxx));
      }
    }
    std::vector<float> dx(li > 0 ? static_cast<size_t>(n) * ly.in : 0);
    matmul_back(in[li].data(), d.data(), n, ly.in, &params_[ly.w], ly.out, &grads_[ly.w], li > 0 ? dx.data() : nullptr);
    d.swap(dx);
  }
  return loss / static_cast<double>(static_cast<size_t>(n) * m);
}

double ExpertMlp::loss_and_grad(const float* x, const float* y, int64_t n, bool use_dropout) {
  return forward_backward(x, y, n, use_dropout, false);
}

double ExpertMlp::train_step(const float* x, const float* y, int64_t n) {
  const double loss = forward_backward(x, y, n, true, true);
  // Adam (beta1 0.9, beta2 0.999) with bias correction.
  ++adam_t_;
  const float c1 = 1.0f - std::pow(0.9f, static_cast<float>(adam_t_));
  const float c2 = 1.0f - std::pow(0.999f, static_cast<float>(adam_t_));
  for (size_t i = 0; i < params_.size(); ++i) {
    const float g = grads_[i];
    adam_m_[i] = 0.9f * adam_m_[i] + 0.1f * g;
    adam_v_[i] = 0.999f * adam_v_[i] + 0.001f * g * g;
    params_[i] -= cfg_.lr * (adam_m_[i] / c1) / (std::sqrt(adam_v_[i] / c2) + 1e-8f);
  }
  return loss;
}

double ExpertMlp::fit(const std::vector<float>& x, const std::vector<float>& y, int64_t n, int32_t epochs) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const int64_t b = std::max<int32_t>(cfg_.batch, 2);
  std::vector<float> bx, by;
  double last = 0;
  for (int32_t e = 0; e < epochs; ++e) {
    for (int64_t i = n - 1; i > 0; --i)  // Fisher-Yates with the model's own generator
      std::swap(order[static_cast<size_t>(i)], order[next_u64(rng_) % static_cast<uint64_t>(i + 1)]);
    double sum = 0;
    int64_t batches = 0;
    for (int64_t s = 0; s + 2 <= n; s += b) {  // a last batch of one is skipped (batch norm)
      const int64_t cnt = std::min(b, n - s);
      if (cnt < 2) break;
      bx.clear();
      by.clear();
      for (int64_t k = 0; k < cnt; ++k) {
        const int64_t r = order[static_cast<size_t>(s + k)];
        bx.insert(bx.end(), x.begin() + r * n_in_, x.begin() + (r + 1) * n_in_);
        by.insert(by.end(), y.begin() + r * n_out_, y.begin() + (r + 1) * n_out_);
      }
      sum += train_step(bx.data(), by.data(), cnt);
      ++batches;
    }
    last = batches ? sum / static_cast<double>(batches) : 0;
  }
  return last;
}

void ExpertMlp::save(std::ostream& o) const {
  put<int32_t>(o, n_in_);
  put<int32_t>(o, n_out_);
  put<int32_t>(o, static_cast<int32_t>(cfg_.widths.size()));
  for (int32_t w : cfg_.widths) put<int32_t>(o, w);
  put<float>(o, cfg_.dropout);
  o.write(reinterpret_cast<const char*>(params_.data()), static_cast<std::streamsize>(params_.size() * sizeof(float)));
  o.write(reinterpret_cast<const char*>(running_.data()), static_cast<std::streamsize>(running_.size() * sizeof(float)));
}

void ExpertMlp::load(std::istream& in, const std::string& what, int32_t n_in, int32_t n_out) {
  const int32_t ni = get<int32_t>(in, what), no = get<int32_t>(in, what), nw = get<int32_t>(in, what);
  if (ni != n_in || no != n_out)
    throw InputError(what + ": ExpertMLP has " + std::to_string(ni) + " inputs and " + std::to_string(no) +
                     " outputs, the model needs " + std::to_string(n_in) + " and " + std::to_string(n_out));
  if (nw < 0 || nw > 64) throw InputError(what + ": ExpertMLP has " + std::to_string(nw) + " hidden layers (0..64)");
  MlpConfig cfg;
  cfg.widths.clear();
  // Parameters and running statistics the widths imply, counted before build()
  // allocates them (four times over: parameters, gradients, two Adam moments).
  uint64_t params = 0, running = 0, prev = static_cast<uint64_t>(ni);
  for (int32_t i = 0; i < nw; ++i) {
    const int32_t w = get<int32_t>(in, what);
    if (w <= 0 || w > (1 << 16)) throw InputError(what + ": ExpertMLP hidden width " + std::to_string(w) + " out of range");
    cfg.widths.push_back(w);
    params += prev * static_cast<uint64_t>(w) + 2 * static_cast<uint64_t>(w);
    running += 2 * static_cast<uint64_t>(w);
    prev = static_cast<uint64_t>(w);
  }
  params += prev * static_cast<uint64_t>(no) + static_cast<uint64_t>(no);
  cfg.dropout = get<float>(in, what);
  if (!(cfg.dropout >= 0 && cfg.dropout < 1)) throw InputError(what + ": ExpertMLP dropout out of range");
  binio::need(in, (params + running) * sizeof(float), what + ": ExpertMLP weights");
  n_in_ = ni;
  n_out_ = no;
  cfg_ = cfg;
  build();
  auto read_all = [&](std::vector<float>& v) {
    if (!in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float))))
      throw InputError(what + ": truncated ExpertMLP weights");
    for (float x : v)
      if (!std::isfinite(x)) throw InputError(what + ": ExpertMLP weights hold a non-finite value");
  };
  read_all(params_);
  read_all(running_);
  rng_ = cfg_.seed;
}

}  // namespace moeflow
