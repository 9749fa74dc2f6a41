/* flamia from C through its installed CMake package: forward and backward of causal packed
 * documents (lengths 1, 17, 113, 0 and 300; GQA 4:2; head dim 64), checked against float64
 * attention computed here. Without an sm_90 GPU it exercises the host side of the API (workspace
 * sizes, an argument error and its message) and exits 77, which ctest reports as skipped.
 *
 *   cmake -S examples/c_api -B build-example -DCMAKE_PREFIX_PATH=<flamia install prefix>
 *   cmake --build build-example && build-example/flamia_c_example */
#include <cuda_runtime.h>
#include <flamia/flamia.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kBatch = 5, kHeadsQ = 4, kHeadsKv = 2, kHeadDim = 64, kSkipped = 77 };
static const int kDocLengths[kBatch] = {1, 17, 113, 0, 300};
/* Relative L2 error bounds against float64 attention on N(0, 1) inputs (tests/python). */
static const double kOutputBound = 0.08, kGradientBound = 0.1;

#define CUDA_OK(call)                                             \
  do {                                                            \
    cudaError_t e_ = (call);                                      \
    if (e_ != cudaSuccess) {                                      \
      fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_)); \
      exit(1);                                                    \
    }                                                             \
  } while (0)
#define FLAMIA_OK_OR_DIE(call)                                                                     \
  do {                                                                                             \
    flamia_status s_ = (call);                                                                     \
    if (s_ != FLAMIA_OK) {                                                                         \
      fprintf(stderr, "%s: %s: %s\n", #call, flamia_status_name(s_), flamia_last_error_message()); \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

/* ---- BF16 on the host ------------------------------------------------------------------------ */
static uint16_t to_bf16(float x) { /* round to nearest even */
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
static float from_bf16(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double uniform01(void) { /* xorshift64*, in (0, 1) */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return ((rng_state * 0x2545f4914f6cdd1dull) >> 11) * (1.0 / 9007199254740992.0) + 1e-300;
}
static float normal(void) {
  return (float)(sqrt(-2.0 * log(uniform01())) * cos(6.283185307179586 * uniform01()));
}

/* A (tokens, heads, kHeadDim) BF16 tensor on the host, random N(0, 1), and its values. */
static uint16_t* random_bf16(size_t n, double* values) {
  uint16_t* h = malloc(n * sizeof *h);
  for (size_t i = 0; i < n; ++i) {
    h[i] = to_bf16(normal());
    values[i] = from_bf16(h[i]);
  }
  return h;
}

/* ---- float64 attention (causal, per document, GQA) and its gradients ------------------------- */
static size_t at(int token, int head, int heads, int d) {
  return ((size_t)token * heads + head) * kHeadDim + d;
}

static void reference(const int* cu, const double* q, const double* k, const double* v,
                      const double* d_o, double scale, double* o, double* dq, double* dk,
                      double* dv) {
  const int group = kHeadsQ / kHeadsKv;
  for (int doc = 0; doc < kBatch; ++doc) {
    const int start = cu[doc], len = cu[doc + 1] - cu[doc];
    double* p = malloc((size_t)(len > 0 ? len : 1) * sizeof *p);
    for (int h = 0; h < kHeadsQ; ++h) {
      const int hk = h / group;
      for (int i = 0; i < len; ++i) {
        const int qi = start + i;
        double row_max = -INFINITY, sum = 0.0, d_sum = 0.0;
        for (int j = 0; j <= i; ++j) { /* causal: keys up to the query */
          double s = 0.0;
          for (int d = 0; d < kHeadDim; ++d)
            s += q[at(qi, h, kHeadsQ, d)] * k[at(start + j, hk, kHeadsKv, d)];
          p[j] = s * scale;
          if (p[j] > row_max) row_max = p[j];
        }
        for (int j = 0; j <= i; ++j) sum += (p[j] = exp(p[j] - row_max));
        for (int d = 0; d < kHeadDim; ++d) {
          double acc = 0.0;
          for (int j = 0; j <= i; ++j) acc += p[j] / sum * v[at(start + j, hk, kHeadsKv, d)];
          o[at(qi, h, kHeadsQ, d)] = acc;
          d_sum += acc * d_o[at(qi, h, kHeadsQ, d)];
        }
        for (int j = 0; j <= i; ++j) {
          const int kj = start + j;
          double dp = 0.0;
          for (int d = 0; d < kHeadDim; ++d)
            dp += d_o[at(qi, h, kHeadsQ, d)] * v[at(kj, hk, kHeadsKv, d)];
          const double pj = p[j] / sum, ds = pj * (dp - d_sum) * scale;
          for (int d = 0; d < kHeadDim; ++d) {
            dv[at(kj, hk, kHeadsKv, d)] += pj * d_o[at(qi, h, kHeadsQ, d)];
            dq[at(qi, h, kHeadsQ, d)] += ds * k[at(kj, hk, kHeadsKv, d)];
            dk[at(kj, hk, kHeadsKv, d)] += ds * q[at(qi, h, kHeadsQ, d)];
          }
        }
      }
    }
    free(p);
  }
}

static double rel_l2(const uint16_t* got, const double* want, size_t n) {
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double x = from_bf16(got[i]);
    if (!isfinite(x)) return INFINITY;
    err += (x - want[i]) * (x - want[i]);
    norm += want[i] * want[i];
  }
  return sqrt(err / (norm > 0 ? norm : 1e-300));
}

/* ---- device buffers ----------------------------------------------------------------------------
 */
static void* device_copy(const void* host, size_t bytes) {
  void* d = NULL;
  CUDA_OK(cudaMalloc(&d, bytes > 0 ? bytes : 1));
  if (host) CUDA_OK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
  return d;
}
static flamia_tensor tensor(void* data, int heads) {
  flamia_tensor t = {data, (int64_t)heads * kHeadDim, kHeadDim};
  return t;
}

static int has_hopper_gpu(void) {
  int count = 0, major = 0, minor = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major == 9 && minor == 0;
}

int main(void) {
  int cu[kBatch + 1] = {0};
  int max_len = 1;
  for (int b = 0; b < kBatch; ++b) {
    cu[b + 1] = cu[b] + kDocLengths[b];
    if (kDocLengths[b] > max_len) max_len = kDocLengths[b];
  }
  const int total = cu[kBatch];
  const size_t nq = (size_t)total * kHeadsQ * kHeadDim, nkv = (size_t)total * kHeadsKv * kHeadDim;

  flamia_problem problem;
  memset(&problem, 0, sizeof problem);
  problem.host_cu_seqlens_q = problem.host_cu_seqlens_k = cu; /* checked on the host too */
  problem.batch = kBatch;
  problem.total_q = problem.total_k = total;
  problem.heads_q = kHeadsQ;
  problem.heads_kv = kHeadsKv;
  problem.head_dim = kHeadDim;
  problem.max_seqlen_q = problem.max_seqlen_k = max_len;
  problem.softmax_scale = 1.0f / sqrtf((float)kHeadDim);
  problem.causal = 1;
  problem.scale_mode = FLAMIA_SCALE_EXACT;
  problem.key_smoothing = FLAMIA_SMOOTH_NONE;

  /* The host side of the API works without a GPU: sizes, and errors that name the argument. */
  flamia_forward_args fwd;
  memset(&fwd, 0, sizeof fwd);
  fwd.problem = problem;
  size_t saved_bytes = 0;
  FLAMIA_OK_OR_DIE(flamia_saved_operands_size(&problem, &saved_bytes));
  printf("saved operands for %d tokens: %zu bytes\n", total, saved_bytes);
  flamia_forward_args wrong = fwd;
  wrong.problem.head_dim = 96;
  const flamia_status refused = flamia_forward(&wrong);
  printf("head_dim 96: %s (%s)\n", flamia_status_name(refused), flamia_last_error_message());
  if (refused == FLAMIA_OK) return 1;

  if (!has_hopper_gpu()) {
    printf("no sm_90 GPU: the forward and backward are skipped\n");
    return kSkipped;
  }

  double *q = malloc(nq * sizeof *q), *k = malloc(nkv * sizeof *k), *v = malloc(nkv * sizeof *v);
  double* d_o = malloc(nq * sizeof *d_o);
  uint16_t *hq = random_bf16(nq, q), *hk = random_bf16(nkv, k), *hv = random_bf16(nkv, v);
  uint16_t* hdo = random_bf16(nq, d_o);
  int* dcu = device_copy(cu, sizeof cu);
  fwd.problem.cu_seqlens_q = fwd.problem.cu_seqlens_k = dcu;
  fwd.q = tensor(device_copy(hq, nq * 2), kHeadsQ);
  fwd.k = tensor(device_copy(hk, nkv * 2), kHeadsKv);
  fwd.v = tensor(device_copy(hv, nkv * 2), kHeadsKv);
  fwd.o = tensor(device_copy(NULL, nq * 2), kHeadsQ);
  fwd.lse = device_copy(NULL, (size_t)kHeadsQ * total * sizeof(float));
  fwd.softmax_stats = device_copy(NULL, (size_t)kHeadsQ * total * 2 * sizeof(float));
  FLAMIA_OK_OR_DIE(flamia_forward_workspace_size(&fwd, &fwd.workspace_bytes));
  fwd.workspace = device_copy(NULL, fwd.workspace_bytes);
  printf("%s\n", flamia_describe_forward(&fwd));
  FLAMIA_OK_OR_DIE(flamia_forward(&fwd));

  flamia_backward_args bwd;
  memset(&bwd, 0, sizeof bwd);
  bwd.problem = fwd.problem;
  bwd.q = fwd.q, bwd.k = fwd.k, bwd.v = fwd.v, bwd.o = fwd.o;
  bwd.d_o = tensor(device_copy(hdo, nq * 2), kHeadsQ);
  bwd.lse = fwd.lse;
  bwd.softmax_stats = fwd.softmax_stats;
  bwd.dq = tensor(device_copy(NULL, nq * 2), kHeadsQ);
  bwd.dk = tensor(device_copy(NULL, nkv * 2), kHeadsKv);
  bwd.dv = tensor(device_copy(NULL, nkv * 2), kHeadsKv);
  bwd.precision = FLAMIA_PRECISION_FP8;
  FLAMIA_OK_OR_DIE(flamia_backward_workspace_size(&bwd, &bwd.workspace_bytes));
  bwd.workspace = device_copy(NULL, bwd.workspace_bytes);
  FLAMIA_OK_OR_DIE(flamia_backward(&bwd));
  FLAMIA_OK_OR_DIE(flamia_check_device_status(bwd.workspace, NULL));
  FLAMIA_OK_OR_DIE(flamia_check_device_status(fwd.workspace, NULL));

  double *o = calloc(nq, sizeof *o), *dq = calloc(nq, sizeof *dq);
  double *dk = calloc(nkv, sizeof *dk), *dv = calloc(nkv, sizeof *dv);
  reference(cu, q, k, v, d_o, problem.softmax_scale, o, dq, dk, dv);
  struct {
    const char* name;
    flamia_tensor t;
    const double* want;
    size_t n;
    double bound;
  } checks[] = {{"O", fwd.o, o, nq, kOutputBound},
                {"dQ", bwd.dq, dq, nq, kGradientBound},
                {"dK", bwd.dk, dk, nkv, kGradientBound},
                {"dV", bwd.dv, dv, nkv, kGradientBound}};
  int failed = 0;
  uint16_t* got = malloc(nq * sizeof *got);
  for (size_t c = 0; c < sizeof checks / sizeof checks[0]; ++c) {
    CUDA_OK(cudaMemcpy(got, checks[c].t.data, checks[c].n * 2, cudaMemcpyDeviceToHost));
    const double err = rel_l2(got, checks[c].want, checks[c].n);
    const int ok = err <= checks[c].bound;
    printf("%-2s relative L2 error against float64: %.4f (bound %.2f) %s\n", checks[c].name, err,
           checks[c].bound, ok ? "ok" : "FAILED");
    failed |= !ok;
  }
  return failed;
}
