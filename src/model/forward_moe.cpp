// The mixture-of-experts feed-forward of a block (qwen3moe, qwen35moe, lfm2moe, granitemoe and
// granitehybrid with experts, olmoe, Mixtral-style llama, gpt-oss), from the normed input h = b.xb:
//   s = Wrouter · h [+ brouter]                           one logit per expert (gpt-oss: biased)
//   p = softmax(s) | sigmoid(s) | s                       (ExpertGating)
//   chosen = the n_expert_used largest p (+ bias)         lfm2moe chooses by biased scores
//   w = p[chosen], softmaxed when the gating chose by logits (gpt-oss), / Σ w when
//       expert_weights_norm (the sum clamped at 2^-14), · expert_weights_scale when set
//   out = Σ_j w_j · Wdown_j · (act(Wgate_j · h) ⊙ Wup_j · h)
//       gpt-oss: each projection plus its expert's bias, act ⊙ up the clamped SwiGLU
//       (ops::swiglu_oai_inplace), the bias of down added before the weight
//       [+ σ(Wsg · h) ·] Wdown_s · (act(Wgate_s · h) ⊙ Wup_s · h)   the shared expert (qwen35moe: gated)
//   gemma4: s = Wrouter · (RMSNorm(x) / sqrt(n_embd) ⊙ router_scale) from the residual stream x, and
//       each expert's down product times its per_expert_scale (ffn_down_exps.scale; every family
//       takes the optional ffn_{gate,up,down}_exps.scale); its dense half is forward_decoder's
// Only the chosen experts' weights are read: the tokens of a micro-batch are grouped by expert and
// each chosen expert runs once over its tokens' rows, so decode reads n_expert_used experts per
// layer and a prompt reads each expert at most once.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "model/forward_internal.h"
#include "ops/matmul.h"
#include "ops/ops.h"

namespace loom::model::detail {
namespace {

// The router's score for choosing: NaN ranks below every number (never chosen over one).
inline float rank_key(float v) { return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v; }

// p = gating(s) in place over the X logits of one token.
void gate_probs(ExpertGating g, float* s, int64_t X) {
  if (g == ExpertGating::kSigmoid) {
    for (int64_t e = 0; e < X; ++e) s[e] = 1.0f / (1.0f + std::exp(-s[e]));
  } else if (g == ExpertGating::kSoftmax) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t e = 0; e < X; ++e) mx = std::max(mx, s[e]);
    double sum = 0.0;
    for (int64_t e = 0; e < X; ++e) {
      s[e] = std::exp(s[e] - mx);
      sum += double(s[e]);
    }
    const float inv = sum > 0.0 ? float(1.0 / sum) : 0.0f;
    for (int64_t e = 0; e < X; ++e) s[e] *= inv;
  }
}

}  // namespace

void route_tokens(const ModelHparams& hp, const float* bias, float* logits, int T, int32_t* chosen, float* weights) {
  const int64_t X = hp.n_expert, K = hp.n_expert_used;
  std::vector<int32_t> order(static_cast<size_t>(X));
  std::vector<float> key(static_cast<size_t>(X));
  for (int t = 0; t < T; ++t) {
    float* p = logits + int64_t(t) * X;
    gate_probs(hp.expert_gating, p, X);
    for (int64_t e = 0; e < X; ++e) {
      key[size_t(e)] = rank_key(bias ? p[e] + bias[e] : p[e]);
      order[size_t(e)] = int32_t(e);
    }
    // The K best, ties to the lower expert index: a total order, whatever the values.
    std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int32_t a, int32_t b) {
      return key[size_t(a)] > key[size_t(b)] || (key[size_t(a)] == key[size_t(b)] && a < b);
    });
    int32_t* c = chosen + int64_t(t) * K;
    float* w = weights + int64_t(t) * K;
    for (int64_t j = 0; j < K; ++j) {
      c[j] = order[size_t(j)];
      w[j] = p[order[size_t(j)]];
    }
    if (hp.expert_gating == ExpertGating::kSoftmaxChosen) gate_probs(ExpertGating::kSoftmax, w, K);
    if (hp.expert_weights_norm) {
      float sum = 0.0f;
      for (int64_t j = 0; j < K; ++j) sum += w[j];
      sum = std::max(sum, 6.103515625e-5f);  // the reference's clamp: no division by zero
      for (int64_t j = 0; j < K; ++j) w[j] /= sum;
    }
    if (hp.expert_weights_scale != 0.0f && hp.expert_weights_scale != 1.0f) {
      for (int64_t j = 0; j < K; ++j) w[j] *= hp.expert_weights_scale;
    }
  }
}

