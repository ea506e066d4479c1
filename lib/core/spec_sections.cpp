// An experiment's optional sections, each a small language of its own: skip rules, plots, the
// summary's claim and checks, and the chapter's book figures.
#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/registry.h"
#include "core/spec_internal.h"

namespace ib::spec_detail {

std::vector<SkipRule> SpecParser::parse_skip(const Field& f, const KindInfo& kind) const {
  if (!f.node.IsSequence())
    throw spec_error(f.loc, f.path,
                     std::string("expected a list of rules like {variant: x, seq_len: 32K}, got ") + node_kind(f.node));
  std::vector<SkipRule> rules;
  for (size_t i = 0; i < f.node.size(); ++i) {
    const YAML::Node& r = f.node[i];
    std::string rp = f.path + fmt::format("[{}]", i);
    if (!r.IsMap() || r.size() == 0) throw spec_error(loc_of(r, file_), rp, "a skip rule is a non-empty map of key: value(s)");
    SkipRule rule;
    for (auto it = r.begin(); it != r.end(); ++it) {
      std::string k = it->first.Scalar();
      std::string kp = rp + "." + k;
      std::vector<YAML::Node> vals;
      if (it->second.IsSequence()) {
        if (it->second.size() == 0) throw spec_error(loc_of(it->second, file_), kp, "the list is empty");
        for (size_t j = 0; j < it->second.size(); ++j) vals.push_back(it->second[j]);
      } else {
        vals.push_back(it->second);
      }
      std::vector<Value> converted;
      if (k == "variant") {
        for (const auto& v : vals) {
          std::string name = scalar_text(v, kp);
          check_variant(kind, name, loc_of(v, file_), kp);
          converted.push_back(name);
        }
      } else {
        const KeySpec* ks = find_key(kind.keys, k);
        if (!ks) {
          std::vector<std::string> names = {"variant"};
          for (const auto& x : kind.keys) names.push_back(x.name);
          throw spec_error(loc_of(it->first, file_), kp, "unknown key '" + k + "' in a skip rule" + did_you_mean(k, names));
        }
        for (const auto& v : vals) converted.push_back(convert(v, *ks, loc_of(v, file_), kp));
      }
      rule.conditions.emplace_back(k, std::move(converted));
    }
    rules.push_back(std::move(rule));
  }
  return rules;
}

// plot: {x: seq, y: ms, ...} or a list of them (core/plot.h draws them).
std::vector<PlotSpec> SpecParser::parse_plots(const Field& f, const KindInfo& kind) const {
  std::vector<YAML::Node> maps;
  std::vector<std::string> paths;
  if (f.node.IsMap()) {
    maps.push_back(f.node);
    paths.push_back(f.path);
  } else if (f.node.IsSequence() && f.node.size() > 0) {
    for (size_t i = 0; i < f.node.size(); ++i) {
      maps.push_back(f.node[i]);
      paths.push_back(f.path + fmt::format("[{}]", i));
    }
  } else {
    throw spec_error(f.loc, f.path,
                     std::string("expected a map like {x: seq, y: ms} or a non-empty list of them, got ") + node_kind(f.node));
  }
  const std::vector<std::string> known = {"x", "y", "book", "log_x", "log_y", "title"};
  std::vector<PlotSpec> plots;
  for (size_t i = 0; i < maps.size(); ++i) {
    const YAML::Node& m = maps[i];
    if (!m.IsMap())
      throw spec_error(loc_of(m, file_), paths[i], std::string("expected a map like {x: seq, y: ms}, got ") + node_kind(m));
    PlotSpec p;
    bool has_x = false;
    for (auto it = m.begin(); it != m.end(); ++it) {
      const std::string k = it->first.Scalar();
      const std::string kp = paths[i] + "." + k;
      const SourceLoc vl = it->second.IsNull() ? loc_of(it->first, file_) : loc_of(it->second, file_);
      if (k == "x") {
        p.x = scalar_text(it->second, kp, vl);
        const KeySpec* ks = find_key(kind.keys, p.x);
        if (!ks) {
          std::vector<std::string> names;
          for (const auto& x : kind.keys) names.push_back(x.name);
          throw spec_error(vl, kp, "'" + p.x + "' is not a key of kind " + kind.name + did_you_mean(p.x, names));
        }
        if (ks->type != ParamType::Int && ks->type != ParamType::Float && ks->type != ParamType::Bytes &&
            ks->type != ParamType::Seconds)
          throw spec_error(
              vl, kp,
              "'" + p.x + "' is a " + to_string(ks->type) + " key: the x axis needs an integer, number, size or duration key");
        has_x = true;
      } else if (k == "y") {
        p.y.clear();
        for (const auto& v : string_list(Field{it->second, vl, kp})) {
          if (v.empty()) throw spec_error(vl, kp, "expected a name, got an empty text");
          if (std::find(p.y.begin(), p.y.end(), v) != p.y.end()) throw spec_error(vl, kp, "'" + v + "' is listed twice");
          p.y.push_back(v);
        }
      } else if (k == "book" || k == "title") {
        std::string v = scalar_text(it->second, kp, vl);
        if (v.empty() && k != "title") throw spec_error(vl, kp, "expected a name, got an empty text");
        (k == "book" ? p.book : p.title) = v;
      } else if (k == "log_x" || k == "log_y") {
        KeySpec b = key(k, ParamType::Bool, "");
        const bool v = std::get<bool>(convert(it->second, b, vl, kp));
        (k == "log_x" ? p.log_x : p.log_y) = v;
      } else {
        throw spec_error(loc_of(it->first, file_), kp, "unknown key '" + k + "' in plot" + did_you_mean(k, known));
      }
    }
    if (!has_x) throw spec_error(loc_of(m, file_), paths[i], "a plot needs x: the numeric parameter on the x axis");
    plots.push_back(std::move(p));
  }
  return plots;
}

SummarySpec SpecParser::parse_summary(const Field& f, const KindInfo& kind) const {
  if (!f.node.IsMap())
    throw spec_error(f.loc, f.path, std::string("expected a map {claim, figure, role, holds}, got ") + node_kind(f.node));
  SummarySpec sum;
  for (auto it = f.node.begin(); it != f.node.end(); ++it) {
    const std::string k = it->first.Scalar();
    const std::string kp = f.path + "." + k;
    if (k == "claim")
      sum.claim = scalar_text(it->second, kp);
    else if (k == "figure")
      sum.figure = scalar_text(it->second, kp);
    else if (k == "role") {
      sum.role = scalar_text(it->second, kp);
      const std::vector<std::string> roles = kind_roles(kind);
      if (std::find(roles.begin(), roles.end(), sum.role) == roles.end())
        throw spec_error(
            loc_of(it->second, file_), kp,
            "no variant of kind " + kind.name + " plays the role '" + sum.role + "'" + did_you_mean(sum.role, roles));
    } else if (k == "holds") {
      std::vector<YAML::Node> items;
      if (it->second.IsSequence())
        for (size_t i = 0; i < it->second.size(); ++i) items.push_back(it->second[i]);
      else
        items.push_back(it->second);
      for (const auto& n : items) {
        const SourceLoc vl = loc_of(n, file_);
        const std::string h = scalar_text(n, kp);
        auto starts = [&](const char* p) { return h.rfind(p, 0) == 0; };
        double x = 0;
        if (h == "faster") {
        } else if (starts("grows with ") || starts("shrinks with ")) {
          const std::string key = h.substr(h.find(" with ") + 6);
          if (!find_key(kind.keys, key)) throw spec_error(vl, kp, "'" + key + "' is not a key of kind " + kind.name);
        } else if (((starts("below ") || starts("above ")) && parse_float(h.substr(6), &x)) ||
                   ((starts("at least ") || starts("at most ")) && parse_float(h.substr(h.find(' ', 3) + 1), &x))) {
        } else {
          throw spec_error(vl, kp,
                           "expected faster, grows with <key>, shrinks with <key>, below <n>, above <n>, at least <n> or "
                           "at most <n>, got '" +
                               h + "'");
        }
        sum.holds.push_back(h);
      }
    } else {
      throw spec_error(loc_of(it->first, file_), kp,
                       "unknown key '" + k + "' in summary" + did_you_mean(k, {"claim", "figure", "role", "holds"}));
    }
  }
  return sum;
}

Book SpecParser::parse_book(const Field& f, const KindInfo& kind) const {
  if (!f.node.IsMap())
    throw spec_error(f.loc, f.path, std::string("expected a map with source and rows, got ") + node_kind(f.node));
  Book book;
  for (auto it = f.node.begin(); it != f.node.end(); ++it) {
    std::string k = it->first.Scalar();
    std::string kp = f.path + "." + k;
    if (k == "source")
      book.source = scalar_text(it->second, kp);
    else if (k == "note")
      book.note = scalar_text(it->second, kp);
    else if (k == "rows") {
      // A copy: the iterator's -> yields a proxy that dies at the end of the statement, so a reference would dangle.
      const YAML::Node rows = it->second;
      if (!rows.IsSequence()) throw spec_error(loc_of(rows, file_), kp, "expected a list of rows");
      for (size_t i = 0; i < rows.size(); ++i) {
        std::string rp = kp + fmt::format("[{}]", i);
        if (!rows[i].IsMap()) throw spec_error(loc_of(rows[i], file_), rp, "expected a map of keys and figures");
        BookRow row;
        for (auto jt = rows[i].begin(); jt != rows[i].end(); ++jt) {
          std::string rk = jt->first.Scalar();
          std::string fp = rp + "." + rk;
          SourceLoc vl = loc_of(jt->second, file_);
          if (rk == "variant") {
            std::string v = scalar_text(jt->second, fp);
            check_variant(kind, v, vl, fp);
            row.match.emplace_back(rk, v);
          } else if (rk == "role") {
            std::string v = scalar_text(jt->second, fp);
            const std::vector<std::string> roles = kind_roles(kind);
            if (std::find(roles.begin(), roles.end(), v) == roles.end()) {
              std::string list;
              for (const auto& r : roles) list += (list.empty() ? "" : ", ") + r;
              throw spec_error(vl, fp,
                               "no variant of kind " + kind.name + " plays the role '" + v + "' (roles: " + list + ")" +
                                   did_you_mean(v, roles));
            }
            row.match.emplace_back(rk, v);
          } else if (const KeySpec* ks = find_key(kind.keys, rk)) {
            row.match.emplace_back(rk, convert(jt->second, *ks, vl, fp));
          } else {
            bool ident = !rk.empty() && (std::islower(static_cast<unsigned char>(rk[0])) || rk[0] == '_');
            for (char c : rk)
              ident = ident &&
                      (std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_');
            if (!ident) throw spec_error(loc_of(jt->first, file_), fp, "a figure name is lower_case_with_underscores");
            if (!jt->second.IsScalar()) throw spec_error(vl, fp, "a figure is a number or a short text");
            double d = 0;
            if (parse_float(jt->second.Scalar(), &d))
              row.figures.emplace_back(rk, BookFigure(d));
            else
              row.figures.emplace_back(rk, BookFigure(jt->second.Scalar()));
          }
        }
        if (row.figures.empty()) throw spec_error(loc_of(rows[i], file_), rp, "a book row needs at least one figure");
        book.rows.push_back(std::move(row));
      }
    } else {
      throw spec_error(loc_of(it->first, file_), kp,
                       "unknown key '" + k + "' in book" + did_you_mean(k, {"source", "note", "rows"}));
    }
  }
  return book;
}

}  // namespace ib::spec_detail
