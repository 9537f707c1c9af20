#!/usr/bin/python3
"""Golden values for the optimizers, gradient clipping and lr schedulers (training/).

Usage: /usr/bin/python3 scripts/golden_optim.py   (needs Debian's python3-torch)

Writes
  tests/golden/optim.json: a list of optimizer cases
    {"name", "optimizer": "SGD" | "Adam" | "AdamW", "defaults": {option: value},
     "groups": [{"params": [names], "options": {option: value}}],
     "init": {name: {"shape", "data"}},
     "grads": [{name: data}, ...]          # one per step, fixed (not from a loss)
     "expected": [{name: data}, ...]}      # the parameters after each step
  tests/golden/optim_clip.json: clipping cases
    {"name", "kind": "norm" | "value", "max_norm", "norm_type" (a number or "inf"), "clip_value",
     "grads": {name: {"shape", "data"}}, "total_norm", "clipped": {name: data}}
  tests/golden/optim_sched.json: scheduler cases, each with two param groups (lr 0.1 and 0.02)
    {"name", "scheduler", "args": {...}, "metrics": [..] (ReduceLROnPlateau),
     "optimizer": "SGD" | "Adam" (SGD when missing),
     "lrs": [[lr of each group] after construction, then after each step],
     "momentums": [[momentum (SGD) or beta1 (Adam) of each group], ...] (OneCycleLR only)}
torch.optim runs in float32 (as the engine); option names follow training/optimizer.h
(beta1/beta2 instead of betas).
"""
import json
import math
import os

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "golden")
STEPS = 12


def flat(t):
    return [float(repr(v)) for v in t.detach().to(torch.float32).reshape(-1).numpy()]


def make_optimizer(kind, groups, defaults):
    d = dict(defaults)
    if "beta1" in d:
        d["betas"] = (d.pop("beta1"), d.pop("beta2"))
    d = {k: (bool(v) if k in ("nesterov", "amsgrad") else v) for k, v in d.items()}
    cls = {"SGD": torch.optim.SGD, "Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW}[kind]
    return cls(groups, **d)


def optim_case(name, kind, defaults, group_options=None, shapes=None, seed=0):
    torch.manual_seed(seed)
    shapes = shapes or {"w": [3, 4], "b": [4]}
    params = {n: torch.randn(s).requires_grad_(True) for n, s in shapes.items()}
    init = {n: {"shape": list(p.shape), "data": flat(p)} for n, p in params.items()}
    names = list(shapes)
    if group_options is None:
        spec = [{"params": names, "options": {}}]
    else:  # one group per parameter
        spec = [{"params": [n], "options": o} for n, o in zip(names, group_options)]
    groups = [dict({"params": [params[n] for n in g["params"]]}, **g["options"]) for g in spec]
    opt = make_optimizer(kind, groups, defaults)
    grads, expected = [], []
    for step in range(STEPS):
        g = {n: torch.randn(p.shape) * (1.0 + 0.1 * step) for n, p in params.items()}
        for n, p in params.items():
            p.grad = g[n].clone()
        opt.step()
        grads.append({n: flat(v) for n, v in g.items()})
        expected.append({n: flat(p) for n, p in params.items()})
    return {"name": name, "optimizer": kind, "defaults": defaults, "groups": spec, "init": init,
            "grads": grads, "expected": expected}


def optim_cases():
    return [
        optim_case("sgd_plain", "SGD", {"lr": 0.1}),
        optim_case("sgd_momentum", "SGD", {"lr": 0.05, "momentum": 0.9}),
        optim_case("sgd_dampening", "SGD", {"lr": 0.05, "momentum": 0.8, "dampening": 0.3}),
        optim_case("sgd_nesterov", "SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": 1}),
        optim_case("sgd_weight_decay", "SGD", {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}),
        optim_case("sgd_two_groups", "SGD", {"lr": 0.1, "momentum": 0.9},
                   [{"lr": 0.01}, {"momentum": 0.5, "weight_decay": 0.1}]),
        optim_case("adam", "Adam", {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}),
        optim_case("adam_weight_decay", "Adam", {"lr": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6,
                                                 "weight_decay": 0.1}),
        optim_case("adam_amsgrad", "Adam", {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                                            "amsgrad": 1}),
        optim_case("adamw", "AdamW", {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                                      "weight_decay": 0.01}),
        optim_case("adamw_amsgrad", "AdamW", {"lr": 0.02, "beta1": 0.9, "beta2": 0.99, "eps": 1e-8,
                                              "weight_decay": 0.05, "amsgrad": 1}),
        optim_case("adamw_two_groups", "AdamW", {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                                                 "weight_decay": 0.01},
                   [{"lr": 0.001}, {"lr": 0.05, "weight_decay": 0.0}]),
    ]


