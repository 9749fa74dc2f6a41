// divide_chunk (chunk_division.cuh), the dO / l copy's division with one reciprocal per token:
// bit for bit __fdiv_rn and the host's IEEE division on chunks inside its fast range, across its
// bounds, and with zeros, subnormals, infinities and NaN (which take the per-element path).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gpu_test_utils.h"
#include "kernels/quantize/chunk_division.cuh"

namespace flamia::test {
namespace {

constexpr int kThreads = 128;
constexpr int kChunk = 16;  // the quantize kernel's chunk of channels

// Per chunk c: divide_chunk of x[c][:] by l[c], and __fdiv_rn of each element.
__global__ void divide_chunks(const float* x, const float* l, int chunks, float* chunked,
                              float* per_element) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= chunks) return;
  float v[kChunk];
  for (int i = 0; i < kChunk; ++i) v[i] = x[c * kChunk + i];
  quantize::divide_chunk(v, l[c]);
  for (int i = 0; i < kChunk; ++i) {
    chunked[c * kChunk + i] = v[i];
    per_element[c * kChunk + i] = __fdiv_rn(x[c * kChunk + i], l[c]);
  }
}

uint32_t bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}

// A float with random sign and mantissa and an exponent uniform in [lo, hi].
float random_float(std::mt19937& rng, int lo, int hi) {
  std::uniform_int_distribution<int> exponent(lo, hi);
  std::uniform_int_distribution<uint32_t> mantissa(0, (1u << 23) - 1);
  const float v = std::ldexp(1.0f + float(mantissa(rng)) / float(1u << 23), exponent(rng));
  return rng() % 2 ? -v : v;
}

struct Chunks {
  std::vector<float> x, l;
  int count() const { return int(l.size()); }
};

// Compares divide_chunk with __fdiv_rn and with the host's division, bit for bit (NaN: both
// NaN); l = 0 must give zeros.
void expect_exact(const Chunks& in, const char* what) {
  const int count = in.count();
  DeviceBuffer<float> d_x(in.x), d_l(in.l), d_chunked(size_t(count) * kChunk),
      d_element(size_t(count) * kChunk);
  d_chunked.poison();
  d_element.poison();
  divide_chunks<<<(count + kThreads - 1) / kThreads, kThreads>>>(d_x.get(), d_l.get(), count,
                                                                 d_chunked.get(), d_element.get());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> chunked = d_chunked.download(), element = d_element.download();
  size_t differ = 0;
  for (int c = 0; c < count; ++c) {
    for (int i = 0; i < kChunk; ++i) {
      const size_t at = size_t(c) * kChunk + i;
      const float got = chunked[at];
      if (in.l[c] == 0.0f) {
        differ += bits(got) != 0u;
        continue;
      }
      const float host = in.x[at] / in.l[c];
      const bool same = std::isnan(host)
                            ? std::isnan(got) && std::isnan(element[at])
                            : bits(got) == bits(host) && bits(element[at]) == bits(host);
      if (!same && differ++ < 5)
        ADD_FAILURE() << what << ": " << in.x[at] << " / " << in.l[c] << " = " << host
                      << ", divide_chunk " << got << ", __fdiv_rn " << element[at];
    }
  }
  std::printf("[chunk_division] %s: %d chunks, %zu differ\n", what, count, differ);
  EXPECT_EQ(differ, 0u) << what;
}

TEST(ChunkDivision, InsideTheFastRange) {
  FLAMIA_REQUIRE_SM90();
  std::mt19937 rng(3);
  Chunks in;
  const int bound = quantize::kChunkDivisionExponentBound;
  for (int c = 0; c < (1 << 16); ++c) {
    in.l.push_back(random_float(rng, -bound, bound));
    for (int i = 0; i < kChunk; ++i) in.x.push_back(random_float(rng, -bound, bound));
  }
  expect_exact(in, "inside the range");
}

TEST(ChunkDivision, SoftmaxRowSums) {
  FLAMIA_REQUIRE_SM90();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> row_sum(1.0f, 65536.0f);
  Chunks in;
  for (int c = 0; c < (1 << 16); ++c) {
    in.l.push_back(row_sum(rng));
    for (int i = 0; i < kChunk; ++i) in.x.push_back(random_float(rng, -30, 8));
  }
  expect_exact(in, "softmax row sums");
}

TEST(ChunkDivision, AcrossTheBoundsAndSpecialValues) {
  FLAMIA_REQUIRE_SM90();
  std::mt19937 rng(9);
  const int bound = quantize::kChunkDivisionExponentBound;
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::denorm_min(),
                            -1e-40f,
                            std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::ldexp(1.0f, -bound),
                            std::nextafter(std::ldexp(1.0f, -bound), 0.0f),
                            std::ldexp(1.0f, bound + 1),
                            std::nextafter(std::ldexp(1.0f, bound + 1), 0.0f)};
  Chunks in;
  for (int c = 0; c < (1 << 14); ++c) {
    // l near and beyond the bounds, sometimes special; x mostly in range with one special
    const bool special_l = c % 7 == 0;
    in.l.push_back(special_l ? specials[rng() % (sizeof(specials) / sizeof(float))]
                             : random_float(rng, -bound - 8, bound + 8));
    const int special_at = c % 3 == 0 ? int(rng() % kChunk) : -1;
    for (int i = 0; i < kChunk; ++i)
      in.x.push_back(i == special_at ? specials[rng() % (sizeof(specials) / sizeof(float))]
                                     : random_float(rng, -bound - 8, bound + 8));
  }
  expect_exact(in, "bounds and specials");
}

}  // namespace
}  // namespace flamia::test
