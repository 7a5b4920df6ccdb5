// Context state: serialization of the memory (whole or one sequence), the last outputs and the
// caller's tokens, with a format loom controls: magic, version, model fingerprint, cache types
// and a checksum, so a wrong, truncated or corrupt state is refused before anything changes.
//
// Layout (little-endian), version 2:
//   "LOOMSTAT" u32 version u32 kind(1 whole, 2 sequence)
//   u64 model fingerprint, u32 type_k, u32 type_v, u32 n_layer (the model's),
//   u64 k_row_bytes, u64 v_row_bytes (one cell's K / V over every layer of every part)
//   u32 n_tokens, i32 tokens[n_tokens]
//   whole only: u32 batch_size, u32 n_outputs, u8 outputs_are_embeddings, i32 output_of_row[batch_size],
//               u64 n_floats, f32 outputs[n_floats]
//   u32 n_parts, per memory part (kv/memory.h):
//     u8 part (1 KV, 2 sliding-window KV, 3 recurrent), u32 n_layers, per layer: u32 layer,
//     u64 k_row_bytes, u64 v_row_bytes
//     u32 n_cells, per cell: i32 pos, i32 delta, [whole only: u32 n_seq, i32 seq[n_seq]]
//     per layer: K rows of the cells, then V rows
//   u64 FNV-1a checksum of all bytes before it
// A recurrent part stores conv states as "K" rows and SSM states as "V" rows, one cell per state
// with delta 0. Version 1 (one memory, no part list; n_layer and the row sizes of one layer) is
// read where the context's memory is one part over every layer, as version 1 wrote it.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>

#include "base/file_util.h"
#include "context/context.h"

namespace loom::context {
namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'S', 'T', 'A', 'T'};
constexpr uint32_t kVersion = 2;
constexpr uint32_t kKindWhole = 1, kKindSeq = 2;

uint64_t fnv1a(const uint8_t* p, size_t n, uint64_t h = 14695981039346656037ull) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

class Writer {
 public:
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    buf.insert(buf.end(), p, p + sizeof(T));
  }
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    buf.insert(buf.end(), b, b + n);
  }
  void finish() { put<uint64_t>(fnv1a(buf.data(), buf.size())); }
  std::vector<uint8_t> buf;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> d) : d_(d) {}
  template <typename T>
  Status get(T* v, const char* what) {
    LOOM_RETURN_IF_ERROR(need(sizeof(T), what));
    std::memcpy(v, d_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::ok();
  }
  Status view(const uint8_t** p, size_t n, const char* what) {
    LOOM_RETURN_IF_ERROR(need(n, what));
    *p = d_.data() + pos_;
    pos_ += n;
    return Status::ok();
  }
  size_t pos() const { return pos_; }
  size_t remaining() const { return d_.size() - pos_; }

 private:
  Status need(size_t n, const char* what) const {
    if (n > d_.size() - pos_) {
      return corrupt(std::string("state is truncated: ") + what + " at offset " + std::to_string(pos_) + " needs " +
                     std::to_string(n) + " bytes, " + std::to_string(d_.size() - pos_) + " remain");
    }
    return Status::ok();
  }
  std::span<const uint8_t> d_;
  size_t pos_ = 0;
};

// The parsed, checked content of a state buffer (views into it).
struct Parsed {
  uint32_t version = 0;
  uint32_t kind = 0;
  std::vector<int32_t> tokens;
  uint32_t batch_size = 0, n_outputs = 0;
  bool outputs_embd = false;
  const uint8_t* output_of_row = nullptr;  // i32[batch_size]
  uint64_t n_floats = 0;
  const uint8_t* floats = nullptr;
  struct Cell {
    int32_t pos, delta;
    std::bitset<kv::kMaxSeqs> seqs;
  };
  struct Part {
    int store = -1;  // index of the context's part it loads into
    std::vector<Cell> cells;
    const uint8_t* rows = nullptr;  // per layer: K rows then V rows
  };
  std::vector<Part> parts;
};

}  // namespace

