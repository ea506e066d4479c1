// The constrain kinds' keys, each kind's declared once as a typed parameter set (core/params.h),
// from shared groups: the constraint's keys (the constraint, its vocabulary and how a schema
// compiles) and the python peers' (`python`, `peer_timeout`). A variant reads a point into its
// kind's struct; the keys a variant lists (its VariantDecl) are the ones it uses.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "constrain/constraint.h"
#include "core/params.h"
#include "core/registry.h"
#include "model/model.h"
#include "model/text_prompt.h"

namespace ib::constrain {

// constraint, vocab, whitespace, max_recursion, strict_properties, unique_items, fallback,
// schema_draft.
struct ConstraintKeys {
  std::string constraint, vocab;
  std::string whitespace = "compact";
  int64_t max_recursion = 3;
  bool strict_properties = true;
  std::string unique_items = "refuse", fallback = "refuse", schema_draft = "auto";

  // How the schema compiles (whitespace, recursion, properties, draft, the validator fallbacks).
  SchemaOptions schema_options() const;
  // A bundled schema or a file, not regex: or choice: (the grammar path and the peers take these only).
  bool is_schema() const;
};

// The xgrammar / llguidance peers' interpreter and time allowance.
struct PythonPeerKeys {
  std::string python = "python3";
  double peer_timeout = 120;
};

struct CompileKeys {  // constrain-compile
  ConstraintKeys constraint;
  PythonPeerKeys peer;
};
struct MaskKeys {  // constrain-mask
  ConstraintKeys constraint;
  int64_t documents = 8;
  PythonPeerKeys peer;
};
struct ValidityKeys {  // constrain-validity
  ConstraintKeys constraint;
  double epsilon = 0.01;
  int64_t retries = 3, documents = 50;
};
struct JumpForwardKeys {  // constrain-jump-forward
  ConstraintKeys constraint;
  int64_t documents = 20;
};
struct KeywordKeys {  // constrain-keywords
  std::string keyword;
  int64_t walks = 100;
};
struct OverheadKeys {  // constrain-overhead
  std::string model;
  double mask_density = 0.5;
};
struct RealworldKeys {  // constrain-realworld
  std::string source;
  bool strict_properties = false;
  std::string unique_items = "refuse", fallback = "refuse";
  double max_compile_seconds = 10;
  std::string vocab;
  int64_t mask_schemas = 16;
};
struct GenerateKeys {  // constrain-generate
  ConstraintKeys constraint;
  std::string model, weights;
  model::Matmul matmul = model::Matmul::Cublas;
  int64_t prompt = 8;
  model::TextPromptSource prompts;  // tokenized with `vocab`: its tokenizer is the constraint's
  int64_t max_tokens = 256;
  double temperature = 1;
  int64_t retries = 3, documents = 8;
};

const ParamSet<CompileKeys>& compile_keys();
const ParamSet<MaskKeys>& mask_keys();
const ParamSet<ValidityKeys>& validity_keys();
const ParamSet<JumpForwardKeys>& jump_forward_keys();
const ParamSet<KeywordKeys>& keyword_keys();
const ParamSet<OverheadKeys>& overhead_keys();
const ParamSet<RealworldKeys>& realworld_keys();
const ParamSet<GenerateKeys>& generate_keys();

// The keys our compile and mask variants read: their kind's but the peers' (an experiment of ours
// alone carries no python key).
std::vector<std::string> compile_reads();
std::vector<std::string> mask_reads();

// Spec-time check of the constraint keys (KindInfo::check of the kinds that have them): every
// constraint is found (a file, a bundled schema, regex: or choice:), parses, and compiles to a
// regex under each whitespace and max_recursion given (unsupported keywords are refused here,
// naming the JSON pointer); every vocab loads (cached for the run).
std::optional<KeyProblem> check_constraint_keys(const SpecKeyValues& values);

}  // namespace ib::constrain
