// Random bad input to the C API: every entry point returns a status with a message naming the
// function, never crashes, and never reports success for a problem it did not run (without a
// GPU only a problem with nothing to write succeeds: a forward without queries, a backward
// without queries and keys). Each case mutates a valid call (test_api_setup.h) in one
// to three places: problem sizes and enums set to edge values, cu_seqlens host copies corrupted,
// tensors, strides and buffers null, misaligned or resized. The seed is random per run (printed;
// FLAMIA_FUZZ_SEED repeats one); the cases where validation needs no GPU skip when one is present.
#include <gtest/gtest.h>

#include <climits>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "test_api_setup.h"

namespace flamia_test {
namespace {

constexpr int kCasesPerEntryPoint = 20000;
constexpr int32_t kMaxHostBatch = 4096;  // larger batches are fuzzed with device cu_seqlens only

// Sizes that sit on or across the boundaries validation checks.
const std::vector<int32_t> kEdgeInts = {
    INT_MIN, -4096, -2,  -1,  0,   1,   2,   3,   7,    8,    16,    17,      63,
    64,      100,   113, 127, 128, 129, 131, 256, 1000, 4096, 65536, 1 << 24, INT_MAX};
const std::vector<float> kEdgeScales = {std::numeric_limits<float>::quiet_NaN(),
                                        std::numeric_limits<float>::infinity(),
                                        -std::numeric_limits<float>::infinity(),
                                        -1.0f,
                                        0.0f,
                                        1e-38f,
                                        1e38f,
                                        0.0883883f};
const std::vector<int64_t> kEdgeStrides = {LLONG_MIN,        -128,     -1, 0, 1, 63, 127, 129, 1024,
                                           int64_t(1) << 40, LLONG_MAX};
const std::vector<int> kEdgeEnums = {-1, 0, 1, 2, 3, 99};

uint32_t fuzz_seed() {
  if (const char* seed = std::getenv("FLAMIA_FUZZ_SEED"))
    return uint32_t(std::strtoul(seed, nullptr, 10));
  return std::random_device{}();
}

template <typename T>
T pick(std::mt19937& rng, const std::vector<T>& values) {
  return values[std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng)];
}

// A host cu_seqlens copy of batch + 1 entries (or none, when batch is out of reach): often a
// valid prefix sum, sometimes corrupted in one entry.
void fill_host_seqlens(std::mt19937& rng, std::vector<int32_t>& cu, int32_t batch, int32_t total) {
  const size_t entries = batch >= 0 && batch <= kMaxHostBatch ? size_t(batch) + 1 : 1;
  cu.assign(entries, 0);
  for (size_t i = 1; i < entries; ++i)
    cu[i] = i + 1 == entries ? total
                             : std::uniform_int_distribution<int32_t>(
                                   cu[i - 1], std::max(cu[i - 1], total))(rng);
  if (rng() % 3 == 0) cu[rng() % entries] = pick(rng, kEdgeInts);
}

// The problem's int32 fields, each set to an edge value by a mutation.
constexpr int32_t flamia_problem::*kIntFields[] = {
    &flamia_problem::batch,         &flamia_problem::total_q,      &flamia_problem::total_k,
    &flamia_problem::heads_q,       &flamia_problem::heads_kv,     &flamia_problem::head_dim,
    &flamia_problem::max_seqlen_q,  &flamia_problem::max_seqlen_k, &flamia_problem::causal,
    &flamia_problem::sliding_window};

// The mutations of a flamia_problem; `host` says whether host cu_seqlens copies are passed (the
// library reads batch + 1 entries of them, so they are rebuilt whenever batch changes).
struct ProblemFuzz {
  std::vector<int32_t>& host_q;
  std::vector<int32_t>& host_k;
  bool host = false;

