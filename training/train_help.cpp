// The documentation of hgraph-train's config (train_config_help in training/train_config.h).
#include "training/train_config.h"

namespace hg::training {

std::string train_config_help() {
  return R"(Config file (JSON). Every section and key is optional; unknown keys are errors naming the key.
Lightning's meaning and defaults unless said otherwise.

"data":
  dataset            "digits"      the data set (only the 8x8 scikit-learn digits, 1797 examples)
  path               bundled       the digits safetensors file (models/data/digits.safetensors)
  image_size         8 (lenet5: 32) 8: x FP32 [64]; 32: x FP32 [1, 32, 32], each pixel repeated 4x4
  batch_size         32            training batch size (shuffled every epoch from seed + epoch)
  val_batch_size     256           batch size of the held-out loader (validation and test)
  holdout_fraction   0.2           share of the examples held out for validation and test (0: none)
  seed               0             seed of the split and of the shuffles
  num_workers        0             DataLoader worker threads (0: batches made on the training thread)
  prefetch_factor    2             batches each worker keeps ready

"model":
  name               "mlp"         "mlp" (image_size 8) or "lenet5" (image_size 32) (models/zoo.h;
                                   bert_classifier takes token ids, not the digits); 10 classes
  config             {}            mlp: {"sizes": [64, 64, 10]}; lenet5: {"classes": 10};
                                   bert_classifier: {"vocab": 1000, "d_model": 128, "nhead": 4,
                                   "layers": 2, "ff": 512, "max_len": 128, "classes": 2}
  seed               0             weight initialization

"optimizer":                       default {"name": "sgd", "lr": 0.05, "momentum": 0.9}
  name               (required)    "sgd", "adam" or "adamw"
  sgd:   lr 0.01, momentum 0, dampening 0, weight_decay 0, nesterov false
  adam:  lr 0.001, betas [0.9, 0.999], eps 1e-8, weight_decay 0, amsgrad false
  adamw: the same, weight_decay 0.01 (decoupled)
  scheduler          none          {"name": ..., fields, and how the Trainer steps it}:
    name             (required)    "step": step_size (required), gamma 0.1
                                   "multistep": milestones (required), gamma 0.1
                                   "cosine": t_max (required), eta_min 0
                                   "exponential": gamma (required)
                                   "linear": start_factor 1/3, end_factor 1, total_iters 5
                                   "sequential": schedulers [{...}, ...], milestones (required)
                                   "plateau": mode "min", factor 0.1, patience 10, threshold 1e-4,
                                     threshold_mode "rel", cooldown 0, min_lr 0, eps 1e-8
    interval         "epoch"       "epoch" or "step": what one scheduler step is
    frequency        1             step the scheduler every N intervals
    monitor          "val_loss" for plateau, else none: the logged metric plateau steps with
    strict           true          a missing monitor is an error (false: a warning)
    log_name         "lr-<Optimizer>"  the LearningRateMonitor key

"trainer":                         hg::training::TrainerOptions, Lightning's Trainer arguments
  accelerator        "auto"        "hpu", "cpu" or "auto" (= hpu)
  devices            "auto"        processes per node (integer) or "auto" (= 1)
  strategy           "auto"        "auto", "hpu_single", "hpu_parallel", "hpu_ddp" (DDP when devices > 1)
  num_nodes          1             nodes (MASTER_ADDR, MASTER_PORT, NODE_RANK from the environment)
  precision          "32"          "32", "32-true" or "bf16-mixed"
  max_epochs         none          none with max_steps -1: 1000; -1: no limit
  min_epochs         0
  max_steps          -1            optimizer steps (-1: no limit)
  limit_train_batches 1.0          a fraction (number with a point) or a batch count (integer)
  limit_val_batches  1.0           the same
  limit_test_batches 1.0           the same
  limit_predict_batches 1.0        the same
  val_check_interval 1.0           validate after this fraction of an epoch, or every N batches
  check_val_every_n_epoch 1        validate every N epochs (null: by val_check_interval only)
  num_sanity_val_steps 2           validation batches run before training
  log_every_n_steps  50            logger rows every N optimizer steps
  accumulate_grad_batches 1        batches per optimizer step
  gradient_clip_val  none          clip gradients at this value (none: no clipping)
  gradient_clip_algorithm "norm"   "norm" (total 2-norm) or "value" (each element)
  deterministic      false         seed every process the same
  seed               0             seed_everything's seed (PL_GLOBAL_SEED overrides)
  default_root_dir   "" (cwd)      where logs and checkpoints go
  logger             true          true (CSV logger), false (none), "csv", "tensorboard" or a list
  callbacks          []            list of {"name": ..., options}:
    ModelCheckpoint: dirpath, filename, monitor, mode "min", save_top_k 1, save_last false,
      save_weights_only false, every_n_train_steps, every_n_epochs, save_on_train_epoch_end,
      auto_insert_metric_name true, enable_version_counter true
    EarlyStopping: monitor (required), min_delta 0, patience 3, mode "min", strict true,
      check_finite true, stopping_threshold, divergence_threshold, check_on_train_epoch_end,
      verbose false
    LearningRateMonitor: logging_interval ("step", "epoch" or "" = the scheduler's),
      log_momentum false, log_weight_decay false
    DeviceStatsMonitor: cpu_stats
  enable_checkpointing true        a ModelCheckpoint (save_last) when callbacks have none
  enable_progress_bar true
  fast_dev_run       0             true or N: N batches of train/val/test, 1 epoch, no logs or checkpoints
  dist_timeout       1800          seconds for rendezvous and collectives (DDP)
  replay_steps       false         lazy mode: replay the training step once two steps record the
                                   same graph (training_step is then not called; DDP reduces
                                   inside the step's graph; see docs)

"ckpt_path"            ""          resume fit from this checkpoint file, or "last" / "best" (the
                                   ModelCheckpoint's in default_root_dir); "": a fresh start

"export":                          written after training and testing (global rank 0)
  dir                none          the model repository (no export without it)
  name               "digits_<model name>"  the model's folder: <dir>/<name>/<version>/
  version            1
  config             none          the server's config.json for the model (e.g. {"max_batch_size": 32})
  format             "package"     "package" (model.json + weights.safetensors) or "onnx" (model.onnx,
                                   opset 17, traced from the module; dynamic batch "batch")

The metrics: train_loss (progress bar), val_loss, val_acc, and test_loss, test_acc on the
held-out split after fit (the same examples as validation).
)";
}

}  // namespace hg::training
