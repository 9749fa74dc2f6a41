// Reference quantization (docs/numerics.md §1-§3): the bit-exact spec of the GPU quantize pass.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/fp8_numerics.h"
#include "common/views.h"

namespace flamia::ref {

// A half-open token range [begin, end) sharing one scale (per head).
struct TokenBlock {
  int begin;
  int end;
};

// Scale blocks of one mode over packed documents (document-local; see numerics §2).
std::vector<TokenBlock> scale_blocks(const std::vector<int32_t>& cu_seqlens, ScaleMode mode);
// Tile-aligned blocks: [floor16(doc_start) + n * size, ...) intersected with each document.
std::vector<TokenBlock> tile_aligned_blocks(const std::vector<int32_t>& cu_seqlens, int size);

// FP32 value of element (token, head, d) before quantization (already transformed, e.g. k - m).
using ElementSource = std::function<float(int token, int head, int d)>;

// Values and exponents of one quantized tensor in row-major order:
// values [tokens][heads][dim], exponents [heads][tokens] (the block's exponent per token).
struct Fp8Tensor {
  int tokens = 0;
  int heads = 0;
  int dim = 0;
  std::vector<uint8_t> values;
  std::vector<int8_t> exponents;
  // Some token held an Inf (an infinite amax, numerics §7): E4M3 has none, so the call's outputs
  // are NaN (the kernels: kDeviceStatusInfinite*, then the poison).
  bool infinite = false;
  uint8_t value(int t, int h, int d) const { return values[(size_t(t) * heads + h) * dim + d]; }
  int8_t exponent(int t, int h) const { return exponents[size_t(h) * tokens + t]; }
  // Dequantized value: e4m3 * 2^e.
  float dequantized(int t, int h, int d) const;
};

// The rule that maps a block's absolute maximum to its exponent: scale_exponent (numerics §1)
// everywhere except the causality audit's deliberately unsafe mode.
using ScaleRule = int (*)(float amax);

Fp8Tensor quantize(const ElementSource& source, int tokens, int heads, int dim,
                   const std::vector<TokenBlock>& blocks, ScaleRule rule = scale_exponent);

// The same with one given exponent per head (scale mode kStatic; static_scale_exponent clamps
// it): values q8(x * 2^-e), saturating.
Fp8Tensor quantize_static(const ElementSource& source, int tokens, int heads, int dim,
                          const std::vector<int8_t>& head_exponents);

// Token-major copy [heads][dim][pad16(tokens)] of the same bytes; `permuted` stores each global
// group of 16 tokens in the register-permutation order (slot p holds token 16g + pi(p)).
std::vector<uint8_t> token_major(const Fp8Tensor& x, bool permuted);

}  // namespace flamia::ref
