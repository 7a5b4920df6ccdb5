// The server's request parsing (tools/server/request.h): body -> request for
// /v1/chat/completions and /v1/completions (flags bit 0), and with flags bits 3-5 = 1..5
// /v1/embeddings, /v1/rerank, /tokenize (then tokenized), /detokenize (then detokenized),
// /apply-template (then rendered), with stories260K's vocabulary and either loom's ChatML
// template or Qwen 2.5's. Input: [flags] body. Any body gives a request or an HttpError
// with a 4xx status (501 for unsupported features); no other exception and no 500. A grammar
// the request produced (json_schema, response_format, tools) parses.
#include <memory>
#include <string>

#include "chat/chat_request.h"
#include "fuzz_util.h"
#include "json_fields.h"
#include "model/model.h"
#include "request.h"
#include "sample/grammar.h"

#include <fstream>
#include <sstream>

using namespace loom;

namespace {

struct Env {
  std::shared_ptr<const Model> model;
  std::unique_ptr<chat::ChatTemplate> chatml, qwen;
};
Env* g_env = nullptr;

void check_grammar(const std::string& gbnf) {
  if (gbnf.empty()) return;
  auto g = Grammar::parse(gbnf);
  if (!g && g.status().message().find("too large") == std::string::npos) {
    std::fprintf(stderr, "grammar:\n%s\nerror: %s\n", gbnf.c_str(), g.status().message().c_str());
    LOOM_FUZZ_CHECK(!"a request's generated grammar must parse");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_env = new Env;
  ModelLoadParams mp;
  mp.vocab_only = true;
  auto m = Model::load(fuzz::shared_file("models/stories260K.gguf"), mp);
  LOOM_FUZZ_CHECK(m.has_value());
  g_env->model = *m;
  auto chatml = chat::ChatTemplate::from_model(*g_env->model);
  LOOM_FUZZ_CHECK(chatml.has_value());
  g_env->chatml = std::make_unique<chat::ChatTemplate>(*chatml);
  std::ifstream f(fuzz::shared_file("golden/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
  std::stringstream ss;
  ss << f.rdbuf();
  auto qwen = chat::ChatTemplate::parse(ss.str(), "", "<|im_end|>");
  LOOM_FUZZ_CHECK(qwen.has_value());
  g_env->qwen = std::make_unique<chat::ChatTemplate>(*qwen);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const uint8_t flags = in.u8();
  const std::string_view body = in.rest();
  const server::RequestEnv env{*g_env->model, (flags & 2) ? *g_env->qwen : *g_env->chatml, (flags & 4) ? 16 : -1};
  try {
    const server::json j = server::parse_body(body);
    // A grammar given by the client is checked when the request is submitted; only the ones
    // made here (json_schema, response_format, tools) must always parse.
    const bool own_grammar = j.contains("grammar") && !j["grammar"].is_null();
    const Vocab& vocab = g_env->model->vocab();
    const int endpoint = (flags >> 3) & 7;
    if (endpoint == 1) {
      server::ParsedEmbeddings p = server::parse_embeddings_request(j, vocab);
      for (const auto& in : p.inputs)
        for (int32_t id : in) LOOM_FUZZ_CHECK(vocab.is_valid(id));
    } else if (endpoint == 2) {
      server::ParsedRerank p = server::parse_rerank_request(j, vocab);
      LOOM_FUZZ_CHECK(p.inputs.size() == p.texts.size() && p.top_n >= 1 && p.top_n <= int(p.inputs.size()));
    } else if (endpoint == 3) {
      const server::ParsedTokenize p = server::parse_tokenize_request(j);
      for (int32_t id : vocab.tokenize(p.content, p.add_special, p.parse_special)) LOOM_FUZZ_CHECK(vocab.is_valid(id));
    } else if (endpoint == 4) {
      const std::vector<int32_t> ids = server::parse_detokenize_request(j, vocab);
      LOOM_FUZZ_CHECK(vocab.detokenize(ids, false, true).has_value());
    } else if (endpoint == 5) {
      const chat::ChatInputs in = server::parse_apply_template_request(j);
      auto text = env.tmpl.render(in);
      if (!text) throw server::http_error(text.status());
    } else if (flags & 1) {
      server::ParsedCompletion p = server::parse_completion_request(j, env);
      LOOM_FUZZ_CHECK(!p.prompts.empty());
      if (!own_grammar) check_grammar(p.gen.sampling.grammar);
    } else {
      server::ParsedChat p = server::parse_chat_request(j, env);
      for (int32_t id : p.gen.prompt) LOOM_FUZZ_CHECK(g_env->model->vocab().is_valid(id));
      if (!own_grammar) check_grammar(p.gen.sampling.grammar);
    }
  } catch (const server::HttpError& e) {
    if (!((e.status >= 400 && e.status < 500) || e.status == 501)) {
      std::fprintf(stderr, "HTTP %d: %s\n", e.status, e.message.c_str());
      LOOM_FUZZ_CHECK(!"a request body must not cause a server error");
    }
    LOOM_FUZZ_CHECK(!e.message.empty());
  }
  return 0;
}
