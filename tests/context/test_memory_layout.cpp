// The memory's per-layer layout (kv/memory.h), on hyperparameters made here: which part holds
// which layer, per-layer widths, layers that reuse another layer's K/V (Gemma 3n / 4), recurrent
// layers of a hybrid, the window cache's size, and what the breakdown and state files count.
#include <gtest/gtest.h>

#include "kv/memory.h"

namespace loom::test {
namespace {

ModelHparams decoder(int n_layer) {
  ModelHparams hp;
  hp.arch_name = "test";
  hp.n_layer = n_layer;
  hp.n_embd = 64;
  hp.n_head = 4;
  hp.n_head_kv = 2;
  hp.head_dim = 16;
  return hp;
}

kv::MemoryParams params(int n_ctx = 1024) {
  kv::MemoryParams p;
  p.n_ctx = n_ctx;
  p.n_seq_max = 2;
  p.n_ubatch = 64;
  p.type_k = p.type_v = TensorType::F32;
  return p;
}

TEST(MemoryLayout, LayersThatReuseAnotherLayersKvShareItsStorage) {
  ModelHparams hp = decoder(4);
  hp.kv_reuse = {-1, -1, 1, 0};  // layers 2 and 3 read layers 1 and 0
  auto m = Memory::create(hp, params());
  ASSERT_TRUE(m.has_value()) << m.status().message();
  const KvCache& kv = *(*m)->kv();
  EXPECT_EQ(kv.stored_layers(), (std::vector<int>{0, 1}));
  const KvView& v = kv.view();
  EXPECT_EQ(v.layers[2].k, v.layers[1].k);
  EXPECT_EQ(v.layers[2].v, v.layers[1].v);
  EXPECT_EQ(v.layers[3].k, v.layers[0].k);
  EXPECT_TRUE(v.layers[2].reused && v.layers[3].reused && !v.layers[0].reused);
  // Two layers of storage: 1024 cells x 2 x (2 heads x 16) floats.
  EXPECT_EQ(kv.bytes(), size_t(1024) * 2 * 2 * 32 * sizeof(float));
  EXPECT_EQ((*m)->breakdown().kv_layers, 2);
  // A layer cannot reuse one that is not stored, or of another width.
  hp.kv_reuse = {-1, -1, 3, -1};
  hp.n_head_kv_layer = {2, 2, 2, 4};
  EXPECT_FALSE(Memory::create(hp, params()).has_value());
}

TEST(MemoryLayout, SlidingLayersGetAWindowCacheAndReusersFollowTheirSource) {
  ModelHparams hp = decoder(6);
  hp.swa_window = 16;
  hp.swa_pattern = 3;                    // layers 0, 1, 3, 4 slide; 2 and 5 are global
  hp.kv_reuse = {-1, -1, -1, -1, 1, 2};  // 4 reads sliding layer 1, 5 global layer 2
  kv::MemoryParams p = params(4096);
  p.swa_window = 16;
  auto m = Memory::create(hp, p);
  ASSERT_TRUE(m.has_value()) << m.status().message();
  const Memory& mem = **m;
  ASSERT_TRUE(mem.kv() && mem.kv_swa());
  EXPECT_EQ(mem.kv()->stored_layers(), (std::vector<int>{2}));
  EXPECT_EQ(mem.kv_swa()->stored_layers(), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(mem.kv_of_layer(4), mem.kv_swa());
  EXPECT_EQ(mem.kv_of_layer(5), mem.kv());
  EXPECT_EQ(mem.kv_swa()->size(), kv::swa_cache_cells(4096, 16, 2, 64));
  EXPECT_EQ(mem.kv_swa()->size(), 256);  // 16 x 2 + 64, rounded up to 256
  // swa_full: one cache of n_ctx cells for every stored layer.
  p.swa_full = true;
  auto full = Memory::create(hp, p);
  ASSERT_TRUE(full.has_value());
  EXPECT_EQ((*full)->kv_swa(), nullptr);
  EXPECT_EQ((*full)->kv()->stored_layers(), (std::vector<int>{0, 1, 2, 3}));
}

TEST(MemoryLayout, AHybridKeepsKvOnlyForItsAttentionLayers) {
  ModelHparams hp = decoder(8);
  hp.n_head_kv_layer = {0, 0, 0, 2, 0, 0, 0, 4};  // attention on layers 3 and 7, different widths
  hp.recurrent_layer = {1, 1, 1, 0, 1, 1, 1, 0};  // what the granitehybrid reader derives from it
  hp.rec_mixer = model::RecurrentMixer::kMamba2;
  hp.ssm_d_conv = 4;
  hp.ssm_d_inner = 128;
  hp.ssm_d_state = 16;
  hp.ssm_n_group = 1;
  hp.ssm_dt_rank = 8;
  ASSERT_TRUE(hp.is_hybrid());
  kv::MemoryParams p = params();
  p.n_seq_states = 1;  // one state cell although two sequence ids exist
  auto m = Memory::create(hp, p);
  ASSERT_TRUE(m.has_value()) << m.status().message();
  const Memory& mem = **m;
  EXPECT_EQ(mem.kv()->stored_layers(), (std::vector<int>{3, 7}));
  EXPECT_EQ(mem.kv()->view().layers[7].n_embd_k, 4 * 16);
  EXPECT_EQ(mem.kv()->view().layers[3].n_embd_k, 2 * 16);
  EXPECT_EQ(mem.kv()->view().layers[0].k, nullptr);
  EXPECT_EQ(mem.rs()->layers(), (std::vector<int>{0, 1, 2, 4, 5, 6}));
  EXPECT_EQ(mem.rs()->size(), 1);
  EXPECT_EQ(mem.parts(), kv::kPartKv | kv::kPartRecurrent);
  EXPECT_TRUE(mem.equal_split());
}

}  // namespace
}  // namespace loom::test
