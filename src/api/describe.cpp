// flamia_describe_forward: which kernel path a problem runs, as a static string.
#include <cstdio>

#include "api/dispatch.h"
#include "api/errors.h"
#include "api/validation.h"
#include "flamia/flamia.h"

namespace {

// Head dims the descriptions cover (validation decides what is supported).
constexpr int kHeadDims[] = {64, 128, 256};
constexpr int kNumHeadDims = sizeof kHeadDims / sizeof kHeadDims[0];
constexpr int kNumScaleModes = 3;
constexpr int kNumCausal = 3;  // non-causal, causal, causal with a sliding window
constexpr int kNumSmoothings = 3;
constexpr int kNumQuantizePaths = 3;
constexpr int kNumOverlaps = 2;  // the quantize pass before the attention, or overlapped with it
constexpr size_t kDescriptionCapacity = 256;

const char* const kScaleNames[kNumScaleModes] = {"exact scales", "block32 scales",
                                                 "static key and value scales"};
const char* const kCausalNames[kNumCausal] = {"non-causal", "causal",
                                              "causal with a sliding window"};
const char* const kSmoothingNames[kNumSmoothings] = {"no key smoothing", "first-key smoothing",
                                                     "vector key smoothing"};
// Indexed by quantize_path().
const char* const kQuantizeNames[kNumQuantizePaths] = {
    "separate quantize pass", "quantization fused into the kernel",
    "separate quantize pass keeping the backward's operands"};
const char* const kOverlapNames[kNumOverlaps] = {
    "", ", overlapped with the attention per chunk of heads (FLAMIA_FORWARD_OVERLAP)"};

// Every description, built once (thread-safe static initialization) and never freed, so the
// returned pointers stay valid for the life of the process.
struct Descriptions {
  char text[kNumHeadDims][kNumScaleModes][kNumCausal][kNumSmoothings][kNumQuantizePaths]
           [kNumOverlaps][kDescriptionCapacity];
  Descriptions() {
    for (int d = 0; d < kNumHeadDims; ++d) {
      for (int s = 0; s < kNumScaleModes; ++s) {
        for (int c = 0; c < kNumCausal; ++c) {
          for (int m = 0; m < kNumSmoothings; ++m) {
            for (int f = 0; f < kNumQuantizePaths; ++f) {
              for (int o = 0; o < kNumOverlaps; ++o) {
                std::snprintf(text[d][s][c][m][f][o], kDescriptionCapacity,
                              "sm90a fp8 forward, hdim %d, %s, %s, %s, %s%s", kHeadDims[d],
                              kScaleNames[s], kCausalNames[c], kSmoothingNames[m],
                              kQuantizeNames[f], kOverlapNames[o]);
              }
            }
          }
        }
      }
    }
  }
};

int quantize_path(const flamia_forward_args& args) {
  if (flamia::api::forward_fuses_quantize(args)) return 1;
  return args.saved_operands != nullptr ? 2 : 0;
}

constexpr const char* kInvalidDescription =
    "no kernel path: invalid or unsupported arguments (see flamia_last_error_message)";

}  // namespace

extern "C" const char* flamia_describe_forward(const flamia_forward_args* args) {
  constexpr const char* kWhere = "flamia_describe_forward";
  if (args == nullptr) {
    flamia::api::fail(FLAMIA_ERROR_INVALID_ARGUMENT, "%s: args is NULL", kWhere);
    return kInvalidDescription;
  }
  if (flamia::api::validate_forward_problem(*args, kWhere) != FLAMIA_OK) return kInvalidDescription;
  const flamia_problem& p = args->problem;
  int d = 0;
  while (d < kNumHeadDims && kHeadDims[d] != p.head_dim) ++d;
  if (d == kNumHeadDims) {  // supported by the kernels but not listed here
    flamia::api::fail(FLAMIA_ERROR_UNSUPPORTED, "%s: no description for head_dim %d", kWhere,
                      p.head_dim);
    return kInvalidDescription;
  }
  static const Descriptions descriptions;
  // Validated: the enums hold their enumerators' values.
  // A window is causal (validated); one at least as long as every document runs as none
  // (packed_shape).
  const int causal = flamia::api::packed_shape(p).sliding_window > 0 ? 2 : p.causal;
  const int overlapped = flamia::api::forward_overlap_plan(*args).overlapped() ? 1 : 0;
  return descriptions
      .text[d][p.scale_mode][causal][p.key_smoothing][quantize_path(*args)][overlapped];
}