namespace {

// act(gate) ⊙ up for n rows of F into out ([n][F]); gate null: act(up) alone.
void expert_activation(const ModelHparams& hp, float* gate, float* up, int64_t n) {
  if (!gate) {
    for (int64_t i = 0; i < n; ++i) up[i] = ops::silu(up[i]);
    return;
  }
  if (hp.ffn_act == FfnAct::kGelu && hp.gelu_f16_table) ops::geglu_f16_table_inplace(gate, up, n);
  else if (hp.ffn_act == FfnAct::kGelu) ops::geglu_inplace(gate, up, n);
  else if (hp.ffn_act == FfnAct::kSwigluOai) ops::swiglu_oai_inplace(gate, up, n, kSwigluOaiAlpha, kSwigluOaiLimit);
  else ops::swiglu_inplace(gate, up, n);
}

// Expert biases (gpt-oss), each null where the expert has none.
struct ExpertBiases {
  const float* gate = nullptr;  // [F]
  const float* up = nullptr;    // [F]
  const float* down = nullptr;  // [E]
  // The expert's output scales (ffn_*_exps.scale; 1: none), applied before the biases.
  float gate_s = 1.0f, up_s = 1.0f, down_s = 1.0f;
};

// One expert (or the shared one) over n rows of x into y ([n][E]): the gate/up projections, the
// activation, the down projection. A fused gate|up view gives [n][2F] rows split here.
void run_expert(const ModelHparams& hp, ThreadPool& pool, const TensorView& gate, const TensorView& up, bool fused,
                const TensorView& down, const ExpertBiases& bias, const float* x, int n, float* y, Buffers& b) {
  const int64_t F = down.cols;
  float* act = nullptr;
  if (fused) {
    linear(pool, up, nullptr, x, n, b.gate, b);  // [n][2F]: gate, then up
    for (int r = 0; r < n; ++r) {
      std::memcpy(b.up + int64_t(r) * F, b.gate + int64_t(r) * 2 * F + F, sizeof(float) * size_t(F));
    }
    for (int r = 1; r < n; ++r)
      std::memmove(b.gate + int64_t(r) * F, b.gate + int64_t(r) * 2 * F, sizeof(float) * size_t(F));
    expert_activation(hp, b.gate, b.up, int64_t(n) * F);
    act = b.gate;
  } else if (gate.empty()) {
    linear(pool, up, nullptr, x, n, b.up, b);
    if (bias.up_s != 1.0f) ops::scale_inplace(b.up, bias.up_s, int64_t(n) * F);
    expert_activation(hp, nullptr, b.up, int64_t(n) * F);
    act = b.up;
  } else {
    linear(pool, gate, nullptr, x, n, b.gate, b);
    linear(pool, up, nullptr, x, n, b.up, b);
    if (bias.gate_s != 1.0f) ops::scale_inplace(b.gate, bias.gate_s, int64_t(n) * F);
    if (bias.up_s != 1.0f) ops::scale_inplace(b.up, bias.up_s, int64_t(n) * F);
    if (bias.gate) ops::add_bias(b.gate, bias.gate, n, F);
    if (bias.up) ops::add_bias(b.up, bias.up, n, F);
    expert_activation(hp, b.gate, b.up, int64_t(n) * F);
    act = b.gate;
  }
  linear(pool, down, nullptr, act, n, y, b);
  if (bias.down_s != 1.0f) ops::scale_inplace(y, bias.down_s, int64_t(n) * down.rows);
  if (bias.down) ops::add_bias(y, bias.down, n, down.rows);
}

}  // namespace

