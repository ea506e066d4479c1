// The JSON Schema drafts real schemas are written in, read as the compiler's one dialect.
//
// `$schema` at the root decides the draft (4, 6, 7, 2019-09, 2020-12); without it (or with a
// meta-schema URI of none of these) 2020-12, as the specification and the `jsonschema` package
// do. Each schema object is rewritten, shallowly, into 2020-12 spelling before it is compiled or
// validated (its subschemas are rewritten when they are visited in turn):
// - draft 4: `id` is an identifier; boolean exclusiveMinimum/exclusiveMaximum modify
//   minimum/maximum (true: the bound becomes exclusive);
// - drafts 4-7: `dependencies` splits into dependentRequired (arrays) and dependentSchemas
//   (schemas); `$ref` beside other keywords is alone (its siblings are ignored, as those drafts
//   say);
// - drafts 4-2019-09: array-form `items` is prefixItems, `additionalItems` the items after them
//   (ignored where `items` is one schema);
// - 2020-12: array-form `items` and boolean exclusive bounds have no meaning there (a validator
//   refuses such a schema), so they are read as the older drafts wrote them;
// - annotations (title, description, default, examples, $comment, deprecated, readOnly,
//   writeOnly, content*, identifiers and anchors, $defs/definitions) are dropped: they do not
//   constrain a document;
// - any other key that is not a keyword of the draft (x-*, vendor and renamed keys, `self`, a
//   keyword of a later draft) is ignored, as the specification says of unknown keywords, and
//   reported. Keywords the translation itself writes (prefixItems, dependentRequired,
//   dependentSchemas) are kept in every draft so that a rewritten object rewrites to itself.
// What remains are keywords of 2020-12 (and OpenAPI's `nullable`), for the compiler to compile or
// refuse; a keyword it does not support is never dropped here.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace ib::constrain {

enum class Draft { Draft4, Draft6, Draft7, Draft2019_09, Draft2020_12 };

// "4", "6", "7", "2019-09", "2020-12".
const char* draft_name(Draft d);
// The draft a root schema declares by `$schema`; 2020-12 when it declares none it knows.
// Throws std::runtime_error for draft 3 and older (different required/extends semantics).
Draft draft_of(const nlohmann::ordered_json& root);
// From its name ("4", "draft-07", "2020-12", ...); false when it is none of them.
bool parse_draft(const std::string& name, Draft* out);

// One schema object in 2020-12 spelling (see above). `ignored`, when given, gains each dropped key
// that was not an annotation (key -> how many times).
nlohmann::ordered_json to_2020_12(const nlohmann::ordered_json& schema, Draft draft,
                                  std::map<std::string, int>* ignored = nullptr);

// Whether a key is an annotation or an identifier in some draft (never reported as ignored).
bool is_annotation(const std::string& key);

}  // namespace ib::constrain
