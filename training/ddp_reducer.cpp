#include "training/ddp_reducer.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <oneapi/tbb/concurrent_queue.h>
#include <spdlog/spdlog.h>
#include <unordered_set>

#include "engine/device.h"
#include "engine/error.h"
#include "engine/op.h"
#include "graphs/executable.h"
#include "graphs/lazy.h"
#include "graphs/live_registry.h"
#include "training/process_group.h"

namespace hg::training {

// The buckets for the communication thread, in launch order.
struct DDPReducer::CommQueue : tbb::concurrent_bounded_queue<size_t> {};

namespace {
constexpr size_t kStopComm = std::numeric_limits<size_t>::max();  // wakes the communication thread to see stop_
constexpr size_t kStartGrads = graphs::Executable::kMaxOpInputs - 1;  // gradients per ddp_bucket_start piece
}  // namespace

// The in_graph ops. "ddp_bucket_start" (inputs: the previous piece's token unless this is the
// bucket's first piece, then up to kStartGrads of the bucket's gradients in bucket order; attrs:
// reducer id, bucket, index of the piece's first gradient in the bucket, 1 on the bucket's last
// piece) copies them into the bucket and returns a token F32[1]: a graph op takes at most
// graphs::Executable::kMaxOpInputs inputs, so a bucket of many parameters is a chain of pieces,
// the last of which starts the all-reduce. "ddp_bucket_mean" (input: that token; attrs:
// reducer id, bucket, offset, then the parameter's shape) returns the parameter's mean
// gradient. Their kernels find the reducer by id when they run, and never throw (kernels run
// inside Runtime::invoke): a failed all-reduce makes the means NaN and is thrown by the
// reducer's next call on the host; a graph run after its reducer was destroyed (recorded, then
// the reducer went before mark_step) logs that and writes NaN. The reducer's destructor lets
// its device's queued work finish before it leaves the registry.
struct DDPReducer::GraphOps {
  using Live = graphs::LiveRegistry<DDPReducer>;
  static DDPReducer* find(int64_t id) {
    if (DDPReducer* r = Live::get().find(id)) return r;
    spdlog::error("DDP: a gradient op of reducer {} ran after that reducer was destroyed; its gradients are NaN", id);
    return nullptr;
  }
  static TensorMeta infer_start(const OpSchema& op, const std::vector<TensorMeta>& in, const Attrs&) {
    for (const TensorMeta& m : in)
      if (m.dtype != DType::F32) throw InvalidArgument(op_context(op, in) + ": gradients must be F32");
    return {{1}, DType::F32};
  }
  static TensorMeta infer_mean(const OpSchema& op, const std::vector<TensorMeta>& in, const Attrs& a) {
    if (in[0] != TensorMeta{{1}, DType::F32} || a.ints.size() < 3)
      throw InvalidArgument(op_context(op, in) + ": expects the F32[1] token of ddp_bucket_start");
    return {Shape(a.ints.begin() + 3, a.ints.end()), DType::F32};
  }
  static Kernel prepare_start(const std::vector<TensorMeta>& in, const TensorMeta&, const Attrs& a) {
    const int64_t id = a.i(0);
    const auto b = static_cast<size_t>(a.i(1)), first = static_cast<size_t>(a.i(2));
    const bool last = a.i(3) != 0;
    const size_t token = first > 0 ? 1 : 0, count = in.size() - token;
    return [id, b, first, count, last, token](const void* const* in, void* out) {
      *static_cast<float*>(out) = 0;
      if (DDPReducer* r = find(id)) r->start_in_graph(b, first, count, in + token, last);
    };
  }
  static Kernel prepare_mean(const std::vector<TensorMeta>&, const TensorMeta& out, const Attrs& a) {
    const int64_t id = a.i(0);
    const auto b = static_cast<size_t>(a.i(1)), offset = static_cast<size_t>(a.i(2));
    const auto n = static_cast<size_t>(out.numel());
    return [id, b, offset, n](const void* const*, void* o) {
      if (DDPReducer* r = find(id)) return r->mean_in_graph(b, offset, n, static_cast<float*>(o));
      std::fill_n(static_cast<float*>(o), n, std::numeric_limits<float>::quiet_NaN());
    };
  }
  static const OpSchema& start_op() {
    static const OpSchema& op = (register_op({"ddp_bucket_start", -1, infer_start, prepare_start}),
                                 op_schema("ddp_bucket_start"));
    return op;
  }
  static const OpSchema& mean_op() {
    static const OpSchema& op = (register_op({"ddp_bucket_mean", 1, infer_mean, prepare_mean}),
                                 op_schema("ddp_bucket_mean"));
    return op;
  }
};

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
  if (opt_.in_graph) {
    if (opt_.find_unused_parameters)
      throw InvalidArgument("DDP: in_graph reduction does not support find_unused_parameters");
    tokens_.resize(buckets_.size());
    started_ = std::make_unique<std::atomic<uint64_t>[]>(buckets_.size());
    done_ = std::make_unique<std::atomic<uint64_t>[]>(buckets_.size());
    GraphOps::start_op();
    GraphOps::mean_op();
    id_ = GraphOps::Live::get().add(this);
  }
  queue_ = std::make_unique<CommQueue>();
  comm_ = std::thread([this] { comm_loop(); });
}

