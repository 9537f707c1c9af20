#include <ostream>

#include "training/callbacks.h"
#include "training/py_format.h"
#include "training/trainer.h"

namespace hg::training {

bool ProgressBar::enabled(Trainer& t) const { return opt_.refresh_rate > 0 && t.is_global_zero(); }

// Lightning's bar postfix: progress_bar_metrics with 3 significant digits, then v_num.
std::string ProgressBar::metrics_text(Trainer& t) const {
  std::string s;
  for (const auto& [k, v] : t.progress_bar_metrics()) s += ", " + k + "=" + py_format(v, ".3g");
  if (!t.loggers().empty()) {
    std::string v = t.loggers()[0]->version();
    s += ", v_num=" + (v.size() > 4 ? v.substr(v.size() - 4) : v);
  }
  return s;
}

void ProgressBar::draw_train(Trainer& t, int64_t done, bool final) {
  int64_t total = t.num_training_batches();
  std::string line = "Epoch " + std::to_string(t.current_epoch()) + ": ";
  if (total > 0) {
    int64_t shown = std::min(done, total);
    int pct = int(100 * shown / total);
    int fill = int(int64_t(opt_.bar_width) * shown / total);
    std::string p = std::to_string(pct);
    line += std::string(3 - std::min<size_t>(3, p.size()), ' ') + p + "%|" + std::string(size_t(fill), '#') +
            std::string(size_t(opt_.bar_width - fill), ' ') + "| " + std::to_string(done) + "/" + std::to_string(total);
  } else {
    line += std::to_string(done) + "/?";
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start_).count();
  std::string rate = done == 0 || secs <= 0 ? "?it/s"
                     : done >= secs       ? py_format(double(done) / secs, ".2f") + "it/s"
                                          : py_format(secs / double(done), ".2f") + "s/it";
  line += " [" + rate + metrics_text(t) + "]";
  std::ostream& out = t.out();
  out << '\r' << line;
  if (line.size() < last_width_) out << std::string(last_width_ - line.size(), ' ');
  last_width_ = line.size();
  line_open_ = true;
  if (final) end_line(t);
  out.flush();
}

void ProgressBar::draw_counter(Trainer& t, const char* what, int64_t done) {
  std::string line = std::string(what) + ": " + std::to_string(done);
  std::ostream& out = t.out();
  out << '\r' << line;
  if (line.size() < last_width_) out << std::string(last_width_ - line.size(), ' ');
  last_width_ = line.size();
  line_open_ = true;
  out.flush();
}

void ProgressBar::end_line(Trainer& t) {
  if (!line_open_) return;
  t.out() << '\n';
  t.out().flush();
  line_open_ = false;
  last_width_ = 0;
}

void ProgressBar::on_train_epoch_start(Trainer& t, LightningModule&) {
  epoch_start_ = std::chrono::steady_clock::now();
  train_done_ = 0;
  if (enabled(t)) draw_train(t, 0, false);
}

void ProgressBar::on_train_batch_end(Trainer& t, LightningModule&, const Batch&, int64_t batch_idx) {
  train_done_ = batch_idx + 1;
  if (enabled(t) && (train_done_ % opt_.refresh_rate == 0 || train_done_ == t.num_training_batches()))
    draw_train(t, train_done_, false);
}

void ProgressBar::on_train_epoch_end(Trainer& t, LightningModule&) {
  if (enabled(t)) draw_train(t, train_done_, true);  // with the epoch's validation metrics
}

void ProgressBar::on_validation_epoch_start(Trainer& t, LightningModule&) {
  eval_done_ = 0;
  in_fit_validation_ = t.stage() == "fit";
}

void ProgressBar::on_validation_batch_end(Trainer& t, LightningModule&, const Batch&, int64_t) {
  ++eval_done_;
  // Inside fit the epoch's bar stays on its line; validate() gets its own counter.
  if (enabled(t) && !in_fit_validation_ && eval_done_ % opt_.refresh_rate == 0) draw_counter(t, "Validation", eval_done_);
}

void ProgressBar::on_validation_end(Trainer& t, LightningModule&) {
  if (!enabled(t) || in_fit_validation_) return;
  draw_counter(t, "Validation", eval_done_);
  end_line(t);
}

void ProgressBar::on_test_batch_end(Trainer& t, LightningModule&, const Batch&, int64_t batch_idx) {
  eval_done_ = batch_idx + 1;
  if (enabled(t) && eval_done_ % opt_.refresh_rate == 0) draw_counter(t, "Testing", eval_done_);
}

void ProgressBar::on_test_epoch_end(Trainer& t, LightningModule&) {
  if (!enabled(t)) return;
  draw_counter(t, "Testing", eval_done_);
  end_line(t);
}

void ProgressBar::on_predict_batch_end(Trainer& t, LightningModule&, const Batch&, int64_t batch_idx) {
  eval_done_ = batch_idx + 1;
  if (enabled(t) && eval_done_ % opt_.refresh_rate == 0) draw_counter(t, "Predicting", eval_done_);
}

void ProgressBar::teardown(Trainer& t, LightningModule&, const std::string&) {
  if (enabled(t)) end_line(t);
  eval_done_ = 0;
}

}  // namespace hg::training
