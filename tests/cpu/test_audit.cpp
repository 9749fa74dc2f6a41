// The causality audit: exact mode is bitwise causal and document-local, block32 is
// document-local with a measured in-block leak, the unsafe mode leaks (the audit can fail), and
// the backward is document-local.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "reference/audit.h"
#include "ref_test_util.h"

namespace flamia::ref {
namespace {

class Audit : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { summary_ = new AuditSummary(audit_all()); }
  static void TearDownTestSuite() {
    delete summary_;
    summary_ = nullptr;
  }
  static AuditSummary* summary_;
};
AuditSummary* Audit::summary_ = nullptr;

TEST_F(Audit, ExactModeIsBitwiseCausal) {
  const AuditResult& r = summary_->exact;
  EXPECT_GT(r.runs, 0);
  EXPECT_GT(r.compared, 0);
  EXPECT_EQ(r.changed, 0);
  EXPECT_EQ(r.max_abs, 0.0);
}

TEST_F(Audit, Block32IsDocumentLocalAndItsLeakIsMeasured) {
  const AuditResult& r = summary_->block32;
  RecordProperty("block32_changed", std::to_string(r.changed));
  RecordProperty("block32_max_abs", std::to_string(r.max_abs));
  EXPECT_EQ(r.cross_document_changed, 0);  // blocks restart at every document
  EXPECT_TRUE(std::isfinite(r.max_abs));
  // In-block leak through E4M3's subnormal range: present under 2^8 scalings, and small.
  EXPECT_GT(r.changed, 0);
  EXPECT_LT(r.max_abs, 0.1);
}

TEST_F(Audit, UnsafeModeLeaksSoTheAuditCanFail) {
  const AuditResult& r = summary_->unsafe;
  EXPECT_GT(r.changed, 0);
  EXPECT_GT(r.cross_document_changed, 0);  // global blocks run across documents
  EXPECT_GT(r.max_abs, summary_->block32.max_abs);
}

TEST_F(Audit, JsonHasTheDocumentedShape) {
  const std::string json = audit_json(*summary_);
  const std::regex shape(
      R"(\{"exact": \{"changed": 0, "max_abs": 0\}, "block32": \{"changed": \d+, "max_abs": [0-9.e+-]+\}, )"
      R"("unsafe": \{"changed": [1-9]\d*, "max_abs": [0-9.e+-]+\}\})");
  EXPECT_TRUE(std::regex_match(json, shape)) << json;
}

TEST(AuditForward, FirstKeySmoothingIsCausal) {
  // The first key is visible to every query of its document: smoothing by it keeps exact mode
  // bitwise causal, forward and backward.
  AuditWorkload w;
  w.doc_lengths = {1, 40, 77};
  w.key_smoothing = KeySmoothing::kFirstKey;
  const AuditResult r = audit_forward(AuditMode::kExact, w);
  EXPECT_GT(r.runs, 0);
  EXPECT_EQ(r.changed, 0);
  EXPECT_EQ(audit_forward(AuditMode::kBlock32, w).cross_document_changed, 0);
  EXPECT_EQ(audit_backward_cross_document(ScaleMode::kExact, w).changed, 0);
}

TEST(AuditForward, DetectsALeakyForwardPassedIn) {
  // A forward that mixes in a future token: the audit of an explicit forward must catch it.
  AuditWorkload w;
  w.doc_lengths = {40, 9};
  w.heads_q = w.heads_kv = 1;
  const AuditForward leaky = [](const Problem& p, const Inputs& in) {
    std::vector<float> o = forward(p, in).o;
    const float last = in.v.at(in.v.tokens - 1, 0, 0);
    for (float& x : o) x += 1e-3f * last;
    return o;
  };
  const AuditResult r = audit_forward(AuditMode::kExact, w, leaky);
  EXPECT_GT(r.changed, 0);
  EXPECT_GT(r.cross_document_changed, 0);
  EXPECT_EQ(audit_forward(AuditMode::kExact, w, reference_audit_forward()).changed, 0);
  EXPECT_THROW(audit_forward(AuditMode::kUnsafe, w, leaky), std::invalid_argument);
}

TEST(AuditBackward, OtherDocumentsDoNotChangeThisDocumentsGradients) {
  AuditWorkload w;
  w.doc_lengths = {1, 40, 77};
  for (ScaleMode mode : {ScaleMode::kExact, ScaleMode::kBlock32}) {
    const AuditResult r = audit_backward_cross_document(mode, w);
    EXPECT_GT(r.runs, 0);
    EXPECT_GT(r.compared, 0);
    EXPECT_EQ(r.changed, 0) << test::mode_name(mode);
  }
  const AuditResult bf16grad = audit_backward_cross_document(
      ScaleMode::kExact, w, reference_audit_backward(BackwardPrecision::kFp8Bf16Grad));
  EXPECT_EQ(bf16grad.changed, 0);
}

TEST(AuditBackward, DetectsALeakyBackwardPassedIn) {
  AuditWorkload w;
  w.doc_lengths = {17, 20};
  w.heads_q = w.heads_kv = 1;
  const AuditBackward reference = reference_audit_backward();
  const AuditBackward leaky = [&](const Problem& p, const Inputs& in) {
    AuditGradients g = reference(p, in);
    g.dk[0] += in.q.at(in.q.tokens - 1, 0, 0);  // doc 0's dK reads doc 1's last query
    return g;
  };
  EXPECT_GT(audit_backward_cross_document(ScaleMode::kExact, w, leaky).changed, 0);
}

}  // namespace
}  // namespace flamia::ref
