// loom template --template FILE.jinja --context FILE.json [--now UNIX_SECONDS]: renders a chat template and prints the
// result exactly (no newline added). The context is a JSON object whose key order is kept; a key
// that is absent is undefined while null is none.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "chat/template.h"
#include "commands.h"

namespace loom::cli {
namespace {

Expected<std::string> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error("cannot read " + path);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return io_error("error reading " + path);
  return s;
}

}  // namespace

void register_template(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string template_file;
    std::string context_file;
    int64_t now = -1;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("template", "Render a chat template (Jinja2) with a JSON context");
  sub->add_option("--template", o->template_file, "template file (.jinja)")->required();
  sub->add_option("--context", o->context_file, "JSON object: messages, tools, bos_token, add_generation_prompt, ...")
      ->required();
  sub->add_option("--now", o->now, "strftime_now() renders this instant (Unix seconds, UTC) instead of the clock")
      ->check(CLI::NonNegativeNumber);
  sub->callback([o, &exit_code] {
    auto source = read_all(o->template_file);
    if (!source) { exit_code = fail(source.status()); return; }
    auto context_text = read_all(o->context_file);
    if (!context_text) { exit_code = fail(context_text.status()); return; }
    nlohmann::ordered_json context;
    try {
      context = nlohmann::ordered_json::parse(*context_text);
    } catch (const nlohmann::json::exception& e) {
      exit_code = fail(invalid_argument(o->context_file + ": invalid JSON: " + e.what()));
      return;
    }
    if (!context.is_object()) {
      exit_code = fail(invalid_argument(o->context_file + ": the context must be a JSON object"));
      return;
    }
    auto tmpl = chat::Template::parse(*source);
    if (!tmpl) { exit_code = fail(Status(tmpl.status().code(), o->template_file + ": " + tmpl.status().message())); return; }
    chat::RenderOptions opts;
    if (o->now >= 0) opts.now_unix = o->now;
    auto out = tmpl->render(context, opts);
    if (!out) { exit_code = fail(out.status()); return; }
    std::fwrite(out->data(), 1, out->size(), stdout);
    std::fflush(stdout);
    exit_code = 0;
  });
}

}  // namespace loom::cli
