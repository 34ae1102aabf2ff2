#include "sim/sweep_report.h"

#include <cstdio>

namespace moeflow {

namespace {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

}  // namespace

std::string sweep_markdown(const SweepTable& t) {
  std::string s = "| policy |";
  // (Appended piece by piece: " " + std::string trips GCC 12's -Wrestrict false positive.)
  for (double f : t.fractions) s.append(" ").append(fmt("%.1f%%", 100 * f)).append(" |");
  s += "\n|---|";
  for (size_t i = 0; i < t.fractions.size(); ++i) s += "---|";
  s += "\n";
  for (size_t p = 0; p < t.policies.size(); ++p) {
    s += "| " + t.policies[p] + " |";
    for (const SimResult& r : t.cell[p]) s.append(" ").append(fmt("%.1f", 100 * r.hit_rate)).append(" |");
    s += "\n";
  }
  return s;
}

std::string sweep_csv(const SweepTable& t) {
  std::string s =
      "policy,cache_fraction,cache_bytes,hit_rate,coverage,prefetch_accuracy,stall_seconds,ttft_seconds,tpot_seconds,bytes_moved,"
      "hits,misses,prefetches_issued,prefetch_hits,wasted_prefetches,rerouted_slots\n";
  for (size_t p = 0; p < t.policies.size(); ++p)
    for (const SimResult& r : t.cell[p]) {
      char b[512];
      std::snprintf(b, sizeof b, "%s,%.4f,%llu,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%llu,%llu,%llu,%llu,%llu,%llu,%llu\n",
                    t.policies[p].c_str(), r.cache_fraction, static_cast<unsigned long long>(r.cache_bytes), r.hit_rate,
                    r.coverage, r.prefetch_accuracy, r.stall_seconds, r.ttft_seconds, r.tpot_seconds,
                    static_cast<unsigned long long>(r.bytes_moved), static_cast<unsigned long long>(r.counters.hits),
                    static_cast<unsigned long long>(r.counters.misses),
                    static_cast<unsigned long long>(r.counters.prefetches_issued),
                    static_cast<unsigned long long>(r.counters.prefetch_hits),
                    static_cast<unsigned long long>(r.counters.wasted_prefetches),
                    static_cast<unsigned long long>(r.rerouted_slots));
      s += b;
    }
  return s;
}

std::string sweep_svg(const SweepTable& t) {
  const double W = 640, H = 420, L = 60, R = 150, T = 40, B = 50;
  const double pw = W - L - R, ph = H - T - B;
  auto x = [&](double f) { return L + f * pw; };  // cache fraction 0..1
  auto y = [&](double h) { return T + (1 - h) * ph; };
  std::string s = fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\"", W) + fmt(" height=\"%.0f\"", H) +
                  " font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + fmt("%.0f", L) + "\" y=\"24\" font-size=\"14\">" + t.title + "</text>\n";
  for (int i = 0; i <= 10; i += 2) {
    const double v = i / 10.0;
    s += "<line x1=\"" + fmt("%.1f", L) + "\" x2=\"" + fmt("%.1f", L + pw) + "\" y1=\"" + fmt("%.1f", y(v)) + "\" y2=\"" +
         fmt("%.1f", y(v)) + "\" stroke=\"#ddd\"/>\n";
    s += "<text x=\"" + fmt("%.1f", L - 8) + "\" y=\"" + fmt("%.1f", y(v) + 4) + "\" text-anchor=\"end\">" +
         fmt("%.0f%%", 100 * v) + "</text>\n";
    s += "<text x=\"" + fmt("%.1f", x(v)) + "\" y=\"" + fmt("%.1f", T + ph + 18) + "\" text-anchor=\"middle\">" +
         fmt("%.0f%%", 100 * v) + "</text>\n";
  }
  s += "<text x=\"" + fmt("%.1f", L + pw / 2) + "\" y=\"" + fmt("%.1f", H - 10) +
       "\" text-anchor=\"middle\">cache size (share of all experts)</text>\n";
  s += "<text transform=\"translate(16," + fmt("%.1f", T + ph / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">decode hit rate</text>\n";
  s += "<rect x=\"" + fmt("%.1f", L) + "\" y=\"" + fmt("%.1f", T) + "\" width=\"" + fmt("%.1f", pw) + "\" height=\"" +
       fmt("%.1f", ph) + "\" fill=\"none\" stroke=\"black\"/>\n";
  // Belady last so that it is drawn on top.
  std::vector<size_t> order;
  for (size_t p = 0; p < t.policies.size(); ++p)
    if (t.policies[p] != "belady") order.push_back(p);
  for (size_t p = 0; p < t.policies.size(); ++p)
    if (t.policies[p] == "belady") order.push_back(p);
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t p = order[i];
    const bool bound = t.policies[p] == "belady";
    const std::string color = bound ? "black" : kColors[p % 10];
    std::string pts;
    for (size_t f = 0; f < t.fractions.size(); ++f)
      pts += fmt("%.1f,", x(t.fractions[f])) + fmt("%.1f ", y(t.cell[p][f].hit_rate));
    s += "<polyline fill=\"none\" stroke=\"" + color + "\" stroke-width=\"" + (bound ? "3" : "1.8") + "\"" +
         (bound ? " stroke-dasharray=\"6,3\"" : "") + " points=\"" + pts + "\"/>\n";
    for (size_t f = 0; f < t.fractions.size(); ++f)
      s += "<circle cx=\"" + fmt("%.1f", x(t.fractions[f])) + "\" cy=\"" + fmt("%.1f", y(t.cell[p][f].hit_rate)) +
           "\" r=\"3\" fill=\"" + color + "\"/>\n";
    const double ly = T + 14 + 18 * static_cast<double>(i);
    s += "<line x1=\"" + fmt("%.1f", L + pw + 12) + "\" x2=\"" + fmt("%.1f", L + pw + 36) + "\" y1=\"" + fmt("%.1f", ly) +
         "\" y2=\"" + fmt("%.1f", ly) + "\" stroke=\"" + color + "\" stroke-width=\"" + (bound ? "3" : "2") + "\"/>\n";
    s += "<text x=\"" + fmt("%.1f", L + pw + 42) + "\" y=\"" + fmt("%.1f", ly + 4) + "\">" + t.policies[p] +
         (bound ? " (bound)" : "") + "</text>\n";
  }
  s += "</svg>\n";
  return s;
}

}  // namespace moeflow
