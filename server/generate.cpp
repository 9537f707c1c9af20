// The generate request parser and the GPT text generator's loader (continuous batching:
// server/generate_scheduler.h). serve_generate is in generate_http.cpp.
#include "server/generate.h"

#include <algorithm>
#include <cstdio>
#include <future>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/json_reader.h"
#include "models/gpt.h"
#include "models/module.h"
#include "models/tokenizer.h"
#include "server/generate_scheduler.h"
#include "server/http_error.h"
#include "server/request_fields.h"

namespace hg::server {

namespace {

using json = nlohmann::json;

// A generate request nests 3 deep (parameters.stop[i]) and holds a prompt and a few parameters.
constexpr JsonLimits kGenerateJsonLimits{.max_depth = 8, .max_values = 4096, .max_bytes = size_t{1} << 20};
constexpr size_t kMaxStopStrings = 16;

const RequestFields kFields("generate request");

void parse_parameters(const json& p, GenerateRequest& r) {
  if (!p.is_object()) kFields.fail("parameters", "must be an object, got " + RequestFields::shown(p));
  bool sampled = false, greedy_temperature = false, seeded = false;
  for (const auto& [key, v] : p.items()) {
    const std::string field = "parameters." + key;
    if (key == "max_tokens") {
      r.max_tokens = kFields.integer(v, field, 1);
    } else if (key == "temperature") {
      r.sampling.temperature = kFields.number(v, field);
      if (r.sampling.temperature < 0) kFields.fail(field, "must be >= 0 (0: greedy), got " + RequestFields::shown(v));
      greedy_temperature = r.sampling.temperature == 0;
      sampled = true;
    } else if (key == "top_k") {
      r.sampling.top_k = kFields.integer(v, field, 0);
      sampled = true;
    } else if (key == "top_p") {
      r.sampling.top_p = kFields.number(v, field);
      if (!(r.sampling.top_p > 0 && r.sampling.top_p <= 1))
        kFields.fail(field, "must be in (0, 1], got " + RequestFields::shown(v));
      sampled = true;
    } else if (key == "seed") {
      if (!v.is_number_unsigned()) kFields.fail(field, "must be an integer >= 0, got " + RequestFields::shown(v));
      r.sampling.seed = v.get<uint64_t>();
      seeded = true;
    } else if (key == "stop") {
      r.stop = kFields.strings(v, field, kMaxStopStrings, SIZE_MAX);
    } else if (key == "timeout") {
      if (!v.is_number_unsigned())
        kFields.fail(field, "must be an integer >= 0 (microseconds), got " + RequestFields::shown(v));
      r.timeout_us = v.get<uint64_t>();
    } else if (key == "stream") {
      kFields.boolean(v, field);
    } else {
      kFields.fail(field,
                   "is not a generate parameter (max_tokens, temperature, top_k, top_p, seed, stop, timeout, stream)");
    }
  }
  r.sampling.greedy = !sampled || greedy_temperature;
  if (greedy_temperature) r.sampling.temperature = 1.0;
  if (!r.sampling.greedy && !seeded) r.sampling.seed = models::random_seed();
}

}  // namespace

constexpr size_t kMaxIdBytes = 256;

GenerateRequest parse_generate_request(std::string_view body) {
  const json j = read_json(body, kGenerateJsonLimits, "the generate request body");
  if (!j.is_object())
    throw InvalidArgument("generate request: the body must be a JSON object, got " + RequestFields::shown(j));
  GenerateRequest r;
  bool has_text = false;
  for (const auto& [key, v] : j.items()) {
    if (key == "id") {
      r.id = kFields.string(v, "id");
      if (r.id->size() > kMaxIdBytes)  // echoed into every event of a stream
        kFields.fail("id", "is " + std::to_string(r.id->size()) + " bytes, at most " + std::to_string(kMaxIdBytes));
    } else if (key == "text_input") {
      r.text_input = kFields.string(v, "text_input");
      has_text = true;
    } else if (key == "parameters") {
      parse_parameters(v, r);
    } else {
      kFields.fail(key, "is not a generate request field (id, text_input, parameters)");
    }
  }
  if (!has_text) kFields.fail("text_input", "is missing");
  if (r.text_input.empty()) kFields.fail("text_input", "is empty (the model needs at least one token)");
  return r;
}

void TextGenerator::submit(GenerateRequest req, PieceCallback on_piece, GenerateDone done) {
  std::vector<Submission> one;
  one.push_back({std::move(req), std::move(on_piece), std::move(done)});
  submit_group(std::move(one));
}

GenerateResult TextGenerator::generate(const GenerateRequest& req, const PieceCallback& on_piece) {
  std::promise<GenerateResult> promise;
  std::future<GenerateResult> result = promise.get_future();
  submit(req, on_piece, [&promise](std::exception_ptr error, GenerateResult r) {
    if (error) promise.set_exception(error);
    else promise.set_value(std::move(r));
  });
  return result.get();
}

std::string step_graphs_summary(const GenerationStats& s) {
  char mb[32];
  std::snprintf(mb, sizeof mb, "%.1f", static_cast<double>(s.graph_bytes) / (1 << 20));
  return std::to_string(s.captured_graphs) + " step graphs (" + std::to_string(s.graphs_from_cache) +
         " from the graph cache), " + mb + " MB, steps of up to " + std::to_string(s.max_step_tokens) + " tokens and " +
         std::to_string(s.max_batch) + " sequences";
}

bool is_text_generation_model(const models::PackageSpec& spec) {
  return spec.graph.is_object() && spec.graph.value("type", "") == "zoo" && spec.graph.value("model", "") == "gpt";
}

std::shared_ptr<TextGenerator> make_gpt_generator(std::shared_ptr<models::Module> module, const ModelConfig& config,
                                                  GenerationHooks hooks, std::shared_ptr<MemoryBudget::Lease> memory) {
  auto gpt = std::dynamic_pointer_cast<models::GPT>(module);
  if (!gpt)
    throw InvalidArgument("model '" + config.name +
                          "': not a text generation model (the generate endpoints serve the GPT zoo model, graph "
                          "{\"type\": \"zoo\", \"model\": \"gpt\"})");
  const Generation& g = config.generation;
  return std::make_shared<GenerateScheduler>(
      std::move(gpt), SchedulerOptions{.name = config.name,
                                       .max_batch = g.max_batch ? g.max_batch : std::max<int64_t>(1, config.max_batch_size),
                                       .max_step_tokens = g.max_step_tokens,
                                       .block_size = g.block_size,
                                       .max_batch_total_tokens = g.max_batch_total_tokens,
                                       .kv_dtype = g.kv_cache_dtype == "bfloat16" ? DType::BF16 : DType::F32,
                                       .graph_memory = static_cast<size_t>(g.graph_memory_mb) << 20,
                                       .memory = std::move(memory),
                                       .max_queue = config.max_queue_size,
                                       .default_timeout_us = config.default_timeout_us,
                                       .allow_timeout_override = config.allow_timeout_override,
                                       .hooks = std::move(hooks)});
}

}  // namespace hg::server
