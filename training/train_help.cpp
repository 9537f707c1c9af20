// The documentation of hgraph-train's config (train_config_help in training/train_config.h).
#include "training/train_config.h"

namespace hg::training {

std::string train_config_help() {
  return R"(Config file (JSON). Every section and key is optional; unknown keys are errors naming the key.
Lightning's meaning and defaults unless said otherwise.

"data":
  dataset            "digits"      "digits": the bundled 8x8 scikit-learn digits (1797 images, 10 classes)
                                   "fashion_mnist": Fashion-MNIST (Debian's dataset-fashion-mnist),
                                     the "idx" layout at /usr/share/datasets/fashion-mnist
                                   "idx": a directory in the MNIST layout: {train,t10k}-{images-idx3,
                                     labels-idx1}-ubyte, each raw or .gz; t10k is the test split
                                   "table": a .csv, .npy or .npz file of features and a label
                                   "text": a UTF-8 file or directory for the byte-level gpt
  path               see dataset   digits: the safetensors file (bundled); fashion_mnist/idx: the
                                   directory; table: the training file; text: a file or directory
                                   (every UTF-8 file under it; other files are skipped and counted)
  test_path          none          table: a test file in the same format (else the held-out split)
  label              -1            table: the label column, a CSV header name or an index (-1: last);
                                   integer labels keep their values, text labels are numbered sorted
  features_key       "x"           table (.npz): the features array [N, F]
  labels_key         "y"           table (.npz): the labels array [N]
  normalize          true          table: standardise each feature with the training split's mean and
                                   std; the export folds them into the model's first layer, so the
                                   served model takes raw features (the statistics are in its metadata)
  image_size         see right     digits: 8 (x FP32 [64]) or 32 (x [1, 32, 32], pixels repeated 4x4),
                                   8 unless lenet5; idx: 0 = as stored (28), or larger: zero-padded
                                   around the centre (lenet5: 32). An mlp gets the images flattened.
  crop_padding       0             images: random crops of the zero-padded image (RandomCrop(size,
                                   padding)); seeded by data.seed, epoch and example
  hflip              false         images: random horizontal flips (probability 1/2), seeded the same
  stride             0             text: bytes between consecutive blocks (0: the model's max_len)
  batch_size         32            training batch size (shuffled every epoch from seed + epoch)
  val_batch_size     256           batch size of the validation and test loaders
  holdout_fraction   0.2           share of the training file held out for validation (idx,
                     (idx, text: 0.1) fashion_mnist: of the 60000; text: the corpus's last bytes); digits
                                   and tables without test_path test on it too (0: none)
  seed               0             seed of the split, the shuffles and the augmentation
  num_workers        0             DataLoader worker threads (0: batches made on the training thread)
  prefetch_factor    2             batches each worker keeps ready

"model":
  name               "mlp"         "mlp", "lenet5" or "bert_classifier" (models/zoo.h), "sequential"
                                   (a stack of built-in layers), or "gpt" (the byte-level language
                                   model; with data.dataset "text" only)
  config             {}            mlp: {"sizes": [64, 64, 10]} (sizes[0]: the features, 784 for
                                   28x28 images; the last: the classes); lenet5: {"classes": 10},
                                   input [1, 32, 32]; bert_classifier: {"vocab": 1000, "d_model": 128,
                                   "nhead": 4, "layers": 2, "ff": 512, "max_len": 128, "classes": 2};
                                   gpt: {"vocab": 256, "d_model": 128, "nhead": 4, "layers": 2,
                                   "ff": 512, "max_len": 256} (max_len: the training block length);
                                   sequential: {"input": one example's shape, "layers": [{"op": ...,
                                   fields}, ...]}, ending in [classes]. Layers and fields (defaults):
                                     linear in_features, out_features, bias true
                                     conv2d in_channels, out_channels, kernel, stride 1, padding 0,
                                       dilation 1, groups 1, bias true (kernel etc.: k or [h, w])
                                     max_pool2d / avg_pool2d kernel, stride kernel, padding 0
                                     adaptive_avg_pool2d output_size; batch_norm2d num_features,
                                       eps 1e-5, momentum 0.1; layer_norm dim, eps 1e-5
                                     embedding num_embeddings, dim (first layer: INT64 ids)
                                     transformer_encoder_layer d_model, nhead, dim_feedforward 2048,
                                       dropout 0.1, activation "relu"|"gelu", norm_first false
                                     flatten start_dim 1, end_dim -1; dropout p 0.5; gelu
                                       approximate "none"|"tanh"; relu, silu, tanh, sigmoid
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
                                   "onecycle": max_lr (required; a number or one per group),
                                     total_steps, or epochs and steps_per_epoch (required),
                                     pct_start 0.3, anneal_strategy "cos" ("linear"),
                                     cycle_momentum true (SGD momentum / Adam beta1),
                                     base_momentum 0.85, max_momentum 0.95, div_factor 25,
                                     final_div_factor 1e4, three_phase false; give it
                                     interval "step" (it counts optimizer steps)
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
  max_epochs         none          none with max_steps -1 and no max_time: 1000; -1: no limit
  min_epochs         0
  max_steps          -1            optimizer steps (-1: no limit)
  min_steps          0             optimizer steps before early stopping or max_time may end fit
  max_time           none          stop fit once the training loop ran this long (checked after
                                   each batch): "DD:HH:MM:SS" (e.g. "00:12:00:00") or seconds
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

"tuner":                           the learning-rate finder (Lightning's Tuner.lr_find)
  lr_find            false         run it before fit and train with its suggestion as optimizer.lr
                                   (one process); hgraph-train --lr-find only prints it
  min_lr             1e-8          the sweep's first lr
  max_lr             1.0           the lr it grows towards
  num_training       100           optimizer steps of the sweep
  mode               "exponential" "exponential" or "linear" growth
  early_stop_threshold 4.0         stop once the smoothed loss passes this x the best (null: never)

"ckpt_path"            ""          resume fit from this checkpoint file, or "last" / "best" (the
                                   ModelCheckpoint's in default_root_dir); "": a fresh start

"export":                          written after training and testing (global rank 0)
  dir                none          the model repository (no export without it)
  name               "<dataset>_<model name>"  the model's folder: <dir>/<name>/<version>/
  version            1
  config             none          the server's config.json for the model (e.g. {"max_batch_size": 32})
  format             "package"     "package" (model.json + weights.safetensors) or "onnx" (model.onnx,
                                   opset 17, traced from the module; dynamic batch "batch")

The metrics: train_loss (progress bar), val_loss, val_acc, and test_loss, test_acc on the
test split after fit (t10k, test_path, or the held-out split). gpt logs val_loss, val_bpb,
test_loss, test_bpb instead (loss in nats per byte; bpb = bits per byte).
)";
}

}  // namespace hg::training