uint64_t Context::fingerprint() const {
  const ModelHparams& hp = model_->hparams();
  uint64_t h = fnv1a(reinterpret_cast<const uint8_t*>(hp.arch_name.data()), hp.arch_name.size());
  const int64_t dims[] = {hp.n_vocab, hp.n_embd, hp.n_layer, hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_ff};
  h = fnv1a(reinterpret_cast<const uint8_t*>(dims), sizeof dims, h);
  for (const auto& t : model_->file().tensors()) {
    h = fnv1a(reinterpret_cast<const uint8_t*>(t.name.data()), t.name.size(), h);
    const uint32_t type = uint32_t(t.type);
    h = fnv1a(reinterpret_cast<const uint8_t*>(&type), 4, h);
    h = fnv1a(reinterpret_cast<const uint8_t*>(t.ne.data()), sizeof(t.ne), h);
  }
  return h;
}

namespace {

// One part of the memory as the state format sees it: its cells, and per layer one "K" and one
// "V" row per cell (a recurrent part: the conv and SSM states of the cell's row).
struct PartStore {
  uint8_t id = 0;  // 1 KV, 2 sliding-window KV, 3 recurrent
  KvCache* kv = nullptr;
  RecurrentCache* rs = nullptr;

  std::vector<int> layers() const { return rs ? rs->layers() : kv->stored_layers(); }
  uint64_t k_row_bytes(int il) const {
    return kv ? kv->view().layers[size_t(il)].k_row_bytes : uint64_t(rs->params().conv_row) * 4;
  }
  uint64_t v_row_bytes(int il) const {
    return kv ? kv->view().layers[size_t(il)].v_row_bytes : uint64_t(rs->params().ssm_row) * 4;
  }
  int size() const { return kv ? kv->size() : rs->size(); }
  bool empty(int c) const { return kv ? kv->cell(c).empty() : rs->cell(c).empty(); }
  kv::Pos pos(int c) const { return kv ? kv->cell(c).pos : rs->cell(c).pos; }
  kv::Pos delta(int c) const { return kv ? kv->cell(c).delta : 0; }
  const std::bitset<kv::kMaxSeqs>& seqs(int c) const { return kv ? kv->cell(c).seqs : rs->cell(c).seqs; }
  const uint8_t* k_row(int il, int c) const {
    return kv ? kv->k_row(il, c) : reinterpret_cast<const uint8_t*>(rs->conv_row(il, rs->cell(c).row));
  }
  const uint8_t* v_row(int il, int c) const {
    return kv ? kv->v_row(il, c) : reinterpret_cast<const uint8_t*>(rs->ssm_row(il, rs->cell(c).row));
  }
  uint8_t* k_row(int il, int c) { return const_cast<uint8_t*>(std::as_const(*this).k_row(il, c)); }
  uint8_t* v_row(int il, int c) { return const_cast<uint8_t*>(std::as_const(*this).v_row(il, c)); }
  // The cells a sequence's state consists of (a window cache: those inside its window).
  std::vector<int> seq_cells(int seq) const {
    std::vector<int> out;
    for (int c = 0; c < size(); ++c) {
      if (empty(c) || !seqs(c).test(size_t(seq))) continue;
      if (kv && kv->swa_window() > 0 && kv->seq_pos_max(seq) - pos(c) >= kv->swa_window()) continue;
      out.push_back(c);
    }
    return out;
  }
};

// What a state must match to be loaded, and where its rows live.
struct Store {
  TensorType type_k = TensorType::F32, type_v = TensorType::F32;
  int n_layer = 0;
  std::vector<PartStore> parts;

