// A grammar of regular rules that call one another (a recursive transition network, i.e. a
// pushdown automaton): what the JSON Schema compiler builds where one DFA cannot hold the
// structure (recursive $ref, values free at any depth, deep nesting). Each rule is a minimal DFA
// over bytes, as the whole-schema path builds, whose body may call other rules at value positions;
// the nesting lives in a stack instead of in states.
//
// A call is written into a rule body as marker bytes that no UTF-8 text holds (re_call), so the
// regex -> NFA -> minimal DFA pipeline compiles bodies unchanged; a rule's compile then takes the
// marker paths out of its DFA and keeps them as call edges (state, callee, return state).
//
// A parse position is a set of stacks (a rule body can be entered in more than one way: a value
// that is either of two objects is two calls on its first byte), each stack bottom first, the top
// frame the rule being read. A byte steps every stack's top frame; the closure then enters the
// calls the new states allow and returns from rules that accept.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "constrain/automaton.h"
#include "constrain/grammar_unions.h"
#include "constrain/lazy_slots.h"
#include "constrain/regex.h"

namespace ib::constrain {

// The marker of a call of `rule` (0 <= rule < kMaxGrammarRules) inside a rule body.
Re re_call(int32_t rule);
constexpr int32_t kMaxGrammarRules = 12 * 12 * 12 * 12;
// Whether a DFA compiled from a body still holds call markers.
bool dfa_holds_call(const Dfa& dfa);
// Whether a regex holds a call marker (a walk of its nodes, each once).
bool re_holds_call(const Re& re);
// Stacks deeper than this die (a document nested past it is refused: far deeper than any
// real-world instance, it keeps a stack's copies bounded).
constexpr size_t kMaxGrammarDepth = 512;

// The callee of the call marker that starts at kids[i] of a concatenation (re_concat flattens a
// call's five bytes into its parent), or -1 when none starts there. Inline for its common answer:
// a node of text bytes only starts no marker.
int32_t decode_call_marker(const std::vector<Re>& kids, size_t i);
inline int32_t call_marker_at(const std::vector<Re>& kids, size_t i) {
  return kids[i]->non_text ? decode_call_marker(kids, i) : -1;
}
// Whether byte b is one a call marker is written with (no UTF-8 text holds it).
bool is_call_marker_byte(uint8_t b);

struct GrammarRule {
  struct Call {
    int32_t rule;  // the callee
    int32_t ret;   // this rule's state once the callee has returned
  };
  Dfa dfa;                          // the body without its call markers
  std::vector<int32_t> call_begin;  // per state (+1): calls[call_begin[s] .. call_begin[s + 1])
  std::vector<Call> calls;
  // Whether a state can still finish the rule, through calls of productive rules too (the DFA's
  // own -1 is only "no path to acceptance through bytes or markers").
  std::vector<uint8_t> live;
  // Live, no calls and not accepting: a stack whose top steps into such a state needs no closure.
  std::vector<uint8_t> plain;
  // Whether a state takes some byte on the way to finishing the rule (a frame there stays in a
  // closed position).
  std::vector<uint8_t> reads;
  std::string name;  // the schema pointer the rule stands for
};

// The rules' bodies, and each rule's DFA compiled when a parse first enters it (rule()): a schema
// of hundreds of object rules costs at compile time only what its bodies' regexes tell without
// an automaton (which rules the start reaches, which can finish and in how few bytes), and a
// document pays for the rules it uses. The start rule, and a body whose regex hides calls (an
// automaton holding call markers), are compiled at once. Shared and const once built: rule() is
// safe from any thread. A rule compiled later runs under whatever CompileBudget its thread holds
// then (none in a generation loop).
struct Grammar {
  Grammar() = default;
  // Alternatives of calls in `bodies` become calls of union rules, appended (grammar_unions.h).
  Grammar(std::vector<Re> bodies, std::vector<std::string> names, int32_t start, const CompileLimits& limits);
  Grammar(Grammar&&) noexcept = default;
  Grammar& operator=(Grammar&&) noexcept = default;
  // A copy is the same grammar with none of its rules compiled yet.
  Grammar(const Grammar& o) : Grammar(CallUnions{o.bodies_, o.names_, o.members_, o.fallbacks_}, o.start, o.limits_) {}
  Grammar& operator=(const Grammar& o) { return *this = Grammar(o); }

