// The generate request parser and the GPT text generator's loader (continuous batching:
// server/generate_scheduler.h). serve_generate is in generate_http.cpp.
#include "server/generate.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/error.h"
#include "engine/json_reader.h"
#include "models/gpt.h"
#include "models/module.h"
#include "models/tokenizer.h"
#include "server/generate_scheduler.h"
#include "server/http_error.h"

namespace hg::server {

namespace {

using json = nlohmann::json;

// A generate request nests 3 deep (parameters.stop[i]) and holds a prompt and a few parameters.
constexpr JsonLimits kGenerateJsonLimits{.max_depth = 8, .max_values = 4096, .max_bytes = size_t{1} << 20};
constexpr size_t kMaxStopStrings = 16;

[[noreturn]] void bad_field(const std::string& field, const std::string& what) {
  throw InvalidArgument("generate request: field '" + field + "' " + what);
}

std::string shown(const json& v) { return json_excerpt(v, 40); }  // a value in an error message

int64_t integer_field(const json& v, const std::string& field, int64_t min) {
  if (!v.is_number_integer()) bad_field(field, "must be an integer, got " + shown(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    bad_field(field, "is " + shown(v) + ", too large");
  const auto x = v.get<int64_t>();
  if (x < min) bad_field(field, "must be >= " + std::to_string(min) + ", got " + std::to_string(x));
  return x;
}

double number_field(const json& v, const std::string& field) {
  if (!v.is_number()) bad_field(field, "must be a number, got " + shown(v));
  const double x = v.get<double>();
  if (!std::isfinite(x)) bad_field(field, "must be finite, got " + shown(v));
  return x;
}

std::string string_field(const json& v, const std::string& field) {
  if (!v.is_string()) bad_field(field, "must be a string, got " + shown(v));
  return v.get<std::string>();
}

void parse_parameters(const json& p, GenerateRequest& r) {
  if (!p.is_object()) bad_field("parameters", "must be an object, got " + shown(p));
  bool sampled = false, greedy_temperature = false, seeded = false;
  for (const auto& [key, v] : p.items()) {
    const std::string field = "parameters." + key;
    if (key == "max_tokens") {
      r.max_tokens = integer_field(v, field, 1);
    } else if (key == "temperature") {
      r.sampling.temperature = number_field(v, field);
      if (r.sampling.temperature < 0) bad_field(field, "must be >= 0 (0: greedy), got " + shown(v));
      greedy_temperature = r.sampling.temperature == 0;
      sampled = true;
    } else if (key == "top_k") {
      r.sampling.top_k = integer_field(v, field, 0);
      sampled = true;
    } else if (key == "top_p") {
      r.sampling.top_p = number_field(v, field);
      if (!(r.sampling.top_p > 0 && r.sampling.top_p <= 1)) bad_field(field, "must be in (0, 1], got " + shown(v));
      sampled = true;
    } else if (key == "seed") {
      if (!v.is_number_unsigned()) bad_field(field, "must be an integer >= 0, got " + shown(v));
      r.sampling.seed = v.get<uint64_t>();
      seeded = true;
    } else if (key == "stop") {
      const json list = v.is_string() ? json::array({v}) : v;
      if (!list.is_array()) bad_field(field, "must be a string or an array of strings, got " + shown(v));
      if (list.size() > kMaxStopStrings)
        bad_field(field, "has " + std::to_string(list.size()) + " strings, at most " + std::to_string(kMaxStopStrings));
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string item = field + (v.is_string() ? "" : "[" + std::to_string(i) + "]");
        r.stop.push_back(string_field(list[i], item));
        if (r.stop.back().empty()) bad_field(item, "is empty");
      }
    } else if (key == "timeout") {
      if (!v.is_number_unsigned()) bad_field(field, "must be an integer >= 0 (microseconds), got " + shown(v));
      r.timeout_us = v.get<uint64_t>();
    } else if (key == "stream") {
      if (!v.is_boolean()) bad_field(field, "must be a boolean, got " + shown(v));
    } else {
      bad_field(field, "is not a generate parameter (max_tokens, temperature, top_k, top_p, seed, stop, timeout, stream)");
    }
  }
  r.sampling.greedy = !sampled || greedy_temperature;
  if (greedy_temperature) r.sampling.temperature = 1.0;
  if (!r.sampling.greedy && !seeded) r.sampling.seed = std::random_device()() | (uint64_t(std::random_device()()) << 32);
}

}  // namespace

GenerateRequest parse_generate_request(std::string_view body) {
  const json j = read_json(body, kGenerateJsonLimits, "the generate request body");
  if (!j.is_object()) throw InvalidArgument("generate request: the body must be a JSON object, got " + shown(j));
  GenerateRequest r;
  bool has_text = false;
  for (const auto& [key, v] : j.items()) {
    if (key == "id") {
      r.id = string_field(v, "id");
    } else if (key == "text_input") {
      r.text_input = string_field(v, "text_input");
      has_text = true;
    } else if (key == "parameters") {
      parse_parameters(v, r);
    } else {
      bad_field(key, "is not a generate request field (id, text_input, parameters)");
    }
  }
  if (!has_text) bad_field("text_input", "is missing");
  if (r.text_input.empty()) bad_field("text_input", "is empty (the model needs at least one token)");
  return r;
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

bool is_text_generation_model(const models::PackageSpec& spec) {
  return spec.graph.is_object() && spec.graph.value("type", "") == "zoo" && spec.graph.value("model", "") == "gpt";
}

std::shared_ptr<TextGenerator> make_gpt_generator(std::shared_ptr<models::Module> module, const ModelConfig& config,
                                                  GenerationHooks hooks) {
  auto gpt = std::dynamic_pointer_cast<models::GPT>(module);
  if (!gpt)
    throw InvalidArgument("model '" + config.name +
                          "': not a text generation model (the generate endpoints serve the GPT zoo model, graph "
                          "{\"type\": \"zoo\", \"model\": \"gpt\"})");
  const Generation& g = config.generation;
  return std::make_shared<GenerateScheduler>(
      std::move(gpt), SchedulerOptions{.name = config.name,
                                       .max_batch = g.max_batch ? g.max_batch : std::max<int64_t>(1, config.max_batch_size),
                                       .max_prefill_batch = g.max_prefill_batch,
                                       .block_size = g.block_size,
                                       .max_batch_total_tokens = g.max_batch_total_tokens,
                                       .max_queue = config.max_queue_size,
                                       .default_timeout_us = config.default_timeout_us,
                                       .allow_timeout_override = config.allow_timeout_override,
                                       .hooks = std::move(hooks)});
}

}  // namespace hg::server
