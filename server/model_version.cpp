#include "server/model_version.h"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <system_error>

#include "engine/error.h"
#include "engine/stream.h"
#include "server/generate.h"
#include "server/identity_model.h"
#include "server/padding.h"
#include "server/precision_check.h"
#include "server/wire.h"

namespace hg::server {
namespace fs = std::filesystem;

namespace {

// The bytes of the regular files under a version folder: what loading its weights will take.
size_t folder_bytes(const fs::path& dir) {
  size_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code e;
    if (!it->is_regular_file(e)) continue;
    const auto n = it->file_size(e);
    if (!e) total += static_cast<size_t>(n);
  }
  return total;
}

std::string tensor_text(const models::IOSpec& io) { return "'" + io.name + "' " + io.datatype + " " + shape_text(io.shape); }

std::string io_text(const std::vector<models::IOSpec>& list) {
  std::string r;
  for (const auto& io : list) r += (r.empty() ? "" : ", ") + tensor_text(io);
  return r;
}

// The tensors config.json declares for an hgraph model must be the package's.
void check_declared(const std::vector<models::IOSpec>& declared, const std::vector<models::IOSpec>& actual,
                    const char* field) {
  if (declared.empty()) return;
  if (declared.size() != actual.size())
    throw InvalidArgument(std::string("config.json: ") + field + " lists " + std::to_string(declared.size()) +
                          " tensors, the model has " + std::to_string(actual.size()));
  for (size_t i = 0; i < declared.size(); ++i)
    if (declared[i].name != actual[i].name || declared[i].datatype != actual[i].datatype || declared[i].shape != actual[i].shape)
      throw InvalidArgument(std::string("config.json: ") + field + "[" + std::to_string(i) + "] declares " +
                            tensor_text(declared[i]) + ", the model has " + tensor_text(actual[i]));
}

}  // namespace

std::shared_ptr<ModelVersion> build_model_version(const RepositoryOptions& opt, MemoryBudget& memory, const std::string& name,
                                                  int64_t version, const fs::path& dir, const ModelConfig& config,
                                                  const std::function<void(const std::string&)>& log) {
  const auto t0 = std::chrono::steady_clock::now();
  auto mv = std::make_shared<ModelVersion>();
  mv->name = name;
  mv->version = version;
  mv->config = config;
  models::PredictorOptions popt = opt.predictor;
  popt.batch_buckets = config.buckets(opt.predictor.batch_buckets);
  config.apply(popt);
  mv->memory = memory.lease("model '" + name + "' version " + std::to_string(version));
  mv->memory->charge("its files in " + dir.string(), folder_bytes(dir));
  {
    // The load's device work (weights, captures, first runs) on the load stream: the models
    // already serving keep their device queue to themselves. Synchronized at the block's end.
    LoadStreamGuard load;
    if (opt.factory) {
      mv->model = opt.factory(name, version, dir, config);
      if (!mv->model) throw InternalError("the model factory returned no model");
    } else if (config.platform == "identity") {
      models::PackageSpec spec;
      spec.name = name;
      spec.inputs = config.inputs;
      spec.outputs = config.outputs;
      mv->model = make_identity_model(std::move(spec));
    } else {
      auto predictor = models::Predictor::load(dir, popt);
      if (!predictor->package().spec.batched) {  // an export without a batch dimension: whole tensors
        if (config.max_batch_size > 0 && (config.max_batch_size_given || !config.batch_buckets.empty()))
          throw InvalidArgument("config.json: max_batch_size is " + std::to_string(config.max_batch_size) +
                                " but the model has no batch dimension (inputs " +
                                io_text(predictor->package().spec.inputs) +
                                "): set max_batch_size to 0 and leave out batch_buckets (one request per run, "
                                "its tensors whole)");
        mv->config.max_batch_size = 0;
        mv->config.batch_buckets.clear();
      }
      check_declared(config.inputs, predictor->package().spec.inputs, "input");
      check_declared(config.outputs, predictor->package().spec.outputs, "output");
      if (config.padding) check_padding(*config.padding, predictor->package().spec);
      if (const size_t n = calibrate_model(*predictor, config, dir.parent_path()))
        log("model '" + config.name + "': int8 calibrated on " + config.calibration->inputs + ": " +
            std::to_string(n) + " convolution input ranges fixed");
      if (config.warmup) {
        models::CaptureAllOptions copt;  // sequence buckets: every (length bucket, batch bucket)
        if (config.padding) copt.signatures = padding_signatures(*config.padding, predictor->package().spec);
        if (const size_t left = mv->memory->left(); left != SIZE_MAX) copt.memory_budget = std::max<size_t>(left, 1);
        mv->buckets = predictor->capture_all(copt);
        size_t captured = 0;
        for (const auto& b : mv->buckets) captured += b.captured ? b.arena_bytes + b.constant_bytes : 0;
        mv->memory->charge("its captured batch buckets", captured);
      }
      if (config.precision != graphs::Precision::Fp32) {
        mv->precision = check_model_precision(*predictor, config, dir.parent_path());
        log(precision_report_line(config, mv->precision));
      }
      if (is_text_generation_model(predictor->package().spec))  // one load: generation shares the Predictor's module
        mv->generator = make_gpt_generator(
            predictor->module(), config,
            {.on_step = [h = opt.on_batch, name, version](int64_t n, Clock::duration d) { if (h) h(name, version, n, d); },
             .on_token = [h = opt.on_token, name, version](bool f, Clock::duration d) { if (h) h(name, version, f, d); }},
            mv->memory);
      mv->model = make_served_model(std::move(predictor));
    }
    // Any model (a factory's, the identity): padded dimensions must be dynamic ones.
    if (config.padding) check_padding(*config.padding, mv->model->spec());
    // The config as served (GET .../config): the model's tensors when config.json names none.
    if (mv->config.inputs.empty()) mv->config.inputs = mv->model->spec().inputs;
    if (mv->config.outputs.empty()) mv->config.outputs = mv->model->spec().outputs;
  }
  BatcherConfig bc = mv->config.batcher_config();
  bc.inline_max_us = opt.inline_max_us;
  if (opt.on_batch)
    bc.on_batch = [hook = opt.on_batch, name, version](int64_t batch, Clock::duration compute) {
      hook(name, version, batch, compute);
    };
  mv->batcher = std::make_shared<DynamicBatcher>(mv->model, std::move(bc));
  mv->load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return mv;
}

std::string ready_line(const ModelVersion& v, const fs::path& dir) {
  const auto cached = std::count_if(v.buckets.begin(), v.buckets.end(), [](auto& b) { return b.disk_hit; });
  const auto captured = std::count_if(v.buckets.begin(), v.buckets.end(), [](auto& b) { return b.captured; });
  std::ostringstream line;
  line << "model '" << v.name << "' version " << v.version << " (" << dir.string() << ") READY in " << v.load_ms
       << " ms: " << captured << " buckets captured (" << cached << " from the graph cache";
  std::string left_out;
  for (const auto& b : v.buckets)
    if (!b.captured) left_out += (left_out.empty() ? "" : ", ") + std::to_string(b.batch);
  if (!left_out.empty()) line << "; batch " << left_out << " left out: past the model memory budget";
  line << "), " << v.config.instance_count << " instance(s)";
  if (v.generator) line << ", text generation: " << step_graphs_summary(v.generator->stats());
  if (v.memory) line << ", " << (v.memory->held() >> 20) << " MiB of the model memory budget";
  return line.str();
}

}  // namespace hg::server