namespace {

// s = Wrouter · h [+ brouter] into b.moe_logits ([T][X]); gemma4's router reads RMSNorm(x) (no
// weight, x the residual stream) / sqrt(n_embd) times its per-channel scale, not the experts' input.
Status router_logits(const ModelHparams& hp, const LayerWeights& l, const ForwardConfig& cfg, ThreadPool& pool, int il,
                     int T, Buffers& b) {
  const int64_t E = hp.n_embd, X = hp.n_expert;
  if (l.ffn_gate_inp_s) {
    ops::rms_norm(b.x, nullptr, T, E, hp.rms_eps, b.moe_x);
    ops::scale_inplace(b.moe_x, 1.0f / std::sqrt(float(E)), int64_t(T) * E);
    for (int t = 0; t < T; ++t) {
      float* r = b.moe_x + int64_t(t) * E;
      for (int64_t i = 0; i < E; ++i) r[i] *= l.ffn_gate_inp_s[i];
    }
    linear(pool, l.ffn_gate_inp, nullptr, b.moe_x, T, b.moe_logits, b);  // [T][X]
  } else {
    linear(pool, l.ffn_gate_inp, nullptr, b.xb, T, b.moe_logits, b);  // [T][X]
  }
  if (!observe(cfg, "ffn_moe_logits", il, b.moe_logits, X, T)) return aborted();
  if (l.ffn_gate_inp_b) ops::add_bias(b.moe_logits, l.ffn_gate_inp_b, T, X);
  return Status::ok();
}

// Groups the n_pairs (token, slot) pairs of b.moe_chosen by expert: offsets per expert into
// b.moe_start ([X + 1]), then the pairs in token order into b.moe_pairs.
void group_pairs_by_expert(int64_t X, int64_t n_pairs, Buffers& b) {
  int32_t* start = b.moe_start;
  std::fill(start, start + X + 1, 0);
  for (int64_t i = 0; i < n_pairs; ++i) ++start[b.moe_chosen[i] + 1];
  for (int64_t e = 0; e < X; ++e) start[e + 1] += start[e];
  std::vector<int32_t> fill(start, start + X);
  for (int64_t i = 0; i < n_pairs; ++i) b.moe_pairs[fill[size_t(b.moe_chosen[i])]++] = int32_t(i);
}

// The chosen experts run in waves: as many consecutive experts as the buffers' rows and the
// matmul scratch hold, their gate/up products in one matmul_many and their down products in
// another (decode: one wave, two pool passes for all n_expert_used experts instead of six per
// expert). Each token's output in b.tmp sums its experts in expert order, wave or not.
class ExpertWaves {
 public:
  ExpertWaves(const ModelHparams& hp, const LayerWeights& l, ThreadPool& pool, Buffers& b)
      : hp_(hp),
        l_(l),
        pool_(pool),
        b_(b),
        E_(hp.n_embd),
        K_(hp.n_expert_used),
        F_(hp.n_ff_exp),
        up_rows_(l.gate_up_fused ? 2 * F_ : F_),
        gated_(!l.gate_up_fused && !l.ffn_gate_exps.empty()) {}

  // Expert e over its n rows: into the current wave (run first when they would not fit), or alone
  // when its products cannot share one pass's scratch.
  void add(int64_t e, int n) {
    up1_.clear();
    down1_.clear();
    jobs_of(e, n, 0, up1_, down1_);
    const size_t need_up = ops::matmul_many_scratch_bytes(up1_), need_down = ops::matmul_many_scratch_bytes(down1_);
    if (need_up > b_.mm_bytes || need_down > b_.mm_bytes) {
      run_wave();
      run_alone(e, n);
      return;
    }
    if (rows_ + n > b_.rows || up_bytes_ + need_up > b_.mm_bytes || down_bytes_ + need_down > b_.mm_bytes) run_wave();
    wave_.push_back({e, n, rows_});
    jobs_of(e, n, rows_, up_jobs_, down_jobs_);
    up_bytes_ += need_up;
    down_bytes_ += need_down;
    rows_ += n;
  }

