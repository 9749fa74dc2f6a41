// The quantize pass (src/kernels/quantize) against its bit-exact spec, the reference's
// quantize_forward_operands / quantize_backward_operands: every layout and every exponent byte
// for byte; the LSE shift and delta (FP32 sums, double in the reference) to a tolerance.
// Inputs are fresh random BF16 tensors whose per-(token, head) scales span tiny (BF16
// subnormal) to huge values, with zero rows, exact E4M3 ties and single spikes; documents have
// awkward lengths (1, 17, 113, 2049, empty ones; totals not multiples of 16); inputs are read
// through dense, padded and head-major strides whose gaps hold NaN; outputs are poisoned.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_utils.h"
#include "kernels/quantize/quantize.h"
#include "reference/attention_ref.h"
#include "reference/bf16.h"

namespace flamia::test {
namespace {

constexpr uint8_t kValuePoison = 0xFF;     // E4M3 -NaN: never produced from finite inputs
constexpr uint8_t kExponentPoison = 0x7F;  // exponent 127: never produced (e <= 120)
constexpr uint8_t kFloatPoison = 0xFF;     // FP32 NaN
// The second side of a comparison between two kernels on non-finite inputs (where 0xFF, E4M3
// -NaN, is a legal output): E4M3 +NaN, exponent 126 (never produced), FP32 -1.7e38.
constexpr uint8_t kComparisonValuePoison = 0x7F;
constexpr uint8_t kComparisonExponentPoison = 0x7E;
constexpr uint8_t kComparisonFloatPoison = 0xFE;

// ---- Random inputs ---------------------------------------------------------------------------

// Per-(token, head) row kinds: what each row of a tensor looks like.
enum class RowKind { kNormal, kZero, kTiny, kHuge, kTies, kSpike };

class InputGenerator {
 public:
  explicit InputGenerator(uint64_t seed) : rng_(seed) {}

  // A BF16 tensor whose rows (one token, one head) have random kinds and scales.
  ref::HostTensor tensor(int tokens, int heads, int dim, bool extreme = true) {
    ref::HostTensor x(tokens, heads, dim);
    for (int t = 0; t < tokens; ++t)
      for (int h = 0; h < heads; ++h) fill_row(x, t, h, extreme ? row_kind() : RowKind::kNormal);
    return x;
  }
  std::vector<float> smoothing_vector(int heads_kv, int dim) {
    std::vector<float> v(size_t(heads_kv) * dim);
    for (float& x : v) x = normal() * std::ldexp(1.0f, uniform_int(-4, 4));
    return v;
  }
  // {M, l} per (head, query): l spans many magnitudes; some rows have l = 0 (no visible key).
  // Rows whose dO / l are exact E4M3 ties: l = (3, 5 or 7) * 2^k and dO = tie * l, both exact
  // in BF16/FP32. An IEEE division gives the tie back, the contract's dO * fl(1/l) (numerics §3)
  // a value one FP32 ulp beside it, which E4M3 rounds the other way half the time: the two
  // rules give different bytes here, so these rows tell them apart.
  void divided_ties(ref::HostTensor& d_o, std::vector<float>& stats) {
    constexpr int kOdd[] = {3, 5, 7};
    for (int t = 0; t < d_o.tokens; ++t)
      for (int h = 0; h < d_o.heads; ++h) {
        if (uniform_int(0, 7) != 0) continue;
        const float l = float(kOdd[uniform_int(0, 2)]) * std::ldexp(1.0f, uniform_int(-6, 10));
        stats[(size_t(h) * d_o.tokens + t) * 2 + 1] = l;
        const float scale = std::ldexp(1.0f, uniform_int(-10, 10));
        for (int d = 0; d < d_o.dim; ++d) d_o.set(t, h, d, tie_value() * scale * l);
      }
  }

  std::vector<float> softmax_stats(int heads, int tokens) {
    std::vector<float> stats(size_t(heads) * tokens * 2);
    for (size_t r = 0; r < stats.size() / 2; ++r) {
      stats[2 * r] = float(uniform_int(-20, 20));
      const bool masked = uniform_int(0, 31) == 0;
      stats[2 * r + 1] =
          masked ? 0.0f : (1.0f + uniform()) * std::ldexp(1.0f, uniform_int(-12, 24));
    }
    return stats;
  }

 private:
  RowKind row_kind() {
    const int r = uniform_int(0, 99);
    if (r < 64) return RowKind::kNormal;
    if (r < 70) return RowKind::kZero;
    if (r < 78) return RowKind::kTiny;
    if (r < 84) return RowKind::kHuge;
    if (r < 94) return RowKind::kTies;
    return RowKind::kSpike;
  }

  void fill_row(ref::HostTensor& x, int t, int h, RowKind kind) {
    const int dim = x.dim;
    switch (kind) {
      case RowKind::kZero:
        for (int d = 0; d < dim; ++d) x.set(t, h, d, uniform_int(0, 1) ? 0.0f : -0.0f);
        return;
      case RowKind::kTies: {
        // amax = 448 * 2^s fixes the exponent at s; the other values sit exactly halfway
        // between two E4M3 values (times 2^s), where only round-to-nearest-even decides.
        const int s = uniform_int(-24, 24);
        for (int d = 0; d < dim; ++d) x.set(t, h, d, tie_value() * std::ldexp(1.0f, s));
        x.set(t, h, uniform_int(0, dim - 1), kE4M3Max * std::ldexp(1.0f, s));
        return;
      }
      case RowKind::kSpike: {
        // One large value and BF16 subnormals: most of the row falls below E4M3's range.
        for (int d = 0; d < dim; ++d) x.set(t, h, d, normal() * std::ldexp(1.0f, -130));
        x.set(t, h, uniform_int(0, dim - 1), normal() * std::ldexp(1.0f, uniform_int(0, 60)));
        return;
      }
      default:
        break;
    }
    int scale = uniform_int(-24, 24);
    if (kind == RowKind::kTiny) scale = uniform_int(-135, -112);  // BF16 subnormals included
    if (kind == RowKind::kHuge) scale = uniform_int(90, 110);
    for (int d = 0; d < dim; ++d) {
      const bool zero = uniform_int(0, 19) == 0;
      x.set(t, h, d, zero ? 0.0f : normal() * std::ldexp(1.0f, scale));
    }
  }

