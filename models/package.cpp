#include "models/package.h"

#include "models/layer_spec.h"

#include "engine/atomic_file.h"
#include "engine/error.h"
#include "engine/json_reader.h"
#include "models/config_fields.h"
#include "models/init.h"
#include "models/layer_spec.h"
#include "models/module.h"
#include "models/op_graph.h"
#include "models/state_dict.h"
#include "models/zoo.h"

namespace hg::models {

namespace {

using Json = nlohmann::json;

const Json& need(const Json& obj, const char* key, Json::value_t type, const std::filesystem::path& file,
                 const std::string& where) {
  const std::string field = where.empty() ? key : where + "." + key;
  auto it = obj.find(key);
  if (it == obj.end()) bad_field(file, field, "is missing");
  const bool ok = type == Json::value_t::number_integer ? it->is_number_integer() : it->type() == type;
  if (!ok) bad_field(file, field, std::string("has type ") + it->type_name());
  return *it;
}

// batched: every shape starts with the batch dimension -1.
std::vector<IOSpec> parse_io(const Json& j, const char* key, const std::filesystem::path& file, bool batched) {
  const Json& arr = need(j, key, Json::value_t::array, file, "");
  if (arr.empty()) bad_field(file, key, "is empty");
  std::vector<IOSpec> r;
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string where = std::string(key) + "[" + std::to_string(i) + "]";
    if (!arr[i].is_object()) bad_field(file, where, "is not an object");
    IOSpec s;
    s.name = need(arr[i], "name", Json::value_t::string, file, where).get<std::string>();
    if (s.name.empty()) bad_field(file, where + ".name", "is empty");
    s.datatype = need(arr[i], "datatype", Json::value_t::string, file, where).get<std::string>();
    try {
      dtype_from_kserve(s.datatype);
    } catch (const DTypeError&) {
      bad_field(file, where + ".datatype", "is '" + s.datatype + "', not a KServe datatype (FP32, INT64, ...)");
    }
    const Json& shape = need(arr[i], "shape", Json::value_t::array, file, where);
    for (size_t d = 0; d < shape.size(); ++d) {
      if (!shape[d].is_number_integer() || shape[d].get<int64_t>() < -1 || shape[d].get<int64_t>() == 0)
        bad_field(file, where + ".shape[" + std::to_string(d) + "]", "must be a positive integer or -1");
      s.shape.push_back(shape[d].get<int64_t>());
    }
    if (batched && (shape.empty() || s.shape[0] != -1))
      bad_field(file, where + ".shape", "must start with the batch dimension -1 (or the model says \"batched\": false)");
    for (const auto& o : r)
      if (o.name == s.name) bad_field(file, where + ".name", "repeats '" + s.name + "'");
    r.push_back(std::move(s));
  }
  return r;
}

// Loads every state_dict tensor of `net` (built under init::SkipInit) from the package's
// weights (dtype and shape checked; no tensor left over).
std::unique_ptr<Module> load_weights(std::unique_ptr<Module> net, const ModelPackage& p, Device device) {
  const auto wfile = (p.dir / "weights.safetensors").string();
  try {
    net->load_state_dict(tensors_from(p.weights, wfile, device), true, LoadMode::Adopt);
  } catch (const InvalidArgument& e) {
    throw FormatError(wfile + ": " + e.what());
  }
  return net;
}

constexpr std::pair<DType, const char*> kKServeTypes[] = {
    {DType::F32, "FP32"}, {DType::I64, "INT64"}, {DType::I32, "INT32"}, {DType::U8, "UINT8"},
    {DType::BOOL, "BOOL"}, {DType::F64, "FP64"},  {DType::F16, "FP16"},  {DType::BF16, "BF16"}};

}  // namespace

std::string kserve_datatype(DType t) {
  for (const auto& [d, name] : kKServeTypes)
    if (d == t) return name;
  throw DTypeError(std::string("dtype ") + dtype_name(t) + " has no KServe datatype");
}

DType dtype_from_kserve(const std::string& datatype) {
  for (const auto& [d, name] : kKServeTypes)
    if (datatype == name) return d;
  throw DTypeError("'" + datatype + "' is not a KServe datatype hgraph serves");
}

ModelPackage load_package(const std::filesystem::path& dir, std::unique_ptr<Module>* module, Device device) {
  const auto file = dir / "model.json";
  if (!std::filesystem::is_regular_file(file)) throw IoError(file.string() + ": no such file");
  // An imported graph lists every op and shape of the model: generous, but bounded.
  const Json j = read_json_file(file, kModelJsonLimits);
  return package_from(j, safetensors::read(dir / "weights.safetensors"), dir, module, device);
}

