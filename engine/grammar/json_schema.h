// Grammars of JSON text: any JSON object (the OpenAI API's
// response_format {"type": "json_object"}), or the documents a JSON Schema
// accepts (response_format json_schema), for constrained decoding.
//
// The grammar may accept fewer documents than the schema, never more: every
// text it completes validates. It narrows where the full language would let a
// model wander: object properties come in the schema's order, at most
// kMaxWhitespace whitespace characters stand between tokens, integers have
// at most 16 digits, fractions 16 and exponents 2 (a double's range),
// strings escape only with \" \\ \/ \b \f \n \r \t and \u00XX, and
// properties the schema does not name are left out unless
// `additionalProperties` (alone) describes them.
//
// Supported keywords: type (a name or a list), enum, const, properties,
// required, additionalProperties, items, prefixItems, minItems, maxItems,
// minLength, maxLength, format (date, time, date-time, uuid), pattern
// (regex.h; alone, without format or lengths), minimum,
// maximum, exclusiveMinimum, exclusiveMaximum (exact for integers; for
// numbers whole bounds only, and no exponent then), anyOf, oneOf (generated
// as anyOf), allOf with one schema, $ref into the document ("#/$defs/...",
// "#/definitions/...", "#"; recursion allowed). Annotations (title,
// description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly, discriminator, strict) are ignored. Any other keyword
// is refused: InvalidArgument "unsupported JSON Schema keyword 'K' at PATH".
#ifndef KVCAST_ENGINE_GRAMMAR_JSON_SCHEMA_H_
#define KVCAST_ENGINE_GRAMMAR_JSON_SCHEMA_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "engine/grammar/grammar.h"
#include "nlohmann/json_fwd.hpp"

namespace kvcast::grammar {

inline constexpr int kMaxWhitespace = 20;

// Any JSON object (with any values inside).
absl::StatusOr<Grammar> JsonObjectGrammar();
// JSON texts valid under `schema`, between the literal `prefix` and
// `suffix`; InvalidArgument naming what is not supported, with its JSON
// pointer.
absl::StatusOr<Grammar> JsonSchemaGrammar(const nlohmann::ordered_json& schema,
                                          std::string_view prefix = "", std::string_view suffix = "");

}  // namespace kvcast::grammar

#endif  // KVCAST_ENGINE_GRAMMAR_JSON_SCHEMA_H_