  static Store of(Memory& m, const ModelHparams& hp, uint8_t mask = kv::kPartsAll) {
    Store st;
    st.n_layer = int(hp.n_layer);
    if (m.kv() && (mask & kv::kPartKv)) st.parts.push_back({1, m.kv(), nullptr});
    if (m.kv_swa() && (mask & kv::kPartKvSwa)) st.parts.push_back({2, m.kv_swa(), nullptr});
    if (m.rs() && (mask & kv::kPartRecurrent)) st.parts.push_back({3, nullptr, m.rs()});
    if (m.kv()) {
      st.type_k = m.kv()->params().type_k;
      st.type_v = m.kv()->params().type_v;
    }
    return st;
  }
  uint64_t k_row_bytes() const {
    uint64_t n = 0;
    for (const PartStore& p : parts)
      for (int il : p.layers()) n += p.k_row_bytes(il);
    return n;
  }
  uint64_t v_row_bytes() const {
    uint64_t n = 0;
    for (const PartStore& p : parts)
      for (int il : p.layers()) n += p.v_row_bytes(il);
    return n;
  }
  // Version 1 wrote one memory over every layer with the row sizes of one layer.
  bool v1_compatible() const { return parts.size() == 1 && int(parts[0].layers().size()) == n_layer; }
};

void write_header(Writer& w, uint32_t kind, uint64_t fp, const Store& st, std::span<const int32_t> tokens) {
  w.bytes(kMagic, 8);
  w.put<uint32_t>(kVersion);
  w.put<uint32_t>(kind);
  w.put<uint64_t>(fp);
  w.put<uint32_t>(uint32_t(st.type_k));
  w.put<uint32_t>(uint32_t(st.type_v));
  w.put<uint32_t>(uint32_t(st.n_layer));
  w.put<uint64_t>(st.k_row_bytes());
  w.put<uint64_t>(st.v_row_bytes());
  w.put<uint32_t>(uint32_t(tokens.size()));
  w.bytes(tokens.data(), tokens.size() * sizeof(int32_t));
}

// One part: its header (id, layers and row sizes), its cells, their rows.
void write_part(Writer& w, const PartStore& p, const std::vector<int>& cells, bool with_seqs) {
  const std::vector<int> layers = p.layers();
  w.put<uint8_t>(p.id);
  w.put<uint32_t>(uint32_t(layers.size()));
  for (int il : layers) {
    w.put<uint32_t>(uint32_t(il));
    w.put<uint64_t>(p.k_row_bytes(il));
    w.put<uint64_t>(p.v_row_bytes(il));
  }
  w.put<uint32_t>(uint32_t(cells.size()));
  for (int c : cells) {
    w.put<int32_t>(p.pos(c));
    w.put<int32_t>(p.delta(c));
    if (with_seqs) {
      const std::bitset<kv::kMaxSeqs>& seqs = p.seqs(c);
      w.put<uint32_t>(uint32_t(seqs.count()));
      for (int s = 0; s < kv::kMaxSeqs; ++s) {
        if (seqs.test(size_t(s))) w.put<int32_t>(s);
      }
    }
  }
  for (int il : layers) {
    for (int c : cells) w.bytes(p.k_row(il, c), p.k_row_bytes(il));
    for (int c : cells) w.bytes(p.v_row(il, c), p.v_row_bytes(il));
  }
}

// Parses and checks the header (magic, version, kind, fingerprint, cache types, geometry) and the
// tokens. With `sum_end` the FNV checksum stored in the last 8 bytes of the whole buffer (of which
// r reads the part before the checksum) is verified after the kind, as a corrupt file's fields
// cannot be trusted; without it (peeking at a file's header) it is not.
Status parse_header(Reader& r, std::span<const uint8_t> data, bool verify_sum, uint32_t want_kind, uint64_t fp,
                    const Store& st, Parsed* out) {
  const uint8_t* magic = nullptr;
  LOOM_RETURN_IF_ERROR(r.view(&magic, 8, "magic"));
  if (std::memcmp(magic, kMagic, 8) != 0) return corrupt("not a loom state (bad magic)");
  uint32_t version = 0, kind = 0;
  LOOM_RETURN_IF_ERROR(r.get(&version, "version"));
  if (version != kVersion && version != 1) {
    return unsupported("state format version " + std::to_string(version) + " is not supported (expected " +
                       std::to_string(kVersion) + ")");
  }
  if (version == 1 && !st.v1_compatible()) {
    return unsupported("state format version 1 holds one memory over every layer; this context's memory has " +
                       std::to_string(st.parts.size()) + " parts (save the state again with this version)");
  }
  LOOM_RETURN_IF_ERROR(r.get(&kind, "kind"));
  if (kind != want_kind) {
    return invalid_argument(kind == kKindSeq ? "this is a sequence state; load it with the sequence functions"
                                             : "this is a whole-context state, not a sequence state");
  }
  if (verify_sum) {
    uint64_t stored_sum;
    std::memcpy(&stored_sum, data.data() + data.size() - 8, 8);
    if (fnv1a(data.data(), data.size() - 8) != stored_sum) return corrupt("state checksum mismatch (corrupt or truncated)");
  }
  out->version = version;
  out->kind = kind;
  uint64_t file_fp = 0, k_row = 0, v_row = 0;
  uint32_t type_k = 0, type_v = 0, n_layer = 0, n_tokens = 0;
  LOOM_RETURN_IF_ERROR(r.get(&file_fp, "fingerprint"));
  if (file_fp != fp) return invalid_argument("state was saved with a different model");
  LOOM_RETURN_IF_ERROR(r.get(&type_k, "type_k"));
  LOOM_RETURN_IF_ERROR(r.get(&type_v, "type_v"));
  LOOM_RETURN_IF_ERROR(r.get(&n_layer, "n_layer"));
  LOOM_RETURN_IF_ERROR(r.get(&k_row, "k_row_bytes"));
  LOOM_RETURN_IF_ERROR(r.get(&v_row, "v_row_bytes"));
  if (type_k != uint32_t(st.type_k) || type_v != uint32_t(st.type_v)) {
    return invalid_argument("state was saved with KV cache types " + std::string(tensor_type_name(TensorType(type_k))) +
                            "/" + std::string(tensor_type_name(TensorType(type_v))) + ", this context uses " +
                            std::string(tensor_type_name(st.type_k)) + "/" + std::string(tensor_type_name(st.type_v)));
  }
  // Version 2's row sizes are those of the parts it holds (a checkpoint holds some of them):
  // each part's own layout is checked where it is read.
  const PartStore* one = st.parts.empty() ? nullptr : &st.parts[0];
  const bool geometry = version == 1
                            ? n_layer == uint32_t(st.n_layer) && one && k_row == one->k_row_bytes(one->layers()[0]) &&
                                  v_row == one->v_row_bytes(one->layers()[0])
                            : n_layer == uint32_t(st.n_layer);
  if (!geometry) return corrupt("state KV geometry does not match this context");
  LOOM_RETURN_IF_ERROR(r.get(&n_tokens, "token count"));
  if (uint64_t(n_tokens) * 4 > r.remaining()) return corrupt("state token count runs past the end");
  const uint8_t* tok = nullptr;
  LOOM_RETURN_IF_ERROR(r.view(&tok, size_t(n_tokens) * 4, "tokens"));
  out->tokens.resize(n_tokens);
  if (n_tokens) std::memcpy(out->tokens.data(), tok, size_t(n_tokens) * 4);
  return Status::ok();
}

// One part's cells and rows (version 1: the only part, without a part header).
Status parse_part(Reader& r, const Store& st, uint32_t version, uint32_t kind, int n_seq_max, std::vector<bool>* seen,
                  Parsed::Part* out) {
  int store = 0;
  if (version >= 2) {
    uint8_t id = 0;
    uint32_t n_layers = 0;
    LOOM_RETURN_IF_ERROR(r.get(&id, "part kind"));
    store = -1;
    for (size_t i = 0; i < st.parts.size(); ++i) {
      if (st.parts[i].id == id) store = int(i);
    }
    static const char* kNames[] = {"?", "KV cache", "sliding-window KV cache", "recurrent state"};
    if (store < 0) {
      return invalid_argument(std::string("state holds a ") + kNames[id <= 3 ? id : 0] +
                              ", which this context's memory does not have (another kind of model or settings)");
    }
    if ((*seen)[size_t(store)]) return corrupt("state holds one memory part twice");
    (*seen)[size_t(store)] = true;
    const PartStore& ps = st.parts[size_t(store)];
    const std::vector<int> layers = ps.layers();
    LOOM_RETURN_IF_ERROR(r.get(&n_layers, "part layer count"));
    if (n_layers != layers.size()) return corrupt(std::string("state's ") + kNames[id] + " has another layer layout");
    for (int il : layers) {
      uint32_t layer = 0;
      uint64_t kr = 0, vr = 0;
      LOOM_RETURN_IF_ERROR(r.get(&layer, "part layer"));
      LOOM_RETURN_IF_ERROR(r.get(&kr, "part k_row_bytes"));
      LOOM_RETURN_IF_ERROR(r.get(&vr, "part v_row_bytes"));
      if (layer != uint32_t(il) || kr != ps.k_row_bytes(il) || vr != ps.v_row_bytes(il)) {
        return corrupt(std::string("state's ") + kNames[id] + " geometry does not match this context");
      }
    }
  }
  out->store = store;
  const PartStore& ps = st.parts[size_t(store)];
  uint32_t n_cells = 0;
  LOOM_RETURN_IF_ERROR(r.get(&n_cells, "cell count"));
  if (n_cells > uint32_t(ps.size())) {
    return invalid_argument("state holds " + std::to_string(n_cells) + " cells but the cache has only " +
                            std::to_string(ps.size()));
  }
  out->cells.resize(n_cells);
  for (auto& c : out->cells) {
    LOOM_RETURN_IF_ERROR(r.get(&c.pos, "cell position"));
    LOOM_RETURN_IF_ERROR(r.get(&c.delta, "cell delta"));
    if (c.pos < 0) return corrupt("state has a cell with a negative position");
    if (ps.rs && c.delta != 0) return corrupt("state has a pending position shift in a recurrent state");
    if (kind == kKindWhole) {
      uint32_t n_seq = 0;
      LOOM_RETURN_IF_ERROR(r.get(&n_seq, "cell sequence count"));
      if (n_seq == 0 || n_seq > uint32_t(kv::kMaxSeqs)) return corrupt("state cell has an invalid sequence count");
      for (uint32_t j = 0; j < n_seq; ++j) {
        int32_t s = 0;
        LOOM_RETURN_IF_ERROR(r.get(&s, "cell sequence id"));
        if (s < 0 || s >= n_seq_max) {
          return invalid_argument("state uses sequence id " + std::to_string(s) + ", outside this context's [0, " +
                                  std::to_string(n_seq_max) + ")");
        }
        c.seqs.set(size_t(s));
      }
    }
  }
  if (ps.rs) {
    // One state per sequence (the reference: "duplicate tail for seq_id").
    if (kind == kKindSeq && out->cells.size() > 1) {
      return corrupt("sequence state holds " + std::to_string(out->cells.size()) + " recurrent states");
    }
    std::bitset<kv::kMaxSeqs> seqs;
    for (const Parsed::Cell& c : out->cells) {
      if ((seqs & c.seqs).any()) return corrupt("state holds two recurrent states for one sequence");
      seqs |= c.seqs;
    }
  }
  uint64_t rows_bytes = 0;
  for (int il : ps.layers()) rows_bytes += uint64_t(n_cells) * (ps.k_row_bytes(il) + ps.v_row_bytes(il));
  if (rows_bytes > r.remaining()) return corrupt("state rows run past the end");
  return r.view(&out->rows, size_t(rows_bytes), "memory rows");
}

// Parses and checks everything; nothing is applied here.
Status parse_state(std::span<const uint8_t> data, uint32_t want_kind, uint64_t fp, const Store& st, int n_seq_max,
                   Parsed* out) {
  if (data.size() < 8 + 8) return corrupt("state is truncated (" + std::to_string(data.size()) + " bytes)");
  Reader r(data.first(data.size() - 8));
  LOOM_RETURN_IF_ERROR(parse_header(r, data, /*verify_sum=*/true, want_kind, fp, st, out));
  const uint32_t kind = out->kind;
  if (kind == kKindWhole) {
    uint8_t is_embd = 0;
    LOOM_RETURN_IF_ERROR(r.get(&out->batch_size, "batch size"));
    LOOM_RETURN_IF_ERROR(r.get(&out->n_outputs, "output count"));
    LOOM_RETURN_IF_ERROR(r.get(&is_embd, "output kind"));
    out->outputs_embd = is_embd != 0;
    if (uint64_t(out->batch_size) * 4 > r.remaining()) return corrupt("state batch size runs past the end");
    LOOM_RETURN_IF_ERROR(r.view(&out->output_of_row, size_t(out->batch_size) * 4, "output ids"));
    LOOM_RETURN_IF_ERROR(r.get(&out->n_floats, "output size"));
    if (out->n_floats > r.remaining() / 4) return corrupt("state outputs run past the end");
    LOOM_RETURN_IF_ERROR(r.view(&out->floats, size_t(out->n_floats) * 4, "outputs"));
  }
  uint32_t n_parts = 1;
  if (out->version >= 2) {
    LOOM_RETURN_IF_ERROR(r.get(&n_parts, "part count"));
    // A whole state holds every part; a sequence state may hold some (a checkpoint).
    if (kind == kKindWhole ? n_parts != st.parts.size() : (n_parts == 0 || n_parts > st.parts.size())) {
      return invalid_argument("state holds " + std::to_string(n_parts) + " memory parts, this context's memory has " +
                              std::to_string(st.parts.size()) + " (another kind of model or settings)");
    }
  }
  std::vector<bool> seen(st.parts.size(), false);
  out->parts.resize(n_parts);
  for (Parsed::Part& part : out->parts) {
    LOOM_RETURN_IF_ERROR(parse_part(r, st, out->version, kind, n_seq_max, &seen, &part));
  }
  if (r.remaining() != 0) return corrupt("state has " + std::to_string(r.remaining()) + " unexpected trailing bytes");
  return Status::ok();
}

void copy_rows_in(PartStore ps, const Parsed::Part& p, const std::vector<int>& dst_cells) {
  const size_t n = p.cells.size();
  const uint8_t* src = p.rows;
  for (int il : ps.layers()) {
    const size_t kr = ps.k_row_bytes(il), vr = ps.v_row_bytes(il);
    for (size_t i = 0; i < n; ++i, src += kr) std::memcpy(ps.k_row(il, dst_cells[i]), src, kr);
    for (size_t i = 0; i < n; ++i, src += vr) std::memcpy(ps.v_row(il, dst_cells[i]), src, vr);
  }
}

}  // namespace

