// flamia: demo and causality audit of the FP8 attention (CPU reference, and the GPU through the
// public C API where an sm_90 GPU is present).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli.h"

namespace {

void print_usage() {
  std::printf(
      "usage: flamia <command> [options]\n"
      "  demo [--cpu] [--docs 1,17,113] [--heads N] [--kv-heads N] [--dim D] [--block32]\n"
      "       [--full] [--smoothing none|first_key] [--seed N] [--repeats N]\n"
      "      forward + backward on a packed workload: accuracy against float64, the causality\n"
      "      audit, and the GPU path (timings, accuracy) when an sm_90 GPU is present\n"
      "  accuracy --docs 3549,4377,725 [--heads-q 2] [--heads-kv 2] [--head-dim 128] [--full]\n"
      "       [--scale-mode exact|block32|static] [--precision fp8|fp8-bf16grad] [--seed N] "
      "[--json]\n"
      "      GPU forward + backward (C API) against the CPU reference and float64: relative L2\n"
      "      errors of O, dQ, dK, dV, LSE max abs; exits 2 without an sm_90 GPU\n"
      "  audit [--json]\n"
      "      causality audit of the CPU reference in the modes exact, block32 and unsafe\n"
      "  formats [--docs 1,17,113,300,700] [--heads-q 4] [--heads-kv 2] [--head-dim 128]\n"
      "       [--scale-mode exact|block32|static] [--smoothing none|first_key] [--key-bias X]\n"
      "       [--precision fp8|fp8-bf16grad] [--seed N] [--json]\n"
      "      CPU reference only: error against float64 with Q.K^T in FP8 and in NVFP4 (the\n"
      "      paper's mixed path, which Hopper has no tensor cores for)\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage();
    return 2;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (command == "demo") return flamia::cli::run_demo(args);
    if (command == "audit") return flamia::cli::run_audit(args);
    if (command == "accuracy") return flamia::cli::run_accuracy(args);
    if (command == "formats") return flamia::cli::run_formats(args);
    if (command == "help" || command == "--help" || command == "-h") {
      print_usage();
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flamia %s: %s\n", command.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "flamia: unknown command '%s'\n", command.c_str());
  print_usage();
  return 2;
}
