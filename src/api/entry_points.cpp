// The C entry points of the passes and their workspace size queries: validate, return early for
// empty problems, require the device, dispatch. None synchronizes (CUDA-graph capturable).
#include "api/device.h"
#include "api/dispatch.h"
#include "api/errors.h"
#include "api/saved_operands.h"
#include "api/validation.h"
#include "api/workspace.h"
#include "flamia/flamia.h"

namespace {

using namespace flamia::api;

flamia_status check_size_query(const void* args, size_t* bytes, const char* where,
                               const char* name = "args") {
  if (bytes != nullptr) *bytes = 0;
  if (args == nullptr) return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", where, name);
  if (bytes == nullptr) return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "%s: bytes is NULL", where);
  return FLAMIA_OK;
}

}  // namespace

extern "C" flamia_status flamia_forward_workspace_size(const flamia_forward_args* args,
                                                       size_t* bytes) {
  constexpr const char* kWhere = "flamia_forward_workspace_size";
  flamia_status status = check_size_query(args, bytes, kWhere);
  if (status == FLAMIA_OK) status = validate_forward_problem(*args, kWhere);
  if (status != FLAMIA_OK) return status;
  *bytes = layout_workspace(forward_workspace_request(*args), nullptr).bytes;
  return FLAMIA_OK;
}

extern "C" flamia_status flamia_backward_workspace_size(const flamia_backward_args* args,
                                                        size_t* bytes) {
  constexpr const char* kWhere = "flamia_backward_workspace_size";
  flamia_status status = check_size_query(args, bytes, kWhere);
  if (status == FLAMIA_OK) status = validate_backward_problem(*args, kWhere);
  if (status != FLAMIA_OK) return status;
  *bytes = layout_workspace(backward_workspace_request(*args), nullptr).bytes;
  return FLAMIA_OK;
}

extern "C" flamia_status flamia_saved_operands_size(const flamia_problem* problem, size_t* bytes) {
  constexpr const char* kWhere = "flamia_saved_operands_size";
  flamia_status status = check_size_query(problem, bytes, kWhere, "problem");
  if (status == FLAMIA_OK) status = validate_saved_operands_problem(*problem, kWhere);
  if (status != FLAMIA_OK) return status;
  *bytes = layout_saved_operands(packed_shape(*problem), nullptr).bytes;
  return FLAMIA_OK;
}

// Empty problems (nothing to write) succeed without touching the device: a forward with no
// queries and no kv_amax, a backward with neither queries nor keys. A problem with only one side
// empty still runs (its outputs are defined: see dispatch.cpp); so does a forward with neither
// queries nor keys that asks for kv_amax (the fill writes its zeros; with keys but no queries
// validation refuses kv_amax).
extern "C" flamia_status flamia_forward(const flamia_forward_args* args) {
  constexpr const char* kWhere = "flamia_forward";
  flamia_status status = validate_forward_args(args, kWhere);
  if (status != FLAMIA_OK) return status;
  if (args->problem.total_q == 0 && args->kv_amax == nullptr) return FLAMIA_OK;
  status = require_sm90_device(kWhere);
  if (status != FLAMIA_OK) return status;
  return dispatch_forward(*args, kWhere);
}

extern "C" flamia_status flamia_backward(const flamia_backward_args* args) {
  constexpr const char* kWhere = "flamia_backward";
  flamia_status status = validate_backward_args(args, kWhere);
  if (status != FLAMIA_OK) return status;
  if (args->problem.total_q == 0 && args->problem.total_k == 0) return FLAMIA_OK;
  status = require_sm90_device(kWhere);
  if (status != FLAMIA_OK) return status;
  return dispatch_backward(*args, kWhere);
}