  // A value halfway between two consecutive E4M3 values, random sign.
  float tie_value() {
    const int code = uniform_int(0, kE4M3MaxCode - 1);
    const float mid = 0.5f * (e4m3_decode(uint8_t(code)) + e4m3_decode(uint8_t(code + 1)));
    return uniform_int(0, 1) ? -mid : mid;
  }
  float normal() { return std::normal_distribution<float>(0.0f, 1.0f)(rng_); }
  float uniform() { return std::uniform_real_distribution<float>(0.0f, 1.0f)(rng_); }
  int uniform_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  std::mt19937_64 rng_;
};

// ---- Device inputs with arbitrary strides ------------------------------------------------------

enum class Layout { kDense, kPadded, kHeadMajor };

constexpr int64_t kRowPad = 8;     // elements between head rows (keeps 16-byte alignment)
constexpr int64_t kTokenPad = 16;  // elements between token rows
constexpr uint16_t kBf16NaN = 0xFFFF;

// A BF16 tensor on the device in `layout`; every element outside the tensor's rows is NaN, so
// a read outside them shows up in the results.
struct DeviceInput {
  DeviceBuffer<uint16_t> buffer;
  Bf16View view;
};

DeviceInput upload(const ref::HostTensor& x, Layout layout) {
  const int64_t dim = x.dim;
  int64_t token_stride = int64_t(x.heads) * dim, head_stride = dim;
  if (layout == Layout::kPadded) {
    head_stride = dim + kRowPad;
    token_stride = x.heads * head_stride + kTokenPad;
  } else if (layout == Layout::kHeadMajor) {
    token_stride = dim + kRowPad;
    head_stride = int64_t(x.tokens) * token_stride + kTokenPad;
  }
  const int64_t span = std::max<int64_t>(
      1, (x.tokens > 0 ? (x.tokens - 1) * token_stride + (x.heads - 1) * head_stride + dim : 0));
  std::vector<uint16_t> host(size_t(span), kBf16NaN);
  for (int t = 0; t < x.tokens; ++t)
    for (int h = 0; h < x.heads; ++h)
      for (int d = 0; d < x.dim; ++d)
        host[size_t(t * token_stride + h * head_stride + d)] = x.bits[x.index(t, h, d)];
  DeviceInput in{DeviceBuffer<uint16_t>(host), {}};
  in.view = {in.buffer.get(), token_stride, head_stride};
  return in;
}

// ---- Device outputs --------------------------------------------------------------------------

struct DeviceCopy {
  DeviceBuffer<uint8_t> values;
  DeviceBuffer<int8_t> exponents;
  DeviceCopy(size_t value_bytes, int heads, int tokens)
      : values(value_bytes), exponents(size_t(heads) * tokens) {
    values.poison(kValuePoison);
    exponents.poison(kExponentPoison);
  }
  // For the side of a kernel-against-kernel comparison: poison unlike the other side's, so that
  // an element neither kernel writes differs instead of comparing equal poison to poison.
  void repoison_for_comparison() {
    values.poison(kComparisonValuePoison);
    exponents.poison(kComparisonExponentPoison);
  }
  Fp8Copy copy() const { return {values.get(), exponents.get()}; }
};

DeviceBuffer<float> poisoned_floats(size_t count) {
  DeviceBuffer<float> buffer(count);
  buffer.poison(kFloatPoison);
  return buffer;
}

// FP32 values as bits (NaN compares equal to itself).
std::vector<uint32_t> float_bits_of(const std::vector<float>& values) {
  std::vector<uint32_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = float_bits(values[i]);
  return bits;
}

// ---- Comparison ------------------------------------------------------------------------------

using Describe = std::function<std::string(size_t index)>;

std::string row_major_at(size_t i, int heads, int dim) {
  const size_t d = i % dim, h = i / dim % heads, t = i / dim / heads;
  return "token " + std::to_string(t) + " head " + std::to_string(h) + " d " + std::to_string(d);
}
std::string token_major_at(size_t i, int dim, int64_t padded) {
  const size_t slot = i % padded, d = i / padded % dim, h = i / padded / dim;
  return "head " + std::to_string(h) + " d " + std::to_string(d) + " slot " + std::to_string(slot);
}
std::string exponent_at(size_t i, int tokens) {
  return "head " + std::to_string(i / tokens) + " token " + std::to_string(i % tokens);
}

// Byte-for-byte equality, reporting the number of mismatches and the first few.
template <typename T>
void expect_bytes_equal(const char* what, const std::vector<T>& got, const std::vector<T>& want,
                        const Describe& describe) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t mismatches = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (++mismatches <= 5) {
      char line[160];
      std::snprintf(line, sizeof(line), "\n  %s: got 0x%02X want 0x%02X", describe(i).c_str(),
                    unsigned(uint8_t(got[i])), unsigned(uint8_t(want[i])));
      first += line;
    }
  }
  EXPECT_EQ(mismatches, 0u) << what << ": " << mismatches << " of " << got.size() << " bytes differ"
                            << first;
}

// An FP32 sum against the reference's double sum: |got - want| <= rel * bound + abs, where
// bound(i) is the sum of |terms| (so cancellation does not tighten the check). NaN never
// passes. Entries whose bound exceeds the FP32 range (products of huge rows) are undefined in
// FP32 (inf in the reference's double sum, inf or NaN in an FP32 one) and are not compared.
void expect_sums_close(const char* what, const std::vector<float>& got,
                       const std::vector<float>& want, const std::vector<double>& bound,
                       double rel) {
  ASSERT_EQ(got.size(), want.size()) << what;
  constexpr double kAbsolute = 1e-37;  // FP32 subnormal rounding of tiny terms
  const double kRange = std::numeric_limits<float>::max();
  size_t bad = 0, compared = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    if (bound[i] > kRange) continue;
    ++compared;
    const double diff = std::fabs(double(got[i]) - double(want[i]));
    if (!std::isnan(got[i]) && diff <= rel * bound[i] + kAbsolute) continue;
    if (++bad <= 5)
      first += "\n  index " + std::to_string(i) + ": got " + std::to_string(got[i]) + " want " +
               std::to_string(want[i]);
  }
  EXPECT_GT(compared, got.size() / 2) << what << ": too few comparable entries";
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << compared << " out of tolerance" << first;
}

// The FP32 dots are FMA chains and shuffle trees: a few D ulps of the sum of |terms|.
constexpr double kDotTolerance = 1e-5;

// ---- Cases -----------------------------------------------------------------------------------

struct QuantizeCase {
  std::string name;
  std::vector<int> q_docs;
  std::vector<int> k_docs;  // empty: the same as q_docs
  int heads_q = 4;
  int heads_kv = 2;
  int head_dim = 128;
  ScaleMode mode = ScaleMode::kExact;
  KeySmoothing smoothing = KeySmoothing::kNone;
  Layout layout = Layout::kDense;
  bool fused_forward = false;  // backward: also rebuild Q̂, K̂, V̂ᵀ and the LSE shift
};

std::string case_name(const ::testing::TestParamInfo<QuantizeCase>& info) {
  return info.param.name;
}

// Documents with many short and empty documents (runs of empty documents give a tile more
// cu_seqlens entries than it caches, which exercises the global-memory search).
constexpr int kEmptyRun = 130;
std::vector<int> many_documents(int count, int max_length, bool with_empty, uint64_t seed) {
  std::mt19937 rng{uint32_t(seed)};
  std::vector<int> docs;
  for (int i = 0; i < count; ++i) {
    docs.push_back(std::uniform_int_distribution<int>(1, max_length)(rng));
    if (with_empty && i % 2 == 0)
      for (int e = 0; e < kEmptyRun; ++e) docs.push_back(0);
  }
  return docs;
}

const std::vector<int> kAwkwardDocs = {1, 17, 0, 113, 2049, 0, 3};  // 2183 tokens