std::vector<uint8_t> Context::state_save(std::span<const int32_t> tokens) const {
  const Store st = Store::of(*mem_, model_->hparams());
  Writer w;
  write_header(w, kKindWhole, fingerprint(), st, tokens);
  w.put<uint32_t>(uint32_t(last_batch_size_));
  w.put<uint32_t>(uint32_t(n_outputs_));
  w.put<uint8_t>(last_was_embd_ ? 1 : 0);
  w.bytes(output_of_row_.data(), size_t(last_batch_size_) * 4);
  const size_t row = size_t(last_was_embd_ ? n_embd() : n_vocab());
  const float* outs = last_was_embd_ ? embd_.data() : logits_.data();
  const uint64_t n_floats = n_outputs_ > 0 && outs ? uint64_t(n_outputs_) * row : 0;
  w.put<uint64_t>(n_floats);
  w.bytes(outs, size_t(n_floats) * 4);
  w.put<uint32_t>(uint32_t(st.parts.size()));
  for (const PartStore& ps : st.parts) {
    std::vector<int> cells;
    for (int c = 0; c < ps.size(); ++c) {
      if (!ps.empty(c)) cells.push_back(c);
    }
    write_part(w, ps, cells, /*with_seqs=*/true);
  }
  w.finish();
  return std::move(w.buf);
}

