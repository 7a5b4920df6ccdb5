#include "jinja/template.h"

#include "jinja/ast.h"
#include "jinja/interpreter.h"

namespace loom::jinja {

Expected<Template> Template::parse(std::string_view source) {
  auto body = parse_template(source);
  if (!body) return body.status();
  Template t;
  t.body_ = std::move(body).value();
  return t;
}

Expected<std::string> Template::render(const nlohmann::ordered_json& context, const RenderOptions& opts) const {
  if (!body_) return invalid_argument("template was not parsed");
  if (!context.is_object() && !context.is_null()) return invalid_argument("template context must be a JSON object");
  ValueArena arena;  // outlives the interpreter: empties what reference counting cannot free
  Interpreter in(body_, opts);
  try {
    return in.render(Value::from_json(context));
  } catch (const TemplateError& e) {
    if (e.raised || in.current_line() == 0) return invalid_argument(e.message);
    return invalid_argument("template error at line " + std::to_string(in.current_line()) + ": " + e.message);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kResourceExhausted, "out of memory while rendering the template");
  } catch (const std::exception& e) {
    return internal_error(std::string("template error: ") + e.what());
  }
}

Expected<std::string> Template::render(const nlohmann::json& context, const RenderOptions& opts) const {
  nlohmann::ordered_json ordered;
  try {
    ordered = nlohmann::ordered_json::parse(context.dump());
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("template context: ") + e.what());
  }
  return render(ordered, opts);
}

}  // namespace loom::jinja