std::vector<QuantizeCase> quantize_cases() {
  std::vector<QuantizeCase> cases = {
      {"awkward_d128_exact", kAwkwardDocs, {}, 4, 2, 128, ScaleMode::kExact},
      {"awkward_d128_block32_first_key_padded",
       kAwkwardDocs,
       {},
       4,
       2,
       128,
       ScaleMode::kBlock32,
       KeySmoothing::kFirstKey,
       Layout::kPadded},
      {"awkward_d64_block32_vector_mqa_head_major",
       kAwkwardDocs,
       {},
       8,
       1,
       64,
       ScaleMode::kBlock32,
       KeySmoothing::kVector,
       Layout::kHeadMajor},
      {"awkward_d256_exact_first_key_padded",
       kAwkwardDocs,
       {},
       2,
       2,
       256,
       ScaleMode::kExact,
       KeySmoothing::kFirstKey,
       Layout::kPadded},
      {"awkward_d256_block32_none_head_major",
       kAwkwardDocs,
       {},
       4,
       1,
       256,
       ScaleMode::kBlock32,
       KeySmoothing::kNone,
       Layout::kHeadMajor},
      {"awkward_d64_exact_first_key",
       kAwkwardDocs,
       {},
       6,
       3,
       64,
       ScaleMode::kExact,
       KeySmoothing::kFirstKey},
      {"one_token_documents_block32_first_key",
       std::vector<int>(301, 1),
       {},
       2,
       1,
       128,
       ScaleMode::kBlock32,
       KeySmoothing::kFirstKey,
       Layout::kPadded},
      {"short_and_empty_documents_block32_first_key",
       many_documents(60, 40, true, 7),
       {},
       2,
       2,
       64,
       ScaleMode::kBlock32,
       KeySmoothing::kFirstKey},
      {"unaligned_documents_d128_block32_vector",
       many_documents(40, 150, false, 11),
       {},
       4,
       4,
       128,
       ScaleMode::kBlock32,
       KeySmoothing::kVector,
       Layout::kPadded},
      {"unequal_q_k_documents_first_key",
       {3, 17, 40, 0, 21},
       {0, 33, 5, 9, 0},
       4,
       2,
       128,
       ScaleMode::kBlock32,
       KeySmoothing::kFirstKey,
       Layout::kPadded},
      {"unequal_q_k_documents_vector_d256",
       {31, 0, 64, 5},
       {16, 7, 0, 40},
       2,
       1,
       256,
       ScaleMode::kExact,
       KeySmoothing::kVector},
      {"long_document_d128_block32_first_key",
       {4100, 1},
       {},
       2,
       1,
       128,
       ScaleMode::kBlock32,
       KeySmoothing::kFirstKey,
       Layout::kHeadMajor},
      // Cases the token-scale kernel takes (exact, no smoothing; its every job in the forward,
      // Q and V in the backward), each also run on the general kernel alone (below).
      {"awkward_d64_exact_gqa4_head_major",
       kAwkwardDocs,
       {},
       8,
       2,
       64,
       ScaleMode::kExact,
       KeySmoothing::kNone,
       Layout::kHeadMajor},
      {"unequal_q_k_documents_d128_exact",
       {3, 17, 40, 0, 21},
       {0, 33, 5, 9, 0},
       4,
       2,
       128,
       ScaleMode::kExact,
       KeySmoothing::kNone,
       Layout::kPadded},
      {"long_document_d64_exact", {4100, 1}, {}, 2, 1, 64, ScaleMode::kExact},
      // Documents whose dO'' blocks (64 queries from floor16(start)) straddle the 128-token
      // tiles: the dO job's halo, on the gradient token kernel and on the general one.
      {"misaligned_documents_d128_exact",
       {48, 300, 5, 250},
       {},
       4,
       2,
       128,
       ScaleMode::kExact,
       KeySmoothing::kNone,
       Layout::kPadded},
      // Exact with key smoothing at head dim 128: the forward's V job (token-scale) and its Q
      // and K jobs (general) in one mixed launch of the general kernel.
      {"misaligned_documents_d128_exact_vector",
       {48, 300, 5, 250},
       {},
       4,
       2,
       128,
       ScaleMode::kExact,
       KeySmoothing::kVector},
      {"misaligned_documents_d64_exact_head_major",
       {33, 200, 77, 129},
       {},
       4,
       2,
       64,
       ScaleMode::kExact,
       KeySmoothing::kNone,
       Layout::kHeadMajor},
  };
  // The backward's fused rebuild of the forward copies on some cases.
  for (size_t i = 0; i < cases.size(); i += 2) cases[i].fused_forward = true;
  return cases;
}

ref::Problem make_problem(const QuantizeCase& c) {
  ref::Problem p =
      ref::make_problem(c.q_docs, c.heads_q, c.heads_kv, c.head_dim, /*causal=*/false, c.mode);
  if (!c.k_docs.empty()) {
    p.cu_seqlens_k.assign(1, 0);
    for (int length : c.k_docs) p.cu_seqlens_k.push_back(p.cu_seqlens_k.back() + length);
  }
  p.key_smoothing = c.smoothing;
  p.softmax_scale = 0.37f;
  return p;
}

uint64_t seed_of(const std::string& name) {
  return case_seed(name);
}

// Everything one case needs on both sides.
struct CaseData {
  ref::Problem problem;
  ref::Inputs inputs;
  ref::HostTensor o;
  std::vector<float> stats;
  DeviceBuffer<int32_t> cu_q, cu_k;
  DeviceBuffer<float> smoothing_vector;
  PackedShape shape;

  explicit CaseData(const QuantizeCase& c) : problem(make_problem(c)) {
    InputGenerator gen(seed_of(c.name));
    const int tq = problem.total_q(), tk = problem.total_k(), dim = c.head_dim;
    inputs.q = gen.tensor(tq, c.heads_q, dim);
    inputs.k = gen.tensor(tk, c.heads_kv, dim);
    inputs.v = gen.tensor(tk, c.heads_kv, dim);
    inputs.d_o = gen.tensor(tq, c.heads_q, dim);
    o = gen.tensor(tq, c.heads_q, dim, /*extreme=*/false);
    stats = gen.softmax_stats(c.heads_q, tq);
    gen.divided_ties(inputs.d_o, stats);
    if (c.smoothing == KeySmoothing::kVector)
      problem.smoothing_vector = gen.smoothing_vector(c.heads_kv, dim);
    cu_q = DeviceBuffer<int32_t>(problem.cu_seqlens_q);
    cu_k = DeviceBuffer<int32_t>(problem.cu_seqlens_k);
    smoothing_vector = DeviceBuffer<float>(problem.smoothing_vector);
    shape.cu_seqlens_q = cu_q.get();
    shape.cu_seqlens_k = cu_k.get();
    shape.batch = problem.batch();
    shape.total_q = tq;
    shape.total_k = tk;
    shape.heads_q = c.heads_q;
    shape.heads_kv = c.heads_kv;
    shape.head_dim = dim;
    for (int b = 0; b < shape.batch; ++b) {
      shape.max_seqlen_q =
          std::max(shape.max_seqlen_q, problem.cu_seqlens_q[b + 1] - problem.cu_seqlens_q[b]);
      shape.max_seqlen_k =
          std::max(shape.max_seqlen_k, problem.cu_seqlens_k[b + 1] - problem.cu_seqlens_k[b]);
    }
  }
};

// The case's BF16 inputs (in the case's layout), O and {M, l} on the device.
struct DeviceInputs {
  DeviceInput q, k, v, d_o, o;
  DeviceBuffer<float> stats;

  DeviceInputs(const CaseData& data, Layout layout)
      : q(upload(data.inputs.q, layout)),
        k(upload(data.inputs.k, layout)),
        v(upload(data.inputs.v, layout)),
        d_o(upload(data.inputs.d_o, layout)),
        o(upload(data.o, layout)),
        stats(data.stats) {}

  // The backward pass over these inputs; no outputs set.
  QuantizeBackwardArgs backward_args(const CaseData& data, ScaleMode mode) const {
    QuantizeBackwardArgs args;
    args.shape = data.shape;
    args.scale_mode = mode;
    args.q = q.view;
    args.k = k.view;
    args.v = v.view;
    args.o = o.view;
    args.d_o = d_o.view;
    args.softmax_stats = stats.get();
    return args;
  }
};