  // Runs the experts of the current wave and starts an empty one.
  void run_wave() {
    if (wave_.empty()) return;
    const int32_t* pairs = b_.moe_pairs + b_.moe_start[wave_.front().e];  // the wave's pairs, in row order
    gather_rows(pairs, rows_);
    ops::matmul_many(pool_, up_jobs_, b_.mm);
    if (l_.gate_up_fused) split_gate_up(rows_);
    for (const Member& m : wave_) scale_and_bias_gate_up(m);
    expert_activation(hp_, gated_ || l_.gate_up_fused ? b_.gate : nullptr, b_.up, int64_t(rows_) * F_);
    ops::matmul_many(pool_, down_jobs_, b_.mm);
    for (const Member& m : wave_) {
      float* y = b_.moe_y + int64_t(m.row) * E_;
      if (l_.ffn_down_exps_s) ops::scale_inplace(y, l_.ffn_down_exps_s[m.e], int64_t(m.n) * E_);
      if (l_.ffn_down_exps_b) ops::add_bias(y, l_.ffn_down_exps_b + m.e * E_, m.n, E_);
      accumulate(pairs + m.row, y, m.n);
    }
    wave_.clear();
    up_jobs_.clear();
    down_jobs_.clear();
    up_bytes_ = down_bytes_ = 0;
    rows_ = 0;
  }

 private:
  struct Member {
    int64_t e;
    int n, row;  // its rows, at this row of the wave's buffers
  };

  // Expert e's products over n rows at row `row` of the wave buffers: gate/up (or fused gate|up,
  // or up alone) from moe_x into b.gate / b.up, down from the activation into moe_y.
  void jobs_of(int64_t e, int n, int row, std::vector<ops::MatmulJob>& up, std::vector<ops::MatmulJob>& down) const {
    const float* x = b_.moe_x + int64_t(row) * E_;
    if (l_.gate_up_fused) {
      up.push_back({expert_view(l_.ffn_up_exps, e, up_rows_), x, n, b_.gate + int64_t(row) * 2 * F_});
    } else {
      if (gated_) up.push_back({expert_view(l_.ffn_gate_exps, e, F_), x, n, b_.gate + int64_t(row) * F_});
      up.push_back({expert_view(l_.ffn_up_exps, e, F_), x, n, b_.up + int64_t(row) * F_});
    }
    const float* act = (gated_ || l_.gate_up_fused ? b_.gate : b_.up) + int64_t(row) * F_;
    down.push_back({expert_view(l_.ffn_down_exps, e, E_), act, n, b_.moe_y + int64_t(row) * E_});
  }

  // The experts' input rows of the n pairs, gathered from b.xb into b.moe_x.
  void gather_rows(const int32_t* pairs, int n) const {
    for (int r = 0; r < n; ++r) {
      std::memcpy(b_.moe_x + int64_t(r) * E_, b_.xb + int64_t(pairs[r] / K_) * E_, sizeof(float) * size_t(E_));
    }
  }

  // [n][2F] gate|up rows into [n][F] gate and [n][F] up.
  void split_gate_up(int n) const {
    for (int r = 0; r < n; ++r) {
      std::memcpy(b_.up + int64_t(r) * F_, b_.gate + int64_t(r) * 2 * F_ + F_, sizeof(float) * size_t(F_));
    }
    for (int r = 1; r < n; ++r) {
      std::memmove(b_.gate + int64_t(r) * F_, b_.gate + int64_t(r) * 2 * F_, sizeof(float) * size_t(F_));
    }
  }

  // A wave member's gate/up scales and biases.
  void scale_and_bias_gate_up(const Member& m) const {
    float* gate = b_.gate + int64_t(m.row) * F_;
    float* up = b_.up + int64_t(m.row) * F_;
    if (l_.ffn_gate_exps_s) ops::scale_inplace(gate, l_.ffn_gate_exps_s[m.e], int64_t(m.n) * F_);
    if (l_.ffn_up_exps_s) ops::scale_inplace(up, l_.ffn_up_exps_s[m.e], int64_t(m.n) * F_);
    if (l_.ffn_gate_exps_b) ops::add_bias(gate, l_.ffn_gate_exps_b + m.e * F_, m.n, F_);
    if (l_.ffn_up_exps_b) ops::add_bias(up, l_.ffn_up_exps_b + m.e * F_, m.n, F_);
  }

  // b.tmp[token of pair] += weight of pair · y row, for the n pairs and their rows of y.
  void accumulate(const int32_t* pairs, const float* y, int n) const {
    for (int r = 0; r < n; ++r) {
      const int32_t pair = pairs[r];
      const float w = b_.moe_weights[pair];
      float* dst = b_.tmp + int64_t(pair / K_) * E_;
      const float* src = y + int64_t(r) * E_;
      for (int64_t i = 0; i < E_; ++i) dst[i] += w * src[i];
    }
  }

