// Workspace size queries, on the CPU: they read only the problem's sizes and options, are
// multiples of 256 bytes that hold at least the device status record, and never shrink when
// the problem grows.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "cpu/test_api_setup.h"

namespace flamia_test {
namespace {

constexpr size_t kWorkspaceAlignment = 256;
// Awkward sizes: 0, 1, 17, 113, 2049 tokens.
const std::vector<int32_t> kTotals = {0, 1, 17, 113, 2049};

size_t forward_bytes(const flamia_forward_args& args) {
  size_t bytes = 0;
  EXPECT_EQ(flamia_forward_workspace_size(&args, &bytes), FLAMIA_OK) << flamia_last_error_message();
  return bytes;
}

size_t backward_bytes(const flamia_backward_args& args) {
  size_t bytes = 0;
  EXPECT_EQ(flamia_backward_workspace_size(&args, &bytes), FLAMIA_OK)
      << flamia_last_error_message();
  return bytes;
}

void expect_well_formed(size_t bytes) {
  EXPECT_EQ(bytes % kWorkspaceAlignment, 0u) << bytes;
  EXPECT_GE(bytes, kWorkspaceAlignment) << "the status record comes first";
}

// Sizes along a sweep of one problem parameter must be non-decreasing.
template <typename Args>
void expect_monotone(const std::string& what, const std::vector<int32_t>& values,
                     const std::function<void(flamia_problem&, int32_t)>& set,
                     const std::function<size_t(const Args&)>& query, Args args) {
  size_t previous = 0;
  for (int32_t value : values) {
    set(args.problem, value);
    const size_t bytes = query(args);
    expect_well_formed(bytes);
    EXPECT_GE(bytes, previous) << what << " = " << value;
    previous = bytes;
  }
}

template <typename Args>
void expect_monotone_in_every_size(const std::function<size_t(const Args&)>& query, Args base) {
  base.problem.causal = 0;  // lets total_q and total_k vary apart
  expect_monotone<Args>(
      "total_q", kTotals, [](flamia_problem& p, int32_t v) { p.total_q = v; }, query, base);
  expect_monotone<Args>(
      "total_k", kTotals, [](flamia_problem& p, int32_t v) { p.total_k = v; }, query, base);
  expect_monotone<Args>(
      "total_q = total_k (causal)", kTotals,
      [](flamia_problem& p, int32_t v) {
        p.causal = 1;
        p.total_q = p.total_k = v;
      },
      query, base);
  expect_monotone<Args>(
      "heads_q", {2, 4, 8, 16}, [](flamia_problem& p, int32_t v) { p.heads_q = v; }, query, base);
  expect_monotone<Args>(
      "heads_kv", {1, 2, 4, 8}, [](flamia_problem& p, int32_t v) { p.heads_kv = v; }, query, base);
  expect_monotone<Args>(
      "head_dim", {64, 128}, [](flamia_problem& p, int32_t v) { p.head_dim = v; }, query, base);
  expect_monotone<Args>(
      "batch", {1, 2, 17, 1000}, [](flamia_problem& p, int32_t v) { p.batch = v; }, query, base);
  expect_monotone<Args>(
      "max_seqlen", {1, 17, 113, 2049},
      [](flamia_problem& p, int32_t v) { p.max_seqlen_q = p.max_seqlen_k = v; }, query, base);
}

TEST(ApiWorkspace, ForwardSizeIsMonotoneAndAligned) {
  expect_monotone_in_every_size<flamia_forward_args>(forward_bytes, ForwardSetup().args);
}

TEST(ApiWorkspace, BackwardSizeIsMonotoneAndAligned) {
  BackwardSetup setup;
  expect_monotone_in_every_size<flamia_backward_args>(backward_bytes, setup.args);
  setup.args.deterministic = 1;
  expect_monotone_in_every_size<flamia_backward_args>(backward_bytes, setup.args);
}

// The quantized operands alone: at least one byte per element of Q, K and V.
TEST(ApiWorkspace, HoldsTheQuantizedOperands) {
  ForwardSetup setup;
  const flamia_problem& p = setup.args.problem;
  const size_t elements =
      size_t(p.total_q) * p.heads_q * p.head_dim + 2 * size_t(p.total_k) * p.heads_kv * p.head_dim;
  EXPECT_GE(forward_bytes(setup.args), elements);
  BackwardSetup backward;
  // The backward adds at least Q̂ᵀ, K̂cᵀ, V̂, dÔ and dO''ᵀ.
  EXPECT_GE(backward_bytes(backward.args), 2 * elements);
}

TEST(ApiWorkspace, KeySmoothingNeverShrinksIt) {
  ForwardSetup setup;
  const size_t plain = forward_bytes(setup.args);
  setup.args.problem.key_smoothing = FLAMIA_SMOOTH_FIRST_KEY;
  const size_t smoothed = forward_bytes(setup.args);
  EXPECT_GE(smoothed, plain);
  setup.args.problem.key_smoothing = FLAMIA_SMOOTH_VECTOR;  // the vector is not needed to size
  EXPECT_EQ(forward_bytes(setup.args), smoothed);
}

// The saved-operands buffer holds the six copies of Q, K, V the FP8 backward reads, which then
// leave both workspaces; it depends on the problem's sizes only.
TEST(ApiWorkspace, SavedOperandsMoveTheCopiesOutOfTheWorkspaces) {
  ForwardSetup forward;
  BackwardSetup backward;
  const flamia_problem& p = forward.args.problem;
  const size_t elements =
      size_t(p.total_q) * p.heads_q * p.head_dim + 2 * size_t(p.total_k) * p.heads_kv * p.head_dim;
  const size_t saved = saved_operands_bytes(p);
  expect_well_formed(saved);
  EXPECT_GE(saved, 2 * elements);

  const size_t forward_plain = forward_bytes(forward.args);
  const size_t backward_plain = backward_bytes(backward.args);
  forward.use_saved_operands();
  backward.use_saved_operands();
  EXPECT_GE(forward_plain - forward_bytes(forward.args), elements);
  EXPECT_GE(backward_plain - backward_bytes(backward.args), 2 * elements);
  // Every copy moves, none is duplicated: the two backward layouts hold the same buffers (the
  // saved buffer adds only its 256-byte header).
  EXPECT_EQ(backward_bytes(backward.args) + saved, backward_plain + kWorkspaceAlignment);

  flamia_problem other = p;
  other.scale_mode = FLAMIA_SCALE_BLOCK32;
  other.key_smoothing = FLAMIA_SMOOTH_FIRST_KEY;
  other.causal = 0;
  EXPECT_EQ(saved_operands_bytes(other), saved);
  other.total_k += 1;
  EXPECT_GT(saved_operands_bytes(other), saved);
}

TEST(ApiWorkspace, SavedOperandsSizeRejectsBadQueries) {
  size_t bytes = 7;
  EXPECT_EQ(flamia_saved_operands_size(nullptr, &bytes), FLAMIA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(bytes, 0u);
  EXPECT_TRUE(contains(flamia_last_error_message(), "flamia_saved_operands_size: problem is NULL"));
  flamia_problem p = valid_problem();
  EXPECT_EQ(flamia_saved_operands_size(&p, nullptr), FLAMIA_ERROR_INVALID_ARGUMENT);
  p.heads_kv = 3;
  EXPECT_EQ(flamia_saved_operands_size(&p, &bytes), FLAMIA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(flamia_last_error_message(), "multiple of problem.heads_kv"));
  p = valid_problem();
  p.head_dim = 96;
  EXPECT_EQ(flamia_saved_operands_size(&p, &bytes), FLAMIA_ERROR_UNSUPPORTED);
}

// Sizing reads no pointer: a framework can size before allocating anything.
TEST(ApiWorkspace, NeedsNoPointers) {
  flamia_forward_args forward{};
  forward.problem = valid_problem();
  forward.problem.cu_seqlens_q = nullptr;
  forward.problem.cu_seqlens_k = nullptr;
  EXPECT_EQ(forward_bytes(forward), forward_bytes(ForwardSetup().args));
  flamia_backward_args backward{};
  backward.problem = forward.problem;
  EXPECT_EQ(backward_bytes(backward), backward_bytes(BackwardSetup().args));
}

TEST(ApiWorkspace, EmptyProblemStillHoldsTheStatusRecord) {
  ForwardSetup setup;
  setup.args.problem.total_q = setup.args.problem.total_k = 0;
  expect_well_formed(forward_bytes(setup.args));
}

TEST(ApiWorkspace, NullArgumentsAreRejected) {
  size_t bytes = 123;
  EXPECT_EQ(flamia_forward_workspace_size(nullptr, &bytes), FLAMIA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(bytes, 0u);
  EXPECT_TRUE(contains(flamia_last_error_message(), "flamia_forward_workspace_size: args"));
  ForwardSetup forward;
  EXPECT_EQ(flamia_forward_workspace_size(&forward.args, nullptr), FLAMIA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(flamia_last_error_message(), "flamia_forward_workspace_size: bytes"));
  bytes = 123;
  EXPECT_EQ(flamia_backward_workspace_size(nullptr, &bytes), FLAMIA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(bytes, 0u);
  BackwardSetup backward;
  EXPECT_EQ(flamia_backward_workspace_size(&backward.args, nullptr), FLAMIA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(flamia_last_error_message(), "flamia_backward_workspace_size: bytes"));
}

// The problem is validated (a size for an invalid problem would be meaningless).
TEST(ApiWorkspace, InvalidProblemsAreRejected) {
  ForwardSetup forward;
  forward.args.problem.heads_kv = 3;
  size_t bytes = 123;
  EXPECT_EQ(flamia_forward_workspace_size(&forward.args, &bytes), FLAMIA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(bytes, 0u);
  EXPECT_TRUE(
      contains(flamia_last_error_message(), "flamia_forward_workspace_size: problem.heads_q"));
  forward.args.problem.heads_kv = 2;
  forward.args.problem.head_dim = 80;
  EXPECT_EQ(flamia_forward_workspace_size(&forward.args, &bytes), FLAMIA_ERROR_UNSUPPORTED);
  EXPECT_TRUE(contains(flamia_last_error_message(), "problem.head_dim 80"));

  BackwardSetup backward;
  set_raw_enum(backward.args.precision, 9);
  EXPECT_EQ(flamia_backward_workspace_size(&backward.args, &bytes), FLAMIA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(flamia_last_error_message(), "flamia_backward_workspace_size: precision"));
}

}  // namespace
}  // namespace flamia_test