// The forward pass's outputs Q̂, K̂, V̂ᵀ and LSE shift, poisoned (written by the forward pass, or
// by the backward one when fused).
struct ForwardCopies {
  DeviceCopy q_hat, k_hat, v_hat_t;
  DeviceBuffer<float> lse_shift;

  ForwardCopies(const QuantizeCase& c, int tq, int tk)
      : q_hat(row_major_bytes(tq, c.heads_q, c.head_dim), c.heads_q, tq),
        k_hat(row_major_bytes(tk, c.heads_kv, c.head_dim), c.heads_kv, tk),
        v_hat_t(token_major_bytes(tk, c.heads_kv, c.head_dim), c.heads_kv, tk),
        lse_shift(poisoned_floats(size_t(c.heads_q) * tq)) {}

  // All four as pass outputs; the LSE shift only when `with_shift`.
  ForwardOperands outputs(bool with_shift) const {
    ForwardOperands out;
    out.q = q_hat.copy();
    out.k = k_hat.copy();
    out.v_t = v_hat_t.copy();
    out.lse_shift = with_shift ? lse_shift.get() : nullptr;
    return out;
  }
};

// sum_d |q_id m_d| * softmax_scale: the scale of the LSE shift's rounding error.
std::vector<double> lse_shift_bounds(const CaseData& data) {
  const ref::Problem& p = data.problem;
  std::vector<double> bound(size_t(p.heads_q) * p.total_q(), 0.0);
  for (int b = 0; b < p.batch(); ++b) {
    if (p.cu_seqlens_k[b] == p.cu_seqlens_k[b + 1]) continue;
    const int key = p.cu_seqlens_k[b];
    for (int i = p.cu_seqlens_q[b]; i < p.cu_seqlens_q[b + 1]; ++i)
      for (int h = 0; h < p.heads_q; ++h) {
        double sum = 0.0;
        for (int d = 0; d < p.head_dim; ++d) {
          const double m = p.key_smoothing == KeySmoothing::kVector
                               ? p.smoothing_vector[size_t(p.kv_head(h)) * p.head_dim + d]
                               : data.inputs.k.at(key, p.kv_head(h), d);
          sum += std::fabs(double(data.inputs.q.at(i, h, d)) * m);
        }
        // The kernel sums in FP32 before scaling: a sum beyond FP32's range is not comparable.
        const bool in_range = sum <= std::numeric_limits<float>::max();
        bound[size_t(h) * p.total_q() + i] =
            in_range ? sum * p.softmax_scale : std::numeric_limits<double>::infinity();
      }
  }
  return bound;
}

// sum_d |decode(dÔ_id) 2^e O_id|: the scale of delta's rounding error.
std::vector<double> delta_bounds(const CaseData& data, const ref::Fp8Tensor& d_o) {
  const ref::Problem& p = data.problem;
  std::vector<double> bound(size_t(p.heads_q) * p.total_q(), 0.0);
  for (int t = 0; t < p.total_q(); ++t)
    for (int h = 0; h < p.heads_q; ++h) {
      double sum = 0.0;
      for (int d = 0; d < p.head_dim; ++d)
        sum += std::fabs(double(d_o.dequantized(t, h, d)) * double(data.o.at(t, h, d)));
      bound[size_t(h) * p.total_q() + t] = sum;
    }
  return bound;
}

void expect_row_major(const char* what, const DeviceCopy& got, const ref::Fp8Tensor& want) {
  const int heads = want.heads, dim = want.dim, tokens = want.tokens;
  expect_bytes_equal(what, got.values.download(), want.values,
                     [&](size_t i) { return row_major_at(i, heads, dim); });
  expect_bytes_equal(what, got.exponents.download(), want.exponents,
                     [&](size_t i) { return exponent_at(i, tokens); });
  EXPECT_TRUE(got.values.guard_intact(kValuePoison)) << what << ": write past the end";
  EXPECT_TRUE(got.exponents.guard_intact(kExponentPoison)) << what << ": write past the end";
}

void expect_token_major(const char* what, const DeviceCopy& got, const std::vector<uint8_t>& want,
                        const ref::Fp8Tensor& exponents_of) {
  const int dim = exponents_of.dim, tokens = exponents_of.tokens;
  const int64_t padded = padded_tokens(tokens);
  expect_bytes_equal(what, got.values.download(), want,
                     [&](size_t i) { return token_major_at(i, dim, padded); });
  expect_bytes_equal(what, got.exponents.download(), exponents_of.exponents,
                     [&](size_t i) { return exponent_at(i, tokens); });
  EXPECT_TRUE(got.values.guard_intact(kValuePoison)) << what << ": write past the end";
  EXPECT_TRUE(got.exponents.guard_intact(kExponentPoison)) << what << ": write past the end";
}

class QuantizeKernelTest : public ::testing::TestWithParam<QuantizeCase> {
 protected:
  void SetUp() override { require_sm90(); }
};

// ---- Forward -----------------------------------------------------------------------------------

// `general_kernel_only`: no job on the token-scale kernel (QuantizeForwardArgs).
void check_forward(const QuantizeCase& c, bool general_kernel_only) {
  CaseData data(c);
  const ref::Problem& p = data.problem;
  const DeviceInputs in(data, c.layout);
  const ForwardCopies out(c, p.total_q(), p.total_k());

  QuantizeForwardArgs args;
  args.shape = data.shape;
  args.scale_mode = c.mode;
  args.key_smoothing = c.smoothing;
  args.key_smoothing_vector = data.smoothing_vector.get();
  args.softmax_scale = p.softmax_scale;
  args.q = in.q.view;
  args.k = in.k.view;
  args.v = in.v.view;
  args.out = out.outputs(c.smoothing != KeySmoothing::kNone);
  args.general_kernel_only = general_kernel_only;
  FLAMIA_CUDA_OK(launch_quantize_forward(args, nullptr));
  FLAMIA_CUDA_OK(cudaDeviceSynchronize());

  const ref::ForwardOperandsRef want = ref::quantize_forward_operands(p, data.inputs);
  expect_row_major("Q̂", out.q_hat, want.q);
  expect_row_major("K̂", out.k_hat, want.k);
  expect_token_major("V̂ᵀ", out.v_hat_t, want.v_t, want.v);
  if (c.smoothing != KeySmoothing::kNone)
    expect_sums_close("lse_shift", out.lse_shift.download(), want.lse_shift, lse_shift_bounds(data),
                      kDotTolerance);
}

// The jobs the token-scale kernel takes run on it (token_scale_kernel.cuh), the others on the
// general kernel; both against the reference, so both write the same bytes.
TEST_P(QuantizeKernelTest, ForwardMatchesReference) {
  check_forward(GetParam(), false);
}

TEST_P(QuantizeKernelTest, GeneralKernelForwardMatchesReference) {
  check_forward(GetParam(), true);
}

// ---- Backward ----------------------------------------------------------------------------------

