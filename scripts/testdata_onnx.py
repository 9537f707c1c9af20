#!/usr/bin/python3
"""Test data for tests/onnx_test.cpp: ONNX exports of the zoo models and PyTorch's outputs.

Usage: /usr/bin/python3 scripts/testdata_onnx.py OUT_DIR

Writes, for each case in CASES, OUT_DIR/<case>.onnx (torch.onnx.export, dynamic batch; cases in
DYNAMIC_SEQ also a dynamic dimension 1) and OUT_DIR/<case>.safetensors holding "input" (the batch
fed to PyTorch) and "output" (the model's output in eval mode); DYNAMIC_SEQ cases also
"input_short" / "output_short" (another batch and sequence length). Also:
  mlp_external.onnx + mlp_external.data   the MLP saved with save_as_external_data=True
  unsupported.onnx                         a graph with an op hgraph does not import (Det)
  const_of_shape_table.onnx                ConstantOfShape with a tensor `value` (0.25) feeding a Gather
  softmax_axis1_op12.onnx + .safetensors   Softmax axis 1 of a [batch, 3, 4] input at opset 12 (over the
                                           12 values of each sample, as opsets before 13 define it)
  sequence_first_op14.onnx + .safetensors  a 2-layer nn.LSTM sequence-first with initial states: its batch is
                                           dimension 1 of "input" [seq, batch, 4] and of "h0"/"c0" [2, batch, 5];
                                           "<tensor>_<k>" for each SEQ_FIRST_SETS entry (input, h0, c0, output,
                                           hn, cn)
  static_mlp_op13.onnx + .safetensors      the MLP exported without dynamic axes: input [2, 64]
  masked_tagger_op17.onnx + .safetensors   per-token logits with an attention mask, batch and sequence
                                           dynamic; "ids_<k>" / "logits_<k>" for each TAGGER_BATCHES entry
  bad_<what>.onnx                          hand-built graphs import_onnx must reject (BAD_MODELS)
  ext_<what>.onnx + w..bin                 a weight in external data, with good and bad fields (EXTERNAL)
OUT_DIR/stamp holds a hash of this script (and of scripts/torch_zoo.py); when it matches,
nothing is redone.
"""
import os
import sys

import onnx
import onnx.helper
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_zoo  # noqa: E402
import testdata_util  # noqa: E402

BATCH = 3


def image(shape):
    return lambda g: torch.randn((BATCH,) + shape, generator=g)


def token_ids(g):
    return torch.randint(0, 1000, (BATCH, 16), generator=g, dtype=torch.int64)


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


class ClassToken(torch.nn.Module):
    """A ViT's class token: a parameter expanded to the batch (shape arithmetic used as data)."""

    def __init__(self):
        super().__init__()
        self.patch = torch.nn.Conv2d(3, 16, 8, 8)
        self.cls = torch.nn.Parameter(torch.randn(1, 1, 16))
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(x.shape[0], -1, -1), t], 1)
        return self.head(torch.softmax(t @ t.transpose(1, 2) / 4.0, -1) @ t)[:, 0]


