// Decode for recurrent models (mamba): the batch's tokens are grouped by sequence and cut into
// equal-split micro-batches as the reference does (each micro-batch takes the same number of
// tokens from each of up to n_ubatch sequences that still have tokens, as many as the shortest
// of them has left and the micro-batch allows). Every sequence continues its state from its row
// and writes the new state into a fresh row (RecurrentCache::plan); only a fully successful
// decode commits them, so a failure leaves every state as it was.
#include <algorithm>
#include <cstring>

#include "context/context.h"

namespace loom {

void Context::create_recurrent() {
  const size_t S = size_t(params_.n_seq_max), nb = size_t(params_.n_batch), nu = size_t(params_.n_ubatch);
  rs_plans_.resize(S);
  rs_index_.assign(S, -1);
  rs_off_.assign(S, 0);
  rs_count_.assign(S, 0);
  rs_done_.assign(S, 0);
  rs_tok_.assign(nb, 0);
  ub_tokens_.assign(nu, 0);
  ub_pos_.assign(nu, 0);
  ub_rows_.assign(nu, 0);
  ub_embd_.assign(nu * size_t(model_->hparams().n_embd), 0.0f);
  ub_start_.assign(nu + 1, 0);
  ub_src_.assign(nu, -1);
  ub_dst_.assign(nu, -1);
  out_store_.assign(nb, -1);
  perm_dest_.assign(nb, 0);
  perm_done_.assign(nb, 0);
  perm_tmp_.assign(size_t(std::max(model_->hparams().n_vocab, model_->hparams().n_embd)), 0.0f);
}

Status Context::validate_recurrent(const Batch& batch, int n) const {
  // A state holds every token of its sequence up to its position: a batch must continue each
  // sequence exactly there (the reference: "it is required that the sequence positions remain
  // consecutive: Y = X + 1"), and a token cannot join several states (the reference's
  // sequential equal split refuses coupled sequences).
  std::fill(rs_index_.begin(), rs_index_.end(), -2);  // here: the next position expected, -2 unknown
  for (int i = 0; i < n; ++i) {
    if (!batch.seq_ids.empty() && batch.seq_ids[size_t(i)].size() > 1) {
      return invalid_argument("token at batch index " + std::to_string(i) +
                              " belongs to several sequences: a recurrent model keeps one state per sequence "
                              "(decode a shared prefix in one sequence, then seq_cp it)");
    }
    const int32_t s = seq_[size_t(i)];
    int32_t& next = rs_index_[size_t(s)];
    if (next == -2) {
      const Pos last = rs_->seq_pos_max(s);
      next = rs_->tail(s) >= 0 ? last + 1 : -1;  // -1: a new sequence may start anywhere
    }
    if (next >= 0 && pos_[size_t(i)] != next) {
      return invalid_argument("position " + std::to_string(pos_[size_t(i)]) + " at batch index " + std::to_string(i) +
                              " does not continue sequence " + std::to_string(s) + " (expected " + std::to_string(next) +
                              "): a recurrent state can neither skip nor revisit positions");
    }
    next = pos_[size_t(i)] + 1;
  }
  return Status::ok();
}

namespace {

// Moves row k of `data` (rows of `row` floats) to row dest[k] for k in [0, n), in place.
void permute_rows(float* data, size_t row, const int32_t* dest, int n, uint8_t* done, float* tmp) {
  std::fill(done, done + n, 0);
  for (int k = 0; k < n; ++k) {
    if (done[k] || dest[k] == k) continue;
    // Follow the cycle through k: carry the displaced row along.
    std::memcpy(tmp, data + size_t(k) * row, row * sizeof(float));
    int cur = k;
    while (!done[cur]) {
      done[cur] = 1;
      const int to = dest[cur];
      if (to == k) {
        std::memcpy(data + size_t(to) * row, tmp, row * sizeof(float));
        break;
      }
      // Row `to` is the next in the cycle: save it, write the carried row over it.
      float* dst = data + size_t(to) * row;
      std::swap_ranges(tmp, tmp + row, dst);
      cur = to;
    }
  }
}

}  // namespace

Status Context::run_recurrent(const Batch& batch, const Checked& c) {
  const int n = c.n;
  const bool embd_out = params_.embeddings;
  const bool pooled = embd_out && params_.pooling != Pooling::kNone;
  const int n_out = assign_outputs(batch, n, pooled);
  n_outputs_ = 0;  // outputs of a failed call are not readable
  std::fill(pooled_valid_.begin(), pooled_valid_.end(), 0);

  // Sequences in order of first appearance; their rows in batch order (a counting sort).
  std::fill(rs_index_.begin(), rs_index_.end(), -1);
  int n_seqs = 0;
  for (int i = 0; i < n; ++i) {
    int32_t& k = rs_index_[size_t(seq_[size_t(i)])];
    if (k < 0) {
      k = n_seqs++;
      rs_plans_[size_t(k)] = RecurrentCache::SeqPlan{};
      rs_plans_[size_t(k)].seq = seq_[size_t(i)];
      rs_count_[size_t(k)] = 0;
    }
    ++rs_count_[size_t(k)];
    rs_plans_[size_t(k)].last_pos = pos_[size_t(i)];
  }
  for (int k = 0, off = 0; k < n_seqs; ++k) {
    rs_off_[size_t(k)] = off;
    off += rs_count_[size_t(k)];
    rs_done_[size_t(k)] = 0;
  }
  for (int i = 0; i < n; ++i) {
    const int k = rs_index_[size_t(seq_[size_t(i)])];
    rs_tok_[size_t(rs_off_[size_t(k)] + rs_done_[size_t(k)]++)] = i;
  }
  std::fill(rs_done_.begin(), rs_done_.begin() + n_seqs, 0);
  const std::span<RecurrentCache::SeqPlan> plans(rs_plans_.data(), size_t(n_seqs));
  rs_->plan(plans);

  const size_t E = size_t(n_embd()), nv = size_t(n_vocab());
  const size_t out_row = embd_out ? E : nv;
  float* const out_base = embd_out ? embd_.data() : logits_.data();
  int stored = 0;
  ForwardConfig cfg = fwd_;
  for (;;) {
    // Equal split: the first sequences (up to n_ubatch) with tokens left, the same count each.
    int ns = 0, per = params_.n_ubatch;
    for (int k = 0; k < n_seqs && ns < params_.n_ubatch; ++k) {
      const int left = rs_count_[size_t(k)] - rs_done_[size_t(k)];
      if (left == 0) continue;
      ub_rows_[size_t(ns++)] = k;  // (reused below as rows)
      per = std::min(per, left);
    }
    if (ns == 0) break;
    per = std::min(per, params_.n_ubatch / ns);
    // Gather the micro-batch: run r = sequence ub_rows_[r]'s next `per` tokens.
    int m = 0, m_out = 0;
    for (int r = 0; r < ns; ++r) {
      const int k = ub_rows_[size_t(r)];
      const RecurrentCache::SeqPlan& p = rs_plans_[size_t(k)];
      ub_start_[size_t(r)] = m;
      ub_src_[size_t(r)] = rs_done_[size_t(k)] == 0 ? p.src_row : p.dst_row;
      ub_dst_[size_t(r)] = p.dst_row;
      for (int j = 0; j < per; ++j, ++m) {
        const int i = rs_tok_[size_t(rs_off_[size_t(k)] + rs_done_[size_t(k)] + j)];
        if (c.use_embd) std::memcpy(ub_embd_.data() + size_t(m) * E, batch.embd.data() + size_t(i) * E, E * sizeof(float));
        else ub_tokens_[size_t(m)] = batch.tokens[size_t(i)];
        ub_pos_[size_t(m)] = pos_[size_t(i)];
        if (output_of_row_[size_t(i)] >= 0) {
          out_store_[size_t(i)] = stored + m_out;
          out_rows_[size_t(m_out++)] = m;
        }
      }
      rs_done_[size_t(k)] += per;
    }
    ub_start_[size_t(ns)] = m;
    ForwardBatch fb;
    fb.n_tokens = m;
    if (c.use_embd) fb.embd = ub_embd_.data();
    else fb.tokens = ub_tokens_.data();
    fb.pos = ub_pos_.data();
    fb.rs = &rs_->view();
    fb.n_seq_runs = ns;
    fb.seq_start = ub_start_.data();
    fb.state_src = ub_src_.data();
    fb.state_dst = ub_dst_.data();
    fb.n_outputs = m_out;
    fb.output_rows = out_rows_.data();
    fb.logits = embd_out ? nullptr : out_base + size_t(stored) * out_row;
    fb.hidden = embd_out ? out_base + size_t(stored) * out_row : nullptr;
    cfg.n_threads = m > 1 ? params_.n_threads_batch : params_.n_threads;
    LOOM_RETURN_IF_ERROR(forward(*model_, fb, KvView{}, scratch_, *pool_, cfg));
    stored += m_out;
  }

  // Outputs were stored in micro-batch order; put them in batch order.
  bool in_order = true;
  for (int i = 0; i < n; ++i) {
    const int o = output_of_row_[size_t(i)];
    if (o < 0) continue;
    in_order = in_order && out_store_[size_t(i)] == o;
    perm_dest_[size_t(out_store_[size_t(i)])] = o;
  }
  if (!in_order) permute_rows(out_base, out_row, perm_dest_.data(), n_out, perm_done_.data(), perm_tmp_.data());
  rs_->commit(plans);
  n_outputs_ = n_out;
  last_batch_size_ = n;
  last_was_embd_ = embd_out;
  if (pooled) pool_outputs(c);
  return Status::ok();
}

}  // namespace loom
