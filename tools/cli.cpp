// The helpers of cli.h that more than one subcommand uses: option walking, list parsing and
// printing, the LSE comparison.
#include "cli.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace flamia::cli {

const std::string& OptionReader::value() {
  if (at_ + 1 >= args_.size()) throw std::invalid_argument(option() + " needs a value");
  return args_[++at_];
}

std::string format_list(const std::vector<int>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = text.find(',', at);
    std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (!item.empty()) items.push_back(std::move(item));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return items;
}

int parse_int(const std::string& option, const std::string& text) {
  int value = 0;
  if (!read_whole(
          text, [](const std::string& t, size_t* used) { return std::stoi(t, used); }, value))
    throw std::invalid_argument(option + " takes an integer, not '" + text + "'");
  return value;
}

std::vector<int> parse_int_list(const std::string& text) {
  std::vector<int> values;
  for (const std::string& item : split_list(text))
    values.push_back(parse_int("an item of the list '" + text + "'", item));
  return values;
}

ScaleMode parse_scale_mode(const std::string& text) {
  if (text == "exact") return ScaleMode::kExact;
  if (text == "block32") return ScaleMode::kBlock32;
  if (text == "static") return ScaleMode::kStatic;
  throw std::invalid_argument("--scale-mode takes exact, block32 or static");
}

BackwardPrecision parse_precision(const std::string& text) {
  if (text == "fp8") return BackwardPrecision::kFp8;
  if (text == "fp8-bf16grad") return BackwardPrecision::kFp8Bf16Grad;
  throw std::invalid_argument("--precision takes fp8 or fp8-bf16grad");
}

KeySmoothing parse_smoothing(const std::string& text) {
  if (text == "none") return KeySmoothing::kNone;
  if (text == "first_key") return KeySmoothing::kFirstKey;
  throw std::invalid_argument("--smoothing takes none or first_key");
}

uint64_t parse_seed(const std::string& text) {
  uint64_t seed = 0;  // (std::stoull reads "-1" as 2^64 - 1: a sign is refused first)
  if (text.empty() || text[0] == '-' ||
      !read_whole(
          text, [](const std::string& t, size_t* used) { return std::stoull(t, used); }, seed))
    throw std::invalid_argument("--seed takes an unsigned integer, not '" + text + "'");
  return seed;
}

bool read_workload_option(OptionReader& r, WorkloadOptions& o) {
  const std::string& a = r.option();
  if (a == "--docs")
    o.docs = parse_int_list(r.value());
  else if (a == "--heads-q")
    o.heads_q = parse_int(a, r.value());
  else if (a == "--heads-kv")
    o.heads_kv = parse_int(a, r.value());
  else if (a == "--head-dim")
    o.head_dim = parse_int(a, r.value());
  else if (a == "--scale-mode")  // static: K and V at make_problem's exponents
    o.scale_mode = parse_scale_mode(r.value());
  else if (a == "--precision")
    o.precision = parse_precision(r.value());
  else if (a == "--seed")
    o.seed = parse_seed(r.value());
  else if (a == "--json")
    o.json = true;
  else
    return false;
  return true;
}

double lse_max_abs_difference(const std::vector<float>& gpu, const std::vector<float>& ref) {
  if (gpu.size() != ref.size()) return INFINITY;
  double worst = 0.0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (std::isinf(ref[i])) {  // -inf: a row without visible keys
      if (!(std::isinf(gpu[i]) && gpu[i] < 0)) worst = INFINITY;
      continue;
    }
    const double d = std::fabs(double(gpu[i]) - double(ref[i]));
    worst = std::max(worst, std::isnan(d) ? INFINITY : d);
  }
  return worst;
}

}  // namespace flamia::cli