class ActPad(torch.nn.Module):
    """MobileNet-style activations and pads: ReLU6 (Clip), hardswish, hardsigmoid, constant /
    reflect / replicate pads, max pooling with ceil_mode (an odd input size needs the extra window)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(3, 8, 3), torch.nn.Conv2d(8, 8, 3)
        self.head = torch.nn.Linear(8, 10)

    def forward(self, x):
        f = torch.nn.functional
        x = f.relu6(self.c1(f.pad(x, (1, 2, 0, 1))))
        x = f.max_pool2d(x, 3, 2, ceil_mode=True)
        x = f.hardswish(self.c2(f.pad(x, (1, 1, 1, 1), mode="reflect")))
        x = f.pad(x, (0, 1, 1, 0), mode="replicate")
        x = x * f.hardsigmoid(x.mean((2, 3), keepdim=True))
        return self.head(x.mean((2, 3)))


class Upsampler(torch.nn.Module):
    """A segmentation head's resizes: bilinear to another feature's size (shape-derived sizes),
    with and without align_corners, and nearest by a scale factor."""

    def __init__(self):
        super().__init__()
        self.down, self.head = torch.nn.Conv2d(3, 4, 3, stride=2), torch.nn.Conv2d(4, 2, 1)

    def forward(self, x):
        f = torch.nn.functional
        y = self.head(self.down(x))
        a = f.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)
        b = f.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=True)
        c = f.interpolate(y, scale_factor=2.0, mode="nearest")
        return torch.cat([a.flatten(1), b.flatten(1), c.flatten(1).repeat(1, 2)], 1)


class Recurrent(torch.nn.Module):
    """nn.LSTM / GRU / RNN (batch first) and a per-step linear head."""

    def __init__(self, kind, layers, bidirectional):
        super().__init__()
        cell = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}[kind]
        self.rnn = cell(6, 8, num_layers=layers, bidirectional=bidirectional, batch_first=True)
        self.head = torch.nn.Linear(16 if bidirectional else 8, 3)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


class Segmenter(torch.nn.Module):
    """A segmentation head's output: upsampled to the input's size, so the export leaves every
    output dimension but the batch open (dim_params) although the input's are fixed."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 2, 3, stride=2)

    def forward(self, x):
        return torch.nn.functional.interpolate(self.conv(x), size=x.shape[-2:], mode="bilinear", align_corners=False)


class Einsums(torch.nn.Module):
    """Attention-like einsums (MaxViT writes its attention this way): batch, contraction, a
    transposed operand, '...', a transpose alone, sums of private labels, an implicit output."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 5))
        self.v = torch.nn.Parameter(torch.randn(4, 6))
        self.k = torch.nn.Parameter(torch.randn(6, 2))

    def forward(self, x):  # [batch, 3, 4, 6]
        q = torch.einsum("bhid,de->bhie", x, self.w)
        s = torch.einsum("B H I D, B H J D -> B H I J", x, x) / 6.0
        o = torch.einsum("bhij,bhje->bhie", s.softmax(-1), q)
        t = torch.einsum("...ie->...ei", o)
        u = torch.einsum("bhei,id->bhed", t, self.v)
        r = torch.einsum("bhed->bd", u)
        g = torch.einsum("bd,dk", r, self.k)  # implicit output: "bk"
        return torch.cat([r, torch.einsum("bhed,bhed->b", u, u).unsqueeze(1), g], 1)


class WindowMask(torch.nn.Module):
    """Swin's shifted-window mask: zeros the size of the image, written region by region (the
    exporter's ScatterND), added to the input."""

    def forward(self, x):  # [batch, c, h, w]
        m = x.new_zeros((x.shape[2], x.shape[3]))
        count = 0
        for h in (slice(0, -3), slice(-3, -1), slice(-1, None)):
            for w in (slice(0, -2), slice(-2, None)):
                m[h, w] = count
                count += 1
        return x + m