ModelPackage package_from(const nlohmann::json& j, safetensors::File weights, const std::filesystem::path& dir,
                          std::unique_ptr<Module>* module, Device device) {
  const auto file = dir / "model.json";
  if (!j.is_object()) throw FormatError(file.string() + ": the top level is not a JSON object");
  ModelPackage p;
  p.dir = dir;
  if (need(j, "format", Json::value_t::string, file, "").get<std::string>() != "hgraph-model")
    bad_field(file, "format", "is not \"hgraph-model\"");
  p.format_version = static_cast<int>(need(j, "format_version", Json::value_t::number_integer, file, "").get<int64_t>());
  if (p.format_version != kPackageFormatVersion)
    bad_field(file, "format_version", "is " + std::to_string(p.format_version) + "; this build reads version " +
                                    std::to_string(kPackageFormatVersion));
  p.spec.name = need(j, "name", Json::value_t::string, file, "").get<std::string>();
  if (p.spec.name.empty()) bad_field(file, "name", "is empty");
  if (j.contains("batched")) p.spec.batched = need(j, "batched", Json::value_t::boolean, file, "").get<bool>();
  p.spec.inputs = parse_io(j, "inputs", file, p.spec.batched);
  p.spec.outputs = parse_io(j, "outputs", file, p.spec.batched);
  p.spec.graph = need(j, "graph", Json::value_t::object, file, "");
  if (j.contains("metadata")) p.spec.metadata = need(j, "metadata", Json::value_t::object, file, "");
  p.weights = std::move(weights);
  auto built = build_module(p, device);  // validates the graph against the weights and the I/O shapes
  if (module) *module = std::move(built);
  return p;
}

nlohmann::json package_json(const PackageSpec& spec) {
  Json io_in = Json::array(), io_out = Json::array();
  for (const auto& s : spec.inputs) io_in.push_back({{"name", s.name}, {"datatype", s.datatype}, {"shape", s.shape}});
  for (const auto& s : spec.outputs) io_out.push_back({{"name", s.name}, {"datatype", s.datatype}, {"shape", s.shape}});
  Json j = {{"format", "hgraph-model"}, {"format_version", kPackageFormatVersion},
            {"name", spec.name},        {"platform", "hgraph_v1"},
            {"inputs", io_in},          {"outputs", io_out},
            {"graph", spec.graph},      {"metadata", spec.metadata}};
  if (!spec.batched) j["batched"] = false;
  return j;
}

Shape sample_shape(const PackageSpec& spec, const IOSpec& io) {
  return Shape(io.shape.begin() + (spec.batched && !io.shape.empty() ? 1 : 0), io.shape.end());
}

std::unique_ptr<Module> build_module(const ModelPackage& p, Device device) {
  const auto file = p.dir / "model.json";
  const Json& g = p.spec.graph;
  const std::string type = need(g, "type", Json::value_t::string, file, "graph").get<std::string>();
  if (type != "ops") {  // zoo and sequential graphs: batched, one fixed sample shape
    if (!p.spec.batched) bad_field(file, "batched", "is false; only an \"ops\" graph may be unbatched");
    for (const auto* list : {&p.spec.inputs, &p.spec.outputs})
      for (const auto& io : *list)
        for (size_t d = 1; d < io.shape.size(); ++d)
          if (io.shape[d] == -1)
            bad_field(file, "shape", "of '" + io.name + "' has a dynamic dimension " + std::to_string(d) +
                                         "; a " + type + " graph takes -1 only as the batch dimension");
  }
  if (type == "zoo") {
    int64_t weight_elements = 0;  // validated entries: small, no overflow
    for (const auto& e : p.weights.entries) weight_elements += numel(e.shape);
    std::unique_ptr<Module> net;
    {
      init::SkipInit skip;
      net = zoo::build(p.spec, file.string(), weight_elements);
    }
    return load_weights(std::move(net), p, device);
  }
  if (type == "ops") return build_op_graph_module(p, device);
  if (type != "sequential") bad_field(file, "graph.type", "is '" + type + "', not \"sequential\", \"zoo\" or \"ops\"");
  const Json& layers = need(g, "layers", Json::value_t::array, file, "graph");
  if (p.spec.inputs.size() != 1 || p.spec.outputs.size() != 1)
    bad_field(file, "inputs", "a sequential graph has exactly one input and one output");
  SequentialPlan plan;
  try {
    plan = plan_sequential(layers, sample_shape(p.spec, p.spec.inputs[0]), "graph.layers");
  } catch (const InvalidArgument& e) {
    throw FormatError(file.string() + ": " + e.what());
  }
  if (p.spec.inputs[0].datatype != plan.input_datatype)
    bad_field(file, "inputs[0].datatype", "is " + p.spec.inputs[0].datatype + ", the first layer takes " + plan.input_datatype);
  if (sample_shape(p.spec, p.spec.outputs[0]) != plan.output)
    bad_field(file, "outputs[0].shape", "is " + shape_str(p.spec.outputs[0].shape) + " but the graph produces " +
                                      shape_str(plan.output) + " per sample");
  int64_t weight_elements = 0;  // validated entries: small, no overflow
  for (const auto& e : p.weights.entries) weight_elements += numel(e.shape);
  if (weight_elements != plan.parameters)  // before any allocation the graph asks for
    bad_field(file, "graph.layers", "describe " + std::to_string(plan.parameters) +
                                        " parameter and buffer elements, weights.safetensors holds " +
                                        std::to_string(weight_elements));
  std::unique_ptr<Sequential> net;
  {
    init::SkipInit skip;
    net = build_sequential(plan, 0);
  }
  return load_weights(std::move(net), p, device);
}

void save_package(const std::filesystem::path& dir, const Module& m, const PackageSpec& spec) {
  std::filesystem::create_directories(dir);
  safetensors::write(dir / "weights.safetensors", to_safetensors(m.state_dict()));
  PackageSpec s = spec;
  s.graph = m.spec();
  write_file_atomic(dir / "model.json", {as_bytes(package_json(s).dump(2) + "\n")});
}

}  // namespace hg::models
