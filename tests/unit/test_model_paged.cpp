// Paged KV in the CPU engine (Model::enable_paged_kv): the same logits as contiguous caches in
// every kind of pass, blocks shared by fork and copied only on a shared partial block's first
// write, blocks returned by truncate and release (counted), a pass past the pool refused with
// nothing changed, and the studies that need a contiguous cache refused.
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "model/engine_studies.h"
#include "model/model.h"
#include "model/model_choice.h"

// Its own namespace: the asan preset's unity build compiles this file with test_model.cpp, whose
// helpers have the same names.
namespace ib::model::paged_kv_test {
namespace {

ModelConfig P(const std::string& name) {
  auto c = preset(name);
  EXPECT_TRUE(c.has_value()) << name;
  return *c;
}

struct Pair {
  ModelConfig c;
  std::unique_ptr<Model> flat, paged;
  Pair(const std::string& name, int blocks, int block_size, uint64_t seed = 3) : c(P(name)) {
    auto w = random_weights(c, seed);
    flat = make_cpu_model(c, *w);
    paged = make_cpu_model(c, *w);
    paged->enable_paged_kv(blocks, block_size);
  }
  size_t V() const { return static_cast<size_t>(c.vocab); }
};

// Block 4 puts a block boundary inside every prompt and chunk; the arithmetic is the same, so the
// logits are the same bit for bit.
TEST(PagedKv, PrefillBatchedChunksAndDecodeGiveTheContiguousLogits) {
  Pair m("tiny-gqa", 64, 4);
  const std::vector<std::vector<int32_t>> prompts = {random_prompt(m.c.vocab, 5, 1), random_prompt(m.c.vocab, 13, 2),
                                                     random_prompt(m.c.vocab, 22, 3)};
  for (Model* e : {m.flat.get(), m.paged.get()}) ASSERT_EQ(e->new_sequence(64), 0);
  for (Model* e : {m.flat.get(), m.paged.get()}) ASSERT_EQ(e->new_sequence(64), 1);
  for (Model* e : {m.flat.get(), m.paged.get()}) ASSERT_EQ(e->new_sequence(64), 2);
  std::vector<float> want(3 * m.V()), got(3 * m.V());
  m.flat->prefill(0, prompts[0].data(), 5, 3, {want.data()});
  m.paged->prefill(0, prompts[0].data(), 5, 3, {got.data()});
  EXPECT_EQ(got, want);
  // Chunked prefill of 1 and 2 beside a decode of 0, in one pass.
  const int seqs[3] = {0, 1, 2}, counts[3] = {1, 7, 9};
  std::vector<int32_t> tokens = {9};
  tokens.insert(tokens.end(), prompts[1].begin(), prompts[1].begin() + 7);
  tokens.insert(tokens.end(), prompts[2].begin(), prompts[2].begin() + 9);
  m.flat->prefill_batch(seqs, counts, 3, tokens.data(), {want.data()}, true);
  m.paged->prefill_batch(seqs, counts, 3, tokens.data(), {got.data()}, true);
  EXPECT_EQ(got, want);
  const int rest[3] = {1, 6, 13};
  tokens = {4};
  tokens.insert(tokens.end(), prompts[1].begin() + 7, prompts[1].end());
  tokens.insert(tokens.end(), prompts[2].begin() + 9, prompts[2].end());
  m.flat->prefill_batch(seqs, rest, 3, tokens.data(), {want.data()}, true);
  m.paged->prefill_batch(seqs, rest, 3, tokens.data(), {got.data()}, true);
  EXPECT_EQ(got, want);
  for (int step = 0; step < 9; ++step) {
    const int32_t in[3] = {step + 1, 2 * step + 3, 40 - step};
    m.flat->decode(seqs, in, 3, {want.data()});
    m.paged->decode(seqs, in, 3, {got.data()});
    ASSERT_EQ(got, want) << "step " << step;
  }
  for (int s = 0; s < 3; ++s) EXPECT_EQ(m.paged->length(s), m.flat->length(s));
  const kvcache::BlockManager* b = m.paged->kv_blocks();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(m.flat->kv_blocks(), nullptr);
  EXPECT_EQ(b->used_blocks(), (16 + 3) / 4 + (22 + 3) / 4 + (31 + 3) / 4);  // lengths 16, 22, 31
  b->check_invariants();
  for (int s = 0; s < 3; ++s) m.paged->release(s);
  EXPECT_EQ(b->free_blocks(), 64);
  b->check_invariants();
  // The pool is the engine's cache, allocated once: 64 blocks of 4 tokens.
  EXPECT_EQ(m.paged->kv_bytes(), 64 * 4 * m.c.kv_elems_per_token() * 4);
}

TEST(PagedKv, TreeVerificationAndKeepingAPathGiveTheContiguousResults) {
  Pair m("tiny", 32, 4, 8);
  const auto prompt = random_prompt(m.c.vocab, 10, 8);
  const std::vector<int32_t> tok = {5, 9, 11, 20, 21, 9, 33};
  const std::vector<int32_t> parent = {-1, 0, 0, 1, 1, 2, 3};
  std::vector<float> want(7 * m.V()), got(7 * m.V());
  for (Model* e : {m.flat.get(), m.paged.get()}) {
    const int t = e->new_sequence(40);
    e->prefill(t, prompt.data(), 10, 1, {});
    float* l = e == m.flat.get() ? want.data() : got.data();
    e->prefill_tree(t, tok.data(), parent.data(), 5, {l});
    e->prefill_tree(t, tok.data() + 5, parent.data() + 5, 2, {l + 5 * m.V()});
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(m.paged->kv_blocks()->used_blocks(), (17 + 3) / 4);
  for (Model* e : {m.flat.get(), m.paged.get()}) e->keep_tree_path(0, {0, 1, 3, 6});
  EXPECT_EQ(m.paged->kv_blocks()->used_blocks(), (14 + 3) / 4);  // the other nodes' slots returned
  const int32_t x = 3;
  m.flat->decode(std::vector<int>{0}.data(), &x, 1, {want.data()});
  m.paged->decode(std::vector<int>{0}.data(), &x, 1, {got.data()});
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(m.V()), want.begin()));
  m.paged->kv_blocks()->check_invariants();
}

// A prefix hit is fork + truncate: every block shared by reference count, none copied; the first
// write into the shared partial block copies that one block, and the holder's cache is untouched.
TEST(PagedKv, AForkSharesBlocksAndCopiesOnlyThePartialBlockOnItsFirstWrite) {
  Pair m("tiny-gqa", 16, 4, 5);
  const auto prompt = random_prompt(m.c.vocab, 10, 5);
  for (Model* e : {m.flat.get(), m.paged.get()}) {
    const int a = e->new_sequence(32);
    e->prefill(a, prompt.data(), 10, 1, {});
  }
  const kvcache::BlockManager& b = *m.paged->kv_blocks();
  EXPECT_EQ(b.used_blocks(), 3);
  const int hit = m.paged->fork(0);
  m.paged->truncate(hit, 6);  // positions 0-5: block 0 whole, block 1 half
  EXPECT_EQ(b.used_blocks(), 3);
  EXPECT_EQ(b.copies_made(), 0);
  EXPECT_EQ(b.ref_count(b.table(0)[0]), 2);
  EXPECT_EQ(b.ref_count(b.table(0)[1]), 2);
  EXPECT_EQ(b.ref_count(b.table(0)[2]), 1);
  EXPECT_EQ(m.paged->blocks_needed(hit, 3), 2);  // the copy of block 1, and block 2 for position 8
  // The hit continues with its own suffix: the logits of prefilling prefix + suffix afresh.
  const std::vector<int32_t> suffix = {7, 8, 9};
  std::vector<float> got(m.V()), want(m.V());
  m.paged->prefill(hit, suffix.data(), 3, 1, {got.data()});
  EXPECT_EQ(b.copies_made(), 1);
  EXPECT_EQ(b.used_blocks(), 5);
  std::vector<int32_t> full(prompt.begin(), prompt.begin() + 6);
  full.insert(full.end(), suffix.begin(), suffix.end());
  const int fresh = m.flat->new_sequence(32);
  m.flat->prefill(fresh, full.data(), 9, 1, {want.data()});
  EXPECT_EQ(got, want);
  // The holder still decodes as its contiguous twin.
  const int32_t x = 11;
  const int zero = 0;
  m.flat->decode(&zero, &x, 1, {want.data()});
  m.paged->decode(&zero, &x, 1, {got.data()});
  EXPECT_EQ(got, want);
  b.check_invariants();
  m.paged->release(0);
  m.paged->release(hit);
  EXPECT_EQ(b.free_blocks(), 16);
  b.check_invariants();
}

TEST(PagedKv, APassPastThePoolIsRefusedAndChangesNothing) {
  Pair m("tiny", 4, 4);
  const auto prompt = random_prompt(m.c.vocab, 12, 2);
  const int a = m.paged->new_sequence(64), b = m.paged->new_sequence(64);
  m.paged->prefill(a, prompt.data(), 12, 1, {});
  EXPECT_EQ(m.paged->kv_blocks()->free_blocks(), 1);
  EXPECT_THROW(m.paged->prefill(b, prompt.data(), 8, 1, {}), KvBlocksExhausted);
  const int both[2] = {a, b};
  const int32_t two[2] = {1, 2};
  m.paged->prefill(b, prompt.data(), 3, 1, {});                        // fits the last block
  EXPECT_THROW(m.paged->decode(both, two, 2, {}), KvBlocksExhausted);  // a needs a block, b needs none: still 1 > 0
  EXPECT_EQ(m.paged->length(a), 12);
  EXPECT_EQ(m.paged->length(b), 3);
  m.paged->kv_blocks()->check_invariants();
  m.paged->release(b);
  m.paged->decode(&a, two, 1, {});  // a's 13th token takes the block b returned
  EXPECT_EQ(m.paged->length(a), 13);
  EXPECT_EQ(m.paged->kv_blocks()->free_blocks(), 0);
  m.paged->release(a);
  EXPECT_EQ(m.paged->kv_blocks()->free_blocks(), 4);
}

TEST(PagedKv, StudiesThatNeedAContiguousCacheAreRefused) {
  Pair m("tiny", 8, 4);
  const int s = m.paged->new_sequence(16);
  EXPECT_THROW(kv_eviction(*m.paged).set_kept(s, 0, false), std::invalid_argument);
  EXPECT_THROW(kv_format_study(*m.paged).set_kv_format(s, kvcache::KvFormat::INT8), std::invalid_argument);
  EXPECT_THROW(kv_format_study(*m.paged).kv_amax(s), std::invalid_argument);
  EXPECT_THROW(m.paged->enable_paged_kv(8, 4), std::logic_error);  // a live sequence
  m.paged->release(s);
  EXPECT_THROW(m.paged->enable_paged_kv(0, 4), std::invalid_argument);
}

}  // namespace
}  // namespace ib::model::paged_kv_test