void check_backward(const QuantizeCase& c, bool general_kernel_only) {
  CaseData data(c);
  const ref::Problem& p = data.problem;
  const int tq = p.total_q(), tk = p.total_k(), dim = c.head_dim;
  const DeviceInputs in(data, c.layout);

  DeviceCopy q_t(token_major_bytes(tq, c.heads_q, dim), c.heads_q, tq);
  DeviceCopy k_centered_t(token_major_bytes(tk, c.heads_kv, dim), c.heads_kv, tk);
  DeviceCopy v_hat(row_major_bytes(tk, c.heads_kv, dim), c.heads_kv, tk);
  DeviceCopy d_o_hat(row_major_bytes(tq, c.heads_q, dim), c.heads_q, tq);
  DeviceCopy d_o_scaled_t(token_major_bytes(tq, c.heads_q, dim), c.heads_q, tq);
  DeviceBuffer<float> delta = poisoned_floats(size_t(c.heads_q) * tq);
  const ForwardCopies fused(c, tq, tk);  // only written when c.fused_forward

  QuantizeBackwardArgs args = in.backward_args(data, c.mode);
  args.out.q_t = q_t.copy();
  args.out.k_centered_t = k_centered_t.copy();
  args.out.v = v_hat.copy();
  args.out.d_o = d_o_hat.copy();
  args.out.d_o_scaled_t = d_o_scaled_t.copy();
  args.out.delta = delta.get();
  if (c.fused_forward) {
    args.fwd_out = fused.outputs(c.smoothing != KeySmoothing::kNone);
    args.key_smoothing = c.smoothing;
    args.key_smoothing_vector = data.smoothing_vector.get();
    args.softmax_scale = p.softmax_scale;
  }
  args.general_kernel_only = general_kernel_only;
  FLAMIA_CUDA_OK(launch_quantize_backward(args, nullptr));
  FLAMIA_CUDA_OK(cudaDeviceSynchronize());

  const ref::ForwardOperandsRef fwd = ref::quantize_forward_operands(p, data.inputs);
  const ref::BackwardOperandsRef want =
      ref::quantize_backward_operands(p, data.inputs, fwd, data.o, data.stats);
  expect_token_major("Q̂ᵀ", q_t, want.q_t, fwd.q);
  expect_token_major("K̂cᵀ", k_centered_t, want.k_centered_t, want.k_centered);
  expect_row_major("V̂", v_hat, fwd.v);
  expect_row_major("dÔ", d_o_hat, want.d_o);
  expect_token_major("dO''ᵀ", d_o_scaled_t, want.d_o_scaled_t, want.d_o_scaled);
  expect_sums_close("delta", delta.download(), want.delta, delta_bounds(data, want.d_o),
                    kDotTolerance);
  if (c.fused_forward) {
    expect_row_major("fused Q̂", fused.q_hat, fwd.q);
    expect_row_major("fused K̂", fused.k_hat, fwd.k);
    expect_token_major("fused V̂ᵀ", fused.v_hat_t, fwd.v_t, fwd.v);
    if (c.smoothing != KeySmoothing::kNone)
      expect_sums_close("fused lse_shift", fused.lse_shift.download(), fwd.lse_shift,
                        lse_shift_bounds(data), kDotTolerance);
  }
}

TEST_P(QuantizeKernelTest, BackwardMatchesReference) {
  check_backward(GetParam(), false);
}

TEST_P(QuantizeKernelTest, GeneralKernelBackwardMatchesReference) {
  check_backward(GetParam(), true);
}

// fp8-bf16grad's extras (numerics §5 step 10): D from the BF16 dO (quantize pass option; on both
// kernels that run the dO job) and the BF16 copy of k - k_first(doc) that its dQ reads
// (launch_center_keys_bf16), bit for bit.
TEST_P(QuantizeKernelTest, Bf16GradExtrasMatchReference) {
  const QuantizeCase& c = GetParam();
  CaseData data(c);
  const ref::Problem& p = data.problem;
  const int tq = p.total_q(), tk = p.total_k(), dim = c.head_dim;
  const DeviceInputs in(data, c.layout);

  DeviceCopy d_o_hat(row_major_bytes(tq, c.heads_q, dim), c.heads_q, tq);
  DeviceCopy d_o_scaled_t(token_major_bytes(tq, c.heads_q, dim), c.heads_q, tq);
  DeviceBuffer<float> delta = poisoned_floats(size_t(c.heads_q) * tq);
  DeviceBuffer<float> general_delta = poisoned_floats(size_t(c.heads_q) * tq);
  for (DeviceBuffer<float>* out : {&delta, &general_delta}) {
    QuantizeBackwardArgs args = in.backward_args(data, c.mode);
    args.out.d_o = d_o_hat.copy();
    args.out.d_o_scaled_t = d_o_scaled_t.copy();
    args.out.delta = out->get();
    args.delta_from_bf16_d_o = true;
    args.general_kernel_only = out == &general_delta;
    FLAMIA_CUDA_OK(launch_quantize_backward(args, nullptr));
  }

  DeviceBuffer<uint16_t> centered(size_t(tk) * c.heads_kv * dim);
  FLAMIA_CUDA_OK(poison_device(centered.get(), centered.size() * sizeof(uint16_t)));
  FLAMIA_CUDA_OK(launch_center_keys_bf16(data.shape, in.k.view, centered.get(), nullptr, nullptr));
  FLAMIA_CUDA_OK(cudaDeviceSynchronize());

  const ref::ForwardOperandsRef fwd = ref::quantize_forward_operands(p, data.inputs);
  const ref::BackwardOperandsRef want =
      ref::quantize_backward_operands(p, data.inputs, fwd, data.o, data.stats);
  std::vector<double> bound(size_t(c.heads_q) * tq, 0.0);  // sum_d |dO_id O_id|
  for (int t = 0; t < tq; ++t)
    for (int h = 0; h < c.heads_q; ++h)
      for (int d = 0; d < dim; ++d)
        bound[size_t(h) * tq + t] +=
            std::fabs(double(data.inputs.d_o.at(t, h, d)) * double(data.o.at(t, h, d)));
  expect_sums_close("delta (BF16 dO)", delta.download(), want.delta_bf16, bound, kDotTolerance);
  expect_sums_close("delta (BF16 dO, general kernel)", general_delta.download(), want.delta_bf16,
                    bound, kDotTolerance);

  const std::vector<uint16_t> got = centered.download();
  size_t bad = 0;
  for (int b = 0; b < p.batch(); ++b)
    for (int t = p.cu_seqlens_k[b]; t < p.cu_seqlens_k[b + 1]; ++t)
      for (int g = 0; g < c.heads_kv; ++g)
        for (int d = 0; d < dim; ++d) {
          const uint16_t expected = ref::float_to_bf16(data.inputs.k.at(t, g, d) -
                                                       data.inputs.k.at(p.cu_seqlens_k[b], g, d));
          bad += got[(size_t(t) * c.heads_kv + g) * dim + d] != expected;
        }
  EXPECT_EQ(bad, 0u) << "BF16 k - k_first: " << bad << " of " << got.size() << " differ";
}

INSTANTIATE_TEST_SUITE_P(Cases, QuantizeKernelTest, ::testing::ValuesIn(quantize_cases()),
                         case_name);

// ---- Other behaviour -------------------------------------------------------------------------

