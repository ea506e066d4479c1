// The registry: a variant declared once (decl + factory) lands in its kind whatever the order of
// static initialisation, every declared CPU variant is built, and mistakes are refused.
#include <gtest/gtest.h>

#include <stdexcept>

#include "core/registry.h"

namespace ib {
namespace {

class Nothing : public Variant {
 public:
  void prepare(const Point&, BackendRuntime&, uint64_t) override {}
  Validation validate(BackendRuntime&) override { return {true, "none", 0, 0, ""}; }
  void run(BackendRuntime&) override {}
};

KindInfo bare_kind(const std::string& name) {
  KindInfo k;
  k.name = name;
  k.group = "test";
  return k;
}

TEST(Registry, VariantsRegisteredBeforeTheirKindKeepTheirOrder) {
  Registry r;
  r.add_variant("k", {"b", Backend::Cpu, "second letter", {}}, make_variant<Nothing>());
  r.add_variant("k", {"a", Backend::Cuda, "first letter", {"x"}}, VariantFactory{});
  EXPECT_EQ(r.problems().size(), 2u);  // no kind `k` yet
  r.add_kind(bare_kind("k"));
  r.add_variant("k", {"c", Backend::Cpu, "third", {}}, make_variant<Nothing>());
  EXPECT_TRUE(r.problems().empty());
  const KindInfo* k = r.kind("k");
  ASSERT_NE(k, nullptr);
  ASSERT_EQ(k->variants.size(), 3u);
  EXPECT_EQ(k->variants[0].name, "b");
  EXPECT_EQ(k->variants[1].name, "a");
  EXPECT_EQ(k->variants[1].uses, std::vector<std::string>{"x"});
  EXPECT_EQ(k->variants[2].name, "c");
  EXPECT_NE(r.make("k", "b"), nullptr);
  EXPECT_EQ(r.make("k", "a"), nullptr);  // declared, not built into this binary
  EXPECT_EQ(r.make("k", "zz"), nullptr);
}

// Static initialisers run file by file in an order the build decides (a unity build differs from
// the default one): the list is ordered by file, then line, not by that order.
TEST(Registry, AKindListsItsVariantsByFileThenLine) {
  Registry r;
  r.add_kind(bare_kind("k"));
  auto decl = [](const char* name, const char* file, int line) {
    VariantDecl d{name, Backend::Cpu, "", {}};
    d.file = file;
    d.line = line;
    return d;
  };
  r.add_variant("k", decl("torch", "lib/attention/torch_peer.cpp", 10), make_variant<Nothing>());
  r.add_variant("k", decl("flash", "lib/attention/cpu_attention.cpp", 30), make_variant<Nothing>());
  r.add_variant("k", decl("list_1", "lib/attention/cuda_attention.cpp", 5), make_variant<Nothing>());
  r.add_variant("k", decl("list_2", "lib/attention/cuda_attention.cpp", 5), make_variant<Nothing>());
  r.add_variant("k", decl("standard", "lib/attention/cpu_attention.cpp", 20), make_variant<Nothing>());
  std::vector<std::string> names;
  for (const auto& v : r.kind("k")->variants) names.push_back(v.name);
  EXPECT_EQ(names, (std::vector<std::string>{"standard", "flash", "list_1", "list_2", "torch"}));
}

TEST(Registry, RefusesTwiceTheSameVariantAndAKindListingVariants) {
  Registry r;
  r.add_kind(bare_kind("k"));
  r.add_variant("k", {"a", Backend::Cpu, "", {}}, make_variant<Nothing>());
  EXPECT_THROW(r.add_variant("k", {"a", Backend::Cpu, "", {}}, make_variant<Nothing>()), std::logic_error);
  EXPECT_THROW(r.add_kind(bare_kind("k")), std::logic_error);
  KindInfo listed = bare_kind("other");
  listed.variants = {{"v", Backend::Cpu, "", {}}};
  EXPECT_THROW(r.add_kind(listed), std::logic_error);
}

TEST(Registry, MakeVariantPassesItsArgumentsToEveryObject) {
  struct Sized : Nothing {
    explicit Sized(int size) : n(size) {}
    int n;
  };
  VariantFactory f = make_variant<Sized>(7);
  auto a = f(), b = f();
  EXPECT_EQ(dynamic_cast<Sized&>(*a).n, 7);
  EXPECT_NE(a.get(), b.get());
}

// The binary's own registrations: every variant's kind exists, and every variant this binary
// can run is built (a CPU variant always; a CUDA one where the CUDA backend is; the torch peers,
// which run in python, in every build).
TEST(Registry, EveryDeclaredVariantOfThisBinaryIsBuilt) {
  const Registry& r = Registry::instance();
  EXPECT_EQ(r.problems(), std::vector<std::string>{});
  size_t variants = 0;
  for (const KindInfo* k : r.kinds()) {
    if (k->name == "unit-test") continue;  // its gpu_only is declared without a factory on purpose
    EXPECT_FALSE(k->variants.empty()) << k->name;
    for (const auto& v : k->variants) {
      ++variants;
#if INFER_BENCH_HAVE_CUDA
      const bool built = true;
#else
      const bool built = v.backend == Backend::Cpu;
#endif
      if (built) {
        EXPECT_NE(r.make(k->name, v.name), nullptr) << k->name << "/" << v.name;
      }
    }
  }
  EXPECT_GE(variants, 84u);  // what the binary declared when variants were first declared once
}

}  // namespace
}  // namespace ib
