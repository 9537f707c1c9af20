#include "graphs/runtime.h"

#include <algorithm>
#include <chrono>

#include "engine/error.h"
#include "engine/generator.h"

namespace hg::graphs {

Runtime::Runtime(std::shared_ptr<const Executable> program, Device d, RuntimeOptions opt)
    : program_(std::move(program)), device_(d), seeds_(std::move(opt.seeds)) {
  if (!program_) throw InvalidArgument("Runtime: no program");
  const size_t nin = program_->input_metas().size(), nout = program_->output_metas().size();
  for (size_t s : seeds_)
    if (s >= nin)
      throw InvalidArgument("Runtime: seed input " + std::to_string(s) + " of a program with " + std::to_string(nin) +
                            " inputs");
  arena_ = std::make_shared<Storage>(d, std::max<size_t>(program_->arena_bytes(), 1));
  const size_t depth = std::max<size_t>(opt.depth, 1);
  seed_store_ = std::make_shared<Storage>(d, std::max<size_t>(depth * seeds_.size() * sizeof(int64_t), 1));
  bindings_.resize(depth);
  for (Binding& b : bindings_) {
    b.in.assign(nin, nullptr);
    b.out.assign(nout, nullptr);
  }
}

Runtime::~Runtime() {
  for (Binding& b : bindings_)
    if (b.queue) b.queue->wait(b.event);  // its invoke reads the arena and the bindings
}

void Runtime::wait_for(Binding& b) {
  if (!b.queue) return;
  if (!b.queue->done(b.event)) {
    const auto t0 = std::chrono::steady_clock::now();
    b.queue->wait(b.event);
    stats_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  b.queue = nullptr;
}

size_t Runtime::setup(std::span<const void* const> inputs, std::span<void* const> outputs) {
  if (inputs.size() != bindings_[0].in.size() || outputs.size() != bindings_[0].out.size())
    throw InvalidArgument("Runtime::setup: " + std::to_string(inputs.size()) + " inputs and " +
                          std::to_string(outputs.size()) + " outputs given, the program has " +
                          std::to_string(bindings_[0].in.size()) + " and " + std::to_string(bindings_[0].out.size()));
  const size_t k = setup();
  std::copy(inputs.begin(), inputs.end(), cur_->in.begin());
  std::copy(outputs.begin(), outputs.end(), cur_->out.begin());
  for (size_t s = 0; s < seeds_.size(); ++s)
    cur_->in[seeds_[s]] = static_cast<int64_t*>(seed_store_->data) + k * seeds_.size() + s;
  return k;
}

size_t Runtime::setup() {
  const size_t k = next_;
  next_ = (next_ + 1) % bindings_.size();
  Binding& b = bindings_[k];
  wait_for(b);
  if (!seeds_.empty()) {
    int64_t* store = static_cast<int64_t*>(seed_store_->data) + k * seeds_.size();
    Generator& gen = default_generator(device_);
    for (size_t s = 0; s < seeds_.size(); ++s) {
      store[s] = static_cast<int64_t>(gen.next());
      b.in[seeds_[s]] = store + s;
    }
  }
  cur_ = &b;
  return k;
}

void Runtime::execute(Binding& b) const noexcept {
  program_->run(arena_->data, b.in.data(), b.out.data());
  b.keep.clear();  // the host touches the binding again only after this invoke's event
}

ExecQueue* Runtime::stream_after_last() {
  ExecQueue* q = device_backend(device_).queue();
  if (q && last_ && last_->queue && last_->queue != q) last_->queue->wait(last_->event);
  return q;
}

void Runtime::invoke() noexcept {
  Binding& b = *cur_;
  ++stats_.invokes;
  ExecQueue* q = stream_after_last();
  if (!q) {  // the cpu device runs inline
    execute(b);
    return;
  }
  b.event = q->enqueue([this, &b] { execute(b); });  // fits std::function's local storage
  b.queue = q;
  last_ = &b;
}

void Runtime::wait() {
  for (Binding& b : bindings_) wait_for(b);
}

void Runtime::run() {
  Binding& b = *cur_;
  ++stats_.invokes;
  ExecQueue* q = stream_after_last();
  if (!q) {
    execute(b);
    ++stats_.inline_runs;
    return;
  }
  if (q->run_sync([this, &b] { execute(b); })) ++stats_.inline_runs;
}

}  // namespace hg::graphs
