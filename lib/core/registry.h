// Experiment kinds (their keys and variants) and variant factories, registered by the files
// that implement them: adding a technique is one file plus one registration line.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/value.h"
#include "core/variant.h"

namespace ib {

struct VariantDecl {
  std::string name;
  Backend backend = Backend::Cpu;
  std::string doc;
  // The kind's keys this variant reads; empty = all. An experiment's points hold only the keys
  // some listed variant reads (values of the others are validated, then left out).
  std::vector<std::string> uses;
  // Host work (token masks, compilers): runs on the CPU, timed with steady_clock, whichever
  // backend the run uses. Declared with backend Cpu.
  bool host = false;
  // The part this variant plays in the chapter's comparison, the same on every backend: a book
  // row's `role:` names it, so the chapter's figures land on the CPU stand-in too. "" = the
  // default: a CPU variant `cpu_X` plays X where the kind declares an X, any other plays itself.
  std::string role;
};

// A problem found across keys at spec validation: the keys it involves, most to blame first (the
// error points at the first one the spec writes, else names the first), and what is wrong.
struct KeyProblem {
  std::vector<std::string> keys;
  std::string message;
};

struct KindInfo {
  std::string name;   // the spec's `kind:`
  std::string group;  // first part of NVTX ranges: the subcommand the kind belongs to
  std::string doc;
  std::vector<KeySpec> keys;
  std::vector<VariantDecl> variants;  // every variant of the kind, built in this binary or not
  // Rows also report `mem saving (×)`: the baseline's peak memory over the row's (both measured
  // by the tracker at the same point).
  bool memory_saving = false;
  // Checks across keys, run at spec validation once every value is parsed: `values` holds each of
  // the kind's keys with its values (a constant as one value, an axis as all of them). Returns
  // the first problem (the error is "file:line:col: experiments[i].<key>: <message>", exit 2).
  std::function<std::optional<KeyProblem>(const std::map<std::string, std::vector<Value>>& values)> check;
};

using VariantFactory = std::function<std::unique_ptr<Variant>()>;

class Registry {
 public:
  static Registry& instance();

  void add_kind(KindInfo kind);
  void add_variant(const std::string& kind, const std::string& name, VariantFactory make);

  const KindInfo* kind(const std::string& name) const;
  std::vector<const KindInfo*> kinds() const;
  std::vector<std::string> kind_names() const;
  // nullptr when the variant is declared but not built into this binary (e.g. CUDA-only).
  std::unique_ptr<Variant> make(const std::string& kind, const std::string& name) const;

 private:
  std::map<std::string, KindInfo> kinds_;
  std::map<std::pair<std::string, std::string>, VariantFactory> factories_;
};

const VariantDecl* find_variant(const KindInfo& kind, const std::string& name);
// The role `name` plays in the kind's comparisons (VariantDecl::role; its own name if undeclared).
std::string variant_role(const KindInfo& kind, const std::string& name);
// Every role some variant of the kind plays, in declaration order.
std::vector<std::string> kind_roles(const KindInfo& kind);

struct KindRegistration {
  explicit KindRegistration(KindInfo kind) { Registry::instance().add_kind(std::move(kind)); }
};
struct VariantRegistration {
  VariantRegistration(const std::string& kind, const std::string& name, VariantFactory make) {
    Registry::instance().add_variant(kind, name, std::move(make));
  }
};

#define IB_CONCAT_INNER(a, b) a##b
#define IB_CONCAT(a, b) IB_CONCAT_INNER(a, b)
// IB_REGISTER_VARIANT("ceiling", "copy", CudaCopy);
#define IB_REGISTER_VARIANT(kind, name, Type)                                                 \
  static const ::ib::VariantRegistration IB_CONCAT(ib_variant_registration_, __LINE__)( \
      kind, name, [] { return std::unique_ptr<::ib::Variant>(new Type()); })

}  // namespace ib
