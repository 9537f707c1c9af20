#include "training/param_state.h"

#include <algorithm>
#include <set>

#include "engine/error.h"

namespace hg::training {

namespace {

bool known_option(const OptionMap& defaults, const std::string& key) {
  return key == "initial_lr" || defaults.count(key) > 0;
}

std::string group_where(const std::string& who, size_t g) {
  return who + " param_groups[" + std::to_string(g) + "]";
}

}  // namespace

void complete_groups(std::vector<ParamGroup>& groups, const OptionMap& defaults, const std::string& who,
                     const OptionCheck& check) {
  if (groups.empty()) throw InvalidArgument(who + ": no parameter groups");
  std::set<std::string> seen;
  for (size_t g = 0; g < groups.size(); ++g) {
    ParamGroup& group = groups[g];
    const std::string where = group_where(who, g);
    for (const auto& [key, value] : group.options)
      if (!known_option(defaults, key)) throw InvalidArgument(where + ": unknown option '" + key + "'");
    for (const auto& [key, value] : defaults) group.options.try_emplace(key, value);
    check(group.options, where);
    for (const auto& [name, p] : group.params) {
      if (p == nullptr || !p->defined())
        throw InvalidArgument(where + ": parameter '" + name + "' is not a defined tensor");
      if (!is_floating(p->dtype()))
        throw InvalidArgument(where + ": parameter '" + name + "' has dtype " + dtype_name(p->dtype()) +
                              ", not a floating-point type");
      if (!seen.insert(name).second)
        throw InvalidArgument(where + ": parameter '" + name + "' appears more than once");
    }
  }
}

StateBlob save_state(const std::vector<ParamGroup>& groups, const std::map<std::string, ParamState>& state,
                     bool with_step) {
  StateBlob blob;
  blob.json["param_groups"] = nlohmann::json::array();
  blob.json["state"] = nlohmann::json::object();
  for (const ParamGroup& group : groups) {
    nlohmann::json g = nlohmann::json::object();
    for (const auto& [key, value] : group.options) g[key] = value;
    g["params"] = nlohmann::json::array();
    for (const auto& [name, p] : group.params) {
      g["params"].push_back(name);
      auto it = state.find(name);
      if (it == state.end()) continue;
      nlohmann::json s = nlohmann::json::object();
      if (with_step) s["step"] = it->second.step;
      blob.json["state"][name] = s;
      for (const auto& [key, t] : it->second.buffers) blob.tensors.emplace_back(name + "." + key, t.to(Device::cpu()));
    }
    blob.json["param_groups"].push_back(g);
  }
  return blob;
}

void load_state(std::vector<ParamGroup>& groups, std::map<std::string, ParamState>& state, const StateBlob& blob,
                const StateSpec& spec, const std::string& who, const OptionCheck& check) {
  const std::vector<std::string>& buffer_keys = spec.buffers;
  const nlohmann::json& j = blob.json;
  if (!j.is_object() || !j.contains("param_groups") || !j["param_groups"].is_array())
    throw InvalidArgument(who + " state: 'param_groups' is missing or not an array");
  if (j.contains("state") && !j["state"].is_object())
    throw InvalidArgument(who + " state: 'state' is not an object");
  const auto& jg = j["param_groups"];
  if (jg.size() != groups.size())
    throw InvalidArgument(who + " state: 'param_groups' has " + std::to_string(jg.size()) +
                          " groups, the optimizer " + std::to_string(groups.size()));
  std::map<std::string, const Tensor*> params;  // name -> parameter
  std::map<std::string, size_t> group_of;
  std::vector<OptionMap> options(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string where = who + " state: param_groups[" + std::to_string(g) + "]";
    const auto& e = jg[g];
    if (!e.is_object() || !e.contains("params") || !e["params"].is_array())
      throw InvalidArgument(where + ".params is missing or not an array");
    std::set<std::string> names;
    for (const auto& n : e["params"]) {
      if (!n.is_string()) throw InvalidArgument(where + ".params holds a non-string entry");
      names.insert(n.get<std::string>());
    }
    std::set<std::string> own;
    for (const auto& [name, p] : groups[g].params) own.insert(name);
    for (const auto& name : names)
      if (!own.count(name)) throw InvalidArgument(where + ".params: unknown parameter '" + name + "'");
    for (const auto& [name, p] : groups[g].params) {
      if (!names.count(name)) throw InvalidArgument(where + ".params lacks parameter '" + name + "'");
      params[name] = p;
      group_of[name] = g;
    }
    for (const auto& [key, value] : e.items()) {
      if (key == "params") continue;
      if (!groups[g].options.count(key) && key != "initial_lr")
        throw InvalidArgument(where + ": unknown option '" + key + "'");
      if (!value.is_number() && !value.is_boolean())
        throw InvalidArgument(where + ": option '" + key + "' is not a number");
      options[g][key] = value.is_boolean() ? (value.get<bool>() ? 1.0 : 0.0) : value.get<double>();
    }
    for (const auto& [key, value] : groups[g].options)
      if (key != "initial_lr" && !options[g].count(key))
        throw InvalidArgument(where + ": option '" + key + "' is missing");
    check(options[g], where);
  }
  std::map<std::string, ParamState> fresh;
  if (j.contains("state"))
    for (const auto& [name, s] : j["state"].items()) {
      const std::string where = who + " state: state['" + name + "']";
      if (!params.count(name)) throw InvalidArgument(where + ": unknown parameter '" + name + "'");
      if (!s.is_object()) throw InvalidArgument(where + " is not an object");
      ParamState ps;
      if (spec.with_step && !s.contains("step")) throw InvalidArgument(where + " lacks 'step'");
      if (s.contains("step")) {
        if (!s["step"].is_number_integer() || s["step"].get<int64_t>() < 0)
          throw InvalidArgument(where + ".step is not a non-negative integer");
        ps.step = s["step"].get<int64_t>();
      }
      fresh[name] = ps;
    }
  for (const auto& [key, t] : blob.tensors) {
    const std::string where = who + " state: tensor '" + key + "'";
    const size_t dot = key.rfind('.');
    const std::string name = dot == std::string::npos ? key : key.substr(0, dot);
    const std::string buf = dot == std::string::npos ? std::string() : key.substr(dot + 1);
    auto p = params.find(name);
    if (p == params.end()) throw InvalidArgument(where + ": unknown parameter '" + name + "'");
    if (std::find(buffer_keys.begin(), buffer_keys.end(), buf) == buffer_keys.end())
      throw InvalidArgument(where + ": unknown buffer '" + buf + "' for " + who);
    if (!t.defined()) throw InvalidArgument(where + " is undefined");
    if (t.shape() != p->second->shape())
      throw InvalidArgument(where + " has shape " + shape_str(t.shape()) + ", the parameter " +
                            shape_str(p->second->shape()));
    if (t.dtype() != p->second->dtype())
      throw InvalidArgument(where + " has dtype " + dtype_name(t.dtype()) + ", the parameter " +
                            dtype_name(p->second->dtype()));
    if (!fresh.count(name)) throw InvalidArgument(where + ": no entry for '" + name + "' in 'state'");
    if (fresh[name].buffers.count(buf)) throw InvalidArgument(where + " appears twice");
    fresh[name].buffers[buf] = t;
  }
  for (const auto& [name, ps] : fresh)
    for (const std::string& key : spec.required(options[group_of[name]]))
      if (!ps.buffers.count(key))
        throw InvalidArgument(who + " state: state['" + name + "'] lacks tensor '" + name + "." + key + "'");
  for (auto& [name, ps] : fresh)
    for (auto& [key, t] : ps.buffers) t = t.to(params[name]->device()).clone();
  for (size_t g = 0; g < groups.size(); ++g) groups[g].options = options[g];
  state = std::move(fresh);
}

}  // namespace hg::training
