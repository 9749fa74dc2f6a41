// Helpers shared by the GPU test suites: skip without an sm_90 GPU, device buffers, poisoning.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace flamia::test {

// True when an sm_90 (Hopper) GPU is present.
inline bool has_sm90() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return false;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return false;
  return prop.major == 9 && prop.minor == 0;
}

// Use at the top of every GPU test: skips (and says so) without an sm_90 GPU.
#define FLAMIA_REQUIRE_SM90()                                                          \
  do {                                                                                 \
    if (!::flamia::test::has_sm90()) GTEST_SKIP() << "no sm_90 GPU: GPU test skipped"; \
  } while (0)

// The same as a function, for fixtures: called from SetUp(), a skip there stops the test body
// (from a TEST body use FLAMIA_REQUIRE_SM90(), which also returns).
inline void require_sm90() {
  if (!has_sm90()) GTEST_SKIP() << "no sm_90 GPU: GPU test skipped";
}

// Inputs are fresh per run: one seed per test process, from FLAMIA_TEST_SEED when set, else
// drawn from std::random_device, printed once (stderr) so that a failing run can be repeated
// with FLAMIA_TEST_SEED=<value>.
inline uint64_t run_seed() {
  static const uint64_t seed = [] {
    uint64_t s = 0;
    if (const char* given = std::getenv("FLAMIA_TEST_SEED")) {
      s = std::strtoull(given, nullptr, 10);
    } else {
      std::random_device source;
      s = (uint64_t(source()) << 32) | source();
    }
    std::fprintf(stderr, "FLAMIA_TEST_SEED=%llu (set it to repeat this run's inputs)\n",
                 static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

// A case's input seed: its name (cases differ within a run) mixed with the run's seed (runs
// differ). The shapes of the cases stay fixed; only the values are fresh.
inline uint64_t case_seed(const std::string& name) {
  constexpr uint64_t kGoldenRatio = 0x9E3779B97F4A7C15ull;
  return std::hash<std::string>{}(name) ^ (run_seed() * kGoldenRatio);
}

// Base fixture of GPU test suites: every test skips without an sm_90 GPU.
class Sm90Test : public ::testing::Test {
 protected:
  void SetUp() override { require_sm90(); }
};

// Fills `bytes` bytes at a device pointer with `byte` (0xFF: BF16/FP32 NaN, E4M3 NaN, exponent
// -1), so that every element a kernel should write but does not is visible.
inline cudaError_t poison_device(void* ptr, size_t bytes, uint8_t byte = 0xFF) {
  return cudaMemset(ptr, byte, bytes);
}

#define FLAMIA_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(expr)

// A device allocation of `count` elements of T (at least one byte so pointers are valid).
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (cudaMalloc(&ptr_, count * sizeof(T) + kGuardBytes) != cudaSuccess) ptr_ = nullptr;
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(count_, other.count_);
    return *this;
  }
  T* get() const { return static_cast<T*>(ptr_); }
  size_t size() const { return count_; }
  void upload(const std::vector<T>& host) {
    if (!host.empty())
      cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  // A copy that fails (a sticky error after a faulting kernel, no allocation) is a test failure
  // and reads as 0xFF bytes (NaN), never as the zeros of a fresh vector, which are legal
  // outputs (O and gradients of rows without keys, amax of no keys).
  std::vector<T> download() const {
    std::vector<T> host(count_);
    if (count_ == 0) return host;
    const cudaError_t copied =
        cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost);
    if (copied != cudaSuccess) {
      ADD_FAILURE() << "DeviceBuffer::download: " << cudaGetErrorString(copied);
      std::memset(static_cast<void*>(host.data()), 0xFF, count_ * sizeof(T));
    }
    return host;
  }
  // Fills every byte with `byte` (0xFF makes BF16/FP32 NaN): outputs must overwrite it. A
  // memset that fails (no allocation, a sticky error) is a test failure: unpoisoned outputs
  // could hold legal values that no kernel wrote.
  void poison(uint8_t byte = 0xFF) {
    const cudaError_t filled = cudaMemset(ptr_, byte, count_ * sizeof(T) + kGuardBytes);
    if (filled != cudaSuccess)
      ADD_FAILURE() << "DeviceBuffer::poison: " << cudaGetErrorString(filled);
  }
  // After poison(byte) and a kernel: whether the guard bytes past the end still hold `byte`
  // (a write past the end of the buffer changes them).
  bool guard_intact(uint8_t byte = 0xFF) const {
    uint8_t guard[kGuardBytes];
    if (cudaMemcpy(guard, static_cast<const uint8_t*>(ptr_) + count_ * sizeof(T), kGuardBytes,
                   cudaMemcpyDeviceToHost) != cudaSuccess)
      return false;
    for (uint8_t b : guard)
      if (b != byte) return false;
    return true;
  }

 private:
  static constexpr size_t kGuardBytes = 16;  // past the end: valid pointers, overrun checks
  void* ptr_ = nullptr;
  size_t count_ = 0;
};

}  // namespace flamia::test
