/* A stand-in for libflamia.so, for the CPU tests of the Python bindings: it implements the C API
 * of include/flamia/flamia.h without a GPU, echoing the arguments it receives so that the tests
 * can check the ctypes marshalling field by field, and failing on request so that the tests can
 * check how status codes become Python exceptions. Compiled by tests/python/conftest.py. */
#include <stdio.h>
#include <string.h>

#include "flamia/flamia.h"

enum { kMessageBytes = 512, kDescriptionBytes = 1024, kStubWorkspaceBase = 4096 };

static char g_message[kMessageBytes];
static char g_description[kDescriptionBytes];

static flamia_status fail(flamia_status status, const char* message) {
  snprintf(g_message, sizeof g_message, "%s", message);
  return status;
}

/* head_dim 96 is "unsupported" and softmax_scale 13 "invalid", so tests can provoke both. */
static flamia_status check_problem(const flamia_problem* p) {
  if (p->head_dim == 96) return fail(FLAMIA_ERROR_UNSUPPORTED, "stub: head_dim 96 unsupported");
  if (p->softmax_scale == 13.0f) return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "stub: bad scale");
  g_message[0] = '\0';
  return FLAMIA_OK;
}

flamia_status flamia_forward_workspace_size(const flamia_forward_args* args, size_t* bytes) {
  if (!args || !bytes) return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "stub: null");
  flamia_status status = check_problem(&args->problem);
  *bytes = kStubWorkspaceBase + (size_t)args->problem.total_q;
  return status;
}

flamia_status flamia_backward_workspace_size(const flamia_backward_args* args, size_t* bytes) {
  if (!args || !bytes) return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "stub: null");
  flamia_status status = check_problem(&args->problem);
  *bytes = 2 * kStubWorkspaceBase + (size_t)args->problem.total_k;
  return status;
}

flamia_status flamia_saved_operands_size(const flamia_problem* problem, size_t* bytes) {
  if (!problem || !bytes) return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "stub: null");
  flamia_status status = check_problem(problem);
  *bytes = 3 * kStubWorkspaceBase + (size_t)problem->total_k;
  return status;
}

flamia_status flamia_forward(const flamia_forward_args* args) {
  if (!args) return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "stub: null");
  flamia_status status = check_problem(&args->problem);
  return status != FLAMIA_OK ? status : fail(FLAMIA_ERROR_NO_DEVICE, "stub: no sm_90 GPU");
}

flamia_status flamia_backward(const flamia_backward_args* args) {
  if (!args) return fail(FLAMIA_ERROR_INVALID_ARGUMENT, "stub: null");
  flamia_status status = check_problem(&args->problem);
  return status != FLAMIA_OK ? status : fail(FLAMIA_ERROR_NO_DEVICE, "stub: no sm_90 GPU");
}

flamia_status flamia_check_device_status(void* workspace, void* stream) {
  (void)workspace;
  (void)stream;
  return FLAMIA_OK;
}

const char* flamia_last_error_message(void) {
  return g_message;
}

const char* flamia_status_name(flamia_status status) {
  switch (status) {
    case FLAMIA_OK:
      return "FLAMIA_OK";
    case FLAMIA_ERROR_INVALID_ARGUMENT:
      return "FLAMIA_ERROR_INVALID_ARGUMENT";
    case FLAMIA_ERROR_UNSUPPORTED:
      return "FLAMIA_ERROR_UNSUPPORTED";
    case FLAMIA_ERROR_WORKSPACE:
      return "FLAMIA_ERROR_WORKSPACE";
    case FLAMIA_ERROR_CUDA:
      return "FLAMIA_ERROR_CUDA";
    case FLAMIA_ERROR_INVALID_SEQLENS:
      return "FLAMIA_ERROR_INVALID_SEQLENS";
    case FLAMIA_ERROR_NO_DEVICE:
      return "FLAMIA_ERROR_NO_DEVICE";
  }
  return "FLAMIA_UNKNOWN_STATUS";
}

static int print_tensor(char* at, size_t room, const char* name, const flamia_tensor* t) {
  return snprintf(at, room, " %s=%p/%lld/%lld", name, t->data, (long long)t->token_stride,
                  (long long)t->head_stride);
}

/* Every field, in a fixed "name=value" format that the tests parse. */
const char* flamia_describe_forward(const flamia_forward_args* a) {
  const flamia_problem* p = &a->problem;
  int n = snprintf(g_description, sizeof g_description,
                   "stub cu_q=%p cu_k=%p host_q=%p host_k=%p batch=%d total_q=%d total_k=%d "
                   "heads_q=%d heads_kv=%d head_dim=%d max_q=%d max_k=%d scale=%.9g causal=%d "
                   "scale_mode=%d smoothing=%d vector=%p",
                   (const void*)p->cu_seqlens_q, (const void*)p->cu_seqlens_k,
                   (const void*)p->host_cu_seqlens_q, (const void*)p->host_cu_seqlens_k, p->batch,
                   p->total_q, p->total_k, p->heads_q, p->heads_kv, p->head_dim, p->max_seqlen_q,
                   p->max_seqlen_k, p->softmax_scale, p->causal, (int)p->scale_mode,
                   (int)p->key_smoothing, (const void*)p->key_smoothing_vector);
  size_t room = sizeof g_description;
  n += print_tensor(g_description + n, room - n, "q", &a->q);
  n += print_tensor(g_description + n, room - n, "k", &a->k);
  n += print_tensor(g_description + n, room - n, "v", &a->v);
  n += print_tensor(g_description + n, room - n, "o", &a->o);
  snprintf(g_description + n, room - n,
           " lse=%p stats=%p ws=%p ws_bytes=%zu stream=%p quantize=%d", (void*)a->lse,
           (void*)a->softmax_stats, a->workspace, a->workspace_bytes, a->stream,
           (int)a->quantize);
  return g_description;
}

/* Not part of the C API: the backward's fields, for the marshalling test. */
const char* flamia_stub_describe_backward(const flamia_backward_args* a) {
  size_t room = sizeof g_description;
  int n = snprintf(g_description, room,
                   "stub batch=%d total_q=%d total_k=%d precision=%d "
                   "deterministic=%d",
                   a->problem.batch, a->problem.total_q, a->problem.total_k, (int)a->precision,
                   a->deterministic);
  n += print_tensor(g_description + n, room - n, "q", &a->q);
  n += print_tensor(g_description + n, room - n, "k", &a->k);
  n += print_tensor(g_description + n, room - n, "v", &a->v);
  n += print_tensor(g_description + n, room - n, "o", &a->o);
  n += print_tensor(g_description + n, room - n, "d_o", &a->d_o);
  n += print_tensor(g_description + n, room - n, "dq", &a->dq);
  n += print_tensor(g_description + n, room - n, "dk", &a->dk);
  n += print_tensor(g_description + n, room - n, "dv", &a->dv);
  snprintf(g_description + n, room - n, " lse=%p stats=%p ws=%p ws_bytes=%zu stream=%p",
           (const void*)a->lse, (const void*)a->softmax_stats, a->workspace, a->workspace_bytes,
           a->stream);
  return g_description;
}
