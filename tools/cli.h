// The `flamia` command-line tool: subcommands and the pieces they share.
#pragma once

#include <string>
#include <vector>

namespace flamia::cli {

int run_demo(const std::vector<std::string>& args);
int run_audit(const std::vector<std::string>& args);

// "1, 17, 113" -> "[1, 17, 113]"
std::string format_list(const std::vector<int>& values);

}  // namespace flamia::cli
