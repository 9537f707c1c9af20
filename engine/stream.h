// The load stream: each HPU runs the device work of model loads and captures on a second
// in-order queue with one OpenMP thread, so that they do not hold up the inference replays
// queued on the device's default queue (before, a model being captured stalled every other
// model on its device for the length of the capture).
//
//   {
//     hg::LoadStreamGuard load;   // this thread's hpu work now goes to each HPU's load stream
//     auto p = hg::models::Predictor::load(dir, opt);
//     p->capture_all();
//   }                             // the load streams this thread used are synchronized here
//
// Work on the two streams of one device is not ordered: a tensor made under the guard may be
// used on the default stream only after the guard's scope ends (or hg::synchronize(device)
// under the guard), and the guarded thread must not use tensors that default-stream work is
// still writing. Guards nest; a guard belongs to the thread that made it.
#pragma once

namespace hg {

class LoadStreamGuard {
 public:
  LoadStreamGuard();
  ~LoadStreamGuard();  // synchronizes the load streams (when the outermost guard ends)
  LoadStreamGuard(const LoadStreamGuard&) = delete;
  LoadStreamGuard& operator=(const LoadStreamGuard&) = delete;
};

// True while a LoadStreamGuard is alive on this thread.
bool on_load_stream();

}  // namespace hg
