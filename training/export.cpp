// Model packages from trained modules, written into a model repository (training/export.h).
#include "training/export.h"

#include <unistd.h>

#include <functional>
#include <set>

#include "engine/atomic_file.h"
#include "engine/error.h"
#include "models/module.h"
#include "models/onnx_export.h"
#include "models/op_graph.h"

namespace hg::training {

namespace fs = std::filesystem;

namespace {

void check_name(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 128 && name[0] != '.' && name[0] != '-' &&
                  name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") ==
                      std::string::npos;
  if (!ok)
    throw InvalidArgument("export.name: '" + name + "' is not a model name (letters, digits, '_', '-', '.'; not first)");
}

void check_options(const ExportOptions& opt) {
  check_name(opt.name);
  if (opt.dir.empty()) throw InvalidArgument("export.dir: empty");
  if (opt.version < 1) throw InvalidArgument("export.version: must be >= 1, got " + std::to_string(opt.version));
  if (!opt.serving_config.is_null() && !opt.serving_config.is_object())
    throw InvalidArgument("export.config: expected an object (the server's config.json), got " + opt.serving_config.dump());
  if (!opt.metadata.is_object()) throw InvalidArgument("export metadata: expected an object");
  if (opt.format != "package" && opt.format != "onnx")
    throw InvalidArgument("export.format: '" + opt.format + "' is not \"package\" or \"onnx\"");
}

// The version folder written by `write` under a hidden name, then renamed into place (replacing
// an older export of the same version); then the serving config.
fs::path write_version(const ExportOptions& opt, const std::function<void(const fs::path&)>& write) {
  const fs::path model_dir = opt.dir / opt.name;
  const fs::path final_dir = model_dir / std::to_string(opt.version);
  const std::string tag = std::to_string(opt.version) + "." + std::to_string(::getpid());
  const fs::path staging = model_dir / (".export-" + tag), old = model_dir / (".replaced-" + tag);
  fs::remove_all(staging);
  fs::create_directories(model_dir);
  try {
    fs::create_directories(staging);
    write(staging);
    if (fs::exists(final_dir)) fs::rename(final_dir, old);
    fs::rename(staging, final_dir);
    fs::remove_all(old);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(staging);
    throw IoError("export to " + final_dir.string() + ": " + e.what());
  } catch (...) {
    fs::remove_all(staging);
    throw;
  }
  if (!opt.serving_config.is_null())
    write_file_atomic(model_dir / "config.json", {as_bytes(opt.serving_config.dump(2) + "\n")});
  return final_dir;
}

void merge_metadata(models::PackageSpec& spec, const ExportOptions& opt) {
  spec.name = opt.name;
  for (const auto& [k, v] : opt.metadata.items()) spec.metadata[k] = v;
}

// A traced model in opt.format.
fs::path write_traced(models::TracedModel t, const ExportOptions& opt) {
  merge_metadata(t.spec, opt);
  if (opt.format == "onnx")
    return write_version(opt, [&](const fs::path& dir) {
      models::write_onnx(dir / "model.onnx", t.spec, t.constants, {.dim_names = t.dim_names});
    });
  std::set<std::string> names;
  for (const auto& [name, c] : t.constants) names.insert(name);
  models::OpGraphModule g(models::op_graph_from_json(t.spec.graph, "the traced graph", names), t.constants);
  return write_version(opt, [&](const fs::path& dir) { models::save_package(dir, g, t.spec); });
}

}  // namespace

fs::path export_package(const models::Module& m, models::PackageSpec spec, const ExportOptions& opt) {
  check_options(opt);
  if (opt.format != "package")
    throw InvalidArgument("export.format: export_package writes packages; \"" + opt.format + "\" needs export_traced");
  merge_metadata(spec, opt);
  return write_version(opt, [&](const fs::path& dir) { models::save_package(dir, m, spec); });
}

fs::path export_traced(models::Module& m, const std::vector<Tensor>& example_inputs, const ExportOptions& opt,
                       const models::TraceOptions& trace) {
  check_options(opt);
  return write_traced(models::trace_module(m, example_inputs, trace), opt);
}

fs::path export_traced(LightningModule& m, const std::vector<Tensor>& example_inputs, const ExportOptions& opt,
                       const models::TraceOptions& trace) {
  return export_traced(m.module(), example_inputs, opt, trace);
}

fs::path export_classifier(ClassifierModule& m, const ExportOptions& opt) {
  models::PackageSpec spec;
  spec.inputs = {m.input_spec()};
  spec.outputs = {m.output_spec()};
  spec.metadata = {{"trained_by", "hgraph-train"},
                   {"model", m.spec().model},
                   {"model_config", m.model_config()},
                   {"optimizer", m.spec().optimizer},
                   {"seed", m.spec().seed}};
  if (opt.format != "onnx") return export_package(m.module(), std::move(spec), opt);
  check_options(opt);
  Shape example = spec.inputs[0].shape;
  example[0] = 2;  // the batch, dynamic in the export
  const DType t = models::dtype_from_kserve(spec.inputs[0].datatype);
  models::TracedModel traced = models::trace_module(
      m.module(), {Tensor::zeros(example, t)}, {.input_names = {spec.inputs[0].name}, .output_names = {spec.outputs[0].name}});
  for (const auto& [k, v] : spec.metadata.items()) traced.spec.metadata[k] = v;
  return write_traced(std::move(traced), opt);
}

}  // namespace hg::training
