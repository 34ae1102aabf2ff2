// One flag parser shared by every subcommand. Flags are declared with their help
// text; parse() rejects unknown flags, missing values and malformed numbers with a
// message that names the flag and says what is expected.
#pragma once
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace moeflow::cli {

class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& w) : std::runtime_error(w) {}
};

class Args {
 public:
  explicit Args(std::string command) : command_(std::move(command)) {}
  // `names` like "-m,--model". takes_value=false makes it a switch.
  void flag(const std::string& names, const std::string& help, bool takes_value = true,
            std::string default_value = "");
  // Positional arguments are collected in order; `max_positional` of them are allowed.
  void positional(const std::string& name, const std::string& help, int max_count = 1);
  void parse(int argc, char** argv, int first);

  bool has(const std::string& name) const;  // given on the command line (or a switch set)
  bool declared(const std::string& name) const { return lookup(name) != nullptr; }
  std::string str(const std::string& name) const;  // value or default
  int64_t integer(const std::string& name, int64_t min, int64_t max) const;
  double number(const std::string& name, double min, double max) const;
  const std::vector<std::string>& positionals() const { return positionals_; }
  std::string help() const;

 private:
  struct Flag { std::vector<std::string> names; std::string help; bool takes_value; std::string dflt; };
  const Flag* lookup(const std::string& any_name) const;
  std::string command_;
  std::vector<Flag> flags_;
  std::map<std::string, std::string> values_;  // keyed by the flag's long name
  std::string positional_name_, positional_help_;
  int max_positional_ = 0;
  std::vector<std::string> positionals_;
};

// "a:b" (python-like, either side optional; "i" alone is i:i+1) over n items,
// clamped to [0, n]; throws UsageError naming the flag, also when the range selects
// nothing (5:2, or a start at or past n).
std::pair<size_t, size_t> parse_request_range(const std::string& flag, const std::string& s, size_t n);

// A request is learned from or scored, not both: overlapping --learn and --measure
// ranges would score requests in sample without a word. Throws UsageError.
void check_learn_measure_disjoint(std::pair<size_t, size_t> learn, std::pair<size_t, size_t> measure);

// "a,b,,c" -> {"a", "b", "c"}: a comma-separated list (policies, overrides); empty
// items are dropped.
std::vector<std::string> split_list(const std::string& s);

// "1,2,3" -> ids; throws UsageError naming the flag and the bad item.
std::vector<int32_t> parse_int_list(const std::string& flag, const std::string& s);

}  // namespace moeflow::cli
