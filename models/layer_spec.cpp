// Sequential stacks from JSON layer lists (models/layer_spec.h).
#include "models/layer_spec.h"

#include <set>

#include "engine/error.h"
#include "models/attention.h"

namespace hg::models {

namespace {

using Json = nlohmann::json;
constexpr int64_t kMaxValue = int64_t{1} << 24;
constexpr int64_t kMaxParameters = int64_t{1} << 32;
constexpr size_t kMaxLayers = 4096;

// Reads the fields of one layer object; every field read once, unknown fields are errors.
class Fields {
 public:
  Fields(const Json& l, std::string where) : l_(l), where_(std::move(where)) {}
  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    throw InvalidArgument(where_ + (field.empty() ? "" : "." + field) + ": " + why);
  }
  int64_t integer(const std::string& key, std::optional<int64_t> fallback, int64_t lo = 1) {
    const Json* v = take(key);
    if (!v) {
      if (!fallback) fail(key, "is required");
      return *fallback;
    }
    if (!v->is_number_integer()) fail(key, "expected an integer, got " + v->dump());
    const auto x = v->get<int64_t>();
    if (x < lo || x > kMaxValue) fail(key, "is " + std::to_string(x) + ", expected " + std::to_string(lo) + ".." + std::to_string(kMaxValue));
    return x;
  }
  std::array<int64_t, 2> pair(const std::string& key, std::optional<std::array<int64_t, 2>> fallback, int64_t lo = 1) {
    const Json* v = take(key);
    if (!v) {
      if (!fallback) fail(key, "is required");
      return *fallback;
    }
    std::array<int64_t, 2> out{};
    if (v->is_number_integer()) out = {v->get<int64_t>(), v->get<int64_t>()};
    else if (v->is_array() && v->size() == 2 && (*v)[0].is_number_integer() && (*v)[1].is_number_integer())
      out = {(*v)[0].get<int64_t>(), (*v)[1].get<int64_t>()};
    else fail(key, "expected an integer or [h, w], got " + v->dump());
    for (int64_t x : out)
      if (x < lo || x > kMaxValue) fail(key, "has " + std::to_string(x) + ", expected " + std::to_string(lo) + ".." + std::to_string(kMaxValue));
    return out;
  }
  double number(const std::string& key, double fallback, double lo, double hi) {
    const Json* v = take(key);
    if (!v) return fallback;
    if (!v->is_number()) fail(key, "expected a number, got " + v->dump());
    const double x = v->get<double>();
    if (!(x >= lo && x <= hi)) fail(key, "is " + v->dump() + ", expected " + std::to_string(lo) + " to " + std::to_string(hi));
    return x;
  }
  bool boolean(const std::string& key, bool fallback) {
    const Json* v = take(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(key, "expected true or false, got " + v->dump());
    return v->get<bool>();
  }
  std::string text(const std::string& key, const std::string& fallback, const std::set<std::string>& allowed) {
    const Json* v = take(key);
    if (!v) return fallback;
    if (!v->is_string() || !allowed.count(v->get<std::string>())) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "\"" : ", \"") + a + "\"";
      fail(key, "expected one of " + list + ", got " + v->dump());
    }
    return v->get<std::string>();
  }
  void finish() const {
    for (const auto& [k, v] : l_.items())
      if (!read_.count(k)) fail(k, "unknown field");
  }

 private:
  const Json* take(const std::string& key) {
    read_.insert(key);
    return l_.contains(key) ? &l_.at(key) : nullptr;
  }
  const Json& l_;
  std::string where_;
  std::set<std::string> read_{"op", "name"};
};

std::string dims(const Shape& s) { return shape_str(s); }

// Output size of a window over `in`: floor((in + 2p - d(k-1) - 1) / s) + 1, >= 1.
int64_t window_out(Fields& f, const std::string& key, int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  const int64_t span = d * (k - 1) + 1;
  if (in + 2 * p < span)
    f.fail(key, "a window of " + std::to_string(span) + " does not fit the input of " + std::to_string(in) +
                    (p ? " padded by " + std::to_string(p) : ""));
  return (in + 2 * p - span) / s + 1;
}

