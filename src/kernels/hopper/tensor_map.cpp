#include "kernels/hopper/tensor_map.h"

#include <cudaTypedefs.h>

#include <mutex>

namespace flamia::hopper {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_function(const char** what) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    cudaDriverEntryPointQueryResult result;
    void* fn = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &result) == cudaSuccess &&
        result == cudaDriverEntryPointSuccess)
      encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  });
  if (!encode) *what = "cuTensorMapEncodeTiled is not available from the CUDA driver";
  return encode;
}

CUtensorMapSwizzle to_cu(TmaSwizzle s) {
  switch (s) {
    case TmaSwizzle::k32B:
      return CU_TENSOR_MAP_SWIZZLE_32B;
    case TmaSwizzle::k64B:
      return CU_TENSOR_MAP_SWIZZLE_64B;
    case TmaSwizzle::k128B:
      return CU_TENSOR_MAP_SWIZZLE_128B;
    default:
      return CU_TENSOR_MAP_SWIZZLE_NONE;
  }
}

}  // namespace

TmaSwizzle swizzle_for_row_bytes(int row_bytes) {
  return row_bytes >= 128 ? TmaSwizzle::k128B
                          : (row_bytes == 64 ? TmaSwizzle::k64B : TmaSwizzle::k32B);
}

cudaError_t make_tensor_map(const TensorMapSpec& spec, CUtensorMap* map, const char** what) {
  auto encode = encode_function(what);
  if (!encode) return cudaErrorNotSupported;
  cuuint64_t dims[3];
  cuuint64_t strides[2];
  cuuint32_t box[3];
  cuuint32_t element_strides[3] = {1, 1, 1};
  for (int i = 0; i < spec.rank; ++i) {
    dims[i] = spec.dims[i];
    box[i] = spec.box[i];
  }
  for (int i = 0; i + 1 < spec.rank; ++i) strides[i] = spec.strides_bytes[i];
  const CUresult r = encode(map,
                            spec.element == TmaElement::kFloat32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                                                 : CU_TENSOR_MAP_DATA_TYPE_UINT8,
                            spec.rank, const_cast<void*>(spec.base), dims, strides, box,
                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, to_cu(spec.swizzle),
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    *what = "cuTensorMapEncodeTiled rejected a tensor map (alignment or size)";
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

}  // namespace flamia::hopper
