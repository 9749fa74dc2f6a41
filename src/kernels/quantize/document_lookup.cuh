// Finding each token's document from cu_seqlens on the device (cu_seqlens is sorted; empty
// documents repeat an entry). A token t lies in document b = (number of entries <= t) - 1, with
// bounds [cu[b], cu[b + 1]) — empty documents drop out of that formula by themselves.
//
// A CTA finds the document of its first token with a cooperative many-way search (every thread
// probes one entry per round: two rounds reach 65k documents), caches the following entries in
// shared memory, then resolves each token by a binary search in that slice. If the slice does
// not reach past the tile (many empty documents) tokens search global memory instead.
#pragma once

#include <cstdint>

#include "common/sorted_search.h"

#include "kernels/quantize/quantize_job.h"

namespace flamia::quantize {

// Number of entries of the sorted array cu[0..n) that are <= x. Called by all threads of the
// CTA with the same arguments (contains barriers).
__device__ __forceinline__ int cooperative_count_le(const int32_t* cu, int n, int x) {
  const int threads = blockDim.x;
  int lo = 0, hi = n;  // entries before lo are <= x; the answer lies in [lo, hi]
  while (hi - lo > threads) {
    const int stride = (hi - lo + threads - 1) / threads;
    const int probe = lo + int(threadIdx.x) * stride;
    const int hits = __syncthreads_count(probe < hi && __ldg(cu + probe) <= x);
    if (hits == 0) {
      hi = lo;
    } else {
      const int new_lo = lo + (hits - 1) * stride + 1;
      hi = min(hi, lo + hits * stride);
      lo = new_lo;
    }
  }
  const int probe = lo + int(threadIdx.x);
  return lo + __syncthreads_count(probe < hi && __ldg(cu + probe) <= x);
}

struct DocumentOf {
  int index;  // b
  int begin;  // cu[b]
  int end;    // cu[b + 1]
};

// The cached slice cu[first .. first + count) of one CTA.
struct DocumentSlice {
  const int32_t* cu;    // global, batch + 1 entries
  int entries;          // batch + 1
  const int32_t* smem;  // the slice
  int first;
  int count;
  bool covers;  // slice has an entry above the tile's last token

  // Valid for tokens whose document is the document of some token of the tile.
  __device__ __forceinline__ DocumentOf find(int t) const {
    int ub;
    if (covers) {
      ub = first + upper_bound_by([&](int i) { return smem[i]; }, count, t);
    } else {
      ub = upper_bound_by([&](int i) { return __ldg(cu + i); }, entries, t);
    }
    // Clamps only matter for invalid cu_seqlens (which device_status reports): stay in bounds.
    const int b = max(ub - 1, 0);
    const int end_index = min(b + 1, entries - 1);
    const int begin = covers ? smem[b - first] : __ldg(cu + b);
    const int end =
        covers && end_index - first < count ? smem[end_index - first] : __ldg(cu + end_index);
    return {b, begin, end};
  }
};

// Each of the tile's `count` tokens' document bounds, and with kWithIndex its index, into shared
// arrays indexed by the token's place in the tile (thread `tid` of kThreads).
template <int kThreads, bool kWithIndex>
__device__ __forceinline__ void store_tile_documents(const DocumentSlice& slice, int tile_begin,
                                                     int count, int tid, int32_t* begin,
                                                     int32_t* end, int32_t* index) {
  for (int i = tid; i < count; i += kThreads) {
    const DocumentOf doc = slice.find(tile_begin + i);
    begin[i] = doc.begin;
    end[i] = doc.end;
    if constexpr (kWithIndex) index[i] = doc.index;
  }
}

// Loads the slice starting at the document of `tile_begin`. All threads; contains barriers.
__device__ __forceinline__ DocumentSlice load_document_slice(const int32_t* cu, int batch,
                                                             int tile_begin, int tile_last,
                                                             int32_t* smem) {
  const int entries = batch + 1;
  const int first = max(cooperative_count_le(cu, entries, tile_begin) - 1, 0);
  const int count = min(kDocSliceCapacity, entries - first);
  for (int i = threadIdx.x; i < count; i += blockDim.x) smem[i] = __ldg(cu + first + i);
  __syncthreads();
  return {cu, entries, smem, first, count, smem[count - 1] > tile_last};
}

}  // namespace flamia::quantize