Status Context::state_load(std::span<const uint8_t> data, std::vector<int32_t>* tokens) {
  Store st = Store::of(*mem_, model_->hparams());
  Parsed p;
  LOOM_RETURN_IF_ERROR(parse_state(data, kKindWhole, fingerprint(), st, params_.n_seq_max, &p));
  const size_t row = size_t(p.outputs_embd ? n_embd() : n_vocab());
  if (p.batch_size > uint32_t(params_.n_batch)) return invalid_argument("state outputs exceed this context's n_batch");
  if (p.n_floats != uint64_t(p.n_outputs) * row) return corrupt("state output size does not match its output count");
  if (!p.outputs_embd && p.n_outputs > 0 && logits_.empty())
    return invalid_argument("state holds logits but this context has no logits buffer");
  for (uint32_t i = 0; i < p.batch_size; ++i) {
    int32_t o;
    std::memcpy(&o, p.output_of_row + size_t(i) * 4, 4);
    if (o < -1 || o >= int32_t(p.n_outputs)) return corrupt("state has an invalid output id " + std::to_string(o));
  }
  // Everything is checked: apply.
  kv_clear();
  for (const Parsed::Part& part : p.parts) {
    PartStore& ps = st.parts[size_t(part.store)];
    std::vector<int> dst(part.cells.size());
    for (size_t i = 0; i < part.cells.size(); ++i) {
      dst[i] = int(i);
      if (ps.rs) {
        ps.rs->restore_cell(int(i), part.cells[i].pos, part.cells[i].seqs);
        continue;
      }
      kv::KvCell cell;
      cell.pos = part.cells[i].pos;
      cell.delta = part.cells[i].delta;
      cell.seqs = part.cells[i].seqs;
      ps.kv->set_cell(int(i), cell);
    }
    copy_rows_in(ps, part, dst);
  }
  last_batch_size_ = int(p.batch_size);
  n_outputs_ = int(p.n_outputs);
  last_was_embd_ = p.outputs_embd;
  std::fill(output_of_row_.begin(), output_of_row_.end(), -1);
  if (p.batch_size) std::memcpy(output_of_row_.data(), p.output_of_row, size_t(p.batch_size) * 4);
  if (p.n_floats) std::memcpy(p.outputs_embd ? embd_.data() : logits_.data(), p.floats, size_t(p.n_floats) * 4);
  count_reused(int64_t(p.tokens.size()));
  if (tokens) *tokens = std::move(p.tokens);
  return Status::ok();
}

