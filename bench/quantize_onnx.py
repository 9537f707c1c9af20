#!/usr/bin/python3
"""Writes the INT8 version of an ONNX model that ONNX Runtime runs as the peer of hgraph's
"precision": "int8": the graph ONNX Runtime's own dynamic quantization (quantize_dynamic,
per_channel=True) produces, made here with Debian's python3-onnx because onnxruntime's Python
tooling is not installable on these machines.

Every MatMul by a 2-D initializer (or an Identity of one), and every Gemm by one (alpha = beta = 1, A not transposed),
becomes
    DynamicQuantizeLinear(A) -> MatMulInteger(A_u8, W_s8, A_zero, W_zero) -> Cast(float)
      -> Mul(A_scale * W_scale) [-> Add(bias)]
with the weights quantized per output column, symmetric (W_s8 = round(W / s_n),
s_n = max|W[:, n]| / 127): the scales hgraph's matmul_int8 uses. Every Conv by a 4-D initializer
with group 1 (the convolutions hgraph runs in INT8) becomes the same around ConvInteger, the
weights quantized per output channel. Everything else is unchanged.

    /usr/bin/python3 bench/quantize_onnx.py IN.onnx OUT.onnx
prints how many MatMul/Gemm and Conv nodes it quantized.
"""
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto


def quantize_weight(w):
    """W [K, N] -> (s8 [K, N], scales [N]) per output column."""
    amax = np.abs(w).max(axis=0)
    scale = np.where((amax > 0) & np.isfinite(amax), amax / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return q, scale


def quantize_conv(node, w, attrs, inits, new_inits):
    """Conv(X, W[, B]) -> DynamicQuantizeLinear + ConvInteger + Cast + Mul [+ Add], W per output channel."""
    o = w.shape[0]
    q, scale = quantize_weight(w.reshape(o, -1).T)
    q = q.T.reshape(w.shape)
    p = f"{node.name or node.output[0]}_q"
    new_inits += [numpy_helper.from_array(q, p + "_w"), numpy_helper.from_array(scale.reshape(1, o, 1, 1), p + "_wscale"),
                  numpy_helper.from_array(np.zeros(1, np.int8), p + "_wzero")]  # ORT's ConvInteger: one zero point
    has_bias = len(node.input) > 2 and node.input[2]
    out = node.output[0]
    conv_attrs = {k: v for k, v in attrs.items() if k in ("dilations", "group", "kernel_shape", "pads", "strides", "auto_pad")}
    nodes = [
        helper.make_node("DynamicQuantizeLinear", [node.input[0]], [p + "_a", p + "_ascale", p + "_azero"], name=p + "_dq"),
        helper.make_node("ConvInteger", [p + "_a", p + "_w", p + "_azero", p + "_wzero"], [p + "_i32"], name=p + "_ci",
                         **conv_attrs),
        helper.make_node("Cast", [p + "_i32"], [p + "_f32"], to=TensorProto.FLOAT, name=p + "_cast"),
        helper.make_node("Mul", [p + "_ascale", p + "_wscale"], [p + "_scale"], name=p + "_scales"),
        helper.make_node("Mul", [p + "_f32", p + "_scale"], [p + "_y" if has_bias else out], name=p + "_mul"),
    ]
    if has_bias:
        b = numpy_helper.to_array(inits[node.input[2]]).reshape(1, o, 1, 1)
        new_inits.append(numpy_helper.from_array(b.astype(np.float32), p + "_bias"))
        nodes.append(helper.make_node("Add", [p + "_y", p + "_bias"], [out], name=p + "_badd"))
    return nodes


def main(src, dst):
    model = onnx.load(src)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    for node in g.node:  # exporters name one initializer under several names through Identity nodes
        if node.op_type == "Identity" and node.input[0] in inits:
            inits[node.output[0]] = inits[node.input[0]]
    new_nodes, new_inits, count, convs = [], [], 0, 0
    for node in g.node:
        weight_name = node.input[1] if len(node.input) > 1 else None
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Conv" and weight_name in inits and attrs.get("group", 1) == 1:
            w = numpy_helper.to_array(inits[weight_name])
            if w.ndim == 4 and w.dtype == np.float32:
                new_nodes += quantize_conv(node, w, attrs, inits, new_inits)
                convs += 1
                continue
        ok = node.op_type in ("MatMul", "Gemm") and weight_name in inits
        if ok and node.op_type == "Gemm":
            ok = attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0 and not attrs.get("transA", 0)
        w = numpy_helper.to_array(inits[weight_name]) if ok else None
        if not ok or w.ndim != 2 or w.dtype != np.float32:
            new_nodes.append(node)
            continue
        if node.op_type == "Gemm" and attrs.get("transB", 0):
            w = w.T
        q, scale = quantize_weight(w)
        p = f"{node.name or node.output[0]}_q"
        new_inits += [numpy_helper.from_array(q, p + "_w"), numpy_helper.from_array(scale, p + "_wscale"),
                      numpy_helper.from_array(np.zeros(q.shape[1], np.int8), p + "_wzero")]
        a = node.input[0]
        out = node.output[0]
        has_bias = node.op_type == "Gemm" and len(node.input) > 2 and node.input[2]
        new_nodes += [
            helper.make_node("DynamicQuantizeLinear", [a], [p + "_a", p + "_ascale", p + "_azero"], name=p + "_dq"),
            helper.make_node("MatMulInteger", [p + "_a", p + "_w", p + "_azero", p + "_wzero"], [p + "_i32"],
                             name=p + "_mmi"),
            helper.make_node("Cast", [p + "_i32"], [p + "_f32"], to=TensorProto.FLOAT, name=p + "_cast"),
            helper.make_node("Mul", [p + "_ascale", p + "_wscale"], [p + "_scale"], name=p + "_scales"),
            helper.make_node("Mul", [p + "_f32", p + "_scale"], [p + "_y" if has_bias else out], name=p + "_mul"),
        ]
        if has_bias:
            new_nodes.append(helper.make_node("Add", [p + "_y", node.input[2]], [out], name=p + "_bias"))
        count += 1
    used = {i for n in new_nodes for i in n.input} | {o.name for o in g.output}
    new_nodes = [n for n in new_nodes if n.op_type != "Identity" or n.output[0] in used]
    used = {i for n in new_nodes for i in n.input}
    kept = [t for t in g.initializer if t.name in used]
    del g.node[:]
    g.node.extend(new_nodes)
    del g.initializer[:]
    g.initializer.extend(kept + new_inits)
    onnx.checker.check_model(model)
    onnx.save(model, dst)
    print(f"{src}: quantized {count} MatMul/Gemm and {convs} Conv nodes -> {dst}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