void add_parameters(Fields& f, int64_t& total, std::initializer_list<int64_t> counts) {
  for (int64_t c : counts) {
    total += c;  // each count is at most 2^48 (two bounded values): no overflow below 2^62
    if (total > kMaxParameters) f.fail("", "the stack passes " + std::to_string(kMaxParameters) + " parameters");
  }
}

}  // namespace

SequentialPlan plan_sequential(const Json& layers, const Shape& input, const std::string& where) {
  if (!layers.is_array()) throw InvalidArgument(where + ": expected a list of layers, got " + layers.dump().substr(0, 80));
  if (layers.empty()) throw InvalidArgument(where + ": no layers");
  if (layers.size() > kMaxLayers) throw InvalidArgument(where + ": more than " + std::to_string(kMaxLayers) + " layers");
  SequentialPlan plan;
  plan.input = input;
  plan.input_datatype = "FP32";
  plan.layers = Json::array();
  Shape x = input;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const Json& l = layers[i];
    if (!l.is_object() || !l.contains("op") || !l["op"].is_string())
      throw InvalidArgument(at + ": expected an object with an \"op\"");
    if (l.contains("name") && l["name"] != std::to_string(i)) throw InvalidArgument(at + ".name: must be \"" + std::to_string(i) + "\"");
    const std::string op = l["op"].get<std::string>();
    Fields f(l, at);
    Json out = {{"op", op}};
    const auto need_rank = [&](size_t rank, const char* what) {
      if (x.size() != rank) f.fail("", op + " takes " + what + ", the layer receives " + dims(x));
    };
    if (op == "linear") {
      const int64_t in = f.integer("in_features", {}), o = f.integer("out_features", {});
      const bool bias = f.boolean("bias", true);
      if (x.empty() || x.back() != in)
        f.fail("in_features", "is " + std::to_string(in) + ", the layer receives " + dims(x) +
                                  (x.empty() ? "" : " (last dim " + std::to_string(x.back()) + ")"));
      x.back() = o;
      add_parameters(f, plan.parameters, {in * o, bias ? o : 0});
      out.update({{"in_features", in}, {"out_features", o}, {"bias", bias}});
    } else if (op == "conv2d") {
      need_rank(3, "[C, H, W]");
      const int64_t in = f.integer("in_channels", {}), o = f.integer("out_channels", {});
      const auto k = f.pair("kernel", {}), s = f.pair("stride", {{1, 1}}), p = f.pair("padding", {{0, 0}}, 0),
                 d = f.pair("dilation", {{1, 1}});
      const int64_t g = f.integer("groups", 1);
      const bool bias = f.boolean("bias", true);
      if (x[0] != in) f.fail("in_channels", "is " + std::to_string(in) + ", the layer receives " + dims(x));
      if (in % g || o % g) f.fail("groups", std::to_string(g) + " does not divide in_channels and out_channels");
      x = {o, window_out(f, "kernel", x[1], k[0], s[0], p[0], d[0]), window_out(f, "kernel", x[2], k[1], s[1], p[1], d[1])};
      add_parameters(f, plan.parameters, {o * (in / g) * k[0] * k[1], bias ? o : 0});
      out.update({{"in_channels", in}, {"out_channels", o}, {"kernel", k}, {"stride", s}, {"padding", p},
                  {"dilation", d}, {"groups", g}, {"bias", bias}});
    } else if (op == "max_pool2d" || op == "avg_pool2d") {
      need_rank(3, "[C, H, W]");
      const auto k = f.pair("kernel", {});
      auto s = f.pair("stride", std::array<int64_t, 2>{0, 0}, 0);
      const auto p = f.pair("padding", {{0, 0}}, 0);
      if (s[0] == 0 || s[1] == 0) s = k;
      if (2 * p[0] > k[0] || 2 * p[1] > k[1]) f.fail("padding", "must be at most half the kernel");
      x = {x[0], window_out(f, "kernel", x[1], k[0], s[0], p[0], 1), window_out(f, "kernel", x[2], k[1], s[1], p[1], 1)};
      out.update({{"kernel", k}, {"stride", s}, {"padding", p}});
    } else if (op == "adaptive_avg_pool2d") {
      need_rank(3, "[C, H, W]");
      const auto o = f.pair("output_size", {});
      x = {x[0], o[0], o[1]};
      out["output_size"] = o;
    } else if (op == "batch_norm2d") {
      need_rank(3, "[C, H, W]");
      const int64_t c = f.integer("num_features", {});
      if (x[0] != c) f.fail("num_features", "is " + std::to_string(c) + ", the layer receives " + dims(x));
      add_parameters(f, plan.parameters, {4 * c, 1});
      out.update({{"num_features", c}, {"eps", f.number("eps", 1e-5, 0, 1)}, {"momentum", f.number("momentum", 0.1, 0, 1)}});
    } else if (op == "layer_norm") {
      const int64_t dim = f.integer("dim", {});
      if (x.empty() || x.back() != dim) f.fail("dim", "is " + std::to_string(dim) + ", the layer receives " + dims(x));
      add_parameters(f, plan.parameters, {2 * dim});
      out.update({{"dim", dim}, {"eps", f.number("eps", 1e-5, 0, 1)}});
    } else if (op == "embedding") {
      if (i != 0) f.fail("", "an embedding must be the first layer (it takes token ids)");
      need_rank(1, "token ids [S]");
      const int64_t n = f.integer("num_embeddings", {}), dim = f.integer("dim", {});
      plan.input_datatype = "INT64";
      x = {x[0], dim};
      add_parameters(f, plan.parameters, {n * dim});
      out.update({{"num_embeddings", n}, {"dim", dim}});
    } else if (op == "transformer_encoder_layer") {
      need_rank(2, "[S, d_model]");
      const int64_t dm = f.integer("d_model", {}), h = f.integer("nhead", {}), ff = f.integer("dim_feedforward", 2048);
      if (x[1] != dm) f.fail("d_model", "is " + std::to_string(dm) + ", the layer receives " + dims(x));
      if (dm % h) f.fail("nhead", std::to_string(h) + " does not divide d_model " + std::to_string(dm));
      add_parameters(f, plan.parameters, {4 * dm * dm + 4 * dm, 2 * dm * ff + ff + dm, 4 * dm});
      out.update({{"d_model", dm}, {"nhead", h}, {"dim_feedforward", ff}, {"dropout", f.number("dropout", 0.1, 0, 1)},
                  {"activation", f.text("activation", "relu", {"relu", "gelu"})},
                  {"norm_first", f.boolean("norm_first", false)}, {"layer_norm_eps", f.number("layer_norm_eps", 1e-5, 0, 1)}});
    } else if (op == "flatten") {
      const int64_t rank = static_cast<int64_t>(x.size()) + 1;  // with the batch
      const auto dim = [&](const std::string& key, int64_t fallback) {
        const Json* v = l.contains(key) ? &l[key] : nullptr;
        const int64_t d = v ? (v->is_number_integer() ? v->get<int64_t>() : (f.fail(key, "expected an integer"), 0)) : fallback;
        const int64_t r = d < 0 ? d + rank : d;
        if (r < 1 || r >= rank) f.fail(key, "is " + std::to_string(d) + ", outside dims 1.." + std::to_string(rank - 1) + " of the batch of " + dims(x));
        return r;
      };
      const int64_t a = dim("start_dim", 1), b = dim("end_dim", -1);
      f.integer("start_dim", 1, -kMaxValue);  // marks them read
      f.integer("end_dim", -1, -kMaxValue);
      if (a > b) f.fail("end_dim", "comes before start_dim");
      Shape y(x.begin(), x.begin() + (a - 1));
      int64_t n = 1;
      for (int64_t k = a - 1; k < b; ++k) n *= x[static_cast<size_t>(k)];
      y.push_back(n);
      y.insert(y.end(), x.begin() + b, x.end());
      x = y;
      out.update({{"start_dim", a}, {"end_dim", b}});
    } else if (op == "gelu") {
      out["approximate"] = f.text("approximate", "none", {"none", "tanh"});
    } else if (op == "dropout") {
      out["p"] = f.number("p", 0.5, 0, 1);
    } else if (op != "relu" && op != "silu" && op != "tanh" && op != "sigmoid") {
      f.fail("op", "unknown layer '" + printable(op, 40) +
                       "' (linear, conv2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d, batch_norm2d, layer_norm, "
                       "embedding, transformer_encoder_layer, flatten, relu, gelu, silu, tanh, sigmoid, dropout)");
    }
    f.finish();
    int64_t elements = 1;
    for (int64_t d : x) {
      elements *= d;
      if (elements > kMaxParameters) f.fail("", "produces " + dims(x) + ", more than 2^32 elements an example");
    }
    out["name"] = std::to_string(i);
    plan.layers.push_back(std::move(out));
  }
  plan.output = x;
  return plan;
}