Expected<std::vector<uint8_t>> Context::seq_state_save(int seq, std::span<const int32_t> tokens, uint8_t parts) const {
  LOOM_RETURN_IF_ERROR(check_seq(seq, false));
  const Store st = Store::of(*mem_, model_->hparams(), parts);
  if (st.parts.empty()) return invalid_argument("seq_state_save: this memory has none of the parts asked for");
  Writer w;
  write_header(w, kKindSeq, fingerprint(), st, tokens);
  w.put<uint32_t>(uint32_t(st.parts.size()));
  for (const PartStore& ps : st.parts) write_part(w, ps, ps.seq_cells(seq), /*with_seqs=*/false);
  w.finish();
  return std::move(w.buf);
}

Status Context::seq_state_load(std::span<const uint8_t> data, int dst_seq, std::vector<int32_t>* tokens) {
  LOOM_RETURN_IF_ERROR(check_seq(dst_seq, false));
  Store st = Store::of(*mem_, model_->hparams());
  Parsed p;
  LOOM_RETURN_IF_ERROR(parse_state(data, kKindSeq, fingerprint(), st, params_.n_seq_max, &p));
  // Room in every KV part, counting the cells that replacing the destination's frees (a
  // recurrent part always has one: every other cell holds another sequence).
  for (const Parsed::Part& part : p.parts) {
    const PartStore& ps = st.parts[size_t(part.store)];
    if (!ps.kv) continue;
    int freed = 0;
    for (int c = 0; c < ps.kv->size(); ++c) {
      const kv::KvCell& cell = ps.kv->cell(c);
      if (!cell.empty() && cell.seqs.test(size_t(dst_seq)) && cell.seqs.count() == 1) ++freed;
    }
    const int need = int(part.cells.size());
    if (need > ps.kv->n_free() + freed) {
      return Status(StatusCode::kResourceExhausted,
                    "not enough free KV cells to restore " + std::to_string(need) + " cells");
    }
  }
  // The destination's own state is replaced in every part the state holds (the reference removes
  // it first); the other parts are left alone.
  uint8_t present = 0;
  for (const Parsed::Part& part : p.parts) {
    const uint8_t id = st.parts[size_t(part.store)].id;
    present |= id == 1 ? kv::kPartKv : id == 2 ? kv::kPartKvSwa : kv::kPartRecurrent;
  }
  (void)mem_->seq_rm(dst_seq, -1, -1, present);
  std::bitset<kv::kMaxSeqs> seqs;
  seqs.set(size_t(dst_seq));
  for (const Parsed::Part& part : p.parts) {
    PartStore& ps = st.parts[size_t(part.store)];
    if (part.cells.empty()) continue;
    if (ps.rs) {
      const std::vector<int> dst = {ps.rs->free_cell()};
      ps.rs->restore_cell(dst[0], part.cells[0].pos, seqs);
      copy_rows_in(ps, part, dst);
      continue;
    }
    const int need = int(part.cells.size());
    std::vector<int32_t> slot(static_cast<size_t>(need));
    if (!ps.kv->find_slot(need, slot.data())) return internal_error("KV slot vanished during restore");
    std::vector<int> dst(slot.begin(), slot.end());
    for (size_t i = 0; i < part.cells.size(); ++i) {
      const int32_t one = dst_seq;
      ps.kv->occupy(dst[i], part.cells[i].pos, std::span<const int32_t>(&one, 1));  // (frees a reused window cell)
      kv::KvCell cell = ps.kv->cell(dst[i]);
      cell.delta = part.cells[i].delta;
      ps.kv->set_cell(dst[i], cell);
    }
    copy_rows_in(ps, part, dst);
  }
  if (tokens) *tokens = std::move(p.tokens);
  return Status::ok();
}

