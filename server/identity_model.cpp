#include "server/identity_model.h"

#include <cstring>
#include <set>
#include <string>

#include "engine/error.h"
#include "server/wire.h"

namespace hg::server {
namespace {

class IdentityModel : public ServedModel {
 public:
  IdentityModel(models::PackageSpec spec, std::vector<int64_t> elements, std::vector<size_t> sample_bytes)
      : spec_(std::move(spec)), elements_(std::move(elements)), sample_bytes_(std::move(sample_bytes)) {}

  const models::PackageSpec& spec() const override { return spec_; }
  int64_t input_size(size_t i) const override { return elements_.at(i); }
  int64_t output_size(size_t i) const override { return elements_.at(i); }

  void run(const std::vector<const void*>& inputs, int64_t batch, const std::vector<void*>& outputs,
           const std::vector<Shape>& input_shapes) override {
    if (!input_shapes.empty()) throw InvalidArgument("identity model '" + spec_.name + "': its shapes are fixed");
    size_t n = sample_bytes_.size();
    if (inputs.size() != n || outputs.size() != n)
      throw InvalidArgument("identity model '" + spec_.name + "': expects " + std::to_string(n) + " inputs and outputs, got " +
                            std::to_string(inputs.size()) + " and " + std::to_string(outputs.size()));
    if (batch < 0) throw InvalidArgument("identity model '" + spec_.name + "': negative batch " + std::to_string(batch));
    for (size_t i = 0; i < n; ++i) {
      size_t bytes = static_cast<size_t>(batch) * sample_bytes_[i];
      if (bytes > 0) std::memcpy(outputs[i], inputs[i], bytes);
    }
  }

 private:
  models::PackageSpec spec_;
  std::vector<int64_t> elements_;    // per sample, input i == output i
  std::vector<size_t> sample_bytes_;
};

}  // namespace

std::shared_ptr<ServedModel> make_identity_model(models::PackageSpec spec) {
  std::string model = "identity model '" + spec.name + "': ";
  if (spec.inputs.empty()) throw InvalidArgument(model + "needs at least one input");
  if (spec.inputs.size() != spec.outputs.size())
    throw InvalidArgument(model + std::to_string(spec.inputs.size()) + " inputs but " + std::to_string(spec.outputs.size()) +
                          " outputs (output i echoes input i)");
  // Either every tensor has the batch dimension (-1 first) or none has (max_batch_size 0: one
  // request per run, the whole shape is the sample).
  const bool batched = !spec.inputs[0].shape.empty() && spec.inputs[0].shape[0] == -1;
  spec.batched = batched;
  std::set<std::string> names;
  std::vector<int64_t> elements;
  std::vector<size_t> sample_bytes;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const models::IOSpec& in = spec.inputs[i];
    const models::IOSpec& out = spec.outputs[i];
    for (const models::IOSpec* t : {&in, &out}) {
      std::string kind = t == &in ? "input " : "output ";
      if (t->name.empty()) throw InvalidArgument(model + kind + std::to_string(i) + " has no name");
      if (!names.insert(t->name).second) throw InvalidArgument(model + "tensor name '" + t->name + "' is used twice");
      if (batched != (!t->shape.empty() && t->shape[0] == -1))
        throw InvalidArgument(model + kind + "'" + t->name + "' shape " + shape_str(t->shape) +
                              (batched ? " must start with -1 (the batch dimension) like input '"
                                       : " must not have a batch dimension, like input '") +
                              spec.inputs[0].name + "'");
      for (size_t d = batched ? 1 : 0; d < t->shape.size(); ++d)
        if (t->shape[d] < 0)
          throw InvalidArgument(model + kind + "'" + t->name + "' shape " + shape_str(t->shape) + ": dim " + std::to_string(d) +
                                " is " + std::to_string(t->shape[d]) + " (only the batch dimension may vary)");
    }
    if (in.datatype != out.datatype)
      throw InvalidArgument(model + "output '" + out.name + "' is " + out.datatype + " but input '" + in.name + "' is " +
                            in.datatype);
    if (in.shape != out.shape)
      throw InvalidArgument(model + "output '" + out.name + "' shape " + shape_str(out.shape) + " differs from input '" +
                            in.name + "' shape " + shape_str(in.shape));
    auto type = wire_type_from_name(in.datatype);
    if (!type) throw InvalidArgument(model + "input '" + in.name + "' has unknown datatype '" + in.datatype + "'");
    if (wire_type_size(*type) == 0)
      throw InvalidArgument(model + "input '" + in.name + "' is BYTES, which the identity backend does not serve " +
                            "(the batcher splits tensors by byte offsets; use a fixed-size datatype)");
    uint64_t count = element_count(Shape(in.shape.begin() + (batched ? 1 : 0), in.shape.end()));
    size_t size = wire_type_size(*type);
    if (count > static_cast<uint64_t>(kMaxTensorBytes) / size)
      throw InvalidArgument(model + "input '" + in.name + "' shape " + shape_str(in.shape) + " is absurdly large (one sample above " +
                            std::to_string(kMaxTensorBytes) + " bytes)");
    elements.push_back(static_cast<int64_t>(count));
    sample_bytes.push_back(static_cast<size_t>(count) * size);
  }
  return std::make_shared<IdentityModel>(std::move(spec), std::move(elements), std::move(sample_bytes));
}

}  // namespace hg::server