  // An expert whose products cannot share one pass's scratch (gate and up of different weight
  // types quantize the activations twice) runs alone, one product at a time.
  void run_alone(int64_t e, int n) const {
    const int32_t* pairs = b_.moe_pairs + b_.moe_start[e];
    gather_rows(pairs, n);
    ExpertBiases bias;
    if (l_.ffn_gate_exps_b) bias.gate = l_.ffn_gate_exps_b + e * F_;
    if (l_.ffn_up_exps_b) bias.up = l_.ffn_up_exps_b + e * F_;
    if (l_.ffn_down_exps_b) bias.down = l_.ffn_down_exps_b + e * E_;
    if (l_.ffn_gate_exps_s) bias.gate_s = l_.ffn_gate_exps_s[e];
    if (l_.ffn_up_exps_s) bias.up_s = l_.ffn_up_exps_s[e];
    if (l_.ffn_down_exps_s) bias.down_s = l_.ffn_down_exps_s[e];
    run_expert(hp_, pool_, gated_ ? expert_view(l_.ffn_gate_exps, e, F_) : TensorView{},
               expert_view(l_.ffn_up_exps, e, up_rows_), l_.gate_up_fused, expert_view(l_.ffn_down_exps, e, E_), bias,
               b_.moe_x, n, b_.moe_y, b_);
    accumulate(pairs, b_.moe_y, n);
  }

  const ModelHparams& hp_;
  const LayerWeights& l_;
  ThreadPool& pool_;
  Buffers& b_;
  const int64_t E_, K_, F_, up_rows_;
  const bool gated_;
  std::vector<Member> wave_;
  std::vector<ops::MatmulJob> up_jobs_, down_jobs_, up1_, down1_;
  size_t up_bytes_ = 0, down_bytes_ = 0;
  int rows_ = 0;
};

// b.tmp += [σ(Wsg · h) ·] the shared expert of the T rows of b.xb (qwen35moe: gated).
void add_shared_expert(const ModelHparams& hp, const LayerWeights& l, ThreadPool& pool, int T, Buffers& b) {
  const int64_t E = hp.n_embd;
  run_expert(hp, pool, l.ffn_gate_shexp, l.ffn_up_shexp, false, l.ffn_down_shexp, {}, b.xb, T, b.moe_y, b);
  if (!l.ffn_gate_inp_shexp.empty()) {
    // qwen35moe: the shared expert's output times σ(its own one-row router).
    linear(pool, l.ffn_gate_inp_shexp, nullptr, b.xb, T, b.moe_logits, b);  // [T][1]
    for (int t = 0; t < T; ++t) {
      const float g = 1.0f / (1.0f + std::exp(-b.moe_logits[t]));
      ops::scale_inplace(b.moe_y + int64_t(t) * E, g, E);
    }
  }
  ops::add_inplace(b.tmp, b.moe_y, int64_t(T) * E);
}

}  // namespace

Status moe_block(const Model& model, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, int il,
                 Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const LayerWeights& l = model.weights().layers[size_t(il)];
  const int T = fb.n_tokens;
  const int64_t E = hp.n_embd, X = hp.n_expert, K = hp.n_expert_used;

  LOOM_RETURN_IF_ERROR(router_logits(hp, l, cfg, pool, il, T, b));
  route_tokens(hp, l.ffn_exp_probs_b, b.moe_logits, T, b.moe_chosen, b.moe_weights);
  if (cfg.expert_counts) {
    uint64_t* counts = cfg.expert_counts + int64_t(il) * X;
    for (int64_t i = 0; i < int64_t(T) * K; ++i) ++counts[b.moe_chosen[i]];
  }
  group_pairs_by_expert(X, int64_t(T) * K, b);

  std::fill(b.tmp, b.tmp + int64_t(T) * E, 0.0f);
  ExpertWaves waves(hp, l, pool, b);
  for (int64_t e = 0; e < X; ++e) {
    const int n = b.moe_start[e + 1] - b.moe_start[e];
    if (n > 0) waves.add(e, n);
  }
  waves.run_wave();
  if (!observe(cfg, "ffn_moe_out", il, b.tmp, E, T)) return aborted();

  if (!l.ffn_up_shexp.empty()) add_shared_expert(hp, l, pool, T, b);
  return Status::ok();
}

}  // namespace loom::model::detail