def clip_case(name, kind, seed, scale, **kw):
    torch.manual_seed(seed)
    grads = {"w": torch.randn(3, 4) * scale, "b": torch.randn(4) * scale}
    params = {n: torch.zeros_like(g, requires_grad=True) for n, g in grads.items()}
    for n, p in params.items():
        p.grad = grads[n].clone()
    out = {"name": name, "kind": kind, "grads": {n: {"shape": list(g.shape), "data": flat(g)}
                                                 for n, g in grads.items()}}
    if kind == "norm":
        total = torch.nn.utils.clip_grad_norm_(list(params.values()), kw["max_norm"], kw["norm_type"])
        out.update(max_norm=kw["max_norm"], total_norm=float(total),
                   norm_type="inf" if math.isinf(kw["norm_type"]) else kw["norm_type"])
    else:
        torch.nn.utils.clip_grad_value_(list(params.values()), kw["clip_value"])
        out.update(clip_value=kw["clip_value"])
    out["clipped"] = {n: flat(p.grad) for n, p in params.items()}
    return out


def clip_cases():
    return [
        clip_case("norm2_clipped", "norm", 1, 1.0, max_norm=1.0, norm_type=2.0),
        clip_case("norm2_unclipped", "norm", 2, 0.05, max_norm=1.0, norm_type=2.0),
        clip_case("norm_inf_clipped", "norm", 3, 1.0, max_norm=0.5, norm_type=math.inf),
        clip_case("norm3_clipped", "norm", 4, 1.0, max_norm=0.7, norm_type=3.0),
        clip_case("value", "value", 5, 1.0, clip_value=0.4),
    ]


SCHED_STEPS = 40


def momentums_of(opt):
    return [g["betas"][0] if "betas" in g else g["momentum"] for g in opt.param_groups]


def sched_case(name, make, args, metrics=None, optimizer="SGD", momentums=False):
    params = [torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)]
    groups = [{"params": [params[0]], "lr": 0.1}, {"params": [params[1]], "lr": 0.02}]
    opt = torch.optim.SGD(groups, lr=0.1) if optimizer == "SGD" else torch.optim.Adam(groups, lr=0.1)
    sched = make(opt)
    lrs = [[g["lr"] for g in opt.param_groups]]
    moms = [momentums_of(opt)]
    for step in range(SCHED_STEPS):
        opt.step()
        if metrics is None:
            sched.step()
        else:
            sched.step(metrics[step])
        lrs.append([g["lr"] for g in opt.param_groups])
        moms.append(momentums_of(opt))
    out = {"name": name, "scheduler": name.split("_")[0], "args": args, "lrs": lrs}
    if metrics is not None:
        out["metrics"] = metrics
    if optimizer != "SGD":
        out["optimizer"] = optimizer
    if momentums:
        out["momentums"] = moms
    return out


