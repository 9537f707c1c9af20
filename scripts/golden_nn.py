#!/usr/bin/python3
"""Golden values of the nn op family (conv2d, pooling, batch_norm, layer_norm) from PyTorch.

Usage: /usr/bin/python3 scripts/golden_nn.py   (needs Debian's python3-torch)

Writes tests/golden/nn.json in gen_golden.py's case format, plus:
  "grad_inputs": indices of the inputs that get gradients (the others, e.g. running
                 statistics, are buffers), in the order of "grads";
  "bf16": true   when the test also runs the case in BF16 against these F32 values.
Inputs are float32 values; the math runs in float64 (see gen_golden.py).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_golden as g  # noqa: E402

F = torch.nn.functional


def case(name, op, fn, inputs, attrs=None, grad_inputs=None, bf16=False):
    if grad_inputs is None:
        grad_inputs = list(range(len(inputs)))
    leaves = [x.clone().requires_grad_(i in grad_inputs) for i, x in enumerate(inputs)]
    out = fn(*leaves)
    c = {"name": name, "op": op, "attrs": attrs or {},
         "inputs": [g.tensor_json(x) for x in leaves],
         "output": {"shape": list(out.shape), "data": g.flat(out)}}
    if grad_inputs:
        upstream = g.randn(*out.shape)
        (out * upstream).sum().backward()
        c["upstream"] = {"shape": list(upstream.shape), "data": g.flat(upstream)}
        c["grad_inputs"] = grad_inputs
        c["grads"] = [g.flat(leaves[i].grad) for i in grad_inputs]
    if bf16:
        c["bf16"] = True
    return c


def positive(*shape):
    return g.f32(torch.rand(shape, dtype=torch.float64) + 0.5)


def conv_case(name, x_shape, w_shape, bias, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    inputs = [g.randn(*x_shape), g.randn(*w_shape)] + ([g.randn(w_shape[0])] if bias else [])
    attrs = {"stride": list(stride), "padding": list(padding), "dilation": list(dilation), "groups": groups}
    fn = lambda x, w, b=None: F.conv2d(x, w, b, stride, padding, dilation, groups)  # noqa: E731
    return case(name, "conv2d", fn, inputs, attrs, bf16=True)


def resnet_block(x, w1, g1, b1, w2, g2, b2):
    """BasicBlock of ResNet-18 (no downsample), batch norm in training mode."""
    bn = lambda t, w, b: F.batch_norm(t, None, None, w, b, training=True, eps=1e-5)  # noqa: E731
    h = F.relu(bn(F.conv2d(x, w1, None, 1, 1), g1, b1))
    return F.relu(bn(F.conv2d(h, w2, None, 1, 1), g2, b2) + x)


def conv_cases():
    return [
        conv_case("conv_3x3_bias", (2, 3, 5, 5), (4, 3, 3, 3), True),
        conv_case("conv_stride2_pad1", (1, 3, 7, 6), (4, 3, 3, 3), True, (2, 2), (1, 1)),
        conv_case("conv_asym_kernel_stride_pad_nobias", (2, 3, 6, 5), (4, 3, 3, 2), False, (2, 1), (1, 0)),
        conv_case("conv_dilation2", (1, 2, 7, 7), (3, 2, 3, 3), True, (1, 1), (2, 2), (2, 2)),
        conv_case("conv_groups2", (1, 4, 5, 5), (6, 2, 3, 3), True, (1, 1), (1, 1), (1, 1), 2),
        conv_case("conv_depthwise_stride2", (1, 4, 6, 6), (4, 1, 3, 3), False, (2, 2), (1, 1), (1, 1), 4),
        conv_case("conv_1x1", (2, 8, 3, 3), (5, 8, 1, 1), True),
        case("resnet_basic_block_4ch", "resnet_block", resnet_block,
             [g.randn(2, 4, 4, 4), g.f32(torch.randn(4, 4, 3, 3, dtype=torch.float64) * 0.3), positive(4), g.randn(4),
              g.f32(torch.randn(4, 4, 3, 3, dtype=torch.float64) * 0.3), positive(4), g.randn(4)]),
    ]


def pool_case(name, op, shape, kernel, stride, padding, count_include_pad=True):
    attrs = {"kernel": list(kernel), "stride": list(stride), "padding": list(padding)}
    if op == "max_pool2d":
        fn = lambda x: F.max_pool2d(x, kernel, stride, padding)  # noqa: E731
    else:
        attrs["count_include_pad"] = count_include_pad
        fn = lambda x: F.avg_pool2d(x, kernel, stride, padding, count_include_pad=count_include_pad)  # noqa: E731
    return case(name, op, fn, [g.randn(*shape)], attrs, bf16=True)


def adaptive_case(name, shape, out):
    return case(name, "adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, out), [g.randn(*shape)],
                {"output_size": list(out)}, bf16=True)


def pool_cases():
    return [
        pool_case("max_pool_3x3_s2_p1", "max_pool2d", (1, 3, 7, 7), (3, 3), (2, 2), (1, 1)),
        pool_case("max_pool_2x2_odd_width", "max_pool2d", (1, 2, 6, 5), (2, 2), (2, 2), (0, 0)),
        pool_case("max_pool_3x2_s21_p10", "max_pool2d", (2, 2, 5, 6), (3, 2), (2, 1), (1, 0)),
        pool_case("avg_pool_3x3_s2_p1_include_pad", "avg_pool2d", (1, 3, 7, 7), (3, 3), (2, 2), (1, 1), True),
        pool_case("avg_pool_3x3_s2_p1_exclude_pad", "avg_pool2d", (1, 3, 7, 7), (3, 3), (2, 2), (1, 1), False),
        pool_case("avg_pool_2x2", "avg_pool2d", (1, 2, 6, 4), (2, 2), (2, 2), (0, 0)),
        adaptive_case("adaptive_7x5_to_3x2", (2, 3, 7, 5), (3, 2)),
        adaptive_case("adaptive_global_1x1", (2, 3, 5, 5), (1, 1)),
        adaptive_case("adaptive_rank3_10x7_to_4x3", (3, 10, 7), (4, 3)),
        adaptive_case("adaptive_upsample_3x3_to_5x4", (1, 2, 3, 3), (5, 4)),
    ]


def norm_cases():
    def bn_train(x, w, b):
        return F.batch_norm(x, None, None, w, b, training=True, eps=1e-5)

    def bn_eval(x, w, b, rm, rv):
        return F.batch_norm(x, rm, rv, w, b, training=False, eps=1e-5)

    def update(which, momentum=0.1):
        def fn(x, rm, rv):
            rm, rv = rm.detach().clone(), rv.detach().clone()
            F.batch_norm(x.detach(), rm, rv, None, None, training=True, momentum=momentum)
            return rm if which == "mean" else rv
        return fn

    cases = [
        case("bn_train_4d", "batch_norm_train", bn_train, [g.randn(4, 3, 3, 3), positive(3), g.randn(3)],
             {"eps": 1e-5}, bf16=True),
        case("bn_train_2d", "batch_norm_train", bn_train, [g.randn(6, 4), positive(4), g.randn(4)], {"eps": 1e-5}),
        case("bn_train_3d", "batch_norm_train", bn_train, [g.randn(3, 2, 5), positive(2), g.randn(2)], {"eps": 1e-5}),
        case("bn_eval_4d", "batch_norm_eval", bn_eval,
             [g.randn(2, 3, 4, 4), positive(3), g.randn(3), g.randn(3), positive(3)], {"eps": 1e-5}, [0, 1, 2], True),
    ]
    x, rm, rv = g.randn(4, 3, 2, 2), g.randn(3), positive(3)
    cases += [
        case("bn_update_mean", "bn_update_mean", update("mean"), [x, rm, rv], {"momentum": 0.1}, []),
        case("bn_update_var", "bn_update_var", update("var"), [x, rm, rv], {"momentum": 0.1}, []),
    ]
    ln = lambda shape: (lambda x, w, b: F.layer_norm(x, shape, w, b, 1e-5))  # noqa: E731
    cases += [
        case("ln_last_dim", "layer_norm", ln([5]), [g.randn(2, 3, 5), g.randn(5), g.randn(5)],
             {"normalized_shape": [5], "eps": 1e-5}),
        case("ln_two_dims", "layer_norm", ln([3, 4]), [g.randn(2, 3, 4), g.randn(3, 4), g.randn(3, 4)],
             {"normalized_shape": [3, 4], "eps": 1e-5}),
        case("ln_no_affine", "layer_norm", lambda x: F.layer_norm(x, [6], None, None, 1e-5), [g.randn(4, 6)],
             {"normalized_shape": [6], "eps": 1e-5}),
        # rows of 16-lane vectors and a tail; a wide row whose mean is far from 0
        case("ln_vectors_and_tail", "layer_norm", ln([100]), [g.randn(3, 100), g.randn(100), g.randn(100)],
             {"normalized_shape": [100], "eps": 1e-5}),
        case("ln_wide_offset", "layer_norm", ln([768]), [g.randn(2, 768) + 5, g.randn(768), g.randn(768)],
             {"normalized_shape": [768], "eps": 1e-5}, [0]),
    ]
    # Batch norm (engine/kernels_norm.cpp sums in F32 blocks of at most 1024 values): rows of
    # 16-lane vectors and a tail, rows longer than a block, many short rows per block, [N, C]
    # in eval mode; channel means far from 0.
    cases += [
        case("bn_train_vectors_and_tail", "batch_norm_train", bn_train,
             [g.f32(g.randn(5, 3, 7, 9) * 2 + 3), positive(3), g.randn(3)], {"eps": 1e-5}, bf16=True),
        case("bn_train_long_rows", "batch_norm_train", bn_train,
             [g.f32(g.randn(1, 2, 36, 30) - 4), positive(2), g.randn(2)], {"eps": 1e-5}),
        case("bn_train_many_rows", "batch_norm_train", bn_train,
             [g.f32(g.randn(210, 2, 5) + 1), positive(2), g.randn(2)], {"eps": 1e-5}),
        case("bn_eval_2d", "batch_norm_eval", bn_eval,
             [g.randn(7, 20), positive(20), g.randn(20), g.randn(20), positive(20)], {"eps": 1e-5}, [0, 1, 2]),
    ]
    x, rm, rv = g.f32(g.randn(6, 3, 50) * 0.5 + 10), g.randn(3), positive(3)
    cases += [
        case("bn_update_mean_offset", "bn_update_mean", update("mean"), [x, rm, rv], {"momentum": 0.1}, []),
        case("bn_update_var_offset", "bn_update_var", update("var"), [x, rm, rv], {"momentum": 0.1}, []),
    ]
    return cases


def main():
    torch.manual_seed(0)
    cases = conv_cases() + pool_cases() + norm_cases()
    g.dump("nn.json", "[\n" + ",\n".join(json.dumps(c) for c in cases) + "\n]\n")


if __name__ == "__main__":
    main()
