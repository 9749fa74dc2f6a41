#include "reference/quantize_ref.h"

#include <algorithm>
#include <cmath>

namespace flamia::ref {

std::vector<TokenBlock> scale_blocks(const std::vector<int32_t>& cu_seqlens, ScaleMode mode) {
  const int size = mode == ScaleMode::kBlock32 ? kBlock32Tokens : 1;  // kStatic: Q per token
  std::vector<TokenBlock> blocks;
  for (size_t b = 0; b + 1 < cu_seqlens.size(); ++b)
    for (int t = cu_seqlens[b]; t < cu_seqlens[b + 1]; t += size)
      blocks.push_back({t, std::min(t + size, int(cu_seqlens[b + 1]))});
  return blocks;
}

std::vector<TokenBlock> tile_aligned_blocks(const std::vector<int32_t>& cu_seqlens, int size) {
  std::vector<TokenBlock> blocks;
  for (size_t b = 0; b + 1 < cu_seqlens.size(); ++b) {
    const int start = cu_seqlens[b], end = cu_seqlens[b + 1];
    if (start == end) continue;  // an empty document has no block (not even an empty one)
    for (int t = start / kPermutationGroup * kPermutationGroup; t < end; t += size)
      blocks.push_back({std::max(t, start), std::min(t + size, end)});
  }
  return blocks;
}

float Fp8Tensor::dequantized(int t, int h, int d) const {
  return e4m3_decode(value(t, h, d)) * exp2_int(exponent(t, h));
}

namespace {

Fp8Tensor zero_tensor(int tokens, int heads, int dim) {
  Fp8Tensor out;
  out.tokens = tokens;
  out.heads = heads;
  out.dim = dim;
  out.values.assign(size_t(tokens) * heads * dim, 0);
  out.exponents.assign(size_t(heads) * tokens, 0);
  return out;
}

}  // namespace

Fp8Tensor quantize(const ElementSource& source, int tokens, int heads, int dim,
                   const std::vector<TokenBlock>& blocks, ScaleRule rule) {
  Fp8Tensor out = zero_tensor(tokens, heads, dim);
  for (const TokenBlock& block : blocks) {
    for (int h = 0; h < heads; ++h) {
      float amax = 0.0f;
      for (int t = block.begin; t < block.end; ++t)
        for (int d = 0; d < dim; ++d) amax = std::max(amax, std::fabs(source(t, h, d)));
      if (std::isinf(amax)) out.infinite = true;
      const int e = rule(amax);
      for (int t = block.begin; t < block.end; ++t) {
        out.exponents[size_t(h) * tokens + t] = int8_t(e);
        for (int d = 0; d < dim; ++d)
          out.values[(size_t(t) * heads + h) * dim + d] = quantize_e4m3(source(t, h, d), e);
      }
    }
  }
  return out;
}

Fp8Tensor quantize_static(const ElementSource& source, int tokens, int heads, int dim,
                          const std::vector<int8_t>& head_exponents) {
  Fp8Tensor out = zero_tensor(tokens, heads, dim);
  for (int h = 0; h < heads; ++h) {
    const int e = static_scale_exponent(head_exponents[size_t(h)]);
    for (int t = 0; t < tokens; ++t) {
      out.exponents[size_t(h) * tokens + t] = int8_t(e);
      for (int d = 0; d < dim; ++d) {
        const float x = source(t, h, d);
        if (std::isinf(x)) out.infinite = true;  // (the kernels take every token's amax)
        out.values[(size_t(t) * heads + h) * dim + d] = quantize_e4m3(x, e);
      }
    }
  }
  return out;
}

std::vector<uint8_t> token_major(const Fp8Tensor& x, bool permuted) {
  const int64_t padded = padded_tokens(x.tokens);
  std::vector<uint8_t> out(size_t(x.heads) * x.dim * padded, 0);
  for (int t = 0; t < x.tokens; ++t) {
    const int64_t slot = permuted ? permuted_index(t) : t;
    for (int h = 0; h < x.heads; ++h)
      for (int d = 0; d < x.dim; ++d)
        out[(size_t(h) * x.dim + d) * padded + slot] = x.value(t, h, d);
  }
  return out;
}

}  // namespace flamia::ref
