#include "training/ddp_reducer.h"

#include <cstring>
#include <limits>
#include <oneapi/tbb/concurrent_queue.h>
#include <unordered_set>

#include "engine/device.h"
#include "engine/error.h"
#include "graphs/lazy.h"

namespace hg::training {

// The buckets for the communication thread, in launch order.
struct DDPReducer::CommQueue : tbb::concurrent_bounded_queue<size_t> {};

namespace {
constexpr size_t kStopComm = std::numeric_limits<size_t>::max();  // wakes the communication thread to see stop_
}  // namespace

std::vector<std::vector<size_t>> assign_buckets(const std::vector<int64_t>& bytes, double first_mb, double cap_mb) {
  if (!(first_mb > 0) || !(cap_mb > 0))
    throw InvalidArgument("DDP bucket sizes must be positive (first_bucket_mb " + std::to_string(first_mb) +
                          ", bucket_cap_mb " + std::to_string(cap_mb) + ")");
  std::vector<std::vector<size_t>> out;
  std::vector<size_t> cur;
  double filled = 0;
  for (size_t k = bytes.size(); k-- > 0;) {
    cur.push_back(k);
    filled += static_cast<double>(bytes[k]);
    const double cap = (out.empty() ? first_mb : cap_mb) * 1024.0 * 1024.0;
    if (filled >= cap) {
      out.push_back(std::move(cur));
      cur.clear();
      filled = 0;
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

DDPReducer::DDPReducer(std::vector<std::pair<std::string, Tensor*>> params, AllReduce allreduce, int world_size,
                       DDPReducerOptions opt)
    : allreduce_(std::move(allreduce)), world_(world_size), opt_(opt) {
  if (world_ < 1) throw InvalidArgument("DDP: world size " + std::to_string(world_) + " must be at least 1");
  bool first = true;
  for (auto& [name, t] : params) {
    if (!t->requires_grad()) continue;
    if (t->dtype() != DType::F32)
      throw InvalidArgument("DDP: parameter '" + name + "' is " + dtype_name(t->dtype()) + "; only F32 is reduced");
    if (first) device_ = t->device();
    if (t->device() != device_)
      throw InvalidArgument("DDP: parameter '" + name + "' is on " + t->device().str() + ", the others on " +
                            device_.str());
    first = false;
    Param p;
    p.name = name;
    p.tensor = t;
    params_.push_back(std::move(p));
  }
  std::vector<int64_t> bytes;
  for (const Param& p : params_) bytes.push_back(p.tensor->numel() * 4);
  layout_ = assign_buckets(bytes, opt_.first_bucket_mb, opt_.bucket_cap_mb);
  buckets_.resize(layout_.size());
  for (size_t b = 0; b < layout_.size(); ++b) {
    Bucket& bk = buckets_[b];
    bk.params = layout_[b];
    for (size_t i : bk.params) {
      params_[i].bucket = b;
      params_[i].offset = bk.numel;
      bk.numel += static_cast<size_t>(params_[i].tensor->numel());
    }
    bk.flat.resize(bk.numel + (opt_.find_unused_parameters ? bk.params.size() : 0));
  }
  queue_ = std::make_unique<CommQueue>();
  comm_ = std::thread([this] { comm_loop(); });
}

DDPReducer::~DDPReducer() {
  stop_ = true;  // buckets still queued are left: the group may be broken (an exception mid-backward)
  queue_->push(kStopComm);
  comm_.join();
}

void DDPReducer::arm_hooks() {
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    if (p.hooked.lock() == p.tensor->impl_ptr()) continue;
    p.hook = register_post_accumulate_grad_hook(*p.tensor, [this, i](const Tensor& leaf) { on_grad_ready(i, leaf); });
    p.hooked = p.tensor->impl_ptr();
  }
}

void DDPReducer::prepare_for_backward(const Tensor& loss, bool sync) {
  if (armed_) finish();
  arm_hooks();
  if (!sync) return;
  for (Param& p : params_) {
    p.ready = false;
    p.grad = Tensor();
    p.mean = Tensor();
  }
  for (Bucket& b : buckets_) b.pending = b.params.size(), b.device_event = 0;
  next_launch_ = 0;
  reduced_ = 0;  // the communication thread is idle: finish() waited for every bucket
  error_ = nullptr;
  armed_ = true;
  if (!opt_.find_unused_parameters) return;
  // Leaves the loss reaches; the others will get no hook call in this backward.
  std::unordered_set<TensorImpl*> reached, seen;
  std::vector<TensorImpl*> stack;
  if (loss.defined() && loss.requires_grad()) stack.push_back(loss.impl());
  while (!stack.empty()) {
    TensorImpl* t = stack.back();
    stack.pop_back();
    if (!seen.insert(t).second) continue;
    if (!t->grad_fn) {
      reached.insert(t);
      continue;
    }
    for (const Tensor& in : t->grad_fn->inputs)
      if (in.requires_grad()) stack.push_back(in.impl());
  }
  for (size_t i = 0; i < params_.size(); ++i)
    if (!reached.count(params_[i].tensor->impl())) mark_ready(i, params_[i].tensor->grad());
}

void DDPReducer::on_grad_ready(size_t i, const Tensor& leaf) {
  if (!armed_) return;  // no_sync: the gradient only accumulates
  if (params_[i].ready)
    throw InvalidArgument("DDP: parameter '" + params_[i].name +
                          "' got a gradient twice in one synchronizing round (call finish_gradient_sync, or "
                          "prepare the next backward, between two backward passes)");
  mark_ready(i, leaf.grad());
}

void DDPReducer::mark_ready(size_t i, Tensor grad) {
  Param& p = params_[i];
  if (grad.defined()) {
    if (grad.dtype() != DType::F32) grad = grad.to(DType::F32);
    if (!grad.is_contiguous()) grad = grad.contiguous();
  }
  p.ready = true;
  p.grad = std::move(grad);
  Bucket& b = buckets_[p.bucket];
  if (--b.pending != 0) return;
  if (device_.is_hpu()) {
    // Lazy: run the traced part of backward that produced this bucket, so its gradients exist
    // while tracing the rest goes on; the communication thread waits for the device event.
    if (graphs::lazy_mode_enabled()) graphs::mark_step(device_);
    for (size_t k : b.params)
      if (params_[k].grad.defined() && params_[k].grad.is_lazy())
        throw InternalError("DDP: gradient of '" + params_[k].name + "' still pending after mark_step");
    b.device_event = device_backend(device_).queue()->record();
  }
  launch_ready_buckets();
}

void DDPReducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) queue_->push(next_launch_++);
}

// A dedicated thread, not a TBB task: Gloo's all-reduce blocks in socket I/O.
void DDPReducer::comm_loop() {
  for (;;) {
    size_t b = kStopComm;
    queue_->pop(b);
    if (stop_) return;
    if (!error_) {  // after an error the group is broken: later buckets are only counted
      try {
        reduce_bucket(b);
      } catch (...) {
        error_ = std::current_exception();
      }
    }
    ++reduced_;
    reduced_.notify_all();
  }
}

void DDPReducer::reduce_bucket(size_t b) {
  Bucket& bk = buckets_[b];
  if (bk.device_event) device_backend(device_).queue()->wait(bk.device_event);
  float* flat = bk.flat.data();
  for (size_t k = 0; k < bk.params.size(); ++k) {
    const Param& p = params_[bk.params[k]];
    const size_t n = static_cast<size_t>(p.tensor->numel());
    if (p.grad.defined()) {
      const TensorImpl* g = p.grad.impl();
      std::memcpy(flat + p.offset, static_cast<const float*>(g->storage->data) + g->offset, n * sizeof(float));
    } else {
      std::memset(flat + p.offset, 0, n * sizeof(float));
    }
    if (opt_.find_unused_parameters) flat[bk.numel + k] = p.grad.defined() ? 1.0f : 0.0f;
  }
  if (world_ > 1) allreduce_(flat, bk.flat.size(), 1000 + static_cast<uint32_t>(b));
  const float inv = 1.0f / static_cast<float>(world_);
  for (size_t k = 0; k < bk.params.size(); ++k) {
    Param& p = params_[bk.params[k]];
    if (opt_.find_unused_parameters && flat[bk.numel + k] == 0) continue;  // no rank used it
    Tensor m = Tensor::empty(p.tensor->shape(), DType::F32, device_);
    float* out = static_cast<float*>(m.impl()->storage->data);
    const float* in = flat + p.offset;
    for (int64_t e = 0; e < p.tensor->numel(); ++e) out[e] = in[e] * inv;
    p.mean = std::move(m);
  }
}

void DDPReducer::finish() {
  if (!armed_) return;
  std::string missing;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].ready) continue;
    if (!opt_.find_unused_parameters) missing += (missing.empty() ? "'" : ", '") + params_[i].name + "'";
    // Reduced anyway (its accumulated .grad or zeros), so every rank runs the same collectives.
    mark_ready(i, params_[i].tensor->grad());
  }
  for (size_t r = reduced_; r != buckets_.size(); r = reduced_) reduced_.wait(r);
  armed_ = false;
  if (error_) {
    for (Param& p : params_) p.grad = Tensor(), p.mean = Tensor();
    std::rethrow_exception(error_);
  }
  for (Param& p : params_) {
    if (p.mean.defined()) p.tensor->impl()->grad = p.mean.impl_ptr();
    p.grad = Tensor();
    p.mean = Tensor();
  }
  if (!missing.empty())
    throw InvalidArgument("DDP: parameters that got no gradient in this backward: " + missing +
                          " (pass find_unused_parameters = true when parts of the model are not used)");
}

}  // namespace hg::training
