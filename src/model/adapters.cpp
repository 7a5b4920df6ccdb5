#include "model/adapters.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "model/model.h"
#include "quant/quant.h"

namespace loom::model {
namespace {

const char* kLayerSuffix[kNumLayerWeights] = {"attn_q.weight",   "attn_k.weight", "attn_v.weight",  "attn_output.weight",
                                              "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"};

const TensorView* base_view(const Model& m, const std::string& name, int* layer, LayerWeight* kind) {
  const ModelWeights& w = m.weights();
  *layer = -1;
  if (name == "token_embd.weight") return &w.tok_embd;
  if (name == "output.weight") return w.tied_output ? nullptr : &w.output;
  if (name.rfind("blk.", 0) != 0) return nullptr;
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos) return nullptr;
  int il = 0;
  for (size_t i = 4; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9' || il > 100000) return nullptr;
    il = il * 10 + (name[i] - '0');
  }
  if (il >= int(w.layers.size())) return nullptr;
  const std::string rest = name.substr(dot + 1);
  const LayerWeights& l = w.layers[size_t(il)];
  const TensorView* views[kNumLayerWeights] = {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down};
  for (int k = 0; k < kNumLayerWeights; ++k) {
    if (rest == kLayerSuffix[k]) {
      *layer = il;
      *kind = LayerWeight(k);
      return views[k]->empty() ? nullptr : views[k];  // a hybrid's recurrent layer has no attention weights
    }
  }
  return nullptr;
}

TensorView view_of(const gguf::TensorInfo& t) {
  return TensorView{t.type, t.data, t.ne[0], t.ne[1], size_t(row_bytes(t.type, t.ne[0]))};
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Expected<std::shared_ptr<const LoraAdapter>> LoraAdapter::load(const std::string& path, const Model& model) {
  LOOM_ASSIGN_OR_RETURN(gguf::GgufFile file, gguf::GgufFile::open(path));
  auto a = from_gguf(std::move(file), model);
  if (!a) return Status(a.status().code(), path + ": " + a.status().message());
  const_cast<LoraAdapter&>(**a).path_ = path;
  return a;
}

Expected<std::shared_ptr<const LoraAdapter>> LoraAdapter::from_gguf(gguf::GgufFile file, const Model& model) {
  std::shared_ptr<LoraAdapter> ad(new LoraAdapter());
  ad->file_ = std::move(file);
  const gguf::GgufFile& f = ad->file_;
  LOOM_ASSIGN_OR_RETURN(std::string type, f.get_string_or("general.type", "adapter"));
  if (type != "adapter") return invalid_argument("not an adapter file (general.type = '" + type + "')");
  LOOM_ASSIGN_OR_RETURN(std::string atype, f.get_string_or("adapter.type", ""));
  if (atype != "lora") return invalid_argument("adapter.type is '" + atype + "', expected 'lora'");
  LOOM_ASSIGN_OR_RETURN(std::string arch, f.get_string_or("general.architecture", ""));
  if (arch != model.hparams().arch_name) {
    return invalid_argument("adapter is for architecture '" + arch + "' but the model is '" + model.hparams().arch_name +
                            "'");
  }
  if (f.has("adapter.alora_invocation_tokens")) return unsupported("activated LoRA (aLoRA) adapters are not supported");
  LOOM_ASSIGN_OR_RETURN(double alpha, f.get_float_or("adapter.lora.alpha", 0.0));
  ad->alpha_ = float(alpha);

  // Pair up X.lora_a / X.lora_b.
  std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>> pairs;
  for (const auto& t : f.tensors()) {
    if (ends_with(t.name, ".lora_a")) pairs[t.name.substr(0, t.name.size() - 7)].first = &t;
    else if (ends_with(t.name, ".lora_b")) pairs[t.name.substr(0, t.name.size() - 7)].second = &t;
    else if (ends_with(t.name, "_norm.weight")) continue;
    else return corrupt("unexpected tensor '" + t.name + "' in LoRA adapter");
  }
  if (pairs.empty()) return corrupt("LoRA adapter has no tensors");
  for (const auto& [name, ab] : pairs) {
    if (!ab.first || !ab.second) return corrupt("LoRA tensor '" + name + "' lacks its lora_a or lora_b half");
    const gguf::TensorInfo& a = *ab.first;
    const gguf::TensorInfo& b = *ab.second;
    for (const gguf::TensorInfo* t : {&a, &b}) {
      if (t->n_dims > 2 || !quant::is_supported(t->type)) {
        return corrupt("LoRA tensor '" + t->name + "' must be a 2-D matrix of a supported type");
      }
    }
    LoraTarget target;
    target.weight = name;
    const TensorView* base = base_view(model, name, &target.layer, &target.kind);
    if (!base) return corrupt("LoRA adapter targets '" + name + "', which the model does not have (or cannot adapt)");
    const int64_t n_in = base->cols, n_out = base->rows;
    target.rank = int(b.ne[0]);
    if (name == "token_embd.weight") {
      // A: ne [rank, n_vocab] (a row per token), B: ne [rank, n_embd].
      if (a.ne[0] != b.ne[0] || a.ne[1] != n_out || b.ne[1] != n_in) {
        return corrupt("LoRA tensors of token_embd.weight have mismatched shapes");
      }
    } else if (a.ne[0] != n_in || a.ne[1] != b.ne[0] || b.ne[1] != n_out) {
      return corrupt("LoRA tensors of '" + name + "' do not match the base weight's shape");
    }
    if (target.rank <= 0 || target.rank > 4096) return corrupt("LoRA rank of '" + name + "' is out of range");
    target.a = view_of(a);
    target.b = view_of(b);
    ad->targets_.push_back(target);
  }
  return std::shared_ptr<const LoraAdapter>(std::move(ad));
}

Expected<ControlVector> ControlVector::load(const std::string& path, float strength) {
  LOOM_ASSIGN_OR_RETURN(gguf::GgufFile file, gguf::GgufFile::open(path));
  auto cv = from_gguf(file, strength);
  if (!cv) return Status(cv.status().code(), path + ": " + cv.status().message());
  return cv;
}

Expected<ControlVector> ControlVector::from_gguf(const gguf::GgufFile& f, float strength) {
  ControlVector cv;
  int max_layer = 0;
  for (const auto& t : f.tensors()) {
    if (t.name.rfind("direction.", 0) != 0) continue;
    if (t.type != TensorType::F32 || t.n_dims != 1) return corrupt("control vector tensor '" + t.name + "' must be 1-D F32");
    const std::string num = t.name.substr(10);
    if (num.empty() || num.size() > 6 || num.find_first_not_of("0123456789") != std::string::npos) {
      return corrupt("control vector tensor '" + t.name + "' has no layer number");
    }
    const int layer = std::stoi(num);
    if (layer < 1) return corrupt("control vector layer numbers start at 1 ('" + t.name + "')");
    if (cv.n_embd == 0) cv.n_embd = int(t.ne[0]);
    if (t.ne[0] != cv.n_embd) return corrupt("control vector directions differ in length");
    max_layer = std::max(max_layer, layer);
  }
  if (cv.n_embd == 0) return corrupt("control vector file has no direction.<layer> tensors");
  cv.data.assign(size_t(max_layer) * size_t(cv.n_embd), 0.0f);
  for (const auto& t : f.tensors()) {
    if (t.name.rfind("direction.", 0) != 0) continue;
    const int layer = std::stoi(t.name.substr(10));
    float* dst = cv.data.data() + size_t(layer - 1) * size_t(cv.n_embd);
    std::memcpy(dst, t.data, sizeof(float) * size_t(cv.n_embd));
    for (int i = 0; i < cv.n_embd; ++i) dst[i] *= strength;
  }
  return cv;
}

Status ControlVector::add(const ControlVector& o) {
  if (n_embd == 0) {
    *this = o;
    return Status::ok();
  }
  if (o.n_embd != n_embd) return invalid_argument("control vectors have different n_embd");
  if (o.data.size() > data.size()) data.resize(o.data.size(), 0.0f);
  for (size_t i = 0; i < o.data.size(); ++i) data[i] += o.data[i];
  return Status::ok();
}

}  // namespace loom::model
