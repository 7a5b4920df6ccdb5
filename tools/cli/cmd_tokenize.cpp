// loom tokenize -m MODEL -p TEXT [--no-bos] [--parse-special] [--json]
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "commands.h"

namespace loom::cli {

void register_tokenize(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string model, prompt;
    bool no_bos = false, parse_special = false, json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("tokenize", "Print the token ids of a text");
  sub->add_option("-m,--model", o->model, "GGUF model file")->required();
  sub->add_option("-p,--prompt", o->prompt, "text to tokenize")->required();
  sub->add_flag("--no-bos", o->no_bos, "do not add BOS/EOS as the model's metadata says");
  sub->add_flag("--parse-special", o->parse_special, "treat special-token text (e.g. <s>) as special tokens");
  sub->add_flag("--json", o->json, "print one JSON object");
  sub->callback([o, &exit_code] {
    auto model = load_model_or_report(o->model, /*vocab_only=*/true);
    if (!model) {
      exit_code = 1;
      return;
    }
    auto tokenized = model->tokenize(o->prompt, !o->no_bos, o->parse_special);
    if (!tokenized) {
      exit_code = fail(tokenized.status());
      return;
    }
    const std::vector<api::Token>& ids = *tokenized;
    if (o->json) {
      nlohmann::json j;
      j["ids"] = ids;
      std::vector<std::string> pieces;
      for (int32_t id : ids) pieces.push_back(model->piece(id, true));
      j["pieces"] = pieces;
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      for (int32_t id : ids) {
        std::printf("%6d -> '%s'\n", id, model->piece(id, true).c_str());
      }
    }
    exit_code = 0;
  });
}

}  // namespace loom::cli
