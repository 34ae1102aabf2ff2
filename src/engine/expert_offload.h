// Puts a run under an expert budget: the store that knows where every expert's bytes
// are, the transport that reads them, the policy, the cache and the engine's expert
// source, built from one set of options. The engine (include/moeflow/engine.h) and
// the project's single-sequence tools build offloading here, never by hand.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/offloaded_experts.h"
#include "experts/expert_cache.h"
#include "experts/expert_store.h"
#include "experts/file_transport.h"

namespace moeflow {

struct OffloadOptions {
  // Fast-tier bytes for experts: "2GiB", "512MiB", a byte count, or "25%" of what all
  // experts take in memory (their buffers as the cache holds them, padding and layout
  // included), so "100%" holds every expert. Empty: every expert (with a policy).
  std::string budget;
  std::string policy = "all";      // "all": no offloading; else policy_names()
  std::string on_miss = "load";    // load (lossless), reroute (eMoE; lossy) or host-compute (lossless; a GPU backend)
  int io_threads = 4;              // expert readers
  std::string policy_state;        // learned state to start from (may be empty)
  std::string tasks_path;          // eMoE task profiles (empty: profiles/tasks.json if present)
  std::string emoe_variant = "all-layer";
  int32_t emoe_top_l = 0;          // eMoE: experts held per layer (0: from the budget)
  // The backend's weight layouts for experts read into the cache (null: the file's);
  // must outlive the offload.
  const WeightPlacer* placer = nullptr;
  // The backend's memory for the cache's expert buffers (null: host memory); must
  // outlive the offload.
  ExpertMemory* memory = nullptr;
  // The backend's transport into the cache's buffers (Backend::expert_transport);
  // unset or null: FileTransport, the file read into host buffers.
  std::function<std::unique_ptr<Transport>(const ExpertStore&, int io_threads)> make_transport;
  // eMoE's keyword task detection reads a request's prompt as text.
  std::function<std::string(const std::vector<int32_t>&)> detokenize;
};

struct ExpertOffload {
  std::unique_ptr<ExpertStore> store;
  std::unique_ptr<Transport> transport;
  std::unique_ptr<ExpertPolicy> policy;
  std::unique_ptr<ExpertCache> cache;
  std::unique_ptr<OffloadedExperts> source;
  std::string policy_name = "all";
  bool lossy = false;

  bool active() const { return source != nullptr; }
  // One line for humans.
  std::string summary() const;
  // Writes the policy's learned state to `path`, replacing it atomically.
  void save_state(const std::string& path) const;
};

// Inactive (all resident) when the policy is "all". Throws InputError for a bad
// budget, policy, on-miss mode or state file, and for a budget without a policy.
ExpertOffload make_expert_offload(const Model& model, const OffloadOptions& opt);

}  // namespace moeflow