  void mutate(std::mt19937& rng, flamia_problem& p) {
    const uint32_t choice = rng() % 12;
    if (choice < 9) {
      p.*kIntFields[rng() % std::size(kIntFields)] = pick(rng, kEdgeInts);
    } else if (choice == 9) {
      p.softmax_scale = pick(rng, kEdgeScales);
    } else if (choice == 10) {
      switch (rng() % 4) {
        case 0:
          set_raw_enum(p.scale_mode, pick(rng, kEdgeEnums));
          break;
        case 1:
          set_raw_enum(p.key_smoothing, pick(rng, kEdgeEnums));
          break;
        default:  // scale mode static's exponent arrays, set or not, with or without the mode
          if (rng() % 2) p.scale_mode = FLAMIA_SCALE_STATIC;
          (rng() % 2 ? p.static_key_exponents : p.static_value_exponents) =
              rng() % 2 ? nullptr : static_cast<const int8_t*>(fake_device(14));
      }
    } else if (rng() % 2) {  // the cu_seqlens pointers, or their host copies
      (rng() % 2 ? p.cu_seqlens_q : p.cu_seqlens_k) =
          rng() % 2 ? nullptr : static_cast<const int32_t*>(fake_device(1, 2));
    } else {
      host = true;
      fill_host_seqlens(rng, host_q, p.batch, p.total_q);
      fill_host_seqlens(rng, host_k, p.batch, p.total_k);
    }
    if (host) {  // the library reads batch + 1 entries: rebuilt whenever batch changed
      if (p.batch < 0 || p.batch > kMaxHostBatch) {
        host = false;
      } else if (host_q.size() != size_t(p.batch) + 1) {
        fill_host_seqlens(rng, host_q, p.batch, p.total_q);
        fill_host_seqlens(rng, host_k, p.batch, p.total_k);
      }
      p.host_cu_seqlens_q = host ? host_q.data() : nullptr;
      p.host_cu_seqlens_k = host ? host_k.data() : nullptr;
    }
  }
};

void mutate_tensor(std::mt19937& rng, flamia_tensor& t) {
  switch (rng() % 4) {
    case 0:
      t.data = nullptr;
      break;
    case 1:
      t.data = static_cast<char*>(t.data) + 1 + rng() % 15;
      break;
    case 2:
      t.token_stride = pick(rng, kEdgeStrides);
      break;
    default:
      t.head_stride = pick(rng, kEdgeStrides);
  }
}

// Whether an entry point has nothing to write for a problem (and so succeeds without a GPU).
using NothingToWrite = bool (*)(const flamia_problem&);

// The status is a flamia_status, with a message naming `function` unless it is FLAMIA_OK, and
// FLAMIA_OK only where the call had nothing to write (no GPU: nothing else can have run).
void expect_clean_status(flamia_status status, const char* function, const flamia_problem& problem,
                         NothingToWrite nothing_to_write) {
  ASSERT_GE(int(status), int(FLAMIA_OK));
  ASSERT_LE(int(status), int(FLAMIA_ERROR_NO_DEVICE));
  if (status == FLAMIA_OK) {
    EXPECT_TRUE(nothing_to_write(problem))
        << "success without a GPU: total_q " << problem.total_q << ", total_k " << problem.total_k;
    return;
  }
  const std::string message = flamia_last_error_message();
  EXPECT_TRUE(contains(message.c_str(), std::string(function) + ": ")) << message;
  EXPECT_NE(std::string(flamia_status_name(status)), "");
}

template <typename Setup>
void fuzz_entry_point(const char* function, NothingToWrite nothing_to_write,
                      const std::function<void(std::mt19937&, Setup&)>& mutate_args,
                      const std::function<flamia_status(Setup&)>& call) {
  if (sm90_device_present()) GTEST_SKIP() << "an sm_90 GPU is present: a valid mutation would run";
  const uint32_t seed = fuzz_seed();
  SCOPED_TRACE("FLAMIA_FUZZ_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  int seen[FLAMIA_ERROR_NO_DEVICE + 1] = {};
  for (int i = 0; i < kCasesPerEntryPoint; ++i) {
    Setup setup;
    ProblemFuzz problem{setup.host_cu_q, setup.host_cu_k};
    if (rng() % 2) {
      setup.use_host_seqlens();
      problem.host = true;
    }
    const int mutations = 1 + int(rng() % 3);
    for (int m = 0; m < mutations; ++m) {
      if (rng() % 2)
        problem.mutate(rng, setup.args.problem);
      else
        mutate_args(rng, setup);
    }
    SCOPED_TRACE("case " + std::to_string(i));
    const flamia_status status = call(setup);
    expect_clean_status(status, function, setup.args.problem, nothing_to_write);
    if (::testing::Test::HasFatalFailure() || ::testing::Test::HasNonfatalFailure()) return;
    ++seen[status];
  }
  // The mutations reach every kind of refusal, and some calls stay valid (they stop at the
  // device check): a fuzz that only ever hit one early check would test little.
  std::string counts;
  for (int s = FLAMIA_OK; s <= FLAMIA_ERROR_NO_DEVICE; ++s)
    counts +=
        std::string(flamia_status_name(flamia_status(s))) + "=" + std::to_string(seen[s]) + " ";
  std::printf("[api fuzz %s] %s\n", function, counts.c_str());
  for (flamia_status s :
       {FLAMIA_ERROR_INVALID_ARGUMENT, FLAMIA_ERROR_UNSUPPORTED, FLAMIA_ERROR_WORKSPACE,
        FLAMIA_ERROR_INVALID_SEQLENS, FLAMIA_ERROR_NO_DEVICE})
    EXPECT_GT(seen[s], 0) << flamia_status_name(s) << " never returned: " << counts;
}

// The workspace and saved-operands mutations both entry points take.
template <typename Setup>
void mutate_buffers(std::mt19937& rng, Setup& s) {
  switch (rng() % 3) {
    case 0:
      s.args.workspace = rng() % 2 ? nullptr : static_cast<char*>(s.args.workspace) + 8;
      break;
    case 1:
      s.args.workspace_bytes = rng() % 2 ? 0 : s.args.workspace_bytes / 2;
      break;
    default:
      s.use_saved_operands();
      if (rng() % 2) s.args.saved_operands_bytes /= 2;
  }
}

void expect_a_status(flamia_status status) {
  EXPECT_GE(int(status), int(FLAMIA_OK));
  EXPECT_LE(int(status), int(FLAMIA_ERROR_NO_DEVICE));
}

TEST(ApiFuzz, ForwardReturnsCleanStatuses) {
  fuzz_entry_point<ForwardSetup>(
      "flamia_forward", [](const flamia_problem& p) { return p.total_q == 0; },
      [](std::mt19937& rng, ForwardSetup& s) {
        switch (rng() % 4) {
          case 0:
            mutate_tensor(rng, s.tensor(pick(rng, std::vector<std::string>{"q", "k", "v", "o"})));
            break;
          case 1:
            s.args.lse = rng() % 2 ? nullptr : s.args.lse + 1;
            break;
          case 2:
            set_raw_enum(s.args.quantize, pick(rng, kEdgeEnums));
            break;
          default:
            mutate_buffers(rng, s);
        }
      },
      [](ForwardSetup& s) {
        size_t bytes = 0;
        expect_a_status(flamia_forward_workspace_size(&s.args, &bytes));
        EXPECT_NE(flamia_describe_forward(&s.args), nullptr);
        return flamia_forward(&s.args);
      });
}

TEST(ApiFuzz, BackwardReturnsCleanStatuses) {
  fuzz_entry_point<BackwardSetup>(
      "flamia_backward", [](const flamia_problem& p) { return p.total_q == 0 && p.total_k == 0; },
      [](std::mt19937& rng, BackwardSetup& s) {
        switch (rng() % 4) {
          case 0:
            mutate_tensor(
                rng, s.tensor(pick(rng, std::vector<std::string>{"q", "k", "v", "o", "d_o", "dq",
                                                                 "dk", "dv"})));
            break;
          case 1:
            s.args.softmax_stats = rng() % 2 ? nullptr : s.args.softmax_stats + 1;
            break;
          case 2:
            if (rng() % 2)
              set_raw_enum(s.args.precision, pick(rng, kEdgeEnums));
            else
              s.args.deterministic = pick(rng, kEdgeInts);
            break;
          default:
            mutate_buffers(rng, s);
        }
      },
      [](BackwardSetup& s) {
        size_t bytes = 0;
        expect_a_status(flamia_backward_workspace_size(&s.args, &bytes));
        expect_a_status(flamia_saved_operands_size(&s.args.problem, &bytes));
        return flamia_backward(&s.args);
      });
}

}  // namespace
}  // namespace flamia_test
