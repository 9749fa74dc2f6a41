// Binary search over a sorted sequence read through a callable (cu_seqlens in global or shared
// memory, on the host in tests), shared by the kernels that map tokens to documents.
#pragma once

#include "common/fp8_numerics.h"  // FLAMIA_HD

namespace flamia {

// First index i in [0, n) with load(i) > x, or n (load(0..n) sorted ascending).
template <typename Load>
FLAMIA_HD int upper_bound_by(Load load, int n, int x) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (load(mid) <= x) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

}  // namespace flamia
