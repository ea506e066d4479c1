// Plots of an experiment's rows as standalone SVG files: one line per series (a variant, and the
// values of the other parameters that vary), a numeric parameter on x, a measured quantity on y,
// whiskers for the spread, the chapter's figures as hollow diamonds, and OOM rows marked on the
// top edge. What is plotted is declared in the spec (`plot:`); nothing is plotted by default.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/runner.h"

namespace ib {

// One rendered plot: the file name inside the run directory and the SVG document.
struct PlotFile {
  std::string file;  // "<experiment>.svg", then "<experiment>-2.svg", ...
  std::string title;
  std::string svg;
};

// The file each declared plot is written to, in the spec's order: "<experiment>.svg", then
// "<experiment>-2.svg", ... (by position, so a plot keeps its name whichever others have data).
std::vector<std::string> plot_file_names(const ExperimentSpec& spec);

// Renders every plot the experiment declares that has data: at least two distinct x values in
// one series. `skipped` (optional) receives one line per plot left out and why.
std::vector<PlotFile> render_plots(const ExperimentResult& result, const Ceilings& ceilings, const std::string& device,
                                   std::vector<std::string>* skipped = nullptr);

// The numbers in a chapter figure as written in a spec: 12 -> {12}; "~25" -> {25}; "1.3×" ->
// {1.3}; "0.5-1" -> {0.5, 1} (a range); "< 100" -> {} (a bound, not a value); "OOM" -> {}.
std::vector<double> book_figure_values(const BookFigure& figure);

// Text escaped for an XML text node or attribute.
std::string xml_escape(const std::string& s);

}  // namespace ib