  int32_t start = 0;
  // Rule i (its DFA compiled on first use). Throws RegexError past the compile limits, or where
  // its DFA calls a rule the grammar does not have.
  const GrammarRule& rule(int32_t i) const;
  size_t size() const { return bodies_.size(); }
  // Whether rule i's language holds a document (through productive calls).
  bool productive(int32_t i) const { return lengths_[static_cast<size_t>(i)] < kNoLength; }
  // The fewest bytes of rule i's documents (kNoLength: none).
  static constexpr int64_t kNoLength = kNoTextLength;
  int64_t min_length(int32_t i) const { return lengths_[static_cast<size_t>(i)]; }
  const std::vector<Re>& bodies() const { return bodies_; }
  // The rules union rule i stands for (empty when it is not one).
  const std::vector<int32_t>& members(int32_t i) const { return members_[static_cast<size_t>(i)]; }
  // Whether rule i's regex tells its calls and lengths (else it was compiled at construction).
  bool readable(int32_t i) const { return readable_[static_cast<size_t>(i)] != 0; }
  size_t reachable_rules() const { return reachable_; }  // the rules the start reaches
  size_t compiled_rules() const { return rules_.built(); }
  // Compiles every rule the start reaches (what an eager compile did); throws as rule() does.
  void compile_all() const;
  size_t states() const;  // of the rules compiled so far
  size_t table_bytes() const;

 private:
  Grammar(CallUnions rules, int32_t start, const CompileLimits& limits);
  GrammarRule compile_rule(int32_t i) const;
  GrammarRule compile_rule_body(const Re& body, size_t i, const CompileLimits& limits) const;
  std::vector<Re> bodies_;
  std::vector<std::string> names_;
  std::vector<std::vector<int32_t>> members_;
  std::vector<Re> fallbacks_;
  CompileLimits limits_;
  std::vector<uint8_t> readable_, reached_;
  std::vector<int64_t> lengths_;
  size_t reachable_ = 0;
  LazySlots<GrammarRule> rules_;
};

// The grammar of bodies[i] (with re_call markers) as rule i; `names` name the rules (may be
// empty). A start rule that cannot finish gives a grammar of no document (grammar_start is then
// empty), as a false schema's DFA. Limits apply to each rule's DFA when it is compiled.
Grammar build_grammar(const std::vector<Re>& bodies, const std::vector<std::string>& names, int32_t start,
                      const CompileLimits& limits = {});

struct GrammarFrame {
  int32_t rule, state;
  bool operator==(const GrammarFrame& o) const { return rule == o.rule && state == o.state; }
};
using GrammarStack = std::vector<GrammarFrame>;  // bottom first
using GrammarStacks = std::vector<GrammarStack>;

// The closure of a set of stacks: calls entered, accepting rules returned from (the bottom frame
// never returns), stacks that can neither take a byte nor end dropped. A rule is not entered again
// on the same closure path (left recursion without bytes adds no document to a JSON grammar).
void grammar_close(const Grammar& g, GrammarStacks& stacks);
// The stacks after byte b (closed); empty when b leaves every stack.
void grammar_step(const Grammar& g, const GrammarStacks& in, uint8_t b, GrammarStacks& out);
// Whether a stack has finished the start rule.
bool grammar_accepts(const Grammar& g, const GrammarStacks& stacks);
// The start position (closed; empty when the grammar has no document).
GrammarStacks grammar_start(const Grammar& g);
// Whether the whole of `text` is a document of the grammar.
bool grammar_matches(const Grammar& g, const std::string& text);
// Steps through `bytes`; false (and `stacks` empty) as soon as one leaves every stack.
bool grammar_walk(const Grammar& g, GrammarStacks& stacks, const std::string& bytes);

}  // namespace ib::constrain
