// Speed-of-light probe of the forward kernel's consumer loop (head dims 128 and 64). The consumer
// warpgroups run the forward's own products (consumer.cuh: S = Q̂K̂ᵀ, then [O | l] += P̂·[V̂ | row
// sums]) and, in the `softmax` mode, its own online softmax (online_softmax.cuh) between them,
// on shared-memory tiles that never change: no producer, no TMA, no barriers, no work items.
// Set beside the forward kernel's throughput it says how much of the distance to the FP8 peak
// is the loop itself and how much the pipeline around it.
//   bench_forward_sol [--tiles N]
// Prints one JSON line per configuration: {"head_dim", "mode", "schedule", "warpgroups", "ms",
// "tflops"}. TFLOP/s count the two products of every tile (4 * 64 * 128 * D FLOPs per
// warpgroup and tile). Modes: `products` (the scores only converted to the P̂ operand),
// `products+softmax`, `products+exp-only` (exp2 of every score, nothing else: the MUFU's
// share). Schedules (Schedule below): the kernel's serial loop, FlashAttention-3's
// intra-warpgroup overlap and its ping-pong; one, two and three consumer warpgroups.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench_util.cuh"
#include "kernels/forward/consumer.cuh"
#include "kernels/forward/online_softmax.cuh"

namespace {

namespace fwd = flamia::forward;
namespace hopper = flamia::hopper;

constexpr int kProbeCtas = 132;  // one per H200 SM
constexpr int kDefaultTiles = 4000;
constexpr int kMaxWarpgroups = 3;  // consumer warpgroups of the largest configuration

// kExpOnly: only exp2 of every score between the products (the MUFU alone).
// kSoftmaxPolynomialN: kSoftmax with every Nth column group exponentiated by exp2_polynomial.
enum class Mode : int {
  kProductsOnly = 0,
  kSoftmax = 1,
  kExpOnly = 2,
  kSoftmaxPolynomial2 = 3,
  kSoftmaxPolynomial4 = 4,
  kSoftmaxPolynomial8 = 5
};
constexpr int polynomial_every(Mode mode) {
  return mode == Mode::kSoftmaxPolynomial2   ? 2
         : mode == Mode::kSoftmaxPolynomial4 ? 4
         : mode == Mode::kSoftmaxPolynomial8 ? 8
                                             : 0;
}

template <int kHeadDim>
struct ProbeStorage {
  using Tile = fwd::ForwardTile<kHeadDim>;
  alignas(1024) uint8_t q[kMaxWarpgroups * fwd::kRowsPerConsumer * kHeadDim];
  alignas(1024) uint8_t k[Tile::kKTileBytes];
  alignas(1024) uint8_t vt[Tile::kVtSubtiles][Tile::kVtSubtileBytes];
  fwd::KeyPairFactors factors[Tile::kBlockN / 2];
};

// Small E4M3 values everywhere (0x30 = 0.5; no NaN codes), unit key scales, zero exponents.
template <int kHeadDim>
__device__ void fill_tiles(ProbeStorage<kHeadDim>& smem) {
  uint32_t* words = reinterpret_cast<uint32_t*>(&smem);
  const int count = int(offsetof(ProbeStorage<kHeadDim>, factors) / sizeof(uint32_t));
  for (int i = threadIdx.x; i < count; i += blockDim.x) words[i] = 0x30303030u;
  for (int i = threadIdx.x; i < fwd::ForwardTile<kHeadDim>::kBlockN / 2; i += blockDim.x)
    smem.factors[i] = fwd::KeyPairFactors{{1.0f, 1.0f}, {0.0f, 0.0f}, {1.0f, 1.0f}, {1.0f, 1.0f}};
}

// How a warpgroup orders its products and softmax. kSerial: S(n), softmax(n), P̂V̂(n), each
// waited for (the forward kernel's loop). kOverlap: S(n) and P̂V̂(n-1) issued together, softmax(n)
// under P̂V̂(n-1) (FlashAttention-3's intra-warpgroup overlap). kPingpong: kOverlap, and the two
// warpgroups take turns issuing their products (named barriers), so that one's softmax runs
// under the other's products instead of beside the other's softmax.
// kSplitHalves: kSerial with S in two 64-key halves, each exponentiated as soon as it is
// done (the first half's P̂ brought to the tile's final maxima when the second half moved them:
// rescale_operand_rows), so that only half of S is ever live: what three consumer warpgroups
// at head dim 128 need to fit their registers.
enum class Schedule : int { kSerial = 0, kOverlap = 1, kPingpong = 2, kSplitHalves = 3 };
constexpr const char* kScheduleNames[] = {"serial", "overlap", "pingpong", "split-halves"};
constexpr int kTurnBarrier = 8;  // named barriers 8 and 9: warpgroup w waits on 8 + w

template <int kHeadDim, Mode kMode>
__device__ __forceinline__ void softmax_to_probabilities(
    float (&s)[fwd::ForwardTile<kHeadDim>::kBlockN / 2], fwd::RowState& state,
    float (&ratio)[fwd::kRowsPerThread], const fwd::KeyPairFactors* factors, int lane) {
  constexpr int kBlockN = fwd::ForwardTile<kHeadDim>::kBlockN;
  const fwd::RowKeyRange rows[fwd::kRowsPerThread] = {{0, kBlockN}, {0, kBlockN}};
  ratio[0] = ratio[1] = 1.0f;
  if constexpr (kMode == Mode::kSoftmax || polynomial_every(kMode) > 0) {
    fwd::softmax_scores_to_probabilities<kBlockN, fwd::KeyMask::kNone, polynomial_every(kMode)>(
        s, state, ratio, factors, lane, 0, rows);
  }
  if constexpr (kMode == Mode::kExpOnly) {
    for (int i = 0; i < kBlockN / 2; ++i) s[i] = flamia::ex2_approx(__fmul_rn(s[i], 0.0625f));
  }
}

// The split schedule's first-half P̂ words brought to the maxima after the whole tile: row r's
// probabilities times ratio[r] (a power of two, or 0), rounded to E4M3 again (the same bytes as
// exponentiating with the final maxima, except below E4M3's normal range). Word 2h + r of k step
// kk holds row r's columns (online_softmax.cuh, add_fallback_row_sums).
template <int kKeys>
__device__ __forceinline__ void rescale_operand_rows(uint32_t (&a)[kKeys / 32][4],
                                                     const float (&ratio)[fwd::kRowsPerThread]) {
  for (int r = 0; r < fwd::kRowsPerThread; ++r) {
    if (ratio[r] == 1.0f) continue;
    for (int kk = 0; kk < kKeys / 32; ++kk) {
      for (int half = 0; half < 2; ++half) {
        uint32_t& word = a[kk][2 * half + r];
        const float2 lo = flamia::unpack_e4m3x2(uint16_t(word & 0xffffu));
        const float2 hi = flamia::unpack_e4m3x2(uint16_t(word >> 16));
        word =
            flamia::pack_e4m3x4(lo.x * ratio[r], lo.y * ratio[r], hi.x * ratio[r], hi.y * ratio[r]);
      }
    }
  }
}

template <int kHeadDim, Mode kMode, Schedule kSchedule, int kRegisters>
__device__ void consumer_loop(ProbeStorage<kHeadDim>& smem, int consumer, int tiles, float* sink) {
  using Tile = fwd::ForwardTile<kHeadDim>;
  constexpr int kBlockN = Tile::kBlockN;
  hopper::warpgroup_registers_increase<kRegisters>();
  const int lane = threadIdx.x % 32;
  const uint64_t desc_q = hopper::make_smem_desc(
      hopper::smem_addr(smem.q + consumer * fwd::kRowsPerConsumer * kHeadDim),
      fwd::qk_swizzle<kHeadDim>());
  const uint64_t desc_k =
      hopper::make_smem_desc(hopper::smem_addr(smem.k), fwd::qk_swizzle<kHeadDim>());
  fwd::RowState state;
  for (int r = 0; r < fwd::kRowsPerThread; ++r) {
    state.row_factor[r] = 0.125f;
    state.row_max[r] = -INFINITY;
    state.row_sum[r] = 0.0f;
  }
  float acc[Tile::kAccumulatorRegisters];
  for (int i = 0; i < Tile::kAccumulatorRegisters; ++i) acc[i] = 0.0f;
  uint32_t a[kBlockN / 32][4];
  float s[kBlockN / 2];
  float ratio[fwd::kRowsPerThread];
  constexpr int kTurnThreads = 2 * fwd::kWarpgroupThreads;
  auto my_turn = [&] {
    if constexpr (kSchedule == Schedule::kPingpong)
      hopper::named_barrier_sync(kTurnBarrier + consumer, kTurnThreads);
  };
  auto end_turn = [&] {
    if constexpr (kSchedule == Schedule::kPingpong)
      hopper::named_barrier_arrive(kTurnBarrier + 1 - consumer, kTurnThreads);
  };
  // The serial schedules' tile end: O to the tile's maxima, [O | l] += P̂·V̂, waited for.
  auto output_product = [&] {
    fwd::rescale_output(acc, ratio);
    for (int i = Tile::kOutRegisters; i < Tile::kAccumulatorRegisters; ++i) acc[i] = 0.0f;
    fwd::mma_output<kHeadDim>(acc, a, smem.vt);
    hopper::warpgroup_wait<0>();
    hopper::fence_registers(acc);
    fwd::add_tile_row_sums<Tile::kOutRegisters>(state, acc, 1.0f);
  };
  if constexpr (kSchedule == Schedule::kSplitHalves) {
    constexpr int kHalfKeys = kBlockN / 2;
    static_assert(kMode == Mode::kSoftmax, "the split schedule exists for the softmax");
    const uint64_t desc_k_hi = hopper::make_smem_desc(
        hopper::smem_addr(smem.k + kHalfKeys * kHeadDim), fwd::qk_swizzle<kHeadDim>());
    const fwd::RowKeyRange rows[fwd::kRowsPerThread] = {{0, kHalfKeys}, {0, kHalfKeys}};
    auto& a_lo = *reinterpret_cast<uint32_t(*)[kHalfKeys / 32][4]>(&a[0]);
    auto& a_hi = *reinterpret_cast<uint32_t(*)[kHalfKeys / 32][4]>(&a[kHalfKeys / 32]);
    for (int n = 0; n < tiles; ++n) {
      float half[kHalfKeys / 2];
      float ratio_lo[fwd::kRowsPerThread];
      fwd::mma_scores<kHeadDim, kHalfKeys>(half, desc_q, desc_k);
      hopper::warpgroup_wait<0>();
      hopper::fence_registers(half);
      fwd::softmax_scores_to_probabilities<kHalfKeys, fwd::KeyMask::kNone>(
          half, state, ratio_lo, smem.factors, lane, 0, rows);
      fwd::probabilities_to_operand<kHalfKeys>(half, a_lo);
      fwd::mma_scores<kHeadDim, kHalfKeys>(half, desc_q, desc_k_hi);
      hopper::warpgroup_wait<0>();
      hopper::fence_registers(half);
      fwd::softmax_scores_to_probabilities<kHalfKeys, fwd::KeyMask::kNone>(
          half, state, ratio, smem.factors + kHalfKeys / 2, lane, 0, rows);
      fwd::probabilities_to_operand<kHalfKeys>(half, a_hi);
      rescale_operand_rows<kHalfKeys>(a_lo, ratio);
      for (int r = 0; r < fwd::kRowsPerThread; ++r) ratio[r] *= ratio_lo[r];
      output_product();
    }
  } else if constexpr (kSchedule == Schedule::kSerial) {
    for (int n = 0; n < tiles; ++n) {
      fwd::mma_scores<kHeadDim, kBlockN>(s, desc_q, desc_k);
      hopper::warpgroup_wait<0>();
      hopper::fence_registers(s);
      softmax_to_probabilities<kHeadDim, kMode>(s, state, ratio, smem.factors, lane);
      fwd::probabilities_to_operand<kBlockN>(s, a);
      output_product();
    }
  } else {
    if (kSchedule == Schedule::kPingpong && consumer == 1)
      hopper::named_barrier_arrive(kTurnBarrier, kTurnThreads);  // warpgroup 0 goes first
    my_turn();
    fwd::mma_scores<kHeadDim, kBlockN>(s, desc_q, desc_k);
    end_turn();
    hopper::warpgroup_wait<0>();
    hopper::fence_registers(s);
    softmax_to_probabilities<kHeadDim, kMode>(s, state, ratio, smem.factors, lane);
    fwd::probabilities_to_operand<kBlockN>(s, a);
    // one call site of each product and both issued in every step (an extra S after the last
    // tile), as in the forward-pv-overlap branch: otherwise ptxas serializes the wgmma (C7511)
    for (int n = 1; n <= tiles; ++n) {
      for (int i = Tile::kOutRegisters; i < Tile::kAccumulatorRegisters; ++i) acc[i] = 0.0f;
      hopper::fence_registers(acc);
      my_turn();
      fwd::mma_scores<kHeadDim, kBlockN>(s, desc_q, desc_k);
      fwd::mma_output<kHeadDim>(acc, a, smem.vt);
      end_turn();
      hopper::warpgroup_wait<1>();  // S(n); P̂V̂(n-1) may still run
      hopper::fence_registers(s);
      if (n < tiles)
        softmax_to_probabilities<kHeadDim, kMode>(s, state, ratio, smem.factors, lane);
      else
        ratio[0] = ratio[1] = 1.0f;
      hopper::warpgroup_wait<0>();  // P̂V̂(n-1): its operand registers are free again
      hopper::fence_registers(acc);
      // l already holds tile n's ratio; tile n-1's row sums join it rescaled (powers of two)
      for (int r = 0; r < fwd::kRowsPerThread; ++r)
        state.row_sum[r] = __fmaf_rn(acc[Tile::kOutRegisters + 2 * r], ratio[r], state.row_sum[r]);
      if (n < tiles) {
        fwd::rescale_output(acc, ratio);
        fwd::probabilities_to_operand<kBlockN>(s, a);
      }
    }
  }
  float total = state.row_sum[0] + state.row_sum[1];
  for (int i = 0; i < Tile::kOutRegisters; ++i) total += acc[i];
  if (total == 12345.0f) sink[0] = total;  // never true; keeps the loop's results live
}

// Register split of a CTA with kWarpgroups consumer warpgroups and the producer's (idle) one:
// the head-dim-128 forward's at two consumers; at three, the most 512 threads can give a
// consumer (setmaxnreg only moves registers within the CTA's launch allocation, 128 per thread
// at 512 threads; the probe's idle producer needs few).
template <int kWarpgroups>
struct RegisterSplit {
  static_assert(kWarpgroups == 2 || kWarpgroups == 3, "consumer warpgroups");
  static constexpr int kProducer =
      kWarpgroups == 2 ? fwd::ForwardTile<128>::kProducerRegisters : 32;
  static constexpr int kConsumer =
      kWarpgroups == 2 ? fwd::ForwardTile<128>::kConsumerRegisters : 160;
  static constexpr int kThreads = (kWarpgroups + 1) * fwd::kWarpgroupThreads;
  // as ForwardTile's: a split beyond the launch allocation hangs in setmaxnreg
  static_assert(kProducer + kWarpgroups * kConsumer <=
                    (kWarpgroups + 1) * (fwd::kRegisterFile / kThreads / 8 * 8),
                "register split within the launch allocation");
};

template <int kHeadDim, Mode kMode, Schedule kSchedule, int kWarpgroups>
__global__ void __launch_bounds__(RegisterSplit<kWarpgroups>::kThreads, 1)
    forward_sol_kernel(int tiles, int consumers, float* sink) {
  using Split = RegisterSplit<kWarpgroups>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t misalignment = hopper::smem_addr(smem_raw) & 1023u;
  auto& smem =
      *reinterpret_cast<ProbeStorage<kHeadDim>*>(smem_raw + ((1024u - misalignment) & 1023u));
  fill_tiles(smem);
  hopper::fence_proxy_async_shared();
  __syncthreads();
  const int warpgroup = threadIdx.x / fwd::kWarpgroupThreads;
  if (warpgroup == 0) {  // the producer's place: idle, as little as possible
    hopper::warpgroup_registers_decrease<Split::kProducer>();
    return;
  }
  if (warpgroup - 1 < consumers)
    consumer_loop<kHeadDim, kMode, kSchedule, Split::kConsumer>(smem, warpgroup - 1, tiles, sink);
}

template <int kHeadDim, Mode kMode, Schedule kSchedule = Schedule::kSerial, int kWarpgroups = 2>
void run(const char* name, int consumers, int tiles, float* sink) {
  const size_t smem_bytes = sizeof(ProbeStorage<kHeadDim>) + 1024;
  CHECK(cudaFuncSetAttribute(forward_sol_kernel<kHeadDim, kMode, kSchedule, kWarpgroups>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes)));
  const double ms = flamia::bench::median_ms(2, 10, nullptr, [&] {
    forward_sol_kernel<kHeadDim, kMode, kSchedule, kWarpgroups>
        <<<kProbeCtas, RegisterSplit<kWarpgroups>::kThreads, smem_bytes>>>(tiles, consumers, sink);
    CHECK(cudaGetLastError());
  });
  const double flops = 4.0 * fwd::kRowsPerConsumer * fwd::ForwardTile<kHeadDim>::kBlockN *
                       kHeadDim * double(tiles) * consumers * kProbeCtas;
  std::printf(
      "{\"head_dim\": %d, \"mode\": \"%s\", \"schedule\": \"%s\", \"warpgroups\": %d, "
      "\"tiles\": %d, \"ms\": %.4f, \"tflops\": %.1f}\n",
      kHeadDim, name, kScheduleNames[int(kSchedule)], consumers, tiles, ms, flops / ms / 1e9);
}