def sched_cases():
    S = torch.optim.lr_scheduler
    plateau_metrics = [1.0 / (1 + i) if i < 8 else 0.125 + 0.001 * ((i * 7) % 5) for i in range(SCHED_STEPS)]
    rising = [0.1 * i if i < 10 else 0.9 for i in range(SCHED_STEPS)]
    return [
        sched_case("StepLR", lambda o: S.StepLR(o, step_size=7, gamma=0.5), {"step_size": 7, "gamma": 0.5}),
        sched_case("MultiStepLR", lambda o: S.MultiStepLR(o, milestones=[5, 12, 12, 30], gamma=0.3),
                   {"milestones": [5, 12, 12, 30], "gamma": 0.3}),
        sched_case("CosineAnnealingLR", lambda o: S.CosineAnnealingLR(o, T_max=15, eta_min=0.001),
                   {"t_max": 15, "eta_min": 0.001}),
        sched_case("LinearLR", lambda o: S.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=8),
                   {"start_factor": 0.1, "end_factor": 1.0, "total_iters": 8}),
        sched_case("LinearLR_decay", lambda o: S.LinearLR(o, start_factor=1.0, end_factor=0.25, total_iters=20),
                   {"start_factor": 1.0, "end_factor": 0.25, "total_iters": 20}),
        sched_case("ExponentialLR", lambda o: S.ExponentialLR(o, gamma=0.9), {"gamma": 0.9}),
        sched_case("LambdaLR", lambda o: S.LambdaLR(o, lambda e: (e + 1) / 4 if e < 4 else 0.9 ** (e - 4)),
                   {"warmup": 4, "decay": 0.9}),
        sched_case("SequentialLR",
                   lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=5),
                                                S.CosineAnnealingLR(o, T_max=30, eta_min=0.0)], milestones=[5]),
                   {"warmup": 5, "t_max": 30}),
        sched_case("ReduceLROnPlateau_min",
                   lambda o: S.ReduceLROnPlateau(o, mode="min", factor=0.5, patience=2, threshold=1e-2,
                                                 threshold_mode="rel", cooldown=1, min_lr=0.004),
                   {"mode": "min", "factor": 0.5, "patience": 2, "threshold": 1e-2, "threshold_mode": "rel",
                    "cooldown": 1, "min_lr": 0.004}, plateau_metrics),
        sched_case("ReduceLROnPlateau_max",
                   lambda o: S.ReduceLROnPlateau(o, mode="max", factor=0.1, patience=3, threshold=0.05,
                                                 threshold_mode="abs", cooldown=0, min_lr=0.0),
                   {"mode": "max", "factor": 0.1, "patience": 3, "threshold": 0.05, "threshold_mode": "abs",
                    "cooldown": 0, "min_lr": 0.0}, rising),
        # total_steps 40: the 40 steps end exactly at the last one (a 41st raises).
        sched_case("OneCycleLR_cos",
                   lambda o: S.OneCycleLR(o, max_lr=[0.5, 0.1], total_steps=40, pct_start=0.25),
                   {"max_lr": [0.5, 0.1], "total_steps": 40, "pct_start": 0.25}, momentums=True),
        sched_case("OneCycleLR_linear_three_phase",
                   lambda o: S.OneCycleLR(o, max_lr=0.3, epochs=5, steps_per_epoch=8, pct_start=0.3,
                                          anneal_strategy="linear", cycle_momentum=False, div_factor=10.0,
                                          final_div_factor=100.0, three_phase=True),
                   {"max_lr": [0.3], "epochs": 5, "steps_per_epoch": 8, "pct_start": 0.3,
                    "anneal_strategy": "linear", "cycle_momentum": False, "div_factor": 10.0,
                    "final_div_factor": 100.0, "three_phase": True}, momentums=True),
        sched_case("OneCycleLR_adam",
                   lambda o: S.OneCycleLR(o, max_lr=0.01, total_steps=45, pct_start=0.4, base_momentum=0.8,
                                          max_momentum=0.9),
                   {"max_lr": [0.01], "total_steps": 45, "pct_start": 0.4, "base_momentum": [0.8],
                    "max_momentum": [0.9]}, optimizer="Adam", momentums=True),
    ]


def write(name, obj):
    path = os.path.join(OUT_DIR, name)
    with open(path + ".tmp", "w") as f:
        f.write("[\n" + ",\n".join(json.dumps(c) for c in obj) + "\n]\n")
    os.replace(path + ".tmp", path)
    print("wrote", path)


if __name__ == "__main__":
    write("optim.json", optim_cases())
    write("optim_clip.json", clip_cases())
    write("optim_sched.json", sched_cases())
