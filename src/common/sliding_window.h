// The causal sliding window of flamia_problem.sliding_window (docs/numerics.md §4.3), shared by
// the forward's and the backward's geometry (host and device).
#pragma once

#include "common/fp8_numerics.h"  // FLAMIA_HD

namespace flamia {

// The first key (document-local) that query row `row` (document-local) sees under a window of
// `window` keys (0: none): row - window + 1, or the document's first key.
FLAMIA_HD int sliding_window_first_key(int row, int window) {
  return window > 0 && row - window + 1 > 0 ? row - window + 1 : 0;
}

}  // namespace flamia
