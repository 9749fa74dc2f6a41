// The FP8 backward's per-query factors, computed before the backward kernel (row_factors.cu):
// [Hq][kRowFactorFields][padded_q] FP32 words, loaded per step by TMA (Fp8QueryFactors).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/backward/backward_params.h"

namespace flamia::backward {

size_t row_factors_bytes(int heads_q, int padded_q);

// Fills `out` from the parameters' exponents, statistics and delta on `stream`.
cudaError_t launch_row_factors(const BackwardParams& p, float* out, cudaStream_t stream);

}  // namespace flamia::backward
