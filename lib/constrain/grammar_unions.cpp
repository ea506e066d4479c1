#include "constrain/grammar_unions.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>

#include "constrain/grammar.h"
#include "constrain/grammar_lengths.h"

namespace ib::constrain {
namespace {

// The callee when `n` is exactly one call (re_call's five bytes), else -1.
int32_t only_call(const RegexNode& n) {
  if (n.kind != RegexNode::Kind::Concat || n.kids.size() != 5) return -1;
  return call_marker_at(n.kids, 0);
}

// Whether a body starts with a call rather than a byte at its top: one call, or an alternative
// with a call among its branches (what forwards a value to other rules).
bool forwards(const Re& body) {
  if (only_call(*body) >= 0) return true;
  if (body->kind != RegexNode::Kind::Alt) return false;
  return std::any_of(body->kids.begin(), body->kids.end(), [](const Re& k) { return only_call(*k) >= 0; });
}

class UnionWriter {
 public:
  explicit UnionWriter(CallUnions& g)
      : g_(g), originals_(g.bodies.size()), joins_(g.bodies.size(), 0), readable_(g.bodies.size(), 0) {
    RegexCallReader reader;
    for (size_t i = 0; i < originals_; ++i) {
      readable_[i] = reader.readable(g_.bodies[i]);
      joins_[i] = readable_[i] && !forwards(g_.bodies[i]);
    }
  }

  void run() {
    // The original bodies stay alive while rewriting: the memo is keyed by their nodes' addresses
    // (and union_of appends to g_.bodies).
    original_.assign(g_.bodies.begin(), g_.bodies.end());
    for (size_t i = 0; i < originals_; ++i) g_.bodies[i] = rewrite(original_[i]);
    // A union's members start with a byte at their top and its other alternatives hold no call,
    // so the union of their bodies holds no alternative of calls at its top: nothing to merge again.
    for (size_t u = originals_; u < g_.bodies.size(); ++u) {
      const Union& un = unions_by_id_[u - originals_];
      std::vector<Re> alts = un.extras, calls = un.extras;
      for (int32_t m : un.members) {
        alts.push_back(g_.bodies[static_cast<size_t>(m)]);
        calls.push_back(re_call(m));
      }
      g_.bodies[u] = re_alt(std::move(alts));
      g_.fallbacks[u] = re_alt(std::move(calls));
    }
  }

 private:
  struct Union {
    std::vector<int32_t> members;  // sorted
    std::vector<Re> extras;        // call-free alternatives, sorted by node
    bool operator<(const Union& o) const { return members != o.members ? members < o.members : extras < o.extras; }
  };

  // What a call of rule c stands for as union alternatives: c itself where it starts with a byte;
  // through a rule that only forwards (one call, or an alternative of calls and call-free
  // languages: a dependentSchemas or if/else split, a union of unions), the rules and languages it
  // forwards to. False where c forwards otherwise (or in a cycle, or past kMaxUnionMembers).
  bool leaves(int32_t c, Union& into, std::vector<int32_t>& path) {
    const auto cu = static_cast<size_t>(c);
    if (cu < g_.members.size() && cu >= originals_) {  // a union made already
      const Union& un = unions_by_id_[cu - originals_];
      into.members.insert(into.members.end(), un.members.begin(), un.members.end());
      into.extras.insert(into.extras.end(), un.extras.begin(), un.extras.end());
      return into.members.size() <= kMaxUnionMembers;
    }
    if (cu >= originals_) return false;
    if (joins_[cu]) {
      into.members.push_back(c);
      return into.members.size() <= kMaxUnionMembers;
    }
    if (!readable_[cu] || std::find(path.begin(), path.end(), c) != path.end()) return false;
    path.push_back(c);
    const Re& body = original_[cu];
    bool ok = true;
    if (const int32_t d = only_call(*body); d >= 0) {
      ok = leaves(d, into, path);
    } else if (body->kind == RegexNode::Kind::Alt) {
      for (size_t i = 0; i < body->kids.size() && ok; ++i) {
        const Re& k = body->kids[i];
        if (const int32_t e = only_call(*k); e >= 0)
          ok = leaves(e, into, path);
        else if (!k->non_text)
          into.extras.push_back(k);
        else
          ok = false;
      }
    } else {
      ok = false;
    }
    path.pop_back();
    return ok;
  }

