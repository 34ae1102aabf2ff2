// The billed-cost and latency model of one MoE layer's experts on a serverless platform
// (serverless-moe Sec. III-C, III-D, Eqs. (3)-(11)). Each expert of each MoE layer is a
// function with a memory size m (its CPU share grows with m), r replicas that split the
// expert's tokens evenly, and one of three scatter-gather designs for its layer:
//   pipelined_indirect  (Eq. (6)/(7), Fig. 6(a)/8(a)): inputs and results through external
//       storage, minibatches of beta tokens so the download+compute of minibatch i+1
//       overlaps the upload of minibatch i; only beta tokens' activations are resident;
//   indirect            (Eq. (8)/(9), Fig. 6(b)/8(b)): all inputs downloaded, computed,
//       all results uploaded;
//   direct              (Eq. (10)/(11), Fig. 7/9): inputs arrive in the invocation payload
//       and results return in the response; both must fit the payload limit ((12f)).
// The paper's equations are not printed in our copy; the terms below are the ones its
// text names (head time = warm start + storage access + parameter download, block time =
// the larger of "download and compute a minibatch" and "upload the previous one", tail
// = upload of the last minibatch), combined as its Fig. 8/9 timelines describe.
// Billing (Eq. (4), Sec. II-A): per replica invocation, duration rounded up to the
// platform's granularity x configured GB x price per GB-second, plus the request price.
// A function that is handed no tokens is not invoked and costs nothing.
#pragma once
#include <cstdint>
#include <limits>
#include <string>

#include "plan/platform.h"
#include "sim/profiles.h"

namespace moeflow::plan {

enum class Comm : int { pipelined_indirect = 0, indirect = 1, direct = 2 };
inline constexpr int kNumComm = 3;
const char* comm_name(Comm c);

inline constexpr double kInfeasible = std::numeric_limits<double>::infinity();

// What one expert function needs, from the model profile: fp16/bf16 weights, so a token
// costs 2 FLOP per weight = expert_bytes FLOP; an activation row is 2 * hidden bytes on
// the wire; resident activations per token are fp32 (in, out and the two d_ff rows of
// a gated FFN, d_ff = expert_bytes / (6 * hidden)).
struct ExpertShape {
  double param_bytes = 0;
  double flops_per_token = 0;
  double token_bytes = 0;       // s: one token's input (and result) on the wire
  double activation_bytes = 0;  // resident bytes per token being processed
};
ExpertShape expert_shape(const ModelProfile& m);  // InputError when hidden_size is unknown

struct FunctionConfig {
  int32_t memory_mb = 0;
  int32_t replicas = 1;
  int32_t minibatch = 0;  // beta; only for pipelined_indirect
  bool operator==(const FunctionConfig&) const = default;
};

// Execution time of one replica handed n tokens (Eqs. (6), (8), (10)); kInfeasible when
// the memory ((12c)), the payload ((12f)) or the platform timeout does not allow it.
double replica_seconds(const PlatformProfile& p, const ExpertShape& s, Comm c, const FunctionConfig& f, int64_t n);

// Billed cost of one invocation lasting `seconds` at `memory_mb`.
double invocation_cost(const PlatformProfile& p, int32_t memory_mb, double seconds);

// One expert handed n tokens, split over f.replicas (Eq. (5)): the slowest replica's time
// and the billed cost of all invoked replicas. kInfeasible time/cost when not allowed.
struct ExpertRun {
  double seconds = 0, cost = 0;
};
ExpertRun expert_run(const PlatformProfile& p, const ExpertShape& s, Comm c, const FunctionConfig& f, int64_t n);

// The gather step after the slowest expert (Eqs. (7), (9), (11)): with storage designs the
// next non-MoE layer downloads every result (one access + all result bytes); with direct
// transfer the results already came back in the responses.
double gather_seconds(const PlatformProfile& p, const ExpertShape& s, Comm c, int64_t layer_tokens);

}  // namespace moeflow::plan