std::unique_ptr<Sequential> build_sequential(const SequentialPlan& plan, uint64_t seed) {
  auto net = std::make_unique<Sequential>();
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const Json& l = plan.layers[i];
    const std::string op = l["op"];
    const uint64_t s = seed + i;
    const auto i64 = [&l](const char* k) { return l[k].get<int64_t>(); };
    const auto p2 = [&l](const char* k) { return ops::Size2{l[k][0].get<int64_t>(), l[k][1].get<int64_t>()}; };
    std::shared_ptr<Module> m;
    if (op == "linear") m = std::make_shared<Linear>(i64("in_features"), i64("out_features"), s, l["bias"].get<bool>());
    else if (op == "conv2d")
      m = std::make_shared<Conv2d>(i64("in_channels"), i64("out_channels"), p2("kernel"),
                                   Conv2dOptions{.stride = p2("stride"), .padding = p2("padding"), .dilation = p2("dilation"),
                                                 .groups = i64("groups"), .bias = l["bias"].get<bool>()},
                                   s);
    else if (op == "max_pool2d") m = std::make_shared<MaxPool2d>(p2("kernel"), p2("stride"), p2("padding"));
    else if (op == "avg_pool2d") m = std::make_shared<AvgPool2d>(p2("kernel"), p2("stride"), p2("padding"));
    else if (op == "adaptive_avg_pool2d") m = std::make_shared<AdaptiveAvgPool2d>(p2("output_size"));
    else if (op == "batch_norm2d") m = std::make_shared<BatchNorm2d>(i64("num_features"), l["eps"].get<double>(), l["momentum"].get<double>());
    else if (op == "layer_norm") m = std::make_shared<LayerNorm>(i64("dim"), l["eps"].get<double>());
    else if (op == "embedding") m = std::make_shared<Embedding>(i64("num_embeddings"), i64("dim"), s);
    else if (op == "transformer_encoder_layer")
      m = std::make_shared<TransformerEncoderLayer>(
          TransformerOptions{.d_model = i64("d_model"), .nhead = i64("nhead"), .dim_feedforward = i64("dim_feedforward"),
                             .dropout = l["dropout"].get<double>(), .activation = l["activation"].get<std::string>(),
                             .norm_first = l["norm_first"].get<bool>(), .layer_norm_eps = l["layer_norm_eps"].get<double>()},
          s);
    else if (op == "flatten") m = std::make_shared<Flatten>(i64("start_dim"), i64("end_dim"));
    else if (op == "relu") m = std::make_shared<ReLU>();
    else if (op == "gelu") m = std::make_shared<GELU>(l["approximate"].get<std::string>());
    else if (op == "silu") m = std::make_shared<SiLU>();
    else if (op == "tanh") m = std::make_shared<Tanh>();
    else if (op == "sigmoid") m = std::make_shared<Sigmoid>();
    else m = std::make_shared<Dropout>(l["p"].get<double>());
    net->add(std::move(m));
  }
  return net;
}

}  // namespace hg::models
