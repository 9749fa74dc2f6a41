// A checksum of the cu_seqlens contents, kept in the saved-operands header (saved_operands.h):
// a backward given the buffer of a forward of another batch with the same sizes (batch, totals,
// heads) but other document boundaries is caught on the device, not run on operands quantized
// for other documents (block-32 scales and first-key smoothing follow the boundaries).
//
// The checksum is the sum, mod 2^64, of one 64-bit hash per entry of (array, index, value).
// A sum is commutative and associative, so any split of the entries over threads, warps or
// blocks (device_checks.cu) gives the same bits as the serial loop below. The index and the
// array enter each term, so moving a length from one document to another, or swapping the q and
// k arrays, changes the terms themselves, not only their order: two different contents collide
// only by chance (about 2^-64 for the mix below).
#pragma once

#include <cstdint>

#include "api/seqlens_rules.h"

namespace flamia::api {

// The bits of (array, index, value) in one word before mixing: value in the low 32, index
// (0 <= index <= batch < 2^31) in bits 32-62, the array in bit 63. Distinct triples give
// distinct words.
constexpr int kChecksumIndexShift = 32;
constexpr int kChecksumArrayShift = 63;

// The splitmix64 finalizer (Steele, Lea, Flood 2014): a bijection of 64-bit words in which every
// input bit flips each output bit with probability close to 1/2, so the per-entry terms behave
// as independent random words and their sum as a 64-bit hash of the whole contents.
constexpr uint64_t kChecksumMultiplier1 = 0xBF58476D1CE4E5B9ull;
constexpr uint64_t kChecksumMultiplier2 = 0x94D049BB133111EBull;
constexpr int kChecksumShift1 = 30;
constexpr int kChecksumShift2 = 27;
constexpr int kChecksumShift3 = 31;

FLAMIA_SEQLENS_HD uint64_t checksum_mix(uint64_t x) {
  x ^= x >> kChecksumShift1;
  x *= kChecksumMultiplier1;
  x ^= x >> kChecksumShift2;
  x *= kChecksumMultiplier2;
  x ^= x >> kChecksumShift3;
  return x;
}

// The term of entry `index` (0 <= index <= batch) of `array` (SeqlensArray), holding `value`.
FLAMIA_SEQLENS_HD uint64_t seqlens_checksum_term(int32_t array, int64_t index, int32_t value) {
  const uint64_t word = (uint64_t(array & 1) << kChecksumArrayShift) |
                        (uint64_t(index) << kChecksumIndexShift) | uint64_t(uint32_t(value));
  return checksum_mix(word);
}

// Both arrays' terms for entry `index`.
FLAMIA_SEQLENS_HD uint64_t seqlens_checksum_terms(const int32_t* cu_q, const int32_t* cu_k,
                                                  int64_t index) {
  return seqlens_checksum_term(kSeqlensQ, index, cu_q[index]) +
         seqlens_checksum_term(kSeqlensK, index, cu_k[index]);
}

// The checksum of all batch + 1 entries of both arrays, serially (the reference the device's
// parallel sum equals).
FLAMIA_SEQLENS_HD uint64_t seqlens_checksum(const int32_t* cu_q, const int32_t* cu_k,
                                            int32_t batch) {
  uint64_t sum = 0;
  for (int64_t i = 0; i <= batch; ++i) sum += seqlens_checksum_terms(cu_q, cu_k, i);
  return sum;
}

}  // namespace flamia::api
