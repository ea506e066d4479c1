#include "core/registry.h"

#include <algorithm>
#include <stdexcept>

namespace ib {

Registry& Registry::instance() {
  static Registry r;
  return r;
}

void Registry::add_kind(KindInfo kind) {
  if (!kind.variants.empty())
    throw std::logic_error("experiment kind " + kind.name + " lists variants: they register themselves (VariantRegistration)");
  std::string name = kind.name;
  auto [it, fresh] = kinds_.emplace(name, std::move(kind));
  if (!fresh) throw std::logic_error("experiment kind registered twice: " + name);
  auto p = pending_.find(name);
  if (p != pending_.end()) {
    it->second.variants = std::move(p->second);
    pending_.erase(p);
  }
}

void Registry::add_variant(const std::string& kind, VariantDecl decl, VariantFactory make) {
  auto k = kinds_.find(kind);
  std::vector<VariantDecl>& list = k != kinds_.end() ? k->second.variants : pending_[kind];
  for (const auto& d : list)
    if (d.name == decl.name) throw std::logic_error("variant registered twice: " + kind + "/" + decl.name);
  if (make) factories_.emplace(std::make_pair(kind, decl.name), std::move(make));
  list.push_back(std::move(decl));
  // Stable: a list registered at one line keeps its order.
  std::stable_sort(list.begin(), list.end(), [](const VariantDecl& a, const VariantDecl& b) {
    return a.file != b.file ? a.file < b.file : a.line < b.line;
  });
}

std::vector<std::string> Registry::problems() const {
  std::vector<std::string> out;
  for (const auto& [kind, decls] : pending_)
    for (const auto& d : decls) out.push_back("variant " + kind + "/" + d.name + " of a kind never registered");
  return out;
}

const KindInfo* Registry::kind(const std::string& name) const {
  auto it = kinds_.find(name);
  return it == kinds_.end() ? nullptr : &it->second;
}

std::vector<const KindInfo*> Registry::kinds() const {
  std::vector<const KindInfo*> out;
  for (const auto& [name, k] : kinds_) out.push_back(&k);
  return out;
}

std::vector<std::string> Registry::kind_names() const {
  std::vector<std::string> out;
  for (const auto& [name, k] : kinds_) out.push_back(name);
  return out;
}

std::unique_ptr<Variant> Registry::make(const std::string& kind, const std::string& name) const {
  auto it = factories_.find({kind, name});
  return it == factories_.end() ? nullptr : it->second();
}

const VariantDecl* find_variant(const KindInfo& kind, const std::string& name) {
  for (const auto& v : kind.variants)
    if (v.name == name) return &v;
  return nullptr;
}

std::string variant_role(const KindInfo& kind, const std::string& name) {
  const VariantDecl* d = find_variant(kind, name);
  if (d && !d->role.empty()) return d->role;
  const std::string prefix = "cpu_";
  if (d && d->backend == Backend::Cpu && name.compare(0, prefix.size(), prefix) == 0) {
    const VariantDecl* twin = find_variant(kind, name.substr(prefix.size()));
    if (twin && twin->backend != Backend::Cpu) return twin->name;
  }
  return name;
}

std::vector<std::string> kind_roles(const KindInfo& kind) {
  std::vector<std::string> roles;
  for (const auto& v : kind.variants) {
    std::string r = variant_role(kind, v.name);
    if (std::find(roles.begin(), roles.end(), r) == roles.end()) roles.push_back(r);
  }
  return roles;
}

}  // namespace ib