// Same inputs, same bytes: the pass has no order-dependent arithmetic.
TEST(QuantizeKernel, Deterministic) {
  FLAMIA_REQUIRE_SM90();
  const QuantizeCase c = {"deterministic",     kAwkwardDocs,           {}, 4, 2, 128,
                          ScaleMode::kBlock32, KeySmoothing::kFirstKey};
  CaseData data(c);
  const int tq = data.problem.total_q();
  const DeviceInputs in(data, c.layout);
  std::vector<uint8_t> first_values;
  std::vector<float> first_delta, first_shift;
  for (int run = 0; run < 2; ++run) {
    DeviceCopy d_o_scaled_t(token_major_bytes(tq, c.heads_q, c.head_dim), c.heads_q, tq);
    DeviceBuffer<float> delta = poisoned_floats(size_t(c.heads_q) * tq);
    DeviceBuffer<float> lse_shift = poisoned_floats(size_t(c.heads_q) * tq);
    QuantizeBackwardArgs args = in.backward_args(data, c.mode);
    args.out.d_o_scaled_t = d_o_scaled_t.copy();
    args.out.delta = delta.get();
    args.fwd_out.lse_shift = lse_shift.get();
    args.key_smoothing = c.smoothing;
    args.softmax_scale = data.problem.softmax_scale;
    FLAMIA_CUDA_OK(launch_quantize_backward(args, nullptr));
    FLAMIA_CUDA_OK(cudaDeviceSynchronize());
    if (run == 0) {
      first_values = d_o_scaled_t.values.download();
      first_delta = delta.download();
      first_shift = lse_shift.download();
      // The first run against the reference: the second is compared with it bit for bit, which
      // outputs that neither run wrote (the same poison in both) would pass.
      const ref::ForwardOperandsRef fwd = ref::quantize_forward_operands(data.problem, data.inputs);
      const ref::BackwardOperandsRef want =
          ref::quantize_backward_operands(data.problem, data.inputs, fwd, data.o, data.stats);
      expect_bytes_equal("dO''ᵀ", first_values, want.d_o_scaled_t, [&](size_t i) {
        return token_major_at(i, c.head_dim, padded_tokens(tq));
      });
      expect_sums_close("delta", first_delta, want.delta, delta_bounds(data, want.d_o),
                        kDotTolerance);
      expect_sums_close("lse_shift", first_shift, fwd.lse_shift, lse_shift_bounds(data),
                        kDotTolerance);
    } else {
      EXPECT_EQ(d_o_scaled_t.values.download(), first_values);
      const std::vector<float> delta2 = delta.download(), shift2 = lse_shift.download();
      EXPECT_EQ(0, std::memcmp(delta2.data(), first_delta.data(), delta2.size() * 4));
      EXPECT_EQ(0, std::memcmp(shift2.data(), first_shift.data(), shift2.size() * 4));
    }
  }
}

// A non-zero device status (invalid cu_seqlens found on the device) makes the pass write
// nothing: every output keeps its poison.
TEST(QuantizeKernel, DeviceStatusSkipsAllWork) {
  FLAMIA_REQUIRE_SM90();
  const QuantizeCase c = {
      "status", kAwkwardDocs, {}, 2, 1, 64, ScaleMode::kBlock32, KeySmoothing::kFirstKey};
  CaseData data(c);
  const int tq = data.problem.total_q(), tk = data.problem.total_k();
  const DeviceInputs in(data, c.layout);
  DeviceBuffer<int32_t> status(std::vector<int32_t>{kDeviceStatusSeqlensDecreasing});

  ForwardCopies out(c, tq, tk);
  DeviceCopy d_o_scaled_t(token_major_bytes(tq, c.heads_q, c.head_dim), c.heads_q, tq);
  DeviceBuffer<float> delta = poisoned_floats(size_t(c.heads_q) * tq);

  QuantizeForwardArgs fwd;
  fwd.shape = data.shape;
  fwd.scale_mode = c.mode;
  fwd.key_smoothing = c.smoothing;
  fwd.q = in.q.view;
  fwd.k = in.k.view;
  fwd.v = in.v.view;
  fwd.out = out.outputs(/*with_shift=*/true);
  fwd.device_status = status.get();
  FLAMIA_CUDA_OK(launch_quantize_forward(fwd, nullptr));
  QuantizeBackwardArgs bwd = in.backward_args(data, c.mode);
  bwd.out.d_o_scaled_t = d_o_scaled_t.copy();
  bwd.out.delta = delta.get();
  bwd.device_status = status.get();
  FLAMIA_CUDA_OK(launch_quantize_backward(bwd, nullptr));
  FLAMIA_CUDA_OK(cudaDeviceSynchronize());

  auto all_bytes = [](const auto& v, uint8_t byte) {
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    for (size_t i = 0; i < v.size() * sizeof(v[0]); ++i)
      if (p[i] != byte) return false;
    return true;
  };
  for (const DeviceCopy* copy : {&out.q_hat, &out.k_hat, &out.v_hat_t, &d_o_scaled_t}) {
    EXPECT_TRUE(all_bytes(copy->values.download(), kValuePoison));
    EXPECT_TRUE(all_bytes(copy->exponents.download(), kExponentPoison));
  }
  EXPECT_TRUE(all_bytes(out.lse_shift.download(), kFloatPoison));
  EXPECT_TRUE(all_bytes(delta.download(), kFloatPoison));
}

// The same for the register kernels (exact, no smoothing: every forward job runs on the
// token-scale kernel, the backward's dO job on the gradient token kernel).
TEST(QuantizeKernel, DeviceStatusStopsTheRegisterKernels) {
  FLAMIA_REQUIRE_SM90();
  const QuantizeCase c = {"status_token_scale", kAwkwardDocs, {}, 4, 2, 128, ScaleMode::kExact};
  CaseData data(c);
  const DeviceInputs in(data, c.layout);
  DeviceBuffer<int32_t> status(std::vector<int32_t>{kDeviceStatusSeqlensDecreasing});
  ForwardCopies out(c, data.problem.total_q(), data.problem.total_k());
  QuantizeForwardArgs fwd;
  fwd.shape = data.shape;
  fwd.scale_mode = c.mode;
  fwd.q = in.q.view;
  fwd.k = in.k.view;
  fwd.v = in.v.view;
  fwd.out = out.outputs(/*with_shift=*/false);
  fwd.device_status = status.get();
  FLAMIA_CUDA_OK(launch_quantize_forward(fwd, nullptr));
  FLAMIA_CUDA_OK(cudaDeviceSynchronize());
  // The backward's dO job in exact mode runs on the gradient token kernel.
  const int tq = data.problem.total_q();
  DeviceCopy d_o_hat(row_major_bytes(tq, c.heads_q, c.head_dim), c.heads_q, tq);
  DeviceCopy d_o_scaled_t(token_major_bytes(tq, c.heads_q, c.head_dim), c.heads_q, tq);
  DeviceBuffer<float> delta = poisoned_floats(size_t(c.heads_q) * tq);
  QuantizeBackwardArgs bwd = in.backward_args(data, c.mode);
  bwd.out.d_o = d_o_hat.copy();
  bwd.out.d_o_scaled_t = d_o_scaled_t.copy();
  bwd.out.delta = delta.get();
  bwd.device_status = status.get();
  FLAMIA_CUDA_OK(launch_quantize_backward(bwd, nullptr));
  FLAMIA_CUDA_OK(cudaDeviceSynchronize());
  for (const DeviceCopy* copy : {&out.q_hat, &out.k_hat, &out.v_hat_t, &d_o_hat, &d_o_scaled_t}) {
    for (uint8_t byte : copy->values.download()) ASSERT_EQ(byte, kValuePoison);
    for (int8_t e : copy->exponents.download()) ASSERT_EQ(uint8_t(e), uint8_t(kExponentPoison));
  }
  for (uint32_t bits : float_bits_of(delta.download())) ASSERT_EQ(bits, 0xFFFFFFFFu);
}

// Rows with NaN, infinities and signed zeros: the token-scale kernel's packed amax (max.bf16x2,
// NaN ignored) gives the general kernel's exponents, bytes and KV amax outputs (fmaxf over FP32,
// NaN ignored), with exact and with static scales.
// BF16 bit patterns of the non-finite and signed-zero inputs below.
namespace bf16_bits {
constexpr uint16_t kNaN = 0x7FC0, kNegativeNaN = 0xFFC1, kInf = 0x7F80, kNegativeInf = 0xFF80,
                   kNegativeZero = 0x8000;
}  // namespace bf16_bits