class MaskedTagger(torch.nn.Module):
    """Per-token logits of one attention block over token ids; attention_mask (1: a token, 0:
    padding) keeps padded positions out of every token's attention, so padding changes nothing."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(100, 16)
        self.q, self.k, self.v = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)
        self.out = torch.nn.Linear(16, 5)

    def forward(self, ids, mask):
        h = self.emb(ids)
        scores = self.q(h) @ self.k(h).transpose(1, 2) / 4.0 + (mask[:, None, :].float() - 1.0) * 1e9
        return self.out(torch.softmax(scores, -1) @ self.v(h) + h)


# MaskedTagger's reference batches: (batch, length) each, ids in 1..99, mask all ones.
TAGGER_BATCHES = {"a": (2, 7), "b": (3, 11), "c": (1, 16)}


def masked_tagger(out):
    torch.manual_seed(11)
    model = MaskedTagger().eval()
    g = torch.Generator().manual_seed(12)
    tensors = {}
    for key, (b, n) in TAGGER_BATCHES.items():
        ids = torch.randint(1, 100, (b, n), generator=g, dtype=torch.int64)
        mask = torch.ones(b, n, dtype=torch.int64)
        with torch.no_grad():
            tensors["ids_" + key], tensors["logits_" + key] = ids, model(ids, mask)
    ids, mask = tensors["ids_a"], torch.ones(2, 7, dtype=torch.int64)
    axes = {0: "batch", 1: "seq"}
    torch.onnx.export(model, (ids, mask), os.path.join(out, "masked_tagger_op17.onnx"), opset_version=17,
                      input_names=["input_ids", "attention_mask"], output_names=["logits"],
                      dynamic_axes={"input_ids": axes, "attention_mask": axes, "logits": axes})
    torch_zoo.write_safetensors(os.path.join(out, "masked_tagger_op17.safetensors"), tensors)


# case -> (model builder, opset, input maker); a spread of opsets 11-17 (BERT at 13 and 17: the
# decomposed LayerNorm and LayerNormalization).
CASES = {
    "mlp_op13": (mlp, 13, image((64,))),
    "lenet5_op15": (lambda: torch_zoo.LeNet5(), 15, image((1, 32, 32))),
    "resnet18_op17": (torch_zoo.resnet18, 17, image((3, 64, 64))),
    "bert_op13": (lambda: torch_zoo.BertClassifier(), 13, token_ids),
    "bert_op17": (lambda: torch_zoo.BertClassifier(), 17, token_ids),
    "lenet5_op14": (lambda: torch_zoo.LeNet5(), 14, image((1, 32, 32))),
    "bert_op16": (lambda: torch_zoo.BertClassifier(), 16, token_ids),
    "lenet5_op11": (lambda: torch_zoo.LeNet5(), 11, image((1, 32, 32))),
    "bert_op12": (lambda: torch_zoo.BertClassifier(), 12, token_ids),
    "bert_seq_op17": (lambda: torch_zoo.BertClassifier(), 17, token_ids),
    "class_token_op14": (ClassToken, 14, image((3, 32, 32))),
    "act_pad_op11": (ActPad, 11, image((3, 15, 15))),
    "act_pad_op13": (ActPad, 13, image((3, 15, 15))),
    "act_pad_op14": (ActPad, 14, image((3, 15, 15))),
    "upsample_op11": (Upsampler, 11, image((3, 13, 17))),
    "upsample_op17": (Upsampler, 17, image((3, 13, 17))),
    "lstm_l2_bi_op14": (lambda: Recurrent("lstm", 2, True), 14, image((5, 6))),
    "gru_l1_op11": (lambda: Recurrent("gru", 1, False), 11, image((5, 6))),
    "gru_l2_bi_op17": (lambda: Recurrent("gru", 2, True), 17, image((5, 6))),
    "rnn_l2_op13": (lambda: Recurrent("rnn", 2, False), 13, image((5, 6))),
    "segmenter_op13": (Segmenter, 13, image((3, 13, 17))),
    "einsum_op12": (Einsums, 12, image((3, 4, 6))),
    "einsum_op17": (Einsums, 17, image((3, 4, 6))),
    "window_mask_op13": (WindowMask, 13, image((2, 7, 5))),
}
# cases exported without constant folding (their ops on shape-derived values stay in the graph)
NO_FOLDING = {"window_mask_op13"}
# cases exported with a dynamic dimension 1 as well (the sequence), and their second reference
DYNAMIC_SEQ = {"bert_seq_op17": lambda g: torch.randint(0, 1000, (2, 9), generator=g, dtype=torch.int64)}


def export(model, x, path, opset, seq=False, folding=True):
    axes = {0: "batch", 1: "seq"} if seq else {0: "batch"}
    torch.onnx.export(model, (x,), path, opset_version=opset, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": axes, "output": {0: "batch"}}, do_constant_folding=folding)


def unsupported_model(path):
    node = onnx.helper.make_node("Det", ["input"], ["output"], name="det_node")
    graph = onnx.helper.make_graph(
        [node], "unsupported",
        [onnx.helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, ["batch", 3, 3])],
        [onnx.helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, ["batch"])])
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 15)]), path)


H = onnx.helper
T = onnx.TensorProto


def save_graph(path, nodes, inputs, outputs, initializers=()):
    graph = H.make_graph(nodes, os.path.basename(path)[:-5], inputs, outputs, list(initializers))
    onnx.save(H.make_model(graph, opset_imports=[H.make_opsetid("", 17)]), path)


def float_io(name, dims):
    return H.make_tensor_value_info(name, T.FLOAT, dims)


def ints(name, values):
    return H.make_tensor(name, T.INT64, [len(values)], values)


def scalar(name, value):
    return H.make_tensor(name, T.FLOAT, [], [value])


def relu_graph(path, extra_nodes, initializers=(), input_dims=("batch", 2)):
    """input [batch, 2] -> Relu -> output, plus nodes the importer must reject."""
    save_graph(path, [H.make_node("Relu", ["input"], ["output"], name="relu")] + extra_nodes,
               [float_io("input", list(input_dims))], [float_io("output", list(input_dims))], initializers)


# bad model -> (extra nodes, initializers, input dims); tests/onnx_test.cpp expects the error to name
# the input or node in the comment.
BAD_MODELS = {
    "huge_input": ([], [], ("batch", 1 << 40)),  # input 'input'
    "fill_value_string": ([H.make_node("ConstantOfShape", ["two"], ["c"], name="fill",
                                       value=H.make_tensor("value", T.STRING, [1], [b"x"]))],
                          [ints("two", [2])], ("batch", 2)),  # node 'fill'
    "fill_huge": ([H.make_node("ConstantOfShape", ["big"], ["c"], name="fill")],
                  [ints("big", [1 << 20, 1 << 20, 1 << 20])], ("batch", 2)),  # node 'fill'
    "range_inf": ([H.make_node("Range", ["zero", "inf", "one"], ["r"], name="range")],
                  [scalar("zero", 0.0), scalar("inf", float("inf")), scalar("one", 1.0)], ("batch", 2)),
    "expand_huge": ([H.make_node("Expand", ["one", "big"], ["e"], name="expand")],
                    [H.make_tensor("one", T.FLOAT, [1], [1.0]), ints("big", [1 << 16, 1 << 16, 1 << 16])],
                    ("batch", 2)),  # node 'expand'
}

# external weight "w" [2] in w..bin: case -> (location, offset, length)
EXTERNAL = {
    "dots": ("w..bin", "0", "8"),
    "parent": ("../w..bin", "0", "8"),
    "length_suffix": ("w..bin", "0", "8abc"),
    "length_negative": ("w..bin", "0", "-8"),
    "offset_negative": ("w..bin", "-4", "8"),
}


def external_model(path, location, offset, length):
    w = T(name="w", data_type=T.FLOAT, dims=[2], data_location=T.EXTERNAL)
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    save_graph(path, [H.make_node("Add", ["input", "w"], ["output"], name="add")], [float_io("input", ["batch", 2])],
               [float_io("output", ["batch", 2])], [w])


# sequence_first's reference sets: (sequence length, batch) each
SEQ_FIRST_SETS = {"a": (6, 2), "b": (3, 5)}


def sequence_first(out):
    """A 2-layer nn.LSTM sequence-first with initial states, dynamic_axes {0: seq, 1: batch} (states
    {1: batch}): its batch is dimension 1, so hgraph serves it whole, one request per run."""
    torch.manual_seed(13)
    model = torch.nn.LSTM(4, 5, num_layers=2).eval()
    g = torch.Generator().manual_seed(14)
    t = {}
    for key, (n, b) in SEQ_FIRST_SETS.items():
        x, h0, c0 = torch.randn(n, b, 4, generator=g), torch.randn(2, b, 5, generator=g), torch.randn(2, b, 5, generator=g)
        with torch.no_grad():
            y, (hn, cn) = model(x, (h0, c0))
        t.update({"input_" + key: x, "h0_" + key: h0, "c0_" + key: c0, "output_" + key: y, "hn_" + key: hn,
                  "cn_" + key: cn})
    state = {1: "batch"}
    torch.onnx.export(model, (t["input_a"], (t["h0_a"], t["c0_a"])), os.path.join(out, "sequence_first_op14.onnx"),
                      opset_version=14, input_names=["input", "h0", "c0"], output_names=["output", "hn", "cn"],
                      dynamic_axes={"input": {0: "seq", 1: "batch"}, "h0": state, "c0": state,
                                    "output": {0: "seq", 1: "batch"}, "hn": state, "cn": state})
    torch_zoo.write_safetensors(os.path.join(out, "sequence_first_op14.safetensors"), t)


def static_mlp(out):
    """The MLP exported without dynamic axes: every shape fixed, input [2, 64]."""
    torch.manual_seed(15)
    model = mlp().eval()
    x = torch.rand(2, 64, generator=torch.Generator().manual_seed(16))
    with torch.no_grad():
        y = model(x)
    torch.onnx.export(model, (x,), os.path.join(out, "static_mlp_op13.onnx"), opset_version=13,
                      input_names=["input"], output_names=["output"])
    torch_zoo.write_safetensors(os.path.join(out, "static_mlp_op13.safetensors"), {"input": x, "output": y})


def edge_models(out):
    save_graph(os.path.join(out, "const_of_shape_table.onnx"),
               [H.make_node("ConstantOfShape", ["shape"], ["table"], name="fill",
                            value=H.make_tensor("value", T.FLOAT, [1], [0.25])),
                H.make_node("Gather", ["table", "ids"], ["output"], name="gather")],
               [H.make_tensor_value_info("ids", T.INT64, ["batch"])], [float_io("output", ["batch", 3])],
               [ints("shape", [4, 3])])
    path = os.path.join(out, "softmax_axis1_op12.onnx")
    graph = H.make_graph([H.make_node("Softmax", ["input"], ["output"], name="softmax", axis=1)], "softmax_axis1",
                         [float_io("input", ["batch", 3, 4])], [float_io("output", ["batch", 3, 4])])
    onnx.save(H.make_model(graph, opset_imports=[H.make_opsetid("", 12)]), path)
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(7))
    torch_zoo.write_safetensors(path[:-5] + ".safetensors",
                                {"input": x, "output": torch.softmax(x.reshape(2, 12), 1).reshape(2, 3, 4)})
    for name, (nodes, inits, dims) in BAD_MODELS.items():
        relu_graph(os.path.join(out, "bad_" + name + ".onnx"), nodes, inits, dims)
    with open(os.path.join(out, "w..bin"), "wb") as f:
        f.write(torch.tensor([1.5, -2.0]).numpy().tobytes())
    for name, fields in EXTERNAL.items():
        external_model(os.path.join(out, "ext_" + name + ".onnx"), *fields)


def make(out):
    for i, (case, (build, opset, make_input)) in enumerate(CASES.items()):
        torch.manual_seed(i)
        model = build().eval()
        x = make_input(torch.Generator().manual_seed(100 + i))
        with torch.no_grad():
            y = model(x)
        export(model, x, os.path.join(out, case + ".onnx"), opset, case in DYNAMIC_SEQ, case not in NO_FOLDING)
        tensors = {"input": x, "output": y}
        if case in DYNAMIC_SEQ:
            tensors["input_short"] = DYNAMIC_SEQ[case](torch.Generator().manual_seed(200 + i))
            with torch.no_grad():
                tensors["output_short"] = model(tensors["input_short"])
        torch_zoo.write_safetensors(os.path.join(out, case + ".safetensors"), tensors)
        if case == "mlp_op13":  # the same model again, its weights in an external data file
            proto = onnx.load(os.path.join(out, case + ".onnx"))
            onnx.save(proto, os.path.join(out, "mlp_external.onnx"), save_as_external_data=True,
                      all_tensors_to_one_file=True, location="mlp_external.data", size_threshold=0)
    unsupported_model(os.path.join(out, "unsupported.onnx"))
    masked_tagger(out)
    sequence_first(out)
    static_mlp(out)
    edge_models(out)


if __name__ == "__main__":
    testdata_util.run(make, ["testdata_onnx.py", "torch_zoo.py"])
