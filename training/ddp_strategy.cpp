// Transient: the declarations are committed first so the Trainer can construct the strategy;
// the implementation (training/ddp_reducer.h, the watchdog) replaces this file.
#include "training/ddp_strategy.h"

#include "engine/error.h"

namespace hg::training {

class DDPReducer {};
struct DDPStrategy::Watchdog {};

DDPStrategy::DDPStrategy(DDPOptions opt, std::string name) : opt_(opt), name_(std::move(name)) {}
DDPStrategy::~DDPStrategy() = default;

void DDPStrategy::setup_environment(const StrategyContext&) {
  throw InvalidArgument("strategy '" + name_ + "': DDP is not built yet");
}
void DDPStrategy::fail(const std::string& what) { throw InvalidArgument(what); }
void DDPStrategy::broadcast_buffers() {}
void DDPStrategy::setup_module(models::Module& m) { module_ = &m; }
void DDPStrategy::backward(const Tensor& loss, bool) { loss.backward(); }
void DDPStrategy::finish_gradient_sync() {}
double DDPStrategy::reduce(double value, ReduceOp) { return value; }
void DDPStrategy::barrier(const std::string&) {}
void DDPStrategy::broadcast(std::string&) {}
DataLoader DDPStrategy::distribute(const DataLoader& loader, bool, uint64_t) const { return loader; }
void DDPStrategy::teardown() {}

}  // namespace hg::training