TEST(QuantizeKernel, TokenScaleKernelMatchesTheGeneralOneOnNonFiniteInputs) {
  FLAMIA_REQUIRE_SM90();
  const QuantizeCase c = {"non_finite", kAwkwardDocs, {}, 4, 2, 128, ScaleMode::kExact};
  CaseData data(c);
  using namespace bf16_bits;
  for (ref::HostTensor* t : {&data.inputs.q, &data.inputs.k, &data.inputs.v}) {
    const int h = t->heads - 1;
    for (int d = 0; d < t->dim; ++d) {
      t->bits[t->index(0, 0, d)] = kNaN;                        // a row of NaN only
      t->bits[t->index(1, h, d)] = d % 2 ? kNegativeZero : 0u;  // a row of zeros
    }
    t->bits[t->index(2, 0, 5)] = kNegativeNaN;  // one NaN among finite values
    t->bits[t->index(3, h, 77)] = kInf;
    t->bits[t->index(4, 0, 127)] = kNegativeInf;
    t->bits[t->index(5, h, 64)] = kNaN;
    t->bits[t->index(5, h, 65)] = kInf;
  }
  const DeviceInputs in(data, c.layout);
  const int tq = data.problem.total_q(), tk = data.problem.total_k();
  const DeviceBuffer<int8_t> key_exponents(std::vector<int8_t>{-2, 3});
  const DeviceBuffer<int8_t> value_exponents(std::vector<int8_t>{1, -3});
  for (const ScaleMode mode : {ScaleMode::kExact, ScaleMode::kStatic}) {
    SCOPED_TRACE(mode == ScaleMode::kStatic ? "static" : "exact");
    ForwardCopies general(c, tq, tk), token_scale(c, tq, tk);
    token_scale.q_hat.repoison_for_comparison();
    token_scale.k_hat.repoison_for_comparison();
    token_scale.v_hat_t.repoison_for_comparison();
    DeviceBuffer<float> general_amax(std::vector<float>(2 * c.heads_kv, 0.0f));
    DeviceBuffer<float> token_scale_amax(std::vector<float>(2 * c.heads_kv, 0.0f));
    for (ForwardCopies* out : {&general, &token_scale}) {
      QuantizeForwardArgs args;
      args.shape = data.shape;
      args.scale_mode = mode;
      if (mode == ScaleMode::kStatic)
        args.static_exponents = {key_exponents.get(), value_exponents.get()};
      args.q = in.q.view;
      args.k = in.k.view;
      args.v = in.v.view;
      args.out = out->outputs(/*with_shift=*/false);
      args.general_kernel_only = out == &general;
      args.kv_amax = out == &general ? general_amax.get() : token_scale_amax.get();
      FLAMIA_CUDA_OK(launch_quantize_forward(args, nullptr));
    }
    FLAMIA_CUDA_OK(cudaDeviceSynchronize());
    const std::pair<const DeviceCopy*, const DeviceCopy*> copies[] = {
        {&general.q_hat, &token_scale.q_hat},
        {&general.k_hat, &token_scale.k_hat},
        {&general.v_hat_t, &token_scale.v_hat_t}};
    for (const auto& [want, got] : copies) {
      EXPECT_EQ(got->values.download(), want->values.download());
      EXPECT_EQ(got->exponents.download(), want->exponents.download());
    }
    const std::vector<float> want_amax = general_amax.download();
    const std::vector<float> got_amax = token_scale_amax.download();
    for (size_t i = 0; i < want_amax.size(); ++i) {
      EXPECT_EQ(float_bits(got_amax[i]), float_bits(want_amax[i])) << "kv_amax " << i;
      EXPECT_FALSE(std::isnan(got_amax[i])) << "kv_amax " << i;
      // Both start at 0 (the caller zeroes kv_amax): every K and V head has non-zero inputs,
      // so a 0 in both means neither kernel wrote it.
      EXPECT_GT(want_amax[i], 0.0f) << "kv_amax " << i << " not written";
    }
  }
}

// The dO job on the gradient token kernel and on the general kernel's gradient instance: the
// same dÔ, dO''ᵀ, exponents and delta bit for bit (both delta rules), and the dQ buffer's rows
// zeroed, on rows of dO with NaN, infinities and signed zeros, and rows whose l is 0, infinite
// or NaN (r = fl(1/l) is 0 for the first two), inside dO'' blocks that straddle tiles.
TEST(QuantizeKernel, GradientTokenKernelMatchesTheGeneralOneOnNonFiniteInputs) {
  FLAMIA_REQUIRE_SM90();
  constexpr float kInfinity = std::numeric_limits<float>::infinity();
  for (const int dim : {64, 128}) {
    SCOPED_TRACE("head dim " + std::to_string(dim));
    const QuantizeCase c = {"non_finite_d_o", {48, 300, 5, 250}, {}, 4, 2, dim, ScaleMode::kExact};
    CaseData data(c);
    const int tq = data.problem.total_q();
    ref::HostTensor& d_o = data.inputs.d_o;
    for (int d = 0; d < dim; ++d) {
      d_o.bits[d_o.index(0, 0, d)] = bf16_bits::kNaN;                                 // NaN only
      d_o.bits[d_o.index(1, 3, d)] = d % 2 ? bf16_bits::kNegativeZero : uint16_t(0);  // zeros
    }
    d_o.bits[d_o.index(120, 1, 5)] = bf16_bits::kNegativeNaN;  // a block straddling tile 1
    d_o.bits[d_o.index(130, 2, dim - 1)] = bf16_bits::kInf;
    d_o.bits[d_o.index(131, 0, 0)] = bf16_bits::kNegativeInf;
    auto l_at = [&](int t, int head) -> float& {
      return data.stats[(size_t(head) * tq + t) * kSoftmaxStatsPerRow + 1];
    };
    l_at(2, 0) = 0.0f;
    l_at(127, 1) = 0.0f;
    l_at(129, 2) = kInfinity;
    l_at(140, 3) = std::numeric_limits<float>::quiet_NaN();
    const DeviceInputs in(data, c.layout);
    for (const bool from_input : {false, true}) {
      SCOPED_TRACE(from_input ? "delta from the BF16 dO" : "delta from dÔ");
      struct Outputs {
        DeviceCopy d_o_hat, d_o_scaled_t;
        DeviceBuffer<float> delta, dq;
      };
      auto outputs = [&] {
        return Outputs{DeviceCopy(row_major_bytes(tq, c.heads_q, dim), c.heads_q, tq),
                       DeviceCopy(token_major_bytes(tq, c.heads_q, dim), c.heads_q, tq),
                       poisoned_floats(size_t(c.heads_q) * tq),
                       poisoned_floats(size_t(c.heads_q) * tq * dim)};
      };
      Outputs general = outputs(), token = outputs();
      token.d_o_hat.repoison_for_comparison();
      token.d_o_scaled_t.repoison_for_comparison();
      token.delta.poison(kComparisonFloatPoison);
      for (Outputs* out : {&general, &token}) {
        QuantizeBackwardArgs args = in.backward_args(data, c.mode);
        args.out.d_o = out->d_o_hat.copy();
        args.out.d_o_scaled_t = out->d_o_scaled_t.copy();
        args.out.delta = out->delta.get();
        args.delta_from_bf16_d_o = from_input;
        args.dq_buffer = out->dq.get();
        args.dq_row_floats = dim;
        args.general_kernel_only = out == &general;
        FLAMIA_CUDA_OK(launch_quantize_backward(args, nullptr));
      }
      FLAMIA_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_EQ(token.d_o_hat.values.download(), general.d_o_hat.values.download());
      EXPECT_EQ(token.d_o_hat.exponents.download(), general.d_o_hat.exponents.download());
      EXPECT_EQ(token.d_o_scaled_t.values.download(), general.d_o_scaled_t.values.download());
      EXPECT_EQ(token.d_o_scaled_t.exponents.download(), general.d_o_scaled_t.exponents.download());
      EXPECT_EQ(float_bits_of(token.delta.download()), float_bits_of(general.delta.download()));
      for (const Outputs* out : {&general, &token}) {
        const std::vector<uint32_t> dq = float_bits_of(out->dq.download());
        EXPECT_EQ(std::count(dq.begin(), dq.end(), 0u), std::ptrdiff_t(dq.size()))
            << (out == &general ? "general" : "gradient token") << " kernel: dQ rows not zeroed";
      }
    }
  }
}

