// The `flamia` command-line tool: subcommands and the pieces they share.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "common/views.h"

namespace flamia::cli {

int run_demo(const std::vector<std::string>& args);
int run_audit(const std::vector<std::string>& args);
int run_accuracy(const std::vector<std::string>& args);
int run_formats(const std::vector<std::string>& args);

// Walks a subcommand's arguments one option at a time:
//   for (OptionReader r(args); r.next();) if (r.option() == "--docs") use(r.value()); ...
class OptionReader {
 public:
  explicit OptionReader(const std::vector<std::string>& args) : args_(args) {}
  // Moves to the next option; false past the last one.
  bool next() { return ++at_ < args_.size(); }
  const std::string& option() const { return args_[at_]; }
  // The argument after the current option, consumed as its value; throws std::invalid_argument
  // when the option is the last argument.
  const std::string& value();

 private:
  const std::vector<std::string>& args_;
  size_t at_ = size_t(-1);  // before the first argument until next()
};

// "1, 17, 113" -> "[1, 17, 113]"
std::string format_list(const std::vector<int>& values);

// "3549,,4377" -> {"3549", "4377"}: the comma-separated items, empty ones skipped.
std::vector<std::string> split_list(const std::string& text);

// `text` read whole by `read` (std::stoi, std::stoull, std::stof: (text, size_t* used) -> T):
// true and `value` set, or false when it fails or leaves characters unread.
template <typename T, typename Read>
bool read_whole(const std::string& text, Read read, T& value) {
  size_t used = 0;
  try {
    value = read(text, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used != 0 && used == text.size();
}

// The whole of `text` as an integer, else std::invalid_argument naming `option`.
int parse_int(const std::string& option, const std::string& text);

// "3549,4377,725" -> {3549, 4377, 725}; empty items are skipped, anything else but an integer
// throws std::invalid_argument.
std::vector<int> parse_int_list(const std::string& text);

// Option values shared by the subcommands; anything else throws std::invalid_argument naming
// the choices. --scale-mode: exact, block32 or static; --precision: fp8 or fp8-bf16grad;
// --smoothing: none or first_key; --seed: an unsigned integer.
ScaleMode parse_scale_mode(const std::string& text);
BackwardPrecision parse_precision(const std::string& text);
KeySmoothing parse_smoothing(const std::string& text);
uint64_t parse_seed(const std::string& text);

// The workload options that `accuracy` and `formats` share: --docs, --heads-q, --heads-kv,
// --head-dim, --scale-mode, --precision, --seed and --json.
struct WorkloadOptions {
  std::vector<int> docs;
  int heads_q = 2;
  int heads_kv = 2;
  int head_dim = 128;
  ScaleMode scale_mode = ScaleMode::kExact;
  BackwardPrecision precision = BackwardPrecision::kFp8;
  uint64_t seed = 1;
  bool json = false;
};
// Consumes the reader's current option into `o` when it is one of WorkloadOptions' (true);
// false for any other option.
bool read_workload_option(OptionReader& r, WorkloadOptions& o);

// Largest |gpu - ref| over LSE rows. A row the reference leaves at -inf (no visible key) must be
// -inf on the GPU too, else the result is inf; NaN also gives inf.
double lse_max_abs_difference(const std::vector<float>& gpu, const std::vector<float>& ref);

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace flamia::cli
