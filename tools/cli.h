// The `flamia` command-line tool: subcommands and the pieces they share.
#pragma once

#include <string>
#include <vector>

namespace flamia::cli {

int run_demo(const std::vector<std::string>& args);
int run_audit(const std::vector<std::string>& args);
int run_accuracy(const std::vector<std::string>& args);

// "1, 17, 113" -> "[1, 17, 113]"
std::string format_list(const std::vector<int>& values);

// "3549,4377,725" -> {3549, 4377, 725}; empty items are skipped, anything else but an integer
// throws std::invalid_argument.
std::vector<int> parse_int_list(const std::string& text);

// Largest |gpu - ref| over LSE rows. A row the reference leaves at -inf (no visible key) must be
// -inf on the GPU too, else the result is inf; NaN also gives inf.
double lse_max_abs_difference(const std::vector<float>& gpu, const std::vector<float>& ref);

}  // namespace flamia::cli
