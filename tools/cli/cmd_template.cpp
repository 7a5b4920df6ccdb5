// loom template --template FILE.jinja --context FILE.json [--now UNIX_SECONDS] [--lenient]: renders a chat template and prints the
// result exactly (no newline added). The context is a JSON object whose key order is kept; a key
// that is absent is undefined while null is none.
#include <cstdio>

#include "commands.h"

namespace loom::cli {

void register_template(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string template_file;
    std::string context_file;
    int64_t now = -1;
    bool lenient = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("template", "Render a chat template (Jinja2) with a JSON context");
  sub->add_option("--template", o->template_file, "template file (.jinja)")->required();
  sub->add_option("--context", o->context_file, "JSON object: messages, tools, bos_token, add_generation_prompt, ...")
      ->required();
  sub->add_option("--now", o->now, "strftime_now() renders this instant (Unix seconds, UTC) instead of the clock")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag(
      "--lenient", o->lenient,
      "render as llama.cpp (and loom serve) where Python Jinja2 raises: undefined attributes, + undefined, none | filters");
  sub->callback([o, &exit_code] {
    std::string error;
    auto source = read_file(o->template_file, &error);
    if (!source) {
      exit_code = fail(error);
      return;
    }
    auto context = read_file(o->context_file, &error);
    if (!context) {
      exit_code = fail(error);
      return;
    }
    auto out = api::render_template(*source, *context, o->now, o->lenient);
    if (!out) {
      // Say which file is at fault: the context's JSON, or the template.
      const std::string msg = last_error();
      const bool context_fault = msg.find("the context") == 0;
      exit_code = fail((context_fault ? o->context_file : o->template_file) + ": " + msg);
      return;
    }
    std::fwrite(out->data(), 1, out->size(), stdout);
    std::fflush(stdout);
    exit_code = 0;
  });
}

}  // namespace loom::cli