  Re rewrite(const Re& n) {
    if (!n->non_text || n->kids.empty()) return n;  // no call below
    if (auto it = done_.find(n.get()); it != done_.end()) return it->second;
    std::vector<Re> kids;
    kids.reserve(n->kids.size());
    bool changed = false;
    for (const auto& k : n->kids) {
      kids.push_back(rewrite(k));
      changed = changed || kids.back() != k;
    }
    Re out = n;
    if (n->kind == RegexNode::Kind::Alt) {
      Union un;
      std::vector<Re> rest;
      for (const auto& k : kids) {
        const int32_t c = only_call(*k);
        Union from;
        std::vector<int32_t> path;
        if (c >= 0 && leaves(c, from, path)) {
          un.members.insert(un.members.end(), from.members.begin(), from.members.end());
          un.extras.insert(un.extras.end(), from.extras.begin(), from.extras.end());
        } else {
          rest.push_back(k);
        }
      }
      std::sort(un.members.begin(), un.members.end());
      un.members.erase(std::unique(un.members.begin(), un.members.end()), un.members.end());
      std::sort(un.extras.begin(), un.extras.end());
      un.extras.erase(std::unique(un.extras.begin(), un.extras.end()), un.extras.end());
      const bool worth = un.members.size() >= 2 && un.members.size() <= kMaxUnionMembers;
      const int32_t u = worth ? union_of(std::move(un)) : -1;
      if (u >= 0) {
        rest.push_back(re_call(u));
        out = re_alt(std::move(rest));
      } else if (changed) {
        out = re_alt(std::move(kids));
      }
    } else if (changed) {
      out = n->kind == RegexNode::Kind::Concat ? re_concat(std::move(kids)) : re_repeat(kids[0], n->min, n->max);
    }
    done_.emplace(n.get(), out);
    return out;
  }

  // The union rule of these members and alternatives, made on first use; -1 past the limits.
  int32_t union_of(Union un) {
    if (auto it = unions_.find(un); it != unions_.end()) return it->second;
    if (unions_.size() >= kMaxUnions || g_.bodies.size() >= static_cast<size_t>(kMaxGrammarRules)) return -1;
    const auto id = static_cast<int32_t>(g_.bodies.size());
    g_.bodies.push_back(re_never());  // written once every original body is rewritten
    std::string name = "either of";
    for (size_t i = 0; i < un.members.size() && name.size() < 200; ++i)
      name += (i ? " | " : " ") + g_.names[static_cast<size_t>(un.members[i])];
    g_.names.push_back(std::move(name));
    g_.members.resize(g_.bodies.size());
    g_.fallbacks.resize(g_.bodies.size());
    g_.members.back() = un.members;
    unions_by_id_.push_back(un);
    unions_.emplace(std::move(un), id);
    return id;
  }

  CallUnions& g_;
  const size_t originals_;
  std::vector<uint8_t> joins_, readable_;
  std::vector<Re> original_;
  std::unordered_map<const RegexNode*, Re> done_;
  std::map<Union, int32_t> unions_;
  std::vector<Union> unions_by_id_;
};

}  // namespace

CallUnions merge_call_unions(std::vector<Re> bodies, std::vector<std::string> names) {
  CallUnions g;
  names.resize(bodies.size());
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i].empty()) names[i] = "rule " + std::to_string(i);
  g.bodies = std::move(bodies);
  g.names = std::move(names);
  g.members.resize(g.bodies.size());
  g.fallbacks.resize(g.bodies.size());
  UnionWriter(g).run();
  return g;
}

}  // namespace ib::constrain
