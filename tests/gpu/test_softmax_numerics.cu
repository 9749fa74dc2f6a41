// exp2_polynomial (softmax_numerics.cuh), the forward's exp2 on the FMA pipe for a quarter of the
// key columns at head dim 128: its error against exp2 in double, its E4M3 values against those of
// ex2.approx (the backward rebuilds P̂ with ex2.approx, numerics §4), and its special values.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gpu_test_utils.h"
#include "kernels/common/softmax_numerics.cuh"

namespace flamia::test {
namespace {

constexpr int kThreads = 256;

// Per input: the polynomial's FP32 value and the E4M3 bytes of both exponentials.
__global__ void evaluate_exponentials(const float* x, int count, float* polynomial,
                                      uint8_t* polynomial_e4m3, uint8_t* approx_e4m3) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const float p = exp2_polynomial(x[i]);
  const float a = ex2_approx(x[i]);
  polynomial[i] = p;
  polynomial_e4m3[i] = uint8_t(pack_e4m3x4(p, 0.0f, 0.0f, 0.0f) & 0xffu);
  approx_e4m3[i] = uint8_t(pack_e4m3x4(a, 0.0f, 0.0f, 0.0f) & 0xffu);
}

struct Evaluated {
  std::vector<float> polynomial;
  std::vector<uint8_t> polynomial_e4m3, approx_e4m3;
};

// `e4m3_poison`: what the E4M3 outputs hold before the kernel (0xFF, an E4M3 NaN, by default).
Evaluated evaluate(const std::vector<float>& x, uint8_t e4m3_poison = 0xFF) {
  const int count = int(x.size());
  DeviceBuffer<float> d_x(x), d_p(count);
  DeviceBuffer<uint8_t> d_pe(count), d_ae(count);
  d_p.poison();
  d_pe.poison(e4m3_poison);
  d_ae.poison(e4m3_poison);
  evaluate_exponentials<<<(count + kThreads - 1) / kThreads, kThreads>>>(
      d_x.get(), count, d_p.get(), d_pe.get(), d_ae.get());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {d_p.download(), d_pe.download(), d_ae.download()};
}

// `count` exponents drawn uniformly from [lo, hi) (a fixed seed).
std::vector<float> random_exponents(int count, float lo, float hi, unsigned seed) {
  std::vector<float> x(count);
  std::srand(seed);
  for (float& v : x) v = lo + (hi - lo) * float(std::rand()) / float(RAND_MAX);
  return x;
}

TEST(Exp2Polynomial, RelativeErrorAgainstDouble) {
  FLAMIA_REQUIRE_SM90();
  // the softmax's range, and every integer in it
  std::vector<float> x = random_exponents(1 << 20, -16.0f, 8.0f, 7);
  for (int n = -16; n <= 8; ++n) x.push_back(float(n));
  const Evaluated e = evaluate(x);
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double exact = std::exp2(double(x[i]));
    const double error = std::fabs(double(e.polynomial[i]) / exact - 1.0);
    worst = std::max(worst, std::isnan(error) ? INFINITY : error);  // (a NaN must not pass)
  }
  std::printf("[exp2_polynomial] max relative error %.3g on [-16, 8]\n", worst);
  EXPECT_LT(worst, 4e-7);
  for (int n = -16; n <= 8; ++n)  // integers: f = 0, p = 1, an exact power of two
    EXPECT_EQ(e.polynomial[x.size() - 25 + (n + 16)], std::ldexp(1.0f, n)) << n;
}

// Both round to the same E4M3 value except where 2^x lies within their FP32 errors of a rounding
// midpoint: at most a few per million normal-range values, and then by one E4M3 step.
TEST(Exp2Polynomial, E4m3ValuesMatchEx2Approx) {
  FLAMIA_REQUIRE_SM90();
  const std::vector<float> x = random_exponents(1 << 22, -10.0f, 8.0f, 11);
  const Evaluated e = evaluate(x);
  size_t normal = 0, differ = 0, far = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const int a = e.approx_e4m3[i], p = e.polynomial_e4m3[i];
    // finite inputs give finite codes (E4M3's NaN is S.1111.111; 0xFF is also the poison)
    ASSERT_NE(a & 0x7F, 0x7F) << "ex2.approx's code for " << x[i];
    ASSERT_NE(p & 0x7F, 0x7F) << "the polynomial's code for " << x[i];
    if ((a & 0x78) == 0 && (p & 0x78) == 0) continue;  // both subnormal or zero
    ++normal;
    differ += a != p;
    far += std::abs(a - p) > 1;
  }
  std::printf("[exp2_polynomial] E4M3 values differing from ex2.approx's: %zu of %zu (%.3g)\n",
              differ, normal, double(differ) / double(normal));
  EXPECT_GT(normal, x.size() / 2);
  EXPECT_LE(double(differ), 4e-6 * double(normal));
  EXPECT_EQ(far, 0u);
}

TEST(Exp2Polynomial, SpecialValues) {
  FLAMIA_REQUIRE_SM90();
  const std::vector<float> x = {-INFINITY, -1e30f, -16.5f, -16.0f, 0.0f, -0.0f, NAN, 8.0f};
  // E4M3 outputs poisoned with neither an expected code (0, NaN) nor NaN: with the default 0xFF
  // an unwritten code would pass the NaN check below.
  constexpr uint8_t kNeitherZeroNorNaN = 0x5A;
  const Evaluated e = evaluate(x, kNeitherZeroNorNaN);
  EXPECT_EQ(e.polynomial_e4m3[0], 0u) << "masked score (-inf) must give P̂ = 0";
  EXPECT_EQ(e.polynomial_e4m3[1], 0u);
  EXPECT_EQ(e.polynomial_e4m3[2], 0u);
  EXPECT_EQ(e.polynomial_e4m3[3], 0u);
  EXPECT_EQ(e.polynomial[4], 1.0f);
  EXPECT_EQ(e.polynomial[5], 1.0f);
  EXPECT_TRUE(std::isnan(e.polynomial[6])) << "NaN must propagate, got " << e.polynomial[6];
  EXPECT_EQ(e.polynomial_e4m3[6] & 0x7f, 0x7f) << "E4M3 NaN";
  EXPECT_EQ(e.polynomial[7], 256.0f);
}

}  // namespace
}  // namespace flamia::test
