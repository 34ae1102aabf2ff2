#include "plan/cost_model.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace moeflow::plan {

const char* comm_name(Comm c) {
  switch (c) {
    case Comm::pipelined_indirect: return "pipelined-indirect";
    case Comm::indirect: return "indirect";
    case Comm::direct: return "direct";
  }
  return "?";
}

ExpertShape expert_shape(const ModelProfile& m) {
  if (m.hidden_size <= 0)
    throw InputError("model profile " + m.name + ": field \"hidden_size\" is needed by the planner (payload sizes)");
  ExpertShape s;
  s.param_bytes = static_cast<double>(m.expert_bytes);
  s.flops_per_token = static_cast<double>(m.expert_bytes);
  s.token_bytes = 2.0 * m.hidden_size;
  const double d_ff = static_cast<double>(m.expert_bytes) / (6.0 * m.hidden_size);
  s.activation_bytes = 4.0 * (2.0 * m.hidden_size + 2.0 * d_ff);
  return s;
}

namespace {

double compute_seconds(const PlatformProfile& p, const ExpertShape& s, int32_t memory_mb, double n) {
  return n * s.flops_per_token / (p.vcpus(memory_mb) * p.flops_per_vcpu);
}
double storage_seconds(const PlatformProfile& p, double bytes) { return p.storage_access_s + bytes / p.storage_bytes_per_s; }

}  // namespace

double replica_seconds(const PlatformProfile& p, const ExpertShape& s, Comm c, const FunctionConfig& f, int64_t n) {
  if (n <= 0) return 0;
  const double mem_bytes = static_cast<double>(f.memory_mb) * 1048576.0;
  const double nd = static_cast<double>(n);
  // Head time: start the (warm) function and download its parameters (Eq. (6)).
  const double head = p.warm_start_s + storage_seconds(p, s.param_bytes);
  double t = 0;
  switch (c) {
    case Comm::pipelined_indirect: {
      if (f.minibatch <= 0) return kInfeasible;
      const double b = std::min<double>(nd, f.minibatch);
      if (p.runtime_overhead_bytes + s.param_bytes + b * s.activation_bytes > mem_bytes) return kInfeasible;
      const int64_t k = (n + f.minibatch - 1) / f.minibatch;
      const double last = nd - static_cast<double>(k - 1) * f.minibatch;
      const double first = storage_seconds(p, b * s.token_bytes) + compute_seconds(p, s, f.memory_mb, b);
      const double block = std::max(storage_seconds(p, f.minibatch * s.token_bytes) +
                                        compute_seconds(p, s, f.memory_mb, f.minibatch),
                                    storage_seconds(p, f.minibatch * s.token_bytes));
      const double tail = storage_seconds(p, last * s.token_bytes);
      t = head + first + static_cast<double>(k - 1) * block + tail;
      break;
    }
    case Comm::indirect:
      if (p.runtime_overhead_bytes + s.param_bytes + nd * s.activation_bytes > mem_bytes) return kInfeasible;
      t = head + storage_seconds(p, nd * s.token_bytes) + compute_seconds(p, s, f.memory_mb, nd) +
          storage_seconds(p, nd * s.token_bytes);
      break;
    case Comm::direct:
      if (p.runtime_overhead_bytes + s.param_bytes + nd * s.activation_bytes > mem_bytes) return kInfeasible;
      if (nd * s.token_bytes > p.payload_limit_bytes) return kInfeasible;
      t = head + nd * s.token_bytes / p.invoke_bytes_per_s + compute_seconds(p, s, f.memory_mb, nd) +
          nd * s.token_bytes / p.invoke_bytes_per_s;
      break;
  }
  return t > p.timeout_s ? kInfeasible : t;
}

double invocation_cost(const PlatformProfile& p, int32_t memory_mb, double seconds) {
  const double billed = std::ceil(seconds / p.billing_granularity_s - 1e-9) * p.billing_granularity_s;
  return billed * (static_cast<double>(memory_mb) / 1024.0) * p.price_per_gb_second + p.price_per_request;
}

ExpertRun expert_run(const PlatformProfile& p, const ExpertShape& s, Comm c, const FunctionConfig& f, int64_t n) {
  ExpertRun r;
  if (n <= 0) return r;
  if (f.replicas < 1) return {kInfeasible, kInfeasible};
  // n tokens split evenly: (n mod r) replicas get one more token; empty replicas idle.
  const int64_t base = n / f.replicas, extra = n % f.replicas;
  for (int64_t size : {base + 1, base}) {
    const int64_t count = size == base + 1 ? extra : f.replicas - extra;
    if (size <= 0 || count <= 0) continue;
    const double t = replica_seconds(p, s, c, f, size);
    if (t == kInfeasible) return {kInfeasible, kInfeasible};
    r.seconds = std::max(r.seconds, t);
    r.cost += static_cast<double>(count) * invocation_cost(p, f.memory_mb, t);
  }
  return r;
}

double gather_seconds(const PlatformProfile& p, const ExpertShape& s, Comm c, int64_t layer_tokens) {
  if (c == Comm::direct || layer_tokens <= 0) return 0;
  return storage_seconds(p, static_cast<double>(layer_tokens) * s.token_bytes);
}

}  // namespace moeflow::plan
