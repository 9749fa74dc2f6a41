#include "reference/nvfp4_ref.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace flamia::ref {

Nvfp4Tensor quantize_nvfp4(const ElementSource& source, const Fp8Tensor& rule_exponents) {
  if (rule_exponents.dim % kNvfp4BlockElements != 0)
    throw std::invalid_argument("flamia::ref: NVFP4 needs a head dim that is a multiple of 16");
  Nvfp4Tensor out;
  out.tokens = rule_exponents.tokens;
  out.heads = rule_exponents.heads;
  out.dim = rule_exponents.dim;
  const int blocks_per_row = out.dim / kNvfp4BlockElements;
  out.codes.assign(size_t(out.tokens) * out.heads * out.dim, 0);
  out.block_scales.assign(size_t(out.tokens) * out.heads * blocks_per_row, 0);
  out.exponents.assign(size_t(out.heads) * out.tokens, 0);
  float block[kNvfp4BlockElements];
  for (int t = 0; t < out.tokens; ++t)
    for (int h = 0; h < out.heads; ++h) {
      const int e = nvfp4_exponent(rule_exponents.exponent(t, h));
      out.exponents[size_t(h) * out.tokens + t] = int8_t(e);
      for (int b = 0; b < blocks_per_row; ++b) {
        float amax = 0.0f;
        for (int x = 0; x < kNvfp4BlockElements; ++x) {
          block[x] = source(t, h, b * kNvfp4BlockElements + x);
          if (!std::isfinite(block[x])) out.non_finite = true;
          amax = std::max(amax, std::fabs(block[x]));  // (fmax-like: a NaN is flagged above)
        }
        const uint8_t scale =
            std::isfinite(amax) ? nvfp4_block_scale_code(amax * exp2_int(-e)) : kE4M3MaxCode;
        out.block_scales[(size_t(t) * out.heads + h) * blocks_per_row + b] = scale;
        for (int x = 0; x < kNvfp4BlockElements; ++x)
          out.codes[out.element(t, h, b * kNvfp4BlockElements + x)] =
              nvfp4_element_code(block[x], e, scale);
      }
    }
  return out;
}

}  // namespace flamia::ref
