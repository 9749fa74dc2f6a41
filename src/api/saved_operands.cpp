// The saved-operands layout (see saved_operands.h for the picture).
#include "api/saved_operands.h"

#include "api/errors.h"
#include "api/operand_carving.h"

namespace flamia::api {

SavedOperandsHeader saved_operands_header(const flamia_problem& p) {
  SavedOperandsHeader header;
  header.magic = kSavedOperandsMagic;
  header.batch = p.batch;
  header.total_q = p.total_q;
  header.total_k = p.total_k;
  header.heads_q = p.heads_q;
  header.heads_kv = p.heads_kv;
  header.head_dim = p.head_dim;
  header.scale_mode = int32_t(p.scale_mode);
  header.key_smoothing = int32_t(p.key_smoothing);
  return header;
}

namespace {

// SavedOperandsHeader's words, in order.
constexpr const char* kHeaderFieldNames[kSavedOperandsHeaderFields] = {"magic",
                                                                       "batch",
                                                                       "total_q",
                                                                       "total_k",
                                                                       "heads_q",
                                                                       "heads_kv",
                                                                       "head_dim",
                                                                       "scale_mode",
                                                                       "key_smoothing",
                                                                       "cu_seqlens_checksum_low",
                                                                       "cu_seqlens_checksum_high"};

bool is_checksum_field(int field) {
  return field == kSavedOperandsChecksumLowField || field == kSavedOperandsChecksumHighField;
}

}  // namespace

flamia_status fail_saved_operands(const char* where, const DeviceStatusRecord& mismatch) {
  if (mismatch.index == 0) {
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT,
                "%s: saved_operands were not filled by a successful flamia_forward (their header "
                "word is 0x%08x); pass the buffer given to the forward of this problem, or NULL",
                where, uint32_t(mismatch.entry));
  }
  if (is_checksum_field(mismatch.index)) {
    // Every size matched: a forward of another batch with the same batch count and totals.
    return fail(FLAMIA_ERROR_INVALID_ARGUMENT,
                "%s: saved_operands were filled by a forward with other cu_seqlens contents "
                "(the same batch, totals and heads, but the checksum of cu_seqlens_q and "
                "cu_seqlens_k differs: %s = 0x%08x in the buffer, 0x%08x for this problem); pass "
                "the buffer given to the forward of this problem, or NULL",
                where, kHeaderFieldNames[mismatch.index], uint32_t(mismatch.entry),
                uint32_t(mismatch.next_entry));
  }
  const int field = mismatch.index < kSavedOperandsHeaderFields ? mismatch.index : 0;
  return fail(FLAMIA_ERROR_INVALID_ARGUMENT,
              "%s: saved_operands were filled by a forward with %s = %d, but this problem has "
              "%s = %d; pass the buffer given to the forward of this problem, or NULL",
              where, kHeaderFieldNames[field], mismatch.entry, kHeaderFieldNames[field],
              mismatch.next_entry);
}

SavedOperandsLayout layout_saved_operands(const PackedShape& s, const void* base) {
  // The buffer is written by the forward and only read by the backward; the carver hands out
  // mutable pointers for both.
  WorkspaceCarver carver(const_cast<void*>(base));
  SavedOperandsLayout layout;
  layout.header = carver.take<SavedOperandsHeader>(1);
  carve_quantized_inputs(carver, s, layout.fwd, layout.q_t, layout.k_centered_t, layout.v);
  layout.bytes = carver.used();
  return layout;
}

}  // namespace flamia::api
