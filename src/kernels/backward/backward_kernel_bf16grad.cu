// The backward kernels of precision fp8-bf16grad (dP, dQ, dK in BF16), head dims 64 and 128.
#include "kernels/backward/backward_kernel_instantiate.cuh"

namespace flamia::backward {

template cudaError_t launch_backward_kernel<64, true>(const BackwardParams&, dim3, cudaStream_t);
template cudaError_t launch_backward_kernel<128, true>(const BackwardParams&, dim3, cudaStream_t);

}  // namespace flamia::backward
