// The FP8 backward kernels (precision fp8), head dims 64 and 128.
#include "kernels/backward/backward_kernel_instantiate.cuh"

namespace flamia::backward {

template cudaError_t launch_backward_kernel<64, false>(const BackwardParams&, dim3, cudaStream_t);
template cudaError_t launch_backward_kernel<128, false>(const BackwardParams&, dim3, cudaStream_t);

}  // namespace flamia::backward

#if FLAMIA_TIMELINE
namespace flamia::timeline {
FLAMIA_TIMELINE_ACCESSORS(backward)
}  // namespace flamia::timeline
#endif
