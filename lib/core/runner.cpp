#include "core/runner.h"

#include <chrono>
#include <new>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/interrupt.h"
#include "core/nvtx.h"
#include "core/point_access.h"
#include "core/registry.h"
#include "core/sysinfo.h"
#include "core/units.h"

namespace ib {

std::string Ceilings::describe() const {
  std::string s = fmt::format("copy {} GB/s ({}), GEMM {} TFLOP/s ({})", format_number(copy_bytes_per_s / 1e9), copy_label,
                              format_number(gemm_flops_per_s / 1e12), gemm_label);
  if (fma_flops_per_s > 0) s += fmt::format(", FMA {} TFLOP/s ({})", format_number(fma_flops_per_s / 1e12), fma_label);
  return s;
}

nlohmann::json Ceilings::to_json() const {
  nlohmann::json j;
  j["copy_bytes_per_s"] = copy_bytes_per_s;
  j["gemm_flops_per_s"] = gemm_flops_per_s;
  j["copy"] = copy_label;
  j["gemm"] = gemm_label;
  if (fma_flops_per_s > 0) {
    j["fma_flops_per_s"] = fma_flops_per_s;
    j["fma"] = fma_label;
  }
  return j;
}

Ceilings Ceilings::from_json(const nlohmann::json& j) {
  Ceilings c;
  c.copy_bytes_per_s = j.value("copy_bytes_per_s", 0.0);
  c.gemm_flops_per_s = j.value("gemm_flops_per_s", 0.0);
  c.copy_label = j.value("copy", std::string());
  c.gemm_label = j.value("gemm", std::string());
  c.fma_flops_per_s = j.value("fma_flops_per_s", 0.0);
  c.fma_label = j.value("fma", std::string());
  return c;
}

const char* to_string(RowStatus s) {
  switch (s) {
    case RowStatus::Ok:
      return "ok";
    case RowStatus::Failed:
      return "FAILED";
    case RowStatus::Oom:
      return "OOM";
    case RowStatus::Unsupported:
      return "unsupported";
  }
  return "?";
}

RowStatus row_status_from_string(const std::string& s) {
  if (s == "ok") return RowStatus::Ok;
  if (s == "FAILED") return RowStatus::Failed;
  if (s == "OOM") return RowStatus::Oom;
  if (s == "unsupported") return RowStatus::Unsupported;
  throw std::runtime_error("unknown row status '" + s + "'");
}

Roofline roofline(const Row& row, const Ceilings& c) {
  Roofline r;
  if (row.status != RowStatus::Ok || row.stats.n == 0 || row.stats.median <= 0) return r;
  const double t = row.stats.median;
  if (row.work.flops > 0) {
    r.tflops = row.work.flops / t / 1e12;
    if (c.gemm_flops_per_s > 0) r.pct_gemm = 100.0 * row.work.flops / t / c.gemm_flops_per_s;
  }
  if (row.work.bytes > 0) {
    r.gbps = row.work.bytes / t / 1e9;
    if (c.copy_bytes_per_s > 0) r.pct_copy = 100.0 * row.work.bytes / t / c.copy_bytes_per_s;
  }
  return r;
}

bool book_row_matches(const BookRow& book_row, const Point& p, const std::string& variant, const std::string& role) {
  for (const auto& [k, v] : book_row.match) {
    if (k == "variant") {
      if (std::get<std::string>(v) != variant) return false;
    } else if (k == "role") {
      if (std::get<std::string>(v) != role) return false;
    } else if (const Param* q = PointAccess::find(p, k)) {
      if (!values_equal(q->value, v)) return false;
    } else {
      return false;
    }
  }
  return true;
}

std::vector<std::pair<std::string, BookFigure>> match_book(const Book& book, const Point& p, const std::string& variant,
                                                           const std::string& role) {
  std::vector<std::pair<std::string, BookFigure>> out;
  for (const auto& row : book.rows)
    if (book_row_matches(row, p, variant, role))
      for (const auto& f : row.figures) out.push_back(f);
  return out;
}

std::string config_label(const ExperimentSpec& spec, const Point& p) {
  std::vector<std::string> varying;
  for (const auto& a : spec.axes)
    if (a.values.size() > 1) varying.push_back(a.key);
  if (varying.empty()) return "default";
  std::string label = p.label(varying);
  for (auto& c : label)
    if (c == ' ') c = ',';
  return label;
}

std::string row_range_name(const ExperimentSpec& spec, const std::string& variant, const Point& p) {
  const KindInfo* kind = Registry::instance().kind(spec.kind);
  return (kind ? kind->group : spec.kind) + "/" + spec.name + "/" + variant + "/" + config_label(spec, p);
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

ExperimentResult Runner::run(const ExperimentSpec& spec) {
  const KindInfo* kind = Registry::instance().kind(spec.kind);
  if (!kind) throw std::logic_error("unregistered kind " + spec.kind);
  // Nested NVTX ranges group > experiment > variant > config > validate|warmup|measure, so that
  // `ncu --nvtx-include "infer-bench@group/experiment/variant/"` selects by any prefix.
  NvtxRange group_range(kind->group);
  NvtxRange experiment_range(spec.name);
  ExperimentResult result;
  result.spec = spec;
  result.plan = plan_sweep(spec);
  if (observer_) observer_->experiment_started(spec, result.plan);

  std::vector<std::string> order;
  if (!spec.baseline.empty()) order.push_back(spec.baseline);
  for (const auto& v : spec.variants)
    if (v != spec.baseline) order.push_back(v);

  size_t index = 0, point_index = 0;
  for (const auto& point : result.plan.points) {
    ++point_index;
    std::optional<size_t> baseline_at;  // index in result.rows of this point's baseline row
    for (const auto& variant : order) {
      if (is_skipped(spec, point, variant)) continue;
      if (interrupted()) {
        result.interrupted = true;
        break;
      }
      if (observer_) observer_->row_started(spec, index, result.plan.rows, variant + " " + config_label(spec, point));
      Row row = run_row(spec, point, variant, point_index);
      ++index;
      if (variant == spec.baseline) {
        row.is_baseline = true;
        baseline_at = result.rows.size();
      } else if (baseline_at && result.rows[*baseline_at].status == RowStatus::Ok && row.status == RowStatus::Ok) {
        row.speedup = bootstrap_speedup(result.rows[*baseline_at].samples, row.samples,
                                        static_cast<uint64_t>(spec.control.seed) * 7919u + index);
        const int64_t base_peak = result.rows[*baseline_at].peak_memory;
        if (kind->memory_saving && base_peak > 0 && row.peak_memory > 0)
          row.metrics.push_back({"mem saving", static_cast<double>(base_peak) / static_cast<double>(row.peak_memory), "×"});
      }
      result.rows.push_back(std::move(row));
      if (observer_) observer_->row_finished(result, result.rows.back());
      if (interrupted()) {
        result.interrupted = true;
        break;
      }
    }
    if (result.interrupted) break;
  }
  if (observer_) observer_->experiment_finished(result);
  return result;
}

Row Runner::run_row(const ExperimentSpec& spec, const Point& point, const std::string& variant, size_t point_index) {
  const KindInfo* kind = Registry::instance().kind(spec.kind);
  if (!kind) throw std::logic_error("unregistered kind " + spec.kind);
  const VariantDecl* decl = find_variant(*kind, variant);
  if (!decl) throw std::logic_error("undeclared variant " + variant);
  BackendRuntime* target = &rt_;
  if (decl->host && rt_.backend() != Backend::Cpu) {
    if (!host_rt_) host_rt_ = make_cpu_runtime();
    target = host_rt_.get();
  }
  try {
    return run_row_on(*target, spec, *decl, point, point_index);
  } catch (const InputError& e) {
    // Bad input only the variant could see: named at the experiment, like a spec error.
    throw spec_error(spec.loc, fmt::format("experiment {} ({}, {})", spec.name, variant, config_label(spec, point)), e.what());
  }
}

Row Runner::run_row_on(BackendRuntime& rt, const ExperimentSpec& spec, const VariantDecl& decl, const Point& point,
                       size_t point_index) {
  const std::string& variant = decl.name;
  Row row;
  row.experiment = spec.name;
  row.kind = spec.kind;
  row.variant = variant;
  row.backend = rt.backend();
  row.point = point;
  if (const KindInfo* kind = Registry::instance().kind(spec.kind)) row.role = variant_role(*kind, variant);
  row.book = match_book(spec.book, point, variant, row.role.empty() ? variant : row.role);

  NvtxRange variant_range(variant);
  NvtxRange config_range(config_label(spec, point));

  if (decl.backend != rt.backend()) {
    row.status = RowStatus::Unsupported;
    row.message = fmt::format("needs the {} backend", to_string(decl.backend));
    return row;
  }
  std::unique_ptr<Variant> v = Registry::instance().make(spec.kind, variant);
  if (!v) {
    row.status = RowStatus::Unsupported;
    row.message = "not built into this binary (built without CUDA)";
    return row;
  }
  if (std::string why = v->unsupported(point); !why.empty()) {
    row.status = RowStatus::Unsupported;
    row.message = why;
    return row;
  }

  MemoryTracker& mem = rt.memory();
  if (spec.control.memory_limit > 0) {
    mem.set_limit(spec.control.memory_limit);
  } else if (&mem == &host_memory()) {
    // Linux overcommits: an allocation past the machine's memory succeeds, and the OOM killer
    // takes the whole run when the pages are touched. Past what is free, the row is OOM instead.
    if (const int64_t free_bytes = host_memory_available_bytes(); free_bytes > 0)
      mem.set_limit(mem.current() + free_bytes, "the memory free when the row began (--memory-limit sets one)");
  }
  const int64_t start_bytes = mem.current();
  mem.reset_peak();
  // Every variant at a point sees the same inputs (a fair comparison); each point fresh ones.
  const uint64_t seed = static_cast<uint64_t>(spec.control.seed) + 1000003ull * point_index;
  std::optional<int64_t> self_peak;  // a self-measured row's peak, as measured where it ran (-1: unknown)
  try {
    v->prepare(point, rt, seed);
    RunControl control = spec.control;
    if (options_.profile) {  // a few runs, as for the other rows (a peer's process is not profiled)
      control.warmup = 1;
      control.min_samples = options_.profile_runs;
      control.min_time = 0;
      control.max_noise = 1e9;
    }
    const std::optional<SelfMeasurement> own = v->measure_self(rt, control);
    if (own) self_peak = own->peak_memory;
    if (own && !own->unsupported.empty()) throw Unsupported(own->unsupported);
    {
      NvtxRange r("validate");
      row.validation = own ? own->validation : v->validate(rt);
      rt.check_errors();
    }
    if (!row.validation->ok) {
      const Validation& val = *row.validation;
      row.status = RowStatus::Failed;
      row.message =
          fmt::format("validation failed: {} {} > {}", val.metric, format_number(val.value), format_number(val.tolerance));
      if (!val.detail.empty()) row.message += " (" + val.detail + ")";
    } else if (own) {
      if (own->samples.empty()) throw std::runtime_error("the variant measured itself and returned no samples");
      row.samples = own->samples;
      row.stop_reason =
          options_.profile
              ? fmt::format("profile: {} runs in the variant's own process (outside the profiler range)", row.samples.size())
              : own->stop_reason;
      row.stats = summarize(row.samples);
      row.work = v->work();
      row.metrics = v->metrics();
      row.message = own->note;
    } else {
      const int64_t warmup = options_.profile ? 1 : spec.control.warmup;
      {
        NvtxRange r("warmup");
        for (int64_t i = 0; i < warmup && !interrupted(); ++i) v->run(rt);
        rt.synchronize();
        rt.check_errors();
      }
      NvtxRange r("measure");
      auto timer = rt.make_timer();
      if (options_.profile) {
        rt.profiler_start();
        for (int i = 0; i < options_.profile_runs; ++i) {
          timer->start();
          v->run(rt);
          row.samples.push_back(timer->stop());
        }
        rt.profiler_stop();
        row.stop_reason = fmt::format("profile: {} runs", options_.profile_runs);
      } else {
        StoppingRule rule({spec.control.min_samples, spec.control.min_time, spec.control.max_noise, spec.control.timeout});
        const auto t0 = std::chrono::steady_clock::now();
        while (!rule.done()) {
          if (spec.control.cold_l2) rt.flush_cache();
          timer->start();
          v->run(rt);
          double s = timer->stop();
          row.samples.push_back(s);
          rule.add(s, seconds_since(t0));
          if (interrupted() && !rule.done()) {
            row.stop_reason = fmt::format("interrupted after {} samples", row.samples.size());
            break;
          }
        }
        if (row.stop_reason.empty()) row.stop_reason = rule.reason();
      }
      rt.check_errors();
      row.stats = summarize(row.samples);
      row.work = v->work();
      row.metrics = v->metrics();
    }
    if (row.validation->ok) {
      const std::string note = v->note();
      if (!note.empty()) row.message = row.message.empty() ? note : row.message + "; " + note;
      row.texts = v->texts();
    }
  } catch (const Unsupported& e) {
    row.status = RowStatus::Unsupported;
    row.message = e.what();
  } catch (const OutOfMemory& e) {
    row.status = RowStatus::Oom;
    row.message = e.what();
  } catch (const std::bad_alloc&) {  // host memory a variant holds outside the tracker (tables, traces)
    row.status = RowStatus::Oom;
    row.message = "a host allocation outside the tracked buffers failed (std::bad_alloc)";
  } catch (const std::length_error& e) {  // a std::vector asked for more than max_size()
    row.status = RowStatus::Oom;
    row.message = std::string("a host allocation outside the tracked buffers is too large (") + e.what() + ")";
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    row.status = RowStatus::Failed;
    row.message = e.what();
  }
  row.peak_memory = row.status == RowStatus::Unsupported ? -1 : self_peak ? *self_peak : mem.peak() - start_bytes;
  v.reset();
  mem.set_limit(0);
  return row;
}

}  // namespace ib
