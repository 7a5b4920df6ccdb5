// Decode and encode over the context's memory (kv/memory.h). A batch is cut into micro-batches:
// in batch order (n_ubatch tokens each), or, when the memory has a recurrent part, llama.cpp's
// equal split (each micro-batch takes the same number of tokens from each of up to n_ubatch
// sequences that still have tokens, as many as the shortest of them has left and the micro-batch
// allows). For each micro-batch every part supplies its inputs: the full KV part its cells (all
// chosen up front, so a full cache fails the call before anything is computed) and masks, the
// window cache its cells (taken per micro-batch: cells out of every window are reused) and a
// sliding mask, the recurrent part the state rows each run continues from and writes to (fresh
// rows: only a fully successful decode commits them). A failure gives every cell back and leaves
// every state as it was (window cells that no sequence could see any more may be gone).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/timer.h"
#include "context/context.h"

namespace loom::context {

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

void Context::reserve_ubatch_buffers() {
  const size_t S = size_t(params_.n_seq_max), nb = size_t(params_.n_batch), nu = size_t(params_.n_ubatch);
  const ModelHparams& hp = model_->hparams();
  cells_.assign(nb, 0);
  swa_cells_.assign(nb, 0);
  out_rows_.assign(nu, 0);
  iota_.resize(nb);
  std::iota(iota_.begin(), iota_.end(), 0);
  ubatch_seqs_.assign(nu, 0);
  ubatch_seq_min_.assign(nu, 0);
  auto reserve_attn = [&](AttnBuffers& a, int n_cells) {
    a.mask.assign(nu * size_t(n_cells), 0.0f);
    a.col_cells.assign(size_t(n_cells), 0);
    a.group.assign(nu, -1);
    a.col_pos.assign(hp.is_t5() ? std::max(size_t(n_cells), nu) : 0, 0);
  };
  int largest = 0;
  if (const KvCache* kv = mem_->kv()) {
    // (An encoder's own cells may outnumber the cache's: n_ubatch of a non-causal model.)
    reserve_attn(attn_, std::max(kv->size(), enc_kv_ ? enc_kv_->size() : 0));
    largest = kv->size();
    // The window layers slide over the same cells (their own cache absent: swa_full, or a family
    // whose every layer slides over one mask).
    if (!mem_->kv_swa() && params_.n_swa > 0 && hp.swa_window > 0) reserve_attn(attn_swa_, kv->size());
  }
  if (const KvCache* kvs = mem_->kv_swa()) {
    reserve_attn(attn_swa_, kvs->size());
    largest = std::max(largest, kvs->size());
  }
  deltas_.assign(size_t(largest), 0);
  if (mem_->equal_split()) {
    rs_plans_.resize(S);
    rs_index_.assign(S, -1);
    rs_off_.assign(S, 0);
    rs_count_.assign(S, 0);
    rs_done_.assign(S, 0);
    rs_tok_.assign(nb, 0);
    ub_rows_.assign(nu, 0);
    ub_tokens_.assign(nu, 0);
    ub_pos_.assign(nu, 0);
    ub_seq_.assign(nu, 0);
    ub_cells_.assign(nu, 0);
    ub_start_.assign(nu + 1, 0);
    ub_src_.assign(nu, -1);
    ub_dst_.assign(nu, -1);
    ub_plan_.assign(nu, 0);
  }
  out_store_.assign(nb, -1);
  perm_dest_.assign(nb, 0);
  perm_done_.assign(nb, 0);
  perm_tmp_.assign(size_t(std::max(hp.n_vocab, hp.n_embd)), 0.0f);
}

Status Context::validate_recurrent(const Batch& batch, int n) const {
  // A state holds every token of its sequence up to its position: a batch must continue each
  // sequence exactly there (the reference: "it is required that the sequence positions remain
  // consecutive: Y = X + 1"), and a token cannot join several states (the reference's
  // sequential equal split refuses coupled sequences).
  const RecurrentCache& rs = *mem_->rs();
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
      const kv::Pos last = rs.seq_pos_max(s);
      next = rs.tail(s) >= 0 ? last + 1 : -1;  // -1: a new sequence may start anywhere
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

int Context::assign_outputs(const Batch& batch, int n, bool all) {
  // Output rows: every token when pooling, else flagged tokens or the last one.
  std::fill(output_of_row_.begin(), output_of_row_.begin() + n, -1);
  int n_out = 0;
  for (int i = 0; i < n; ++i) {
    const bool want = all || (batch.output.empty() ? i == n - 1 : batch.output[size_t(i)] != 0);
    if (want) output_of_row_[size_t(i)] = n_out++;
  }
  return n_out;
}

int Context::next_ubatch(const Batch& batch, const Checked& c, bool encoding, int done, Ubatch* ub) {
  *ub = Ubatch{};
  if (!mem_->equal_split()) {
    // In batch order: pointers into the batch and the resolved arrays.
    const int ubatch = (encoding || !causal_) ? c.n : params_.n_ubatch;
    const int m = std::min(ubatch, c.n - done);
    if (m <= 0) return 0;
    ub->m = m;
    ub->rows = iota_.data() + done;
    if (c.use_embd) ub->embd = batch.embd.data() + size_t(done) * size_t(n_embd());
    else ub->tokens = batch.tokens.data() + done;
    ub->pos = pos_.data() + done;
    ub->seq = seq_.data() + done;
    ub->cells = cells_.data() + done;
    return m;
  }
  // Equal split: the first sequences (up to n_ubatch) with tokens left, the same count each.
  int ns = 0, per = params_.n_ubatch;
  for (int k = 0; k < n_plans_ && ns < params_.n_ubatch; ++k) {
    const int left = rs_count_[size_t(k)] - rs_done_[size_t(k)];
    if (left == 0) continue;
    ub_plan_[size_t(ns++)] = k;
    per = std::min(per, left);
  }
  if (ns == 0) return 0;
  per = std::min(per, params_.n_ubatch / ns);
  const size_t E = size_t(n_embd());
  if (c.use_embd && ub_embd_.empty()) ub_embd_.assign(size_t(params_.n_ubatch) * E, 0.0f);
  int m = 0;
  for (int r = 0; r < ns; ++r) {
    const int k = ub_plan_[size_t(r)];
    const RecurrentCache::SeqPlan& p = rs_plans_[size_t(k)];
    ub_start_[size_t(r)] = m;
    ub_src_[size_t(r)] = rs_done_[size_t(k)] == 0 ? p.src_row : p.dst_row;
    ub_dst_[size_t(r)] = p.dst_row;
    for (int j = 0; j < per; ++j, ++m) {
      const int i = rs_tok_[size_t(rs_off_[size_t(k)] + rs_done_[size_t(k)] + j)];
      ub_rows_[size_t(m)] = i;
      if (c.use_embd) std::memcpy(ub_embd_.data() + size_t(m) * E, batch.embd.data() + size_t(i) * E, E * sizeof(float));
      else ub_tokens_[size_t(m)] = batch.tokens[size_t(i)];
      ub_pos_[size_t(m)] = pos_[size_t(i)];
      ub_seq_[size_t(m)] = seq_[size_t(i)];
      ub_cells_[size_t(m)] = cells_[size_t(i)];
    }
    rs_done_[size_t(k)] += per;
  }
  ub_start_[size_t(ns)] = m;
  ub->m = m;
  ub->rows = ub_rows_.data();
  if (c.use_embd) ub->embd = ub_embd_.data();
  else ub->tokens = ub_tokens_.data();
  ub->pos = ub_pos_.data();
  ub->seq = ub_seq_.data();
  ub->cells = ub_cells_.data();
  ub->n_runs = ns;
  return m;
}

void Context::build_attn(const KvCache& part, const Ubatch& ub, const int32_t* cells, const kv::MaskParams& mp,
                         AttnBuffers& buf, model::AttnInputs* out) {
  const int m = ub.m;
  const int n_kv = part.n_kv();
  // Batch invariance (docs/design.md): the mask columns list each token's visible cells in
  // position order, wherever the cache put them (usually the cell order already), and tokens of
  // one sequence may share attention tiles where their visible columns nest.
  int n_seqs = 0;
  for (int t = 0; t < m; ++t) {
    const int32_t s = ub.seq[t];
    if (std::find(ubatch_seqs_.begin(), ubatch_seqs_.begin() + n_seqs, s) == ubatch_seqs_.begin() + n_seqs) {
      ubatch_seqs_[size_t(n_seqs++)] = s;
    }
  }
  const int32_t* cols =
      part.position_order(n_kv, std::span<const int32_t>(ubatch_seqs_.data(), size_t(n_seqs)), buf.col_cells.data())
          ? buf.col_cells.data()
          : nullptr;
  part.build_mask(m, ub.pos, ub.seq, n_kv, mp, buf.mask.data(), cols);
  // A sliding window keeps the nesting only where it hides nothing yet (the sequence's first cell
  // is inside every such token's window).
  if (mp.swa_window > 0) {
    for (int i = 0; i < n_seqs; ++i) ubatch_seq_min_[size_t(i)] = part.seq_pos_min(ubatch_seqs_[size_t(i)]);
  }
  for (int t = 0; t < m; ++t) {
    const int32_t s = ub.seq[t];
    buf.group[size_t(t)] = s;
    if (mp.swa_window <= 0) continue;
    const int i = int(std::find(ubatch_seqs_.begin(), ubatch_seqs_.begin() + n_seqs, s) - ubatch_seqs_.begin());
    if (ubatch_seq_min_[size_t(i)] <= ub.pos[t] - mp.swa_window) buf.group[size_t(t)] = -1;
  }
  out->kv = &part.view();
  out->cells = cells;
  out->n_kv = n_kv;
  out->mask = buf.mask.data();
  out->kv_cells = cols;
  out->prefix_group = buf.group.data();
  if (!buf.col_pos.empty()) {
    for (int col = 0; col < n_kv; ++col) buf.col_pos[size_t(col)] = part.cell(cols ? cols[col] : col).pos;
    out->kv_pos = buf.col_pos.data();
  }
}

Status Context::decode(const Batch& batch) {
  Checked c;
  LOOM_RETURN_IF_ERROR(validate(batch, /*encoding=*/false, &c));
  if (model_->hparams().arch == Arch::kT5) {
    // Checked before anything changes (pending shifts included): every sequence decoded needs its
    // encoder output.
    for (int i = 0; i < c.n; ++i) {
      if (!enc_.has(seq_[size_t(i)])) {
        return invalid_argument("t5: decode of sequence " + std::to_string(seq_[size_t(i)]) +
                                " needs its encoder output; encode() its input first");
      }
    }
  }
  // Before any shift is applied: a batch without room changes nothing.
  if (const KvCache* kv = mem_->kv(); kv && c.n > kv->size() - kv->used()) {
    return Status(StatusCode::kResourceExhausted, "no KV slot: the cache has " + std::to_string(kv->size() - kv->used()) +
                                                      " free cells, the batch needs " + std::to_string(c.n));
  }
  if (const KvCache* kvs = mem_->kv_swa(); kvs && std::min(c.n, params_.n_ubatch) > kvs->n_free()) {
    return Status(StatusCode::kResourceExhausted,
                  "no KV slot: the sliding-window cache has " + std::to_string(kvs->n_free()) + " free cells");
  }
  LOOM_RETURN_IF_ERROR(prepare_kv());
  const int64_t t0 = params_.no_perf ? 0 : now_us();
  LOOM_RETURN_IF_ERROR(run_ubatches(batch, c, /*encoding=*/false));
  if (!params_.no_perf) {
    const int64_t dt = now_us() - t0;
    if (c.n > 1) {
      perf_.n_prompt_tokens += c.n;
      perf_.t_prompt_us += dt;
    } else {
      perf_.n_gen_tokens += 1;
      perf_.t_gen_us += dt;
    }
  }
  return Status::ok();
}

Status Context::encode(const Batch& batch) {
  KvCache* kv = enc_kv_ ? enc_kv_.get() : mem_->kv();
  if (!kv || mem_->rs()) {
    return unsupported("encode: " + model_->hparams().arch_name +
                       " is a decoder with recurrent layers, without an encoder (use decode)");
  }
  Checked c;
  LOOM_RETURN_IF_ERROR(validate(batch, /*encoding=*/true, &c));
  if (c.n > kv->size() - kv->used()) return Status(StatusCode::kResourceExhausted, "no KV slot for the encoder batch");
  if (kv == mem_->kv()) LOOM_RETURN_IF_ERROR(prepare_kv());
  const int64_t t0 = params_.no_perf ? 0 : now_us();
  Status st = run_ubatches(batch, c, /*encoding=*/true);
  // The encoder's cells are scratch: the cache is left as it was.
  kv->release_cells(std::span<const int32_t>(cells_.data(), size_t(c.n)));
  LOOM_RETURN_IF_ERROR(st);
  if (model_->hparams().arch == Arch::kT5) {
    // Keep the output (every token is an output here) for the decoder of its sequences, as the
    // cross K/V of every decoder layer, computed once instead of at every decode step.
    for (int i = 0; i < c.n; ++i) {
      model::EncoderState::SeqSet& set = cross_seqs_[size_t(i)];
      set.reset();
      if (batch.seq_ids.empty()) set.set(0);
      else
        for (int32_t sid : batch.seq_ids[size_t(i)]) set.set(size_t(sid));
    }
    pool_->set_active(c.n > 1 ? params_.n_threads_batch : params_.n_threads);
    LOOM_RETURN_IF_ERROR(enc_.store(*model_, embd_.data(),
                                    std::span<const model::EncoderState::SeqSet>(cross_seqs_.data(), size_t(c.n)),
                                    params_.type_k, scratch_, *pool_));
  }
  if (!params_.no_perf) {
    perf_.n_prompt_tokens += c.n;
    perf_.t_prompt_us += now_us() - t0;
  }
  return Status::ok();
}

// The recurrent part: sequences in order of first appearance, their rows grouped (a counting sort),
// each with the row it continues from and a fresh row to write. Fails (taking nothing) when the
// part has too few free state rows.
Status Context::plan_recurrent(RecurrentCache& rs, int n, std::span<RecurrentCache::SeqPlan>* plans) {
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
  *plans = std::span<RecurrentCache::SeqPlan>(rs_plans_.data(), size_t(n_seqs));
  n_plans_ = n_seqs;
  if (rs.cells_needed(*plans) > rs.size() - rs.used()) {
    return Status(StatusCode::kResourceExhausted,
                  "no recurrent state cell: " + std::to_string(rs.size()) + " states are held (n_seq_states)");
  }
  rs.plan(*plans);
  return Status::ok();
}

namespace {

// Puts m tokens (batch rows `rows`, positions `pos`) into `cells` of a KV part with their sequences.
void occupy_cells(KvCache& part, const Batch& batch, int m, const int32_t* rows, const int32_t* pos, const int32_t* cells) {
  static constexpr int32_t kSeqZero = 0;
  for (int t = 0; t < m; ++t) {
    if (batch.seq_ids.empty()) part.occupy(cells[t], pos[t], std::span<const int32_t>(&kSeqZero, 1));
    else part.occupy(cells[t], pos[t], batch.seq_ids[size_t(rows[t])]);
  }
}

}  // namespace

void Context::build_encoder_mask(const Batch& batch, const Ubatch& ub, model::ForwardBatch* fb) {
  // The T5 encoder attends within its batch only, as the reference's (which has no cache there):
  // the columns are the batch's own cells, a token seeing those that hold its first sequence; a
  // decoder's cells of the same sequence stay out of view.
  const int m = ub.m;
  const int first = ub.rows[0];
  for (int col = 0; col < m; ++col) {
    attn_.col_cells[size_t(col)] = ub.cells[col];
    attn_.col_pos[size_t(col)] = ub.pos[col];
  }
  for (int t = 0; t < m; ++t) {
    const int32_t s = ub.seq[t];
    for (int col = 0; col < m; ++col) {
      bool in = batch.seq_ids.empty() ? s == 0 : false;
      if (!batch.seq_ids.empty()) {
        for (int32_t sid : batch.seq_ids[size_t(first + col)]) in = in || sid == s;
      }
      attn_.mask[size_t(t) * size_t(m) + size_t(col)] = in ? 0.0f : -INFINITY;
    }
  }
  fb->attn.n_kv = m;
  fb->attn.kv_cells = attn_.col_cells.data();
  fb->attn.kv_pos = attn_.col_pos.data();
  fb->encoder = true;
}

model::CrossAttentionView Context::build_cross_attention(const Batch& batch, const Ubatch& ub) {
  // Token t sees the encoder rows of its sequences (llama.cpp's cross mask).
  for (int t = 0; t < ub.m; ++t) {
    model::EncoderState::SeqSet& set = cross_seqs_[size_t(t)];
    set.reset();
    if (batch.seq_ids.empty()) set.set(0);
    else
      for (int32_t sid : batch.seq_ids[size_t(ub.rows[t])]) set.set(size_t(sid));
  }
  const size_t need = size_t(ub.m) * size_t(enc_.n_rows());
  if (cross_mask_.size() < need) cross_mask_.resize(need);
  return enc_.view(std::span<const model::EncoderState::SeqSet>(cross_seqs_.data(), size_t(ub.m)), cross_mask_.data());
}

int Context::mark_outputs(const Ubatch& ub, int stored) {
  // Outputs are stored in micro-batch order (batch order unless the split regrouped rows).
  int m_out = 0;
  for (int t = 0; t < ub.m; ++t) {
    const int i = ub.rows[t];
    if (output_of_row_[size_t(i)] >= 0) {
      out_store_[size_t(i)] = stored + m_out;
      out_rows_[size_t(m_out++)] = t;
    }
  }
  return m_out;
}

void Context::reorder_outputs(int n, int n_out, float* out_base, size_t out_row) {
  // Put outputs stored in micro-batch order into batch order.
  bool in_order = true;
  for (int i = 0; i < n; ++i) {
    const int o = output_of_row_[size_t(i)];
    if (o < 0) continue;
    in_order = in_order && out_store_[size_t(i)] == o;
    perm_dest_[size_t(out_store_[size_t(i)])] = o;
  }
  if (!in_order) permute_rows(out_base, out_row, perm_dest_.data(), n_out, perm_done_.data(), perm_tmp_.data());
}

Status Context::attach_memory(const Batch& batch, const Ubatch& ub, MemoryParts& parts, model::ForwardBatch* fb,
                              model::CrossAttentionView* cross) {
  const int m = ub.m;
  if (KvCache* kv = parts.kv) {
    occupy_cells(*kv, batch, m, ub.rows, ub.pos, ub.cells);
    build_attn(*kv, ub, ub.cells, parts.mp, attn_, &fb->attn);
  }
  if (KvCache* kvs = parts.kvs) {
    // The window cache: cells for this micro-batch now (reusing those out of every window).
    int32_t* wc = swa_cells_.data() + parts.swa_taken;
    if (!kvs->find_slot(m, wc)) return Status(StatusCode::kResourceExhausted, "no KV slot in the sliding-window cache");
    occupy_cells(*kvs, batch, m, ub.rows, ub.pos, wc);
    parts.swa_taken += m;
    build_attn(*kvs, ub, wc, parts.mp_swa, attn_swa_, &fb->attn_swa);
  } else if (!attn_swa_.mask.empty() && parts.kv) {
    build_attn(*parts.kv, ub, ub.cells, parts.mp_swa, attn_swa_, &fb->attn_swa);
  }
  if (parts.rs) {
    fb->rs = &parts.rs->view();
    fb->n_seq_runs = ub.n_runs;
    fb->seq_start = ub_start_.data();
    fb->state_src = ub_src_.data();
    fb->state_dst = ub_dst_.data();
  }
  const ModelHparams& hp = model_->hparams();
  const bool t5_decoder = hp.arch == Arch::kT5 && !parts.encoding;
  if (hp.is_t5() && parts.encoding) build_encoder_mask(batch, ub, fb);
  else if (hp.is_t5()) fb->encoder = !t5_decoder;  // an encoder-only T5 decodes as an encoder
  if (t5_decoder) {
    *cross = build_cross_attention(batch, ub);
    fb->cross = cross;
  }
  return Status::ok();
}

Status Context::run_ubatches(const Batch& batch, const Checked& c, bool encoding) {
  const int n = c.n;
  const bool embd_out = params_.embeddings || encoding;
  const bool pooled = embd_out && params_.pooling != Pooling::kNone;
  // An encode attends over its own F32 cells; a decode over the memory's parts.
  MemoryParts parts;
  parts.encoding = encoding;
  parts.kv = encoding && enc_kv_ ? enc_kv_.get() : mem_->kv();
  parts.kvs = encoding ? nullptr : mem_->kv_swa();
  parts.rs = encoding ? nullptr : mem_->rs();
  parts.mp.causal = causal_ && !encoding;
  if (swa_all_layers_) parts.mp.swa_window = params_.n_swa;  // every layer slides: one mask
  // The window layers' mask: over their own cache, or the full one (swa_full).
  parts.mp_swa = parts.mp;
  parts.mp_swa.swa_window = params_.n_swa;
  // A T5 encode keeps every token's output (the decoder attends to all of them).
  const int n_out = assign_outputs(batch, n, pooled || (encoding && model_->hparams().arch == Arch::kT5));
  n_outputs_ = 0;  // outputs of a failed call are not readable
  std::fill(pooled_valid_.begin(), pooled_valid_.end(), 0);

  // The full KV part's cells are all chosen up front (so the call fails before computing anything
  // when the cache is full); each micro-batch occupies its own only when it runs, as a
  // sequential decode would. Every cell taken is recorded so a failure can give them back.
  if (parts.kv && !parts.kv->find_slot(n, cells_.data())) {
    return Status(StatusCode::kResourceExhausted, "no KV slot for the batch");
  }
  auto give_back = [&](Status st) {
    if (parts.kv) parts.kv->release_cells(std::span<const int32_t>(cells_.data(), size_t(n)));
    if (parts.kvs) parts.kvs->release_cells(std::span<const int32_t>(swa_cells_.data(), size_t(parts.swa_taken)));
    return st;
  };
  std::span<RecurrentCache::SeqPlan> plans;
  if (parts.rs) {
    if (Status st = plan_recurrent(*parts.rs, n, &plans); !st) return give_back(st);
  }

  const size_t out_row = embd_out ? size_t(n_embd()) : size_t(n_vocab());
  float* const out_base = embd_out ? embd_.data() : logits_.data();
  int stored = 0;
  model::ForwardConfig cfg = fwd_;
  Ubatch ub;
  for (int done = 0; next_ubatch(batch, c, encoding, done, &ub) > 0; done += ub.m) {
    model::ForwardBatch fb;
    fb.n_tokens = ub.m;
    fb.tokens = ub.tokens;
    fb.embd = ub.embd;
    fb.pos = ub.pos;
    model::CrossAttentionView cross;
    if (Status st = attach_memory(batch, ub, parts, &fb, &cross); !st) return give_back(st);
    const int m_out = mark_outputs(ub, stored);
    fb.n_outputs = m_out;
    fb.output_rows = out_rows_.data();
    fb.logits = embd_out ? nullptr : out_base + size_t(stored) * out_row;
    fb.hidden = embd_out ? out_base + size_t(stored) * out_row : nullptr;
    cfg.n_threads = ub.m > 1 ? params_.n_threads_batch : params_.n_threads;
    Status st = forward(*model_, fb, scratch_, *pool_, cfg);
    if (!st) return give_back(st);
    stored += m_out;
  }

  reorder_outputs(n, n_out, out_base, out_row);
  if (parts.rs) parts.rs->commit(plans);
  n_outputs_ = n_out;
  last_batch_size_ = n;
  last_was_embd_ = embd_out;
  if (pooled) pool_outputs(c);
  return Status::ok();
}

}  // namespace loom::context