DDPReducer::~DDPReducer() {
  if (id_) {
    // Queued graphs with this reducer's ops run first (their all-reduces need the thread).
    if (device_.is_hpu()) {
      ExecQueue& q = *device_backend(device_).queue();
      q.wait(q.record());
    }
    GraphOps::Live::get().remove(id_);
  }
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

void DDPReducer::check_error() const {
  if (failed_.load(std::memory_order_acquire)) std::rethrow_exception(error_);
}

void DDPReducer::prepare_for_backward(const Tensor& loss, bool sync) {
  check_error();
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
  if (opt_.in_graph) {
    launch_ready_buckets();
    return;
  }
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
  for (; next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0; ++next_launch_) {
    if (!opt_.in_graph && opt_.allreduce_inline && next_launch_ + 1 == buckets_.size()) {
      for (size_t r = reduced_; r != next_launch_; r = reduced_) reduced_.wait(r);  // one caller at a time
      reduce_and_count(next_launch_);
      continue;
    }
    if (!opt_.in_graph) {
      queue_->push(next_launch_);
      continue;
    }
    // Recorded (lazy) or queued (eager) in bucket order on every rank, like the pushes above.
    const Bucket& bk = buckets_[next_launch_];
    Tensor token;
    for (size_t first = 0; first < bk.params.size(); first += kStartGrads) {
      const size_t end = std::min(bk.params.size(), first + kStartGrads);
      std::vector<Tensor> in;
      if (first > 0) in.push_back(token);
      for (size_t k = first; k < end; ++k) in.push_back(params_[bk.params[k]].grad);
      const Attrs a{{id_, static_cast<int64_t>(next_launch_), static_cast<int64_t>(first), end == bk.params.size()}, {}};
      token = dispatch(GraphOps::start_op(), std::move(in), a);
    }
    tokens_[next_launch_] = std::move(token);
  }
}

// Kernels of the in_graph ops, in device order: a bucket's mean ops run after its start op and
// before the next round's start op, so the flat buffer is the round's alone.
void DDPReducer::start_in_graph(size_t b, size_t first, size_t count, const void* const* grads, bool last) {
  Bucket& bk = buckets_[b];
  for (size_t k = 0; k < count; ++k) {
    const Param& p = params_[bk.params[first + k]];
    std::memcpy(bk.flat.data() + p.offset, grads[k], static_cast<size_t>(p.tensor->numel()) * sizeof(float));
  }
  if (!last) return;
  started_[b].fetch_add(1, std::memory_order_relaxed);
  if (opt_.allreduce_inline) return reduce_and_count(b);  // in device order already: no hand-off
  queue_->push(b);
}

void DDPReducer::mean_in_graph(size_t b, size_t offset, size_t n, float* out) {
  const uint64_t want = started_[b].load(std::memory_order_relaxed);
  // The communication thread has the round (it stops only once the device's work is done); the
  // group's timeout bounds the all-reduce.
  for (uint64_t d = done_[b].load(std::memory_order_acquire); d < want; d = done_[b].load(std::memory_order_acquire))
    done_[b].wait(d, std::memory_order_acquire);
  if (failed_.load(std::memory_order_acquire)) {  // thrown by the next call on the host
    std::fill_n(out, n, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  const float inv = 1.0f / static_cast<float>(world_);
  const float* in = buckets_[b].flat.data() + offset;
  for (size_t e = 0; e < n; ++e) out[e] = in[e] * inv;
}

// A dedicated thread, not a TBB task: Gloo's all-reduce blocks in socket I/O.
void DDPReducer::comm_loop() {
  for (;;) {
    size_t b = kStopComm;
    queue_->pop(b);
    if (stop_) return;
    reduce_and_count(b);
  }
}

void DDPReducer::reduce_and_count(size_t b) {
  if (!failed_.load(std::memory_order_acquire)) {  // after an error the group is broken: later buckets are only counted
    try {
      reduce_bucket(b);
    } catch (...) {
      error_ = std::current_exception();
      failed_.store(true, std::memory_order_release);
    }
  }
  if (opt_.in_graph) {
    done_[b].fetch_add(1, std::memory_order_release);
    done_[b].notify_all();
    return;
  }
  ++reduced_;
  reduced_.notify_all();
}

void DDPReducer::reduce_bucket(size_t b) {
  Bucket& bk = buckets_[b];
  if (opt_.in_graph) {  // start_in_graph filled the buffer; the mean ops read it
    if (world_ > 1) allreduce_(bk.flat.data(), bk.flat.size(), 1000 + static_cast<uint32_t>(b));
    return;
  }
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
  check_error();
  if (!armed_) return;
  if (opt_.in_graph) {
    finish_in_graph();
    return;
  }
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


// Every parameter got its gradient: each .grad becomes its bucket's mean op (nothing waits here).
// A parameter without one is an error before any bucket op is recorded for it: the step's
// graph may never run, so reducing the others would not keep the other ranks from waiting.
void DDPReducer::finish_in_graph() {
  armed_ = false;
  std::string missing;
  for (const Param& p : params_)
    if (!p.ready) missing += (missing.empty() ? "'" : ", '") + p.name + "'";
  if (!missing.empty()) {
    for (Param& p : params_) p.grad = Tensor();
    tokens_.assign(tokens_.size(), Tensor());
    throw InvalidArgument("DDP: parameters that got no gradient in this backward: " + missing +
                          " (every parameter that requires grad must be used in each step)");
  }
  for (Param& p : params_) {
    Attrs a{{id_, static_cast<int64_t>(p.bucket), static_cast<int64_t>(p.offset)}, {}};
    for (int64_t d : p.tensor->shape()) a.ints.push_back(d);
    p.tensor->impl()->grad = dispatch(GraphOps::mean_op(), {tokens_[p.bucket]}, a).impl_ptr();
    p.grad = Tensor();
  }
  tokens_.assign(tokens_.size(), Tensor());
}

}  // namespace hg::training
