// Model packages from trained modules, written into a model repository (training/export.h).
#include "training/export.h"

#include <unistd.h>

#include "engine/atomic_file.h"
#include "engine/error.h"
#include "models/module.h"

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

}  // namespace

fs::path export_package(const models::Module& m, models::PackageSpec spec, const ExportOptions& opt) {
  check_name(opt.name);
  if (opt.dir.empty()) throw InvalidArgument("export.dir: empty");
  if (opt.version < 1) throw InvalidArgument("export.version: must be >= 1, got " + std::to_string(opt.version));
  if (!opt.serving_config.is_null() && !opt.serving_config.is_object())
    throw InvalidArgument("export.config: expected an object (the server's config.json), got " + opt.serving_config.dump());
  if (!opt.metadata.is_object()) throw InvalidArgument("export metadata: expected an object");
  spec.name = opt.name;
  for (const auto& [k, v] : opt.metadata.items()) spec.metadata[k] = v;
  const fs::path model_dir = opt.dir / opt.name;
  const fs::path final_dir = model_dir / std::to_string(opt.version);
  const std::string tag = std::to_string(opt.version) + "." + std::to_string(::getpid());
  const fs::path staging = model_dir / (".export-" + tag), old = model_dir / (".replaced-" + tag);
  fs::remove_all(staging);
  fs::create_directories(model_dir);
  try {
    models::save_package(staging, m, spec);
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

fs::path export_classifier(ClassifierModule& m, const ExportOptions& opt) {
  models::PackageSpec spec;
  spec.inputs = {m.input_spec()};
  spec.outputs = {m.output_spec()};
  spec.metadata = {{"trained_by", "hgraph-train"},
                   {"model", m.spec().model},
                   {"model_config", m.model_config()},
                   {"optimizer", m.spec().optimizer},
                   {"seed", m.spec().seed}};
  return export_package(m.module(), std::move(spec), opt);
}

}  // namespace hg::training
