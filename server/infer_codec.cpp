#include "server/infer_codec.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "engine/error.h"
#include "engine/json_reader.h"

namespace hg::server {

namespace {

using json = nlohmann::json;

// Levels a request adds above a tensor's `data` ({"inputs":[{"data":...}]}) plus room for
// nested parameters; the data's own depth is checked exactly by json_to_bytes.
constexpr size_t kEnvelopeDepth = 8;

json parse_header(std::string_view text, const WireLimits& limits, const char* what) {
  json j = read_json(text, {.max_depth = limits.max_json_depth + kEnvelopeDepth, .max_values = limits.max_json_values,
                            .max_bytes = text.size()}, what);
  if (!j.is_object()) throw InvalidArgument(std::string(what) + " must be a JSON object, got " + j.type_name());
  return j;
}

// A JSON value for an error message.
std::string text(const json& j) { return json_excerpt(j); }

// A member of an object; null counts as absent (clients send "parameters": null).
const json* member(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

json object_member(const json& obj, const char* key, const std::string& what) {
  const json* p = member(obj, key);
  if (!p) return json::object();
  if (!p->is_object()) throw InvalidArgument(what + ": '" + key + "' must be an object, got " + p->type_name());
  return *p;
}

std::optional<std::string> string_member(const json& obj, const char* key, const std::string& what) {
  const json* p = member(obj, key);
  if (!p) return std::nullopt;
  if (!p->is_string()) throw InvalidArgument(what + ": '" + key + "' must be a string, got " + p->type_name());
  return p->get<std::string>();
}

std::optional<bool> bool_param(const json& params, const char* key, const std::string& what) {
  const json* p = member(params, key);
  if (!p) return std::nullopt;
  if (!p->is_boolean()) throw InvalidArgument(what + ": parameter '" + key + "' must be a bool, got " + text(*p));
  return p->get<bool>();
}

std::optional<uint64_t> uint_param(const json& params, const char* key, const std::string& what) {
  const json* p = member(params, key);
  if (!p) return std::nullopt;
  if (!p->is_number_unsigned() && !(p->is_number_integer() && p->get<int64_t>() >= 0))
    throw InvalidArgument(what + ": parameter '" + key + "' must be a non-negative integer, got " + text(*p));
  return p->get<uint64_t>();
}

std::string type_names() {
  std::string s;
  for (WireType t : kAllWireTypes) {
    if (!s.empty()) s += ", ";
    s += wire_type_name(t);
  }
  return s;
}

// One entry of "inputs" (request) or "outputs" (response) without its bytes: those come from
// `data` or, when binary_size is set, from the binary part of the body.
struct DecodedTensor {
  WireTensor tensor;
  std::optional<uint64_t> binary_size;
};

DecodedTensor decode_tensor(const json& j, size_t index, std::string_view role, const char* list,
                            const WireLimits& limits) {
  const std::string at = std::string(list) + "[" + std::to_string(index) + "]";
  if (!j.is_object()) throw InvalidArgument(at + " must be an object, got " + j.type_name());
  DecodedTensor d;
  WireTensor& t = d.tensor;
  const json* name = member(j, "name");
  if (!name || !name->is_string()) throw InvalidArgument(at + " has no string 'name'");
  t.name = name->get<std::string>();
  const std::string what = std::string(role) + " '" + t.name + "'";

  const json* dt = member(j, "datatype");
  if (!dt || !dt->is_string()) throw InvalidArgument(what + " has no string 'datatype'");
  const auto type = wire_type_from_name(dt->get_ref<const std::string&>());
  if (!type)
    throw InvalidArgument(what + ": unknown datatype '" + dt->get_ref<const std::string&>() +
                          "' (expected one of " + type_names() + ")");
  t.datatype = *type;

  const json* shape = member(j, "shape");
  if (!shape || !shape->is_array()) throw InvalidArgument(what + " has no 'shape' array");
  t.shape.reserve(shape->size());
  for (const json& dim : *shape) {
    if (!dim.is_number_unsigned() || dim.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      throw InvalidArgument(what + ": 'shape' must hold non-negative integers, got " + text(*shape));
    t.shape.push_back(dim.get<int64_t>());
  }
  const uint64_t count = element_count(t.shape);
  if (count > limits.max_elements)
    throw InvalidArgument(what + ": shape " + shape_text(t.shape) + " has " +
                          (count == UINT64_MAX ? std::string("more than 2^64") : std::to_string(count)) +
                          " elements, more than the limit of " + std::to_string(limits.max_elements));

  t.parameters = object_member(j, "parameters", what);
  d.binary_size = uint_param(t.parameters, "binary_data_size", what);
  const json* data = member(j, "data");
  if (d.binary_size) {
    if (data) throw InvalidArgument(what + " has both 'data' and parameters.binary_data_size");
    t.parameters.erase("binary_data_size");
    t.binary = true;
  } else {
    if (!data) throw InvalidArgument(what + " has no 'data' (and no parameters.binary_data_size)");
    t.data = json_to_bytes(*data, t, limits, role);
  }
  return d;
}

// Takes the binary tensors' bytes from body[header_length...], in order; they must use up the
// body exactly.
void read_binary(std::vector<DecodedTensor>& tensors, std::string_view body, std::optional<size_t> header_length,
                 std::string_view role) {
  size_t offset = header_length.value_or(body.size());
  for (DecodedTensor& d : tensors) {
    if (!d.binary_size) continue;
    WireTensor& t = d.tensor;
    const std::string what = std::string(role) + " '" + t.name + "'";
    if (!header_length)
      throw InvalidArgument(what + " has parameters.binary_data_size, but the body came without an "
                            "Inference-Header-Content-Length header (binary data needs one)");
    if (*d.binary_size > body.size() - offset)
      throw InvalidArgument(what + ": binary_data_size " + std::to_string(*d.binary_size) + " at body byte offset " +
                            std::to_string(offset) + " runs past the end of the " + std::to_string(body.size()) +
                            "-byte body");
    const std::string_view bytes = body.substr(offset, static_cast<size_t>(*d.binary_size));
    try {
      check_binary(bytes, t, role);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string(e.what()) + " (its data starts at body byte offset " + std::to_string(offset) +
                            ")");
    }
    t.data.assign(bytes);
    offset += bytes.size();
  }
  if (offset != body.size())
    throw InvalidArgument("the body has " + std::to_string(body.size() - offset) + " bytes after the binary " +
                          std::string(role) + "s (at byte offset " + std::to_string(offset) +
                          "): the JSON header (Inference-Header-Content-Length " +
                          std::to_string(header_length.value_or(body.size())) +
                          ") and the binary_data_size values must add up to the body's " +
                          std::to_string(body.size()) + " bytes");
}

std::vector<WireTensor> decode_tensors(const json& top, const char* list, std::string_view role,
                                       std::string_view body, std::optional<size_t> header_length,
                                       const WireLimits& limits) {
  const json* arr = member(top, list);
  if (!arr || !arr->is_array())
    throw InvalidArgument(std::string(role == "input" ? "request" : "response") + " has no '" + list + "' array");
  const size_t max = role == "input" ? limits.max_inputs : limits.max_outputs;
  if (arr->size() > max)
    throw InvalidArgument(std::string(role == "input" ? "request" : "response") + ": '" + list + "' has " +
                          std::to_string(arr->size()) + " entries; the model has " + std::to_string(max) + " " + list);
  std::vector<DecodedTensor> decoded;
  decoded.reserve(arr->size());
  for (size_t i = 0; i < arr->size(); ++i) decoded.push_back(decode_tensor((*arr)[i], i, role, list, limits));
  read_binary(decoded, body, header_length, role);
  std::vector<WireTensor> out;
  out.reserve(decoded.size());
  for (DecodedTensor& d : decoded) out.push_back(std::move(d.tensor));
  return out;
}

std::string_view header_part(std::string_view body, std::optional<size_t> header_length) {
  if (!header_length) return body;
  if (*header_length > body.size())
    throw InvalidArgument("Inference-Header-Content-Length is " + std::to_string(*header_length) +
                          " but the body has only " + std::to_string(body.size()) + " bytes");
  return body.substr(0, *header_length);
}

// ---- encoding ---------------------------------------------------------------------------

void append_params(std::string& out, const json& p) { out += p.dump(-1, ' ', false, json::error_handler_t::replace); }

// {"name":..,"datatype":..,"shape":..,"parameters":..,"data":..}; a binary tensor gets
// binary_data_size and its bytes go to `tail`.
void append_tensor(std::string& out, std::string& tail, const WireTensor& t, bool binary) {
  out += "{\"name\":";
  append_json_string(out, t.name);
  out += ",\"datatype\":\"";
  out += wire_type_name(t.datatype);
  out += "\",\"shape\":";
  out += shape_text(t.shape);
  if (binary) {
    out += ",\"parameters\":";
    if (t.parameters.is_object() && !t.parameters.empty()) {
      json p = t.parameters;
      p["binary_data_size"] = t.data.size();
      append_params(out, p);
    } else {
      out += "{\"binary_data_size\":";
      out += std::to_string(t.data.size());
      out += '}';
    }
    tail += t.data;
    out += '}';
    return;
  }
  if (t.parameters.is_object() && !t.parameters.empty()) {
    out += ",\"parameters\":";
    append_params(out, t.parameters);
  }
  out += ",\"data\":";
  append_json_data(out, t);
  out += '}';
}

EncodedBody finish(std::string header, std::string tail) {
  EncodedBody e;
  if (tail.empty()) {
    e.body = std::move(header);
    e.content_type = "application/json";
    return e;
  }
  e.header_length = header.size();
  e.body = std::move(header);
  e.body += tail;
  e.content_type = "application/octet-stream";
  return e;
}

size_t data_bytes(const std::vector<WireTensor>& ts) {
  size_t n = 0;
  for (const WireTensor& t : ts) n += t.data.size();
  return n;
}


// ---- binding ----------------------------------------------------------------------------

std::string io_names(const std::vector<models::IOSpec>& ios) {
  std::string s;
  for (const auto& io : ios) s += (s.empty() ? "'" : ", '") + io.name + "'";
  return s;
}

WireType model_wire_type(const models::IOSpec& io, const std::string& model) {
  const auto t = wire_type_from_name(io.datatype);
  if (!t) throw InternalError("model '" + model + "': tensor '" + io.name + "' has unknown datatype '" + io.datatype + "'");
  return *t;
}

double element_value(const WireTensor& t, size_t i) {
  const char* p = t.data.data() + i * wire_type_size(t.datatype);
  const auto load = [p]<class T>(T) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  };
  switch (t.datatype) {
    case WireType::BOOL: return load(uint8_t{}) ? 1.0 : 0.0;
    case WireType::UINT8: return load(uint8_t{});
    case WireType::UINT16: return load(uint16_t{});
    case WireType::UINT32: return load(uint32_t{});
    case WireType::UINT64: return static_cast<double>(load(uint64_t{}));
    case WireType::INT8: return load(int8_t{});
    case WireType::INT16: return load(int16_t{});
    case WireType::INT32: return load(int32_t{});
    case WireType::INT64: return static_cast<double>(load(int64_t{}));
    case WireType::FP16: return f16{load(uint16_t{})}.to_float();
    case WireType::BF16: return bf16{load(uint16_t{})}.to_float();
    case WireType::FP32: return load(float{});
    case WireType::FP64: return load(double{});
    case WireType::BYTES: break;
  }
  throw InternalError("element_value of a BYTES tensor");
}

// The classification extension: per batch row (or for the whole tensor when unbatched), the
// `top` largest values as BYTES "value:index", largest first, ties by lower index.
WireTensor classify(const WireTensor& t, uint32_t top, bool batched) {
  const uint64_t n = element_count(t.shape);
  const uint64_t rows = batched && n > 0 ? static_cast<uint64_t>(t.shape[0]) : 1;
  const uint64_t classes = rows ? n / rows : 0;
  const uint64_t k = std::min<uint64_t>(top, classes);
  WireTensor c;
  c.name = t.name;
  c.datatype = WireType::BYTES;
  c.shape = batched ? std::vector<int64_t>{static_cast<int64_t>(rows), static_cast<int64_t>(k)}
                    : std::vector<int64_t>{static_cast<int64_t>(k)};
  std::vector<std::string> labels;
  labels.reserve(rows * k);
  std::vector<size_t> order(classes);
  for (uint64_t r = 0; r < rows; ++r) {
    for (size_t i = 0; i < classes; ++i) order[i] = i;
    const size_t base = r * classes;
    std::partial_sort(order.begin(), order.begin() + static_cast<ptrdiff_t>(k), order.end(), [&](size_t a, size_t b) {
      const double va = element_value(t, base + a), vb = element_value(t, base + b);
      return va > vb || (va == vb && a < b);
    });
    for (size_t i = 0; i < k; ++i) {
      std::string label;
      const double v = element_value(t, base + order[i]);
      if (t.datatype == WireType::FP64) append_number(label, v);
      else append_number(label, static_cast<float>(v));
      label += ':';
      label += std::to_string(order[i]);
      labels.push_back(std::move(label));
    }
  }
  c.data = bytes_encode(labels);
  return c;
}

}  // namespace

InferRequest decode_infer_request(std::string_view body, std::optional<size_t> header_length,
                                  const WireLimits& limits) {
  InferRequest req;
  if (header_length == size_t{0}) {  // raw mode: bind_inputs names and shapes it
    req.raw = true;
    WireTensor t;
    t.data.assign(body);
    t.binary = true;
    req.inputs.push_back(std::move(t));
    return req;
  }
  const json j = parse_header(header_part(body, header_length), limits,
                              header_length ? "the request's JSON header" : "the request body");
  req.id = string_member(j, "id", "request");
  req.parameters = object_member(j, "parameters", "request");
  req.binary_data_output = bool_param(req.parameters, "binary_data_output", "request").value_or(false);
  if (const json* p = member(req.parameters, "priority")) {
    if (!p->is_number_integer())
      throw InvalidArgument("request: parameter 'priority' must be an integer, got " + text(*p));
    req.priority = p->get<int64_t>();
  }
  req.timeout_us = uint_param(req.parameters, "timeout", "request");
  req.inputs = decode_tensors(j, "inputs", "input", body, header_length, limits);

  if (const json* outs = member(j, "outputs")) {
    if (!outs->is_array()) throw InvalidArgument("request: 'outputs' must be an array, got " + std::string(outs->type_name()));
    if (outs->size() > limits.max_outputs)
      throw InvalidArgument("request: 'outputs' has " + std::to_string(outs->size()) + " entries; the model has " +
                            std::to_string(limits.max_outputs) + " outputs");
    std::unordered_set<std::string_view> requested;
    requested.reserve(outs->size());
    for (size_t i = 0; i < outs->size(); ++i) {
      const json& o = (*outs)[i];
      const json* name = o.is_object() ? member(o, "name") : nullptr;
      if (!name || !name->is_string()) throw InvalidArgument("outputs[" + std::to_string(i) + "] has no string 'name'");
      RequestedOutput r;
      r.name = name->get<std::string>();
      const std::string what = "output '" + r.name + "'";
      if (!requested.insert(name->get_ref<const std::string&>()).second)
        throw InvalidArgument(what + " is requested more than once");
      r.parameters = object_member(o, "parameters", what);
      r.binary = bool_param(r.parameters, "binary_data", what);
      uint_param(r.parameters, "classification", what);  // checked here, used by bind_inputs
      req.outputs.push_back(std::move(r));
    }
  }
  return req;
}

EncodedBody encode_infer_request(const InferRequest& req) {
  if (req.raw) {
    if (req.inputs.size() != 1)
      throw InvalidArgument("a raw binary request carries exactly one input, this one has " +
                            std::to_string(req.inputs.size()));
    return {req.inputs[0].data, size_t{0}, "application/octet-stream"};
  }
  std::string out, tail;
  out.reserve(256 + (data_bytes(req.inputs) * 3));
  tail.reserve(data_bytes(req.inputs));
  out += '{';
  if (req.id) {
    out += "\"id\":";
    append_json_string(out, *req.id);
    out += ',';
  }
  json params = req.parameters.is_object() ? req.parameters : json::object();
  if (req.binary_data_output) params["binary_data_output"] = true;
  if (req.priority) params["priority"] = *req.priority;
  if (req.timeout_us) params["timeout"] = *req.timeout_us;
  if (!params.empty()) {
    out += "\"parameters\":";
    append_params(out, params);
    out += ',';
  }
  out += "\"inputs\":[";
  for (size_t i = 0; i < req.inputs.size(); ++i) {
    if (i) out += ',';
    append_tensor(out, tail, req.inputs[i], req.inputs[i].binary);
  }
  out += ']';
  if (!req.outputs.empty()) {
    out += ",\"outputs\":[";
    for (size_t i = 0; i < req.outputs.size(); ++i) {
      const RequestedOutput& o = req.outputs[i];
      if (i) out += ',';
      out += "{\"name\":";
      append_json_string(out, o.name);
      json p = o.parameters.is_object() ? o.parameters : json::object();
      if (o.binary) p["binary_data"] = *o.binary;
      if (!p.empty()) {
        out += ",\"parameters\":";
        append_params(out, p);
      }
      out += '}';
    }
    out += ']';
  }
  out += '}';
  return finish(std::move(out), std::move(tail));
}

EncodedBody encode_infer_response(const InferResponse& resp) {
  std::string out, tail;
  size_t json_bytes = 0, binary_bytes = 0;
  for (const WireTensor& t : resp.outputs) (t.binary ? binary_bytes : json_bytes) += t.data.size();
  out.reserve(160 + json_bytes * 3 + resp.outputs.size() * 96);
  tail.reserve(binary_bytes);
  out += "{\"model_name\":";
  append_json_string(out, resp.model_name);
  if (!resp.model_version.empty()) {
    out += ",\"model_version\":";
    append_json_string(out, resp.model_version);
  }
  if (resp.id) {
    out += ",\"id\":";
    append_json_string(out, *resp.id);
  }
  if (resp.parameters.is_object() && !resp.parameters.empty()) {
    out += ",\"parameters\":";
    append_params(out, resp.parameters);
  }
  out += ",\"outputs\":[";
  for (size_t i = 0; i < resp.outputs.size(); ++i) {
    if (i) out += ',';
    append_tensor(out, tail, resp.outputs[i], resp.outputs[i].binary);
  }
  out += "]}";
  return finish(std::move(out), std::move(tail));
}

InferResponse decode_infer_response(std::string_view body, std::optional<size_t> header_length,
                                    const WireLimits& limits) {
  const json j = parse_header(header_part(body, header_length), limits,
                              header_length ? "the response's JSON header" : "the response body");
  InferResponse resp;
  const auto name = string_member(j, "model_name", "response");
  if (!name) throw InvalidArgument("response has no string 'model_name'");
  resp.model_name = *name;
  resp.model_version = string_member(j, "model_version", "response").value_or("");
  resp.id = string_member(j, "id", "response");
  resp.parameters = object_member(j, "parameters", "response");
  resp.outputs = decode_tensors(j, "outputs", "output", body, header_length, limits);
  return resp;
}

namespace {
// Whether an input has a dynamic dimension besides the batch.
bool dynamic(const models::PackageSpec& spec) {
  for (const auto& io : spec.inputs)
    for (int64_t d : models::sample_shape(spec, io))
      if (d == -1) return true;
  return false;
}
}  // namespace

ModelInputs bind_inputs(InferRequest& req, const models::PackageSpec& spec, int64_t max_batch_size,
                        std::string_view model_name) {
  const std::string model(model_name.empty() ? std::string_view(spec.name) : model_name);
  if (req.raw) {
    if (spec.inputs.size() != 1 || req.inputs.size() != 1)
      throw InvalidArgument("a raw binary request (Inference-Header-Content-Length: 0) needs a model with "
                            "exactly one input; model '" + model + "' has " + std::to_string(spec.inputs.size()));
    const models::IOSpec& io = spec.inputs[0];
    if (dynamic(spec))
      throw InvalidArgument("a raw binary request (Inference-Header-Content-Length: 0) carries no shape; model '" + model +
                            "' has dynamic dimensions (shape " + shape_text(io.shape) + "): send a JSON header");
    WireTensor& t = req.inputs[0];
    t.name = io.name;
    t.datatype = model_wire_type(io, model);
    t.shape = io.shape;
    for (int64_t& d : t.shape)
      if (d == -1) d = 1;  // raw mode is batch 1
    check_binary(t.data, t, "input");
  }

  ModelInputs in;
  in.data.resize(spec.inputs.size());
  if (dynamic(spec)) in.shapes.resize(spec.inputs.size());
  std::vector<WireTensor*> given(spec.inputs.size(), nullptr);
  int64_t batch = -1;
  size_t batch_from = 0;
  for (WireTensor& t : req.inputs) {
    size_t k = 0;
    while (k < spec.inputs.size() && spec.inputs[k].name != t.name) ++k;
    if (k == spec.inputs.size())
      throw InvalidArgument("unknown input '" + t.name + "' for model '" + model +
                            "' (model inputs: " + io_names(spec.inputs) + ")");
    if (given[k]) throw InvalidArgument("input '" + t.name + "' is given more than once");
    given[k] = &t;
    const models::IOSpec& io = spec.inputs[k];
    if (io.datatype != wire_type_name(t.datatype))
      throw InvalidArgument("input '" + t.name + "' of model '" + model + "': expected datatype " + io.datatype +
                            ", got " + wire_type_name(t.datatype));
    // A batched model's dimension 0 is the batch; any other -1 is a dynamic dimension (1 or more).
    const bool batched = spec.batched;
    if (t.shape.size() != io.shape.size())
      throw InvalidArgument("unexpected shape for input '" + t.name + "' of model '" + model + "': expected " +
                            shape_text(io.shape) + ", got " + shape_text(t.shape) + " (" +
                            std::to_string(io.shape.size()) + " dimensions, not " + std::to_string(t.shape.size()) + ")");
    for (size_t i = batched ? 1 : 0; i < io.shape.size(); ++i)
      if (io.shape[i] == -1 ? t.shape[i] < 1 : io.shape[i] != t.shape[i])
        throw InvalidArgument("unexpected shape for input '" + t.name + "' of model '" + model + "': expected " +
                              shape_text(io.shape) + ", got " + shape_text(t.shape) + " (dimension " + std::to_string(i) +
                              " must be " + (io.shape[i] == -1 ? std::string("1 or more") : std::to_string(io.shape[i])) +
                              ")");
    if (dynamic(spec)) in.shapes[k] = Shape(t.shape.begin() + (batched ? 1 : 0), t.shape.end());
    const int64_t this_batch = batched ? t.shape[0] : 1;
    if (batch < 0) {
      batch = this_batch;
      batch_from = k;
    } else if (this_batch != batch) {
      throw InvalidArgument("inputs disagree on the batch size: '" + spec.inputs[batch_from].name + "' has " +
                            std::to_string(batch) + ", '" + t.name + "' has " + std::to_string(this_batch));
    }
  }
  for (size_t k = 0; k < spec.inputs.size(); ++k)
    if (!given[k])
      throw InvalidArgument("missing input '" + spec.inputs[k].name + "' for model '" + model +
                            "' (expected shape " + shape_text(spec.inputs[k].shape) + ", datatype " +
                            spec.inputs[k].datatype + ")");
  if (batch < 1) throw InvalidArgument("batch size must be at least 1, got " + std::to_string(batch));
  if (max_batch_size > 0 && batch > max_batch_size)
    throw InvalidArgument("batch size " + std::to_string(batch) + " exceeds the max_batch_size " +
                          std::to_string(max_batch_size) + " of model '" + model + "'");
  in.batch = batch;

  const bool all_binary = req.binary_data_output || req.raw;
  if (req.outputs.empty()) {
    for (size_t j = 0; j < spec.outputs.size(); ++j) {
      in.outputs.push_back(j);
      in.binary.push_back(all_binary);
      in.classification.push_back(0);
    }
  }
  for (const RequestedOutput& o : req.outputs) {
    size_t j = 0;
    while (j < spec.outputs.size() && spec.outputs[j].name != o.name) ++j;
    if (j == spec.outputs.size())
      throw InvalidArgument("unknown output '" + o.name + "' requested from model '" + model +
                            "' (model outputs: " + io_names(spec.outputs) + ")");
    const auto top = static_cast<uint32_t>(
        std::min<uint64_t>(uint_param(o.parameters, "classification", "output '" + o.name + "'").value_or(0), UINT32_MAX));
    if (top > 0 && model_wire_type(spec.outputs[j], model) == WireType::BYTES)
      throw InvalidArgument("output '" + o.name + "' of model '" + model +
                            "' is BYTES: classification needs a numeric output");
    in.outputs.push_back(j);
    in.binary.push_back(req.raw || o.binary.value_or(req.binary_data_output));
    in.classification.push_back(top);
  }

  for (size_t k = 0; k < spec.inputs.size(); ++k) in.data[k] = std::move(given[k]->data);
  return in;
}

InferResponse make_response(const InferRequest& req, const models::PackageSpec& spec, const ModelInputs& in,
                            std::string model_name, std::string model_version, std::vector<std::string>&& outputs,
                            const std::vector<Shape>& output_shapes) {
  InferResponse resp;
  resp.model_name = std::move(model_name);
  resp.model_version = std::move(model_version);
  resp.id = req.id;
  resp.outputs.reserve(in.outputs.size());
  for (size_t s = 0; s < in.outputs.size(); ++s) {
    const size_t j = in.outputs[s];
    const models::IOSpec& io = spec.outputs.at(j);
    WireTensor t;
    t.name = io.name;
    t.datatype = model_wire_type(io, resp.model_name);
    if (!output_shapes.empty()) {
      t.shape = spec.batched ? Shape{in.batch} : Shape{};
      t.shape.insert(t.shape.end(), output_shapes.at(j).begin(), output_shapes.at(j).end());
    } else {
      t.shape = io.shape;
      for (int64_t& d : t.shape)
        if (d == -1) d = in.batch;
    }
    t.data = std::move(outputs.at(j));
    if (const size_t size = wire_type_size(t.datatype); size && t.data.size() != element_count(t.shape) * size)
      throw InternalError("output '" + t.name + "' of model '" + resp.model_name + "' has " +
                          std::to_string(t.data.size()) + " bytes, shape " + shape_text(t.shape) + " of " +
                          io.datatype + " needs " + std::to_string(element_count(t.shape) * size));
    if (t.datatype == WireType::BYTES) check_binary(t.data, t, "output");
    const uint32_t top = s < in.classification.size() ? in.classification[s] : 0;
    if (top > 0) t = classify(t, top, spec.batched);
    t.binary = in.binary.at(s);
    resp.outputs.push_back(std::move(t));
  }
  return resp;
}

}  // namespace hg::server
