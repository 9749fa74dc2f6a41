// The FP8 backward's per-query factors, computed before the backward kernel (row_factors.cu):
// [Hq][kRowFactorFields][padded_q] FP32 words, loaded per step by TMA (Fp8QueryFactors).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/backward/backward_params.h"

namespace flamia::backward {

size_t row_factors_bytes(int heads_q, int padded_q);

// Fills `out` from the parameters' exponents, statistics and delta on `stream`.
// `folded`: the gradient factors of the launched kernel's form (kFoldedScoreGradient,
// Fp8QueryFactors).
cudaError_t launch_row_factors(const BackwardParams& p, float* out, bool folded,
                               cudaStream_t stream);

}  // namespace flamia::backward
