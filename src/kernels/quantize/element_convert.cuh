// Element-level conversions of the quantize pass: BF16 unpacking, the per-copy transforms,
// E4M3 encoding with the hardware's satfinite RNE conversion (bit-identical to e4m3_encode),
// E4M3 decoding, and the 4x4 byte transpose behind the token-major copies.
#pragma once

#include <cstdint>

#include "common/fp8_numerics.h"
#include "kernels/quantize/quantize_job.h"

namespace flamia::quantize {

constexpr int kChunkVectors = 2;  // a chunk of 16 BF16 channels is two 16-byte vectors
constexpr int kBf16PerVector = 8;
constexpr int kCodeWords = kChunkChannels / 4;  // 16 E4M3 codes = 4 words

struct Bf16Chunk {
  uint4 v[kChunkVectors];
};

// 8 BF16 values (one 16-byte vector) -> FP32, written from x[first]. BF16 -> FP32 is exact:
// the BF16 bits are the high half of the FP32 bits.
template <int N>
__device__ __forceinline__ void unpack_vector(const uint4& v, float (&x)[N], int first = 0) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[first + 2 * i] = __uint_as_float(w[i] << 16);
    x[first + 2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

__device__ __forceinline__ void unpack_chunk(const Bf16Chunk& c, float (&x)[kChunkChannels]) {
#pragma unroll
  for (int h = 0; h < kChunkVectors; ++h) unpack_vector(c.v[h], x, h * kBf16PerVector);
}

__device__ __forceinline__ Bf16Chunk load_chunk(const TensorSource& src, int64_t token, int head,
                                                int chunk) {
  const uint4* p =
      reinterpret_cast<const uint4*>(src.data + token * src.token_stride +
                                     int64_t(head) * src.head_stride + chunk * kChunkChannels);
  return {{__ldg(p), __ldg(p + 1)}};
}

__device__ __forceinline__ Bf16Chunk zero_chunk() {
  return {{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)}};
}

// 16 FP32 values of a caller's vector (tiny and cached: scalar loads, any 4-byte alignment).
__device__ __forceinline__ void load_vector_chunk(const float* v, float (&x)[kChunkChannels]) {
#pragma unroll
  for (int i = 0; i < kChunkChannels; ++i) x[i] = __ldg(v + i);
}

// x * r for one token's chunk, r = inverse_l_factor(l) (the dO'' copy, numerics §3): 0 where
// r = 0 (a row with no visible key).
template <int N>
__device__ __forceinline__ void scale_by_inverse_l(float (&x)[N], float r) {
  if (r == 0.0f) {
#pragma unroll
    for (int i = 0; i < N; ++i) x[i] = 0.0f;
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) x[i] = __fmul_rn(x[i], r);
  }
}

// The transform of a copy, applied in FP32 exactly as the reference's element source does:
// one subtraction (x - m) or one product by r = fl(1/l). `shift` is m for the subtract kinds,
// `inverse_l` is r for x * r.
__device__ __forceinline__ void apply_transform(Transform transform,
                                                const float (&shift)[kChunkChannels],
                                                float inverse_l, float (&x)[kChunkChannels]) {
  if (transform == Transform::kSubtractFirstKey || transform == Transform::kSubtractVector) {
#pragma unroll
    for (int i = 0; i < kChunkChannels; ++i) x[i] = __fsub_rn(x[i], shift[i]);
  } else if (transform == Transform::kTimesInverseL) {
    scale_by_inverse_l(x, inverse_l);
  }
}

// max |x| (fmaxf: NaN ignored, as the reference's std::max ignores it).
template <int N>
__device__ __forceinline__ float values_amax(const float (&x)[N]) {
  float a = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) a = fmaxf(a, fabsf(x[i]));
  return a;
}

__device__ __forceinline__ float chunk_amax(const float (&x)[kChunkChannels]) {
  return values_amax(x);
}

// e4m3x2 with x0 in the low byte; cvt puts its first source in the high byte.
__device__ __forceinline__ uint32_t encode_e4m3x2(float x0, float x1) {
  uint16_t pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(x1), "f"(x0));
  return pair;
}

// q8(x * 2^-e) for N channels, packed little-endian (channel 0 in byte 0 of word 0). The
// product by an exact power of two is a separate rounding step, as in quantize_e4m3.
template <int N>
__device__ __forceinline__ void encode_scaled(const float (&x)[N], float inv_scale,
                                              uint32_t (&codes)[N / 4]) {
#pragma unroll
  for (int w = 0; w < N / 4; ++w) {
    const uint32_t lo =
        encode_e4m3x2(__fmul_rn(x[4 * w], inv_scale), __fmul_rn(x[4 * w + 1], inv_scale));
    const uint32_t hi =
        encode_e4m3x2(__fmul_rn(x[4 * w + 2], inv_scale), __fmul_rn(x[4 * w + 3], inv_scale));
    codes[w] = lo | hi << 16;
  }
}

__device__ __forceinline__ void encode_chunk(const float (&x)[kChunkChannels], float inv_scale,
                                             uint32_t (&codes)[kCodeWords]) {
  encode_scaled(x, inv_scale, codes);
}

// Exact E4M3 -> FP32 of the 4 codes of one word (via the exact e4m3x2 -> f16x2 conversion).
__device__ __forceinline__ void decode_word(uint32_t word, float (&x)[4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint16_t pair = uint16_t(word >> (16 * h));
    uint32_t halves;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(halves) : "h"(pair));
    float lo, hi;
    asm("cvt.f32.f16 %0, %1;" : "=f"(lo) : "h"(uint16_t(halves & 0xFFFFu)));
    asm("cvt.f32.f16 %0, %1;" : "=f"(hi) : "h"(uint16_t(halves >> 16)));
    x[2 * h] = lo;
    x[2 * h + 1] = hi;
  }
}

// 4x4 byte transpose: out[b] byte j = in[j] byte b.
__device__ __forceinline__ void transpose_bytes(const uint32_t (&in)[4], uint32_t (&out)[4]) {
  constexpr uint32_t kInterleaveLow = 0x5140;   // a.b0 b.b0 a.b1 b.b1
  constexpr uint32_t kInterleaveHigh = 0x7362;  // a.b2 b.b2 a.b3 b.b3
  constexpr uint32_t kLowHalves = 0x5410;       // a.h0 b.h0
  constexpr uint32_t kHighHalves = 0x7632;      // a.h1 b.h1
  const uint32_t t01_lo = __byte_perm(in[0], in[1], kInterleaveLow);
  const uint32_t t01_hi = __byte_perm(in[0], in[1], kInterleaveHigh);
  const uint32_t t23_lo = __byte_perm(in[2], in[3], kInterleaveLow);
  const uint32_t t23_hi = __byte_perm(in[2], in[3], kInterleaveHigh);
  out[0] = __byte_perm(t01_lo, t23_lo, kLowHalves);
  out[1] = __byte_perm(t01_lo, t23_lo, kHighHalves);
  out[2] = __byte_perm(t01_hi, t23_hi, kLowHalves);
  out[3] = __byte_perm(t01_hi, t23_hi, kHighHalves);
}

}  // namespace flamia::quantize
