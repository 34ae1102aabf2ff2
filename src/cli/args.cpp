#include "cli/args.h"

#include <algorithm>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <sstream>

#include "base/json_fields.h"

namespace moeflow::cli {

namespace {
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}
}  // namespace

void Args::flag(const std::string& names, const std::string& help, bool takes_value, std::string dflt) {
  flags_.push_back(Flag{split(names, ','), help, takes_value, std::move(dflt)});
}

void Args::positional(const std::string& name, const std::string& help, int max_count) {
  positional_name_ = name;
  positional_help_ = help;
  max_positional_ = max_count;
}

const Args::Flag* Args::lookup(const std::string& n) const {
  for (const auto& f : flags_)
    for (const auto& x : f.names)
      if (x == n) return &f;
  return nullptr;
}

void Args::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") throw UsageError(help());
    if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && (std::isdigit(static_cast<unsigned char>(a[1])) != 0))) {
      std::string value;
      bool inline_value = false;
      const size_t eq = a.find('=');
      if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
        inline_value = true;
      }
      const Flag* f = lookup(a);
      if (!f) throw UsageError("moeflow " + command_ + ": unknown flag '" + a + "'\n" + help());
      if (f->takes_value) {
        if (!inline_value) {
          if (i + 1 >= argc) throw UsageError("moeflow " + command_ + ": flag " + a + " needs a value");
          value = argv[++i];
        }
        values_[f->names.back()] = value;
      } else {
        if (inline_value) throw UsageError("moeflow " + command_ + ": flag " + a + " takes no value");
        // assign(1, '1') rather than = "1": GCC 12 reports a bogus -Wrestrict overlap
        // for a short literal assigned into a map's string.
        values_[f->names.back()].assign(1, '1');
      }
    } else {
      if (static_cast<int>(positionals_.size()) >= max_positional_)
        throw UsageError("moeflow " + command_ + ": unexpected argument '" + a + "'\n" + help());
      positionals_.push_back(a);
    }
  }
}

bool Args::has(const std::string& name) const {
  const Flag* f = lookup(name);
  return f && values_.count(f->names.back());
}

std::string Args::str(const std::string& name) const {
  const Flag* f = lookup(name);
  if (!f) return "";
  auto it = values_.find(f->names.back());
  return it != values_.end() ? it->second : f->dflt;
}

int64_t Args::integer(const std::string& name, int64_t min, int64_t max) const {
  const std::string s = str(name);
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE || v < min || v > max)
    throw UsageError("moeflow " + command_ + ": " + name + " must be an integer in [" + std::to_string(min) + ", " +
                     std::to_string(max) + "], got '" + s + "'");
  return v;
}

double Args::number(const std::string& name, double min, double max) const {
  const std::string s = str(name);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(v >= min && v <= max))
    throw UsageError("moeflow " + command_ + ": " + name + " must be a number in [" + json_short_number(min) + ", " +
                     json_short_number(max) + "], got '" + s + "'");
  return v;
}

std::string Args::help() const {
  std::string h = "usage: moeflow " + command_ + " [flags]";
  if (max_positional_) h += " " + positional_name_;
  h += "\n";
  if (max_positional_) h += "  " + positional_name_ + "  " + positional_help_ + "\n";
  for (const auto& f : flags_) {
    std::string n;
    for (const auto& x : f.names) n += (n.empty() ? "" : ", ") + x;
    if (f.takes_value) n += " V";
    h += "  " + n + std::string(n.size() < 24 ? 24 - n.size() : 1, ' ') + f.help;
    if (!f.dflt.empty()) h += " (default " + f.dflt + ")";
    h += "\n";
  }
  return h;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  for (std::string& item : split(s, ','))
    if (!item.empty()) out.push_back(std::move(item));
  return out;
}

std::vector<int32_t> parse_int_list(const std::string& flag, const std::string& s) {
  std::vector<int32_t> out;
  for (const auto& item : split(s, ',')) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno == ERANGE || v < 0 || v > INT32_MAX)
      throw UsageError(flag + ": '" + item + "' is not a non-negative integer (expected a comma-separated list of them)");
    out.push_back(static_cast<int32_t>(v));
  }
  if (out.empty()) throw UsageError(flag + ": empty list");
  return out;
}

void check_learn_measure_disjoint(std::pair<size_t, size_t> learn, std::pair<size_t, size_t> measure) {
  const size_t lo = std::max(learn.first, measure.first), hi = std::min(learn.second, measure.second);
  if (lo < hi)
    throw UsageError("--learn " + std::to_string(learn.first) + ":" + std::to_string(learn.second) + " and --measure " +
                     std::to_string(measure.first) + ":" + std::to_string(measure.second) + " share requests " +
                     std::to_string(lo) + ":" + std::to_string(hi) +
                     " (a request is learned from or scored, not both; give ranges that do not overlap)");
}

std::pair<size_t, size_t> parse_request_range(const std::string& flag, const std::string& s, size_t n) {
  const size_t colon = s.find(':');
  auto num = [&](const std::string& x, size_t dflt) -> size_t {
    if (x.empty()) return dflt;
    try {
      size_t used = 0;
      const long long v = std::stoll(x, &used);
      if (used != x.size() || v < 0) throw std::invalid_argument(x);
      return std::min(static_cast<size_t>(v), n);
    } catch (...) {
      throw UsageError(flag + " '" + s + "': expected a request range like 0:10, :5 or 3:");
    }
  };
  std::pair<size_t, size_t> r;
  if (colon == std::string::npos) {
    const size_t i = num(s, 0);
    r = {i, std::min(i + 1, n)};
  } else {
    r = {num(s.substr(0, colon), 0), num(s.substr(colon + 1), n)};
  }
  // An empty selection (5:2, or a start past the last request) would silently learn
  // or score nothing.
  if (r.first >= r.second)
    throw UsageError(flag + " '" + s + "' selects no requests (there are " + std::to_string(n) +
                     ", numbered from 0; ranges are begin:end with begin < end)");
  return r;
}

}  // namespace moeflow::cli
