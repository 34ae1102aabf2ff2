// Writes a policy x cache-size sweep as a Markdown table, a CSV file and an SVG plot
// of hit rate against cache size (Belady drawn on top as the bound).
#pragma once
#include <string>
#include <vector>

#include "sim/simulator.h"

namespace moeflow {

struct SweepTable {
  std::string title;
  std::vector<double> fractions;            // cache sizes, fraction of all experts
  std::vector<std::string> policies;
  std::vector<std::vector<SimResult>> cell;  // [policy][fraction]
};

std::string sweep_markdown(const SweepTable& t);
std::string sweep_csv(const SweepTable& t);
std::string sweep_svg(const SweepTable& t);

}  // namespace moeflow
