// Experiment kinds (keys, doc, checks) and their variants (declaration and factory), each
// registered once, from static initialisers, by the file that implements it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/spec_key_values.h"
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
  // Another framework measured in its own process (torch, llama.cpp, XGrammar): its rows are
  // unsupported, saying why, where that framework is not installed.
  bool peer = false;
  // Where it was registered (VariantRegistration fills them in): a kind lists its variants by
  // source file, then by line, whatever order static initialisation ran them in.
  std::string file;
  int line = 0;
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
  // Rows count the bytes and FLOPs of the work they time (Variant::work), so a run of the kind
  // measures the backend's peaks first for the roofline columns. False for a kind whose rows time
  // something no peak bounds (an endpoint's answers, a scheduler's policy): a run of such kinds
  // only skips that measurement. The conformance test checks the flag against the rows.
  bool roofline = false;
  // Checks across keys, run at spec validation once every value is parsed: `values` holds each of
  // the kind's keys with its values (a constant as one value, an axis as all of them). Returns
  // the first problem (the error is "file:line:col: experiments[i].<key>: <message>", exit 2).
  std::function<std::optional<KeyProblem>(const SpecKeyValues& values)> check;
  // The kind's smallest point: spec keys (a YAML block, "key: value" lines) at which every variant
  // runs in a fraction of a second on the CPU. The conformance test (tests/unit/test_conformance.cpp)
  // runs every registered variant of every kind there, so a new variant is checked by registering it.
  std::string smallest;
};

using VariantFactory = std::function<std::unique_ptr<Variant>()>;

class Registry {
 public:
  static Registry& instance();

  void add_kind(KindInfo kind);
  void add_variant(const std::string& kind, VariantDecl decl, VariantFactory make);
  // What is wrong with the registrations (variants of kinds never registered), one line each;
  // empty when nothing is. A test asserts it empty.
  std::vector<std::string> problems() const;

  const KindInfo* kind(const std::string& name) const;
  std::vector<const KindInfo*> kinds() const;
  std::vector<std::string> kind_names() const;
  // nullptr when the variant is declared but not built into this binary (e.g. CUDA-only).
  std::unique_ptr<Variant> make(const std::string& kind, const std::string& name) const;

 private:
  std::map<std::string, KindInfo> kinds_;
  std::map<std::pair<std::string, std::string>, VariantFactory> factories_;
  // Variants registered before their kind (static initialisation runs file by file), in order.
  std::map<std::string, std::vector<VariantDecl>> pending_;
};

const VariantDecl* find_variant(const KindInfo& kind, const std::string& name);
// The role `name` plays in the kind's comparisons (VariantDecl::role; its own name if undeclared).
std::string variant_role(const KindInfo& kind, const std::string& name);
// Every role some variant of the kind plays, in declaration order.
std::vector<std::string> kind_roles(const KindInfo& kind);

// `decl` declared a peer (VariantDecl::peer).
inline VariantDecl peer(VariantDecl decl) {
  decl.peer = true;
  return decl;
}

// `kind` with its smallest point (KindInfo::smallest), for a kind built in one expression.
inline KindInfo with_smallest(KindInfo kind, std::string yaml) {
  kind.smallest = std::move(yaml);
  return kind;
}

// A kind: its keys, doc and checks. Its variants register themselves beside their code
// (VariantRegistration); a KindInfo registered with variants already in it is refused.
struct KindRegistration {
  explicit KindRegistration(KindInfo kind) { Registry::instance().add_kind(std::move(kind)); }
};

// A variant, declared once beside its code: what `list`, `keys`, the spec reader and the
// reference docs know of it (`decl`), and how to make one (`make`). `make` is empty where this
// binary lacks the variant's backend (IB_IF_CUDA): the variant is still declared, and its rows
// say it is not built into this binary. A kind lists its variants by the file that registers
// them (its path), then by line, then in the order of a list: the order in which static
// initialisers run across files differs between builds (a unity build links them otherwise).
struct VariantRegistration {
  VariantRegistration(const std::string& kind, VariantDecl decl, VariantFactory make, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
    decl.file = file;
    decl.line = line;
    Registry::instance().add_variant(kind, std::move(decl), std::move(make));
  }
};

// Variants made in a loop (one per policy, per cache kind): registered in the list's order.
struct DeclaredVariant {
  VariantDecl decl;
  VariantFactory make;
};
struct VariantListRegistration {
  VariantListRegistration(const std::string& kind, std::vector<DeclaredVariant> variants, const char* file = __builtin_FILE(),
                          int line = __builtin_LINE()) {
    for (auto& v : variants) {
      v.decl.file = file;
      v.decl.line = line;
      Registry::instance().add_variant(kind, std::move(v.decl), std::move(v.make));
    }
  }
};

// A factory that makes a T from copies of `args` (a variant differing from its siblings only by
// constructor arguments needs no class of its own).
template <class T, class... Args>
VariantFactory make_variant(Args... args) {
  return [=] { return std::unique_ptr<Variant>(new T(args...)); };
}

// The factory of a CUDA variant: the expression in a build with the CUDA backend, empty in a
// CPU-only one (where the variant's class, under #if INFER_BENCH_HAVE_CUDA, does not exist).
#if INFER_BENCH_HAVE_CUDA
#define IB_IF_CUDA(...) __VA_ARGS__
#else
#define IB_IF_CUDA(...) \
  ::ib::VariantFactory {}
#endif

}  // namespace ib