template <int kHeadDim>
void run_head_dim(int tiles, float* sink) {
  for (int consumers = 1; consumers <= 2; ++consumers) {
    run<kHeadDim, Mode::kProductsOnly>("products", consumers, tiles, sink);
    run<kHeadDim, Mode::kSoftmax>("products+softmax", consumers, tiles, sink);
  }
  constexpr int kBoth = 2;
  run<kHeadDim, Mode::kProductsOnly, Schedule::kOverlap>("products", kBoth, tiles, sink);
  run<kHeadDim, Mode::kSoftmax, Schedule::kOverlap>("products+softmax", kBoth, tiles, sink);
  run<kHeadDim, Mode::kProductsOnly, Schedule::kPingpong>("products", kBoth, tiles, sink);
  run<kHeadDim, Mode::kSoftmax, Schedule::kPingpong>("products+softmax", kBoth, tiles, sink);
  run<kHeadDim, Mode::kExpOnly, Schedule::kSerial>("products+exp-only", kBoth, tiles, sink);
  run<kHeadDim, Mode::kProductsOnly, Schedule::kSerial, 3>("products", 3, tiles, sink);
  run<kHeadDim, Mode::kSoftmax, Schedule::kSerial, 3>("products+softmax", 3, tiles, sink);
  run<kHeadDim, Mode::kSoftmax, Schedule::kSplitHalves>("products+softmax", kBoth, tiles, sink);
  run<kHeadDim, Mode::kSoftmax, Schedule::kSplitHalves, 3>("products+softmax", 3, tiles, sink);
  if constexpr (kHeadDim ==
                64)  // three consumers with the overlap fit only head dim 64's registers
    run<kHeadDim, Mode::kSoftmax, Schedule::kOverlap, 3>("products+softmax", 3, tiles, sink);
  // a share of the exponentials on the FMA pipe (exp2_polynomial)
  run<kHeadDim, Mode::kSoftmaxPolynomial2>("products+softmax-poly1/2", kBoth, tiles, sink);
  run<kHeadDim, Mode::kSoftmaxPolynomial4>("products+softmax-poly1/4", kBoth, tiles, sink);
  run<kHeadDim, Mode::kSoftmaxPolynomial8>("products+softmax-poly1/8", kBoth, tiles, sink);
  run<kHeadDim, Mode::kSoftmaxPolynomial4, Schedule::kOverlap>("products+softmax-poly1/4", kBoth,
                                                               tiles, sink);
  run<kHeadDim, Mode::kSoftmaxPolynomial4, Schedule::kPingpong>("products+softmax-poly1/4", kBoth,
                                                                tiles, sink);
  run<kHeadDim, Mode::kSoftmaxPolynomial2, Schedule::kSerial, 3>("products+softmax-poly1/2", 3,
                                                                 tiles, sink);
  run<kHeadDim, Mode::kSoftmaxPolynomial4, Schedule::kSerial, 3>("products+softmax-poly1/4", 3,
                                                                 tiles, sink);
  if constexpr (kHeadDim == 64)
    run<kHeadDim, Mode::kSoftmaxPolynomial4, Schedule::kOverlap, 3>("products+softmax-poly1/4", 3,
                                                                    tiles, sink);
}

}  // namespace

int main(int argc, char** argv) {
  int tiles = kDefaultTiles;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--tiles") == 0) tiles = std::atoi(argv[++i]);
  float* sink;
  CHECK(cudaMalloc(&sink, sizeof(float)));
  run_head_dim<128>(tiles, sink);
  run_head_dim<64>(tiles, sink);
  CHECK(cudaFree(sink));
  return 0;
}
