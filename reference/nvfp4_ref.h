// NVFP4 operands of the CPU reference (docs/numerics.md §9): FLAMIA's mixed path quantizes Q
// and K of Q·Kᵀ (forward and the backward's recomputation) to NVFP4 and keeps FP8 elsewhere.
// Hopper has no FP4 tensor core: this is the format's executable spec for accuracy studies and
// for a Blackwell kernel, not a GPU path.
#pragma once

#include <cstdint>
#include <vector>

#include "common/nvfp4_numerics.h"
#include "reference/quantize_ref.h"

namespace flamia::ref {

// Which operands Q·Kᵀ reads (forward and backward recomputation alike).
enum class ScoreFormat {
  kFp8,    // Q̂ and K̂: E4M3 with the scale mode's power-of-two scales (numerics §2-§3)
  kNvfp4,  // Q̃ and K̃: E2M1, an E4M3 scale per 16 elements of a row, and a power-of-two scale
           // per token block from the scale mode's (nvfp4_exponent): the same causality
};

// "fp8" or "nvfp4" (messages, tool output).
inline const char* score_format_name(ScoreFormat format) {
  return format == ScoreFormat::kFp8 ? "fp8" : "nvfp4";
}

// One NVFP4 tensor (tokens, heads, dim), dim a multiple of kNvfp4BlockElements.
struct Nvfp4Tensor {
  int tokens = 0;
  int heads = 0;
  int dim = 0;
  std::vector<uint8_t> codes;         // [tokens][heads][dim]: an E2M1 code (4 bits) per byte
  std::vector<uint8_t> block_scales;  // [tokens][heads][dim / 16]: E4M3 codes
  std::vector<int8_t> exponents;      // [heads][tokens]: e' (nvfp4_exponent)
  // Some element was NaN or Inf: E2M1 has neither, so the call's outputs are NaN (numerics §9).
  bool non_finite = false;

  size_t element(int t, int h, int d) const { return (size_t(t) * heads + h) * dim + d; }
  uint8_t block_scale(int t, int h, int d) const {
    return block_scales[(size_t(t) * heads + h) * (dim / kNvfp4BlockElements) +
                        d / kNvfp4BlockElements];
  }
  int8_t exponent(int t, int h) const { return exponents[size_t(h) * tokens + t]; }
  // e2m1 * s, without 2^e' (exact in FP32: 2 x 4 significant bits).
  float block_value(int t, int h, int d) const {
    return e2m1_decode(codes[element(t, h, d)]) * e4m3_decode(block_scale(t, h, d));
  }
  // The dequantized value e2m1 * s * 2^e'.
  float dequantized(int t, int h, int d) const {
    return block_value(t, h, d) * exp2_int(exponent(t, h));
  }
};

// NVFP4 of `source` with the power-of-two exponents of `rule_exponents` (the tensor's E4M3
// quantization under the scale mode, whose tokens, heads and dim it shares): e' =
// nvfp4_exponent(e) per (token, head), then per block of 16 elements the scale
// nvfp4_block_scale_code(amax 2^-e') and the codes nvfp4_element_code.
Nvfp4Tensor quantize_nvfp4(const ElementSource& source, const Fp8Tensor& rule_exponents);

}  // namespace flamia::ref
