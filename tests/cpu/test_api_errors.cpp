// Status names, the thread-local last error message, path descriptions and the argument checks
// of flamia_check_device_status, on the CPU.
#include <gtest/gtest.h>

#include <limits>
#include <set>
#include <string>
#include <thread>

#include "cpu/test_api_setup.h"

namespace flamia_test {
namespace {

TEST(ApiErrors, EveryStatusHasItsOwnName) {
  const flamia_status all[] = {FLAMIA_OK,
                               FLAMIA_ERROR_INVALID_ARGUMENT,
                               FLAMIA_ERROR_UNSUPPORTED,
                               FLAMIA_ERROR_WORKSPACE,
                               FLAMIA_ERROR_CUDA,
                               FLAMIA_ERROR_INVALID_SEQLENS,
                               FLAMIA_ERROR_NO_DEVICE};
  std::set<std::string> names;
  for (flamia_status status : all) names.insert(flamia_status_name(status));
  EXPECT_EQ(names.size(), std::size(all));
  EXPECT_STREQ(flamia_status_name(FLAMIA_OK), "FLAMIA_OK");
  EXPECT_STREQ(flamia_status_name(FLAMIA_ERROR_INVALID_SEQLENS), "FLAMIA_ERROR_INVALID_SEQLENS");
  flamia_status unknown;
  set_raw_enum(unknown, 42);
  EXPECT_STREQ(flamia_status_name(unknown), "FLAMIA_UNKNOWN_STATUS");
}

TEST(ApiErrors, LastErrorIsPerThread) {
  ASSERT_EQ(flamia_forward(nullptr), FLAMIA_ERROR_INVALID_ARGUMENT);
  std::string other_before;
  std::string other_after;
  std::thread other([&] {
    other_before = flamia_last_error_message();  // a fresh thread has none
    flamia_backward(nullptr);
    other_after = flamia_last_error_message();
  });
  other.join();
  EXPECT_EQ(other_before, "");
  EXPECT_TRUE(contains(other_after.c_str(), "flamia_backward: args is NULL"));
  EXPECT_TRUE(contains(flamia_last_error_message(), "flamia_forward: args is NULL"));
}

// A window shorter than the longest document runs the windowed kernels; one at least as long
// as every document is no window (numerics §4.3) and runs the causal ones, however large.
TEST(ApiErrors, DescribeRunsLongWindowsAsCausal) {
  ForwardSetup setup;  // max_seqlen_k 113
  for (const int32_t window : {1, 8, 112}) {
    setup.args.problem.sliding_window = window;
    EXPECT_TRUE(contains(flamia_describe_forward(&setup.args), "sliding window")) << window;
  }
  for (const int32_t window : {113, 114, std::numeric_limits<int32_t>::max()}) {
    setup.args.problem.sliding_window = window;
    const std::string text = flamia_describe_forward(&setup.args);
    EXPECT_FALSE(contains(text.c_str(), "sliding window")) << window << ": " << text;
    EXPECT_TRUE(contains(text.c_str(), "causal")) << window << ": " << text;
  }
}

TEST(ApiErrors, DescribeNamesThePath) {
  ForwardSetup setup;
  std::string text = flamia_describe_forward(&setup.args);
  EXPECT_TRUE(contains(text.c_str(), "sm90a fp8 forward")) << text;
  EXPECT_TRUE(contains(text.c_str(), "hdim 128")) << text;
  EXPECT_TRUE(contains(text.c_str(), "exact scales")) << text;
  EXPECT_TRUE(contains(text.c_str(), "causal")) << text;

  setup.args.problem.head_dim = 64;
  setup.args.problem.scale_mode = FLAMIA_SCALE_BLOCK32;
  setup.args.problem.causal = 0;
  setup.args.problem.key_smoothing = FLAMIA_SMOOTH_FIRST_KEY;
  text = flamia_describe_forward(&setup.args);
  EXPECT_TRUE(contains(text.c_str(), "hdim 64")) << text;
  EXPECT_TRUE(contains(text.c_str(), "block32 scales")) << text;
  EXPECT_TRUE(contains(text.c_str(), "non-causal")) << text;
  EXPECT_TRUE(contains(text.c_str(), "first-key smoothing")) << text;
  EXPECT_TRUE(contains(text.c_str(), "separate quantize pass")) << text;
  // AUTO quantizes in a separate pass (the faster path measured); FUSED on request, at head
  // dim 128 without key smoothing.
  setup.args.problem.key_smoothing = FLAMIA_SMOOTH_NONE;
  setup.args.problem.max_seqlen_q = setup.args.problem.max_seqlen_k = 100;
  EXPECT_TRUE(contains(flamia_describe_forward(&setup.args), "separate quantize pass"));
  setup.args.quantize = FLAMIA_QUANTIZE_FUSED;
  EXPECT_TRUE(contains(flamia_describe_forward(&setup.args), "no kernel path"));
  EXPECT_TRUE(
      contains(flamia_last_error_message(), "FLAMIA_QUANTIZE_FUSED with problem.head_dim 64"));
  setup.args.problem.head_dim = 128;
  EXPECT_TRUE(contains(flamia_describe_forward(&setup.args), "quantization fused"));
  setup.args.problem.key_smoothing = FLAMIA_SMOOTH_FIRST_KEY;
  EXPECT_TRUE(contains(flamia_describe_forward(&setup.args), "no kernel path"));
  EXPECT_TRUE(contains(flamia_last_error_message(), "FLAMIA_QUANTIZE_FUSED with key smoothing"));
  setup.args.quantize = static_cast<flamia_forward_quantize>(7);
  EXPECT_TRUE(contains(flamia_describe_forward(&setup.args), "no kernel path"));
  EXPECT_TRUE(contains(flamia_last_error_message(), "quantize"));
  setup.args.quantize = FLAMIA_QUANTIZE_AUTO;
  setup.args.problem.head_dim = 64;
  // A training forward names the operands it keeps (the longest description: not truncated).
  setup.args.problem.key_smoothing = FLAMIA_SMOOTH_VECTOR;
  setup.args.problem.key_smoothing_vector = static_cast<const float*>(fake_device(14));
  setup.use_saved_operands();
  text = flamia_describe_forward(&setup.args);
  EXPECT_TRUE(contains(text.c_str(),
                       "vector key smoothing, separate quantize pass keeping the "
                       "backward's operands"))
      << text;
  setup.args.saved_operands = nullptr;
  // Static storage: the same pointer each time.
  EXPECT_EQ(flamia_describe_forward(&setup.args), flamia_describe_forward(&setup.args));
}

TEST(ApiErrors, DescribeRejectsBadProblems) {
  EXPECT_TRUE(contains(flamia_describe_forward(nullptr), "flamia_last_error_message"));
  EXPECT_TRUE(contains(flamia_last_error_message(), "flamia_describe_forward: args is NULL"));
  ForwardSetup setup;
  setup.args.problem.head_dim = 96;
  EXPECT_TRUE(contains(flamia_describe_forward(&setup.args), "no kernel path"));
  EXPECT_TRUE(contains(flamia_last_error_message(), "problem.head_dim 96"));
}

TEST(ApiErrors, CheckDeviceStatusValidatesItsArguments) {
  EXPECT_EQ(flamia_check_device_status(nullptr, nullptr), FLAMIA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(flamia_last_error_message(), "flamia_check_device_status: workspace"));
  EXPECT_EQ(flamia_check_device_status(fake_device(0, 16), nullptr), FLAMIA_ERROR_WORKSPACE);
  EXPECT_TRUE(contains(flamia_last_error_message(), "256-byte aligned"));
}

TEST(ApiErrors, CheckDeviceStatusNeedsTheDeviceWithoutGpu) {
  if (sm90_device_present()) GTEST_SKIP() << "an sm_90 GPU is present (GPU tests cover it)";
  EXPECT_EQ(flamia_check_device_status(fake_device(0), nullptr), FLAMIA_ERROR_NO_DEVICE);
  EXPECT_TRUE(contains(flamia_last_error_message(), "flamia_check_device_status: "));
}

}  // namespace
}  // namespace flamia_test