Expected<std::vector<int32_t>> Context::seq_state_file_tokens(const std::string& path) const {
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error("cannot open state file " + path);
  // The header up to the token count is 56 bytes; then 4 bytes per token.
  std::vector<uint8_t> head(56);
  if (!f.read(reinterpret_cast<char*>(head.data()), std::streamsize(head.size()))) {
    return corrupt(path + ": state is truncated (no complete header)");
  }
  uint32_t n_tokens = 0;
  std::memcpy(&n_tokens, head.data() + 52, 4);
  f.seekg(0, std::ios::end);
  const uint64_t size = uint64_t(f.tellg());
  if (uint64_t(n_tokens) * 4 + 56 > size) return corrupt(path + ": state token count runs past the end");
  head.resize(56 + size_t(n_tokens) * 4);
  f.seekg(56);
  if (n_tokens && !f.read(reinterpret_cast<char*>(head.data() + 56), std::streamsize(n_tokens) * 4)) {
    return io_error("cannot read state file " + path);
  }
  Reader r(head);
  Parsed p;
  Status st = parse_header(r, head, /*verify_sum=*/false, kKindSeq, fingerprint(), Store::of(*mem_, model_->hparams()), &p);
  if (!st) return Status(st.code(), path + ": " + st.message());
  return std::move(p.tokens);
}

Status Context::state_save_file(const std::string& path, std::span<const int32_t> tokens) const {
  return write_file_atomic(path, state_save(tokens), "state file");
}

Status Context::state_load_file(const std::string& path, std::vector<int32_t>* tokens) {
  LOOM_ASSIGN_OR_RETURN(std::vector<uint8_t> data, read_file_bytes(path, "state file"));
  Status st = state_load(data, tokens);
  return st ? st : Status(st.code(), path + ": " + st.message());
}

Status Context::seq_state_save_file(const std::string& path, int seq, std::span<const int32_t> tokens) const {
  LOOM_ASSIGN_OR_RETURN(std::vector<uint8_t> data, seq_state_save(seq, tokens));
  return write_file_atomic(path, data, "state file");
}

Status Context::seq_state_load_file(const std::string& path, int dst_seq, std::vector<int32_t>* tokens) {
  LOOM_ASSIGN_OR_RETURN(std::vector<uint8_t> data, read_file_bytes(path, "state file"));
  Status st = seq_state_load(data, dst_seq, tokens);
  return st ? st : Status(st.code(), path + ": " + st.message());
}

}  // namespace loom::context
