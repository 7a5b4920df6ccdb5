// JSON schema -> GBNF grammar (the subset llama.cpp's json-schema-to-grammar supports, minus
// regex patterns). The grammar's root matches exactly the JSON texts the schema accepts, written
// with optional whitespace between tokens (at most 2 newlines and 20 blanks at a time).
//
// Supported: type (string, number, integer, boolean, null, object, array, or a list of them),
// enum, const, properties / required (other properties are optional, emitted in schema order;
// additionalProperties false unless given as true or a schema), arrays with items / prefixItems /
// minItems / maxItems, strings with minLength / maxLength / format (date, time, date-time, uuid),
// integers with minimum / maximum / exclusiveMinimum / exclusiveMaximum, numbers with minimum 0
// or with integer bounds >= 0, $ref to "#..." JSON pointers ($defs, definitions; recursion
// allowed), anyOf / oneOf (as alternatives), allOf of object schemas (merged). An empty schema
// or `true` accepts any JSON value.
//
// Anything else that constrains values (pattern, not, if/then/else, multipleOf, uniqueItems,
// patternProperties, remote $ref, ...) is refused with kUnsupported naming its JSON pointer.
// Annotations (title, description, default, examples, $schema, $id, $comment, ...) are ignored.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "base/status.h"

namespace loom::sample {

Expected<std::string> json_schema_to_grammar(const nlohmann::ordered_json& schema);
// Parses the schema text first (kInvalidArgument when it is not JSON).
Expected<std::string> json_schema_to_grammar(std::string_view schema_text);
inline Expected<std::string> json_schema_to_grammar(const std::string& schema_text) {
  return json_schema_to_grammar(std::string_view(schema_text));
}
inline Expected<std::string> json_schema_to_grammar(const char* schema_text) {
  return json_schema_to_grammar(std::string_view(schema_text));
}

}  // namespace loom::sample
