// Valid C API arguments for the CPU tests of the API (test_api_*.cpp). Device pointers are fake,
// aligned addresses that are never dereferenced: every CPU test either expects an error that
// validation reports before the device is touched, or skips when an sm_90 GPU is present.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "flamia/flamia.h"

namespace flamia_test {

// Awkward documents: length 1, 17, an empty one, 113.
inline std::vector<int32_t> awkward_cu_seqlens() {
  return {0, 1, 18, 18, 131};
}
constexpr int32_t kAwkwardTotal = 131;
constexpr int32_t kAwkwardMax = 113;
constexpr int32_t kHeadsQ = 8;
constexpr int32_t kHeadsKv = 2;
constexpr int32_t kHeadDim = 128;

// Distinct 256-byte-aligned fake device addresses, one region per argument.
constexpr uintptr_t kFakeDeviceBase = 0x100000000ull;
constexpr uintptr_t kFakeRegion = 0x10000000ull;
inline void* fake_device(int region, size_t offset = 0) {
  return reinterpret_cast<void*>(kFakeDeviceBase + uintptr_t(region) * kFakeRegion + offset);
}

// A C enum field set to any int, as a C caller could (C++ may not hold such values in the enum).
template <typename Enum>
void set_raw_enum(Enum& field, int value) {
  static_assert(sizeof(Enum) == sizeof(int), "C enums are int-sized");
  std::memcpy(&field, &value, sizeof value);
}

// Contiguous (tokens, heads, head_dim) strides.
inline flamia_tensor contiguous_tensor(void* data, int heads, int head_dim) {
  return flamia_tensor{data, int64_t(heads) * head_dim, head_dim};
}

inline flamia_problem valid_problem() {
  flamia_problem p{};
  p.cu_seqlens_q = static_cast<const int32_t*>(fake_device(0));
  p.cu_seqlens_k = static_cast<const int32_t*>(fake_device(1));
  p.batch = 4;
  p.total_q = kAwkwardTotal;
  p.total_k = kAwkwardTotal;
  p.heads_q = kHeadsQ;
  p.heads_kv = kHeadsKv;
  p.head_dim = kHeadDim;
  p.max_seqlen_q = kAwkwardMax;
  p.max_seqlen_k = kAwkwardMax;
  p.softmax_scale = 1.0f / std::sqrt(float(kHeadDim));
  p.causal = 1;
  p.scale_mode = FLAMIA_SCALE_EXACT;
  p.key_smoothing = FLAMIA_SMOOTH_NONE;
  return p;
}

// What ForwardSetup and BackwardSetup share: the host copies of cu_seqlens, the valid problem,
// and Q, K, V, O (fake regions 2 to 5) laid out for the problem's heads and head dim.
template <typename Args>
struct ApiSetup {
  std::vector<int32_t> host_cu_q = awkward_cu_seqlens();
  std::vector<int32_t> host_cu_k = awkward_cu_seqlens();
  Args args{};

  ApiSetup() { args.problem = valid_problem(); }
  void use_host_seqlens() {
    args.problem.host_cu_seqlens_q = host_cu_q.data();
    args.problem.host_cu_seqlens_k = host_cu_k.data();
  }

 protected:
  void layout_inputs() {
    const flamia_problem& p = args.problem;
    args.q = contiguous_tensor(fake_device(2), p.heads_q, p.head_dim);
    args.k = contiguous_tensor(fake_device(3), p.heads_kv, p.head_dim);
    args.v = contiguous_tensor(fake_device(4), p.heads_kv, p.head_dim);
    args.o = contiguous_tensor(fake_device(5), p.heads_q, p.head_dim);
  }
};

// The bytes of a problem's saved-operands buffer (0 when the problem is invalid).
inline size_t saved_operands_bytes(const flamia_problem& problem) {
  size_t bytes = 0;
  return flamia_saved_operands_size(&problem, &bytes) == FLAMIA_OK ? bytes : size_t(0);
}

// relayout() re-points every tensor for the problem's heads and head dim (after a test changes
// them). use_saved_operands() passes a saved-operands buffer (fake region 13) of the right size.
struct ForwardSetup : ApiSetup<flamia_forward_args> {
  ForwardSetup() { relayout(); }
  void relayout() {
    layout_inputs();
    args.lse = static_cast<float*>(fake_device(6));
    args.softmax_stats = static_cast<float*>(fake_device(7));
    args.workspace = fake_device(8);
    size_t bytes = 0;
    args.workspace_bytes =
        flamia_forward_workspace_size(&args, &bytes) == FLAMIA_OK ? bytes : size_t(0);
  }
  void use_saved_operands() {
    args.saved_operands = fake_device(13);
    args.saved_operands_bytes = saved_operands_bytes(args.problem);
    relayout();
  }
  flamia_tensor& tensor(const std::string& name) {
    if (name == "q") return args.q;
    if (name == "k") return args.k;
    if (name == "v") return args.v;
    return args.o;
  }
};

struct BackwardSetup : ApiSetup<flamia_backward_args> {
  BackwardSetup() {
    args.precision = FLAMIA_PRECISION_FP8;
    relayout();
  }
  void relayout() {
    layout_inputs();
    const flamia_problem& p = args.problem;
    args.d_o = contiguous_tensor(fake_device(6), p.heads_q, p.head_dim);
    args.lse = static_cast<const float*>(fake_device(7));
    args.softmax_stats = static_cast<const float*>(fake_device(8));
    args.dq = contiguous_tensor(fake_device(9), p.heads_q, p.head_dim);
    args.dk = contiguous_tensor(fake_device(10), p.heads_kv, p.head_dim);
    args.dv = contiguous_tensor(fake_device(11), p.heads_kv, p.head_dim);
    args.workspace = fake_device(12);
    size_t bytes = 0;
    args.workspace_bytes =
        flamia_backward_workspace_size(&args, &bytes) == FLAMIA_OK ? bytes : size_t(0);
  }
  void use_saved_operands() {
    args.saved_operands = fake_device(13);
    args.saved_operands_bytes = saved_operands_bytes(args.problem);
    relayout();
  }
  flamia_tensor& tensor(const std::string& name) {
    if (name == "q") return args.q;
    if (name == "k") return args.k;
    if (name == "v") return args.v;
    if (name == "o") return args.o;
    if (name == "d_o") return args.d_o;
    if (name == "dq") return args.dq;
    if (name == "dk") return args.dk;
    return args.dv;
  }
};

// True when an sm_90 GPU is present: then a fully valid call would run kernels on the fake
// pointers, so the tests that need one to be absent skip.
inline bool sm90_device_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return false;
  }
  int device = 0;
  int major = 0;
  int minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major == 9 && minor == 0;
}

inline bool contains(const char* text, const std::string& part) {
  return std::string(text).find(part) != std::string::npos;
}

}  // namespace flamia_test