// A finite dO whose product by r = fl(1/l) overflows FP32 (numerics §3: dO'' = dO * r; a tiny l,
// as huge values or a large static value exponent give) holds an Inf in what dO'' quantizes:
// E4M3 has none, so the pass records it (numerics §7, as an overflow of k - k_first counts as an
// Inf in k) instead of writing a finite wrong dO'' (±448 with exponent 0 for the whole 64-query
// block). The general kernel's gradient instance (head dim 256, `block32`) always did; the
// gradient token kernel (exact and static at head dims 64 and 128) looked only at dÔ's amax.
TEST(QuantizeKernel, OverflowOfTheScaledGradientIsReportedByBothKernels) {
  FLAMIA_REQUIRE_SM90();
  for (const int dim : {64, 128}) {
    SCOPED_TRACE("head dim " + std::to_string(dim));
    const QuantizeCase c = {"scaled_overflow", {48, 300, 5, 250}, {}, 4, 2, dim, ScaleMode::kExact};
    CaseData data(c);
    const int tq = data.problem.total_q();
    for (const bool overflow : {false, true}) {
      SCOPED_TRACE(overflow ? "dO * r overflows" : "no overflow");
      if (overflow) {
        // Token 130 of head 1, in the 64-query block [112, 176) that straddles tiles 0 and 1:
        // |dO| = 1.5 * 2^30 (dÔ's amax stays finite), l = 2^-100: |dO * r| = 1.5 * 2^130.
        constexpr int kToken = 130, kHead = 1;
        for (int d = 0; d < dim; ++d)
          data.inputs.d_o.set(kToken, kHead, d, (d % 2 ? -1.5f : 1.5f) * std::ldexp(1.0f, 30));
        data.stats[(size_t(kHead) * tq + kToken) * kSoftmaxStatsPerRow + 1] =
            std::ldexp(1.0f, -100);
      }
      const DeviceInputs in(data, c.layout);
      for (const bool general : {true, false}) {
        SCOPED_TRACE(general ? "general kernel" : "gradient token kernel");
        DeviceCopy d_o_hat(row_major_bytes(tq, c.heads_q, dim), c.heads_q, tq);
        DeviceCopy d_o_scaled_t(token_major_bytes(tq, c.heads_q, dim), c.heads_q, tq);
        DeviceBuffer<float> delta = poisoned_floats(size_t(c.heads_q) * tq);
        DeviceBuffer<int32_t> status(std::vector<int32_t>{kDeviceStatusOk});
        QuantizeBackwardArgs args = in.backward_args(data, c.mode);
        args.out.d_o = d_o_hat.copy();
        args.out.d_o_scaled_t = d_o_scaled_t.copy();
        args.out.delta = delta.get();
        args.device_status = status.get();
        args.general_kernel_only = general;
        FLAMIA_CUDA_OK(launch_quantize_backward(args, nullptr));
        FLAMIA_CUDA_OK(cudaDeviceSynchronize());
        EXPECT_EQ(status.download()[0],
                  overflow ? kDeviceStatusInfiniteOutputGradient : kDeviceStatusOk);
      }
    }
  }
}

// Nothing to do: no tokens (every document empty) launches nothing and succeeds.
TEST(QuantizeKernel, EmptyProblem) {
  FLAMIA_REQUIRE_SM90();
  DeviceBuffer<int32_t> cu(std::vector<int32_t>{0, 0, 0});
  DeviceBuffer<uint16_t> dummy(8);
  QuantizeForwardArgs args;
  args.shape.cu_seqlens_q = args.shape.cu_seqlens_k = cu.get();
  args.shape.batch = 2;
  args.shape.heads_q = args.shape.heads_kv = 1;
  args.shape.head_dim = 128;
  args.scale_mode = ScaleMode::kBlock32;
  args.q = args.k = args.v = {dummy.get(), 128, 128};
  FLAMIA_CUDA_OK(launch_quantize_forward(args, nullptr));
  FLAMIA_CUDA_OK(cudaDeviceSynchronize());
}

// Argument errors are found on the host, before anything is launched (no GPU needed).
TEST(QuantizeKernel, RejectsBadArguments) {
  alignas(16) static uint16_t host_data[64];
  alignas(16) static uint8_t host_out[64];
  alignas(16) static int32_t host_cu[2] = {0, 16};
  QuantizeForwardArgs args;
  args.shape.cu_seqlens_q = args.shape.cu_seqlens_k = host_cu;
  args.shape.batch = 1;
  args.shape.total_q = args.shape.total_k = 16;
  args.shape.heads_q = args.shape.heads_kv = 1;
  args.shape.head_dim = 128;
  args.q = args.k = args.v = {host_data, 128, 128};
  args.out.q.values = host_out;

  QuantizeForwardArgs bad = args;
  bad.shape.head_dim = 96;
  EXPECT_EQ(launch_quantize_forward(bad, nullptr), cudaErrorInvalidValue) << "head dim";
  bad = args;
  bad.q.data = host_data + 1;
  EXPECT_EQ(launch_quantize_forward(bad, nullptr), cudaErrorInvalidValue) << "misaligned input";
  bad = args;
  bad.k.token_stride = 132;
  bad.out.k.values = host_out;
  EXPECT_EQ(launch_quantize_forward(bad, nullptr), cudaErrorInvalidValue) << "stride";
  bad = args;
  bad.out.q.values = host_out + 8;
  EXPECT_EQ(launch_quantize_forward(bad, nullptr), cudaErrorInvalidValue) << "misaligned output";
  bad = args;
  bad.shape.heads_q = 3;
  bad.shape.heads_kv = 2;
  EXPECT_EQ(launch_quantize_forward(bad, nullptr), cudaErrorInvalidValue) << "GQA ratio";
  bad = args;
  bad.key_smoothing = KeySmoothing::kVector;
  bad.out.k.values = host_out;
  EXPECT_EQ(launch_quantize_forward(bad, nullptr), cudaErrorInvalidValue) << "no vector";

  QuantizeBackwardArgs backward;
  backward.shape = args.shape;
  backward.q = backward.k = backward.v = backward.o = backward.d_o = args.q;
  backward.out.d_o_scaled_t.values = host_out;
  EXPECT_EQ(launch_quantize_backward(backward, nullptr), cudaErrorInvalidValue) << "no stats";
}

}  // namespace
}  // namespace flamia::test
