#!/usr/bin/python3
"""PyTorch ONNX exports for the ONNX coverage harness (bench/onnx_coverage.py): what torch.onnx.export
(torch 1.13, torchvision 0.14) emits for torchvision's classification and segmentation models,
nn.TransformerEncoder/Decoder, nn.MultiheadAttention, LSTM/GRU/RNN and an embedding classifier, at
opsets 11 to 17, with and without constant folding. Weights are random (seeded per case);
BatchNorm's running statistics are those of a batch of random inputs, so activations keep their
scale, and layers initialised to zero (ViT's head) are given random weights.

Usage: /usr/bin/python3 scripts/onnx_exports.py OUT_DIR [--quick] [--only REGEX] [--list]
  --quick       about 10 small cases (seconds each): a test fixture
  --only REGEX  the cases whose name matches REGEX (re.search), out of the selection
  --list        print the selected cases and exit

For each selected case it writes:
  OUT_DIR/<case>/1/model.onnx  so OUT_DIR is a Triton-style model repository (hgraph-serve
                               --model-repository OUT_DIR); inputs "input_<i>", outputs "output_<i>"
  OUT_DIR/<case>.safetensors   the inputs fed to PyTorch and its outputs in eval mode, two sets:
                               "input_<i>"/"output_<i>" at batch 3 and "input_<i>.b1"/"output_<i>.b1"
                               at batch 1 (the export itself traces batch 2). With a dynamic sequence
                               axis, the batch-3 set also has a sequence length other than the trace's.
and OUT_DIR/cases.json, a list with one entry per case whose files are current (this run's and
earlier runs' of the same script, e.g. with other --only), in the matrix's order:
  name, group (classification, segmentation, sequence), family, model, opset, constant_folding,
  image_size (images) or dynamic_seq (sequences), depth (Conv/Linear/recurrent layers; the harness
  allows 1e-3 instead of 1e-4 above 50), output_scale (the largest |output|), inputs [{name, dtype,
  dynamic_axes {axis: name}}], outputs [{name, dynamic_axes}], sets [{suffix, batch, shapes {input
  name: shape}}], export_seconds, and export_error when torch.onnx.export failed (then the case has
  no files: the repository holds only models that exported).

The matrix: every family (an architecture, a segmentation model, a sequence module) has at least
7 cases, one per opset 11..17, alternating do_constant_folding; heavy variants (224x224, a second
model of the family) appear once and the lightest ones fill the other opsets. The classification
families take one or two representatives each (torchvision's other variants only change widths and
depths); vgg, alexnet and maxvit export only at 224 (their adaptive pooling or window partition does
not export or run at smaller sizes), and swin_v2 is left out (torch 1.13 cannot export aten::zero).

A case is redone only when this script changes: OUT_DIR/.stamps/<case>.json (ignored by the
server, like every name starting with '.') holds the script's hash and the case's entry, and is
written after the case's files.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import time
import warnings
import zlib

import torch
import torchvision
from torch import nn
from torchvision.models import segmentation

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_zoo import write_safetensors  # noqa: E402

OPSETS = list(range(11, 18))
EXPORT_BATCH = 2  # traced batch; the reference sets use other batch sizes
SETS = (("", 3), (".b1", 1))  # (safetensors key suffix, batch)
SEQ, SEQ_OTHER = 8, 11  # traced sequence length; the batch-3 set's when the sequence axis is dynamic
TGT, TGT_OTHER = 6, 9  # the decoder's target length
EMBED, HEADS, FF, FEATURES, HIDDEN, VOCAB = 32, 4, 64, 8, 16, 100


# ---- models -------------------------------------------------------------------------------------

class SegmentationOut(nn.Module):
    """torchvision's segmentation models return {"out": ...}: export that tensor."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


class Encoder(nn.Module):
    def __init__(self, batch_first):
        super().__init__()
        layer = nn.TransformerEncoderLayer(EMBED, HEADS, FF, dropout=0.0, batch_first=batch_first)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x):
        return self.encoder(x)


class Decoder(nn.Module):
    """Two decoder layers over (tgt, memory) with a causal target mask built from tgt's length."""

    def __init__(self, batch_first):
        super().__init__()
        layer = nn.TransformerDecoderLayer(EMBED, HEADS, FF, dropout=0.0, batch_first=batch_first)
        self.decoder = nn.TransformerDecoder(layer, 2)
        self.batch_first = batch_first

    def forward(self, tgt, memory):
        pos = torch.arange(tgt.shape[1 if self.batch_first else 0])
        return self.decoder(tgt, memory, tgt_mask=pos[None, :] > pos[:, None])


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(EMBED, HEADS, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


class CrossAttention(nn.Module):
    """Sequence-first cross-attention with kdim = vdim != embed_dim; returns the averaged weights too."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(EMBED, HEADS, kdim=24, vdim=24)

    def forward(self, query, memory):
        return self.attn(query, memory, memory)


class Recurrent(nn.Module):
    """nn.LSTM / GRU / RNN; with initial states, takes h0 (and c0) and also returns h_n (and c_n)."""

    def __init__(self, cell, layers, bidirectional, batch_first):
        super().__init__()
        self.rnn = getattr(nn, cell)(FEATURES, HIDDEN, num_layers=layers, bidirectional=bidirectional,
                                     batch_first=batch_first)

    def forward(self, x, *state):
        if not state:
            return self.rnn(x)[0]
        y, h = self.rnn(x, state if len(state) == 2 else state[0])
        return (y,) + (h if isinstance(h, tuple) else (h,))


class EmbeddingClassifier(nn.Module):
    """Token ids -> Embedding(padding_idx=0) -> mean over the sequence -> Linear-ReLU-Linear."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMBED, padding_idx=0)
        self.head = nn.Sequential(nn.Linear(EMBED, FF), nn.ReLU(), nn.Linear(FF, 5))

    def forward(self, ids):
        return self.head(self.embed(ids).mean(1))


def depth(model):
    """Weight layers: Conv and Linear modules, the attention input projections, recurrent layers."""
    n = 0
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            n += 1
        elif isinstance(m, nn.MultiheadAttention):
            n += 1  # the in-projection (out_proj is a Linear)
        elif isinstance(m, nn.RNNBase):
            n += m.num_layers
    return n


# ---- the matrix ---------------------------------------------------------------------------------

class Entry:
    """One model variant of a family: build() -> nn.Module, its inputs and outputs.

    inputs/outputs: [(dtype, {axis: symbol})] with symbols "batch", "seq", "tgt" (the latter two
    dynamic only when dynamic_seq), shape: [dim or symbol]."""

    def __init__(self, tag, model, build, inputs, outputs, shapes, image_size=None, dynamic_seq=None):
        self.tag, self.model, self.build = tag, model, build
        self.inputs, self.outputs, self.shapes = inputs, outputs, shapes
        self.image_size, self.dynamic_seq = image_size, dynamic_seq

    @property
    def light(self):
        return self.image_size is None or self.image_size < 224


def image_entry(model, size, build):
    return Entry(f"{model}_{size}", model, build, [("float32", {0: "batch"})], [{0: "batch"}],
                 [["batch", 3, size, size]], image_size=size)


def classifier(model, size):
    kwargs = {}
    if model.startswith("vit_") and size != 224:
        kwargs["image_size"] = size
    if model in ("googlenet", "inception_v3"):
        kwargs["init_weights"] = True
    return image_entry(model, size, lambda: getattr(torchvision.models, model)(weights=None, **kwargs))


def segmenter(model, size):
    return image_entry(model, size, lambda: SegmentationOut(
        getattr(segmentation, model)(weights=None, weights_backbone=None)))


def seq_axes(axes, dynamic_seq):
    return {a: s for a, s in axes.items() if s == "batch" or dynamic_seq}


def seq_entry(tag, model, build, inputs, outputs, dynamic_seq):
    """inputs: [(dtype, shape with "batch"/"seq"/"tgt" symbols)]; outputs: [{axis: symbol}]."""
    ins = [(dtype, seq_axes({i: d for i, d in enumerate(shape) if isinstance(d, str)}, dynamic_seq))
           for dtype, shape in inputs]
    return Entry(f"{tag}_{'dyn' if dynamic_seq else 'static'}", model, build, ins,
                 [seq_axes(o, dynamic_seq) for o in outputs], [shape for _, shape in inputs],
                 dynamic_seq=dynamic_seq)


def sequence_first(shape, batch_first):
    """shape given batch-first, as the module takes it."""
    return shape if batch_first else [shape[1], shape[0]] + shape[2:]


def encoder(batch_first, dynamic_seq):
    x = sequence_first(["batch", "seq", EMBED], batch_first)
    axes = {i: d for i, d in enumerate(x) if isinstance(d, str)}
    return seq_entry(f"tfenc_{'bf' if batch_first else 'sf'}", "TransformerEncoder",
                     lambda: Encoder(batch_first), [("float32", x)], [axes], dynamic_seq)


def decoder(batch_first, dynamic_seq):
    tgt = sequence_first(["batch", "tgt", EMBED], batch_first)
    memory = sequence_first(["batch", "seq", EMBED], batch_first)
    axes = {i: d for i, d in enumerate(tgt) if isinstance(d, str)}
    return seq_entry(f"tfdec_{'bf' if batch_first else 'sf'}", "TransformerDecoder",
                     lambda: Decoder(batch_first), [("float32", tgt), ("float32", memory)], [axes],
                     dynamic_seq)


def self_attention(dynamic_seq):
    return seq_entry("mha_self_bf", "MultiheadAttention", SelfAttention, [("float32", ["batch", "seq", EMBED])],
                     [{0: "batch", 1: "seq"}], dynamic_seq)


def cross_attention(dynamic_seq):
    return seq_entry("mha_cross_sf", "MultiheadAttention", CrossAttention,
                     [("float32", ["tgt", "batch", EMBED]), ("float32", ["seq", "batch", 24])],
                     [{0: "tgt", 1: "batch"}, {0: "batch", 1: "tgt", 2: "seq"}], dynamic_seq)


def recurrent(cell, layers, bidirectional, initial_state, batch_first, dynamic_seq):
    x = sequence_first(["batch", "seq", FEATURES], batch_first)
    y_axes = {i: d for i, d in enumerate(x) if isinstance(d, str)}
    inputs, outputs = [("float32", x)], [y_axes]
    if initial_state:
        states = 2 if cell == "LSTM" else 1
        inputs += [("float32", [layers * (2 if bidirectional else 1), "batch", HIDDEN])] * states
        outputs += [{1: "batch"}] * states
    tag = (f"{cell.lower()}_l{layers}_{'bi' if bidirectional else 'uni'}_{'h0' if initial_state else 'noh0'}"
           f"_{'bf' if batch_first else 'sf'}")
    return seq_entry(tag, cell, lambda: Recurrent(cell, layers, bidirectional, batch_first), inputs, outputs, dynamic_seq)


def embedding(dynamic_seq):
    return seq_entry("embed_cls", "EmbeddingClassifier", EmbeddingClassifier, [("int64", ["batch", "seq"])],
                     [{0: "batch"}], dynamic_seq)


def recurrent_family(cell):
    """The 8 combinations of layers x direction x initial state, batch_first on half of them (the
    one of each pair that differs in a single factor), all with a dynamic sequence; then two static."""
    entries = [recurrent(cell, layers, bi, h0, (layers + bi + h0) % 2 == 1, True)
               for layers in (1, 2) for bi in (False, True) for h0 in (False, True)]
    return entries + [recurrent(cell, 1, False, False, True, False), recurrent(cell, 2, True, True, False, False)]


def both_seq(make, *args):
    return [make(*args, True), make(*args, False)]


# group -> family -> entries, heavy ones after the first light one (it fills the spare opsets).
FAMILIES = {
    "classification": {
        "resnet": [classifier("resnet18", 64), classifier("resnet50", 64), classifier("resnet18", 224),
                   classifier("resnet50", 224)],
        "resnext": [classifier("resnext50_32x4d", 64), classifier("resnext50_32x4d", 224)],
        "wide_resnet": [classifier("wide_resnet50_2", 64), classifier("wide_resnet50_2", 224)],
        "vgg": [classifier("vgg11", 224), classifier("vgg11_bn", 224)],
        "alexnet": [classifier("alexnet", 224)],
        "squeezenet": [classifier("squeezenet1_1", 64), classifier("squeezenet1_0", 64),
                       classifier("squeezenet1_0", 224)],
        "densenet": [classifier("densenet121", 64), classifier("densenet121", 224)],
        "googlenet": [classifier("googlenet", 64), classifier("googlenet", 224)],
        "inception": [classifier("inception_v3", 75), classifier("inception_v3", 299)],
        "mobilenet_v2": [classifier("mobilenet_v2", 64), classifier("mobilenet_v2", 224)],
        "mobilenet_v3": [classifier("mobilenet_v3_small", 64), classifier("mobilenet_v3_large", 64),
                         classifier("mobilenet_v3_large", 224)],
        "mnasnet": [classifier("mnasnet0_5", 64), classifier("mnasnet0_5", 224)],
        "shufflenet_v2": [classifier("shufflenet_v2_x0_5", 64), classifier("shufflenet_v2_x0_5", 224)],
        "efficientnet": [classifier("efficientnet_b0", 64), classifier("efficientnet_b0", 224)],
        "efficientnet_v2": [classifier("efficientnet_v2_s", 64), classifier("efficientnet_v2_s", 224)],
        "regnet": [classifier("regnet_x_400mf", 64), classifier("regnet_y_400mf", 64),
                   classifier("regnet_y_400mf", 224)],
        "convnext": [classifier("convnext_tiny", 64), classifier("convnext_tiny", 224)],
        "vit": [classifier("vit_b_16", 64), classifier("vit_b_16", 224)],
        "swin": [classifier("swin_t", 64), classifier("swin_t", 224)],
        "maxvit": [classifier("maxvit_t", 224)],
    },
    "segmentation": {
        "fcn": [segmenter("fcn_resnet50", 96), segmenter("fcn_resnet50", 224)],
        "deeplabv3": [segmenter("deeplabv3_mobilenet_v3_large", 96),
                      segmenter("deeplabv3_mobilenet_v3_large", 224)],
        "lraspp": [segmenter("lraspp_mobilenet_v3_large", 96), segmenter("lraspp_mobilenet_v3_large", 224)],
    },
    "sequence": {
        "transformer_encoder": both_seq(encoder, True) + both_seq(encoder, False),
        "transformer_decoder": both_seq(decoder, True) + both_seq(decoder, False),
        "multihead_attention": both_seq(self_attention) + both_seq(cross_attention),
        "lstm": recurrent_family("LSTM"),
        "gru": recurrent_family("GRU"),
        "rnn": recurrent_family("RNN"),
        "embedding": both_seq(embedding),
    },
}

QUICK_FAMILIES = {"resnet", "squeezenet", "mobilenet_v3", "shufflenet_v2", "efficientnet", "transformer_encoder",
                  "transformer_decoder", "multihead_attention", "lstm", "gru", "embedding"}


def matrix():
    """[(name, group, family, entry, opset, fold, quick)]: per family max(7, entries) cases; case k
    takes entry k (then the light entries again), opset 11 + (k + f) % 7 and folding on when
    (k + f) is even, f the family's index, so families differ in which variant meets which opset."""
    cases, f = [], 0
    for group, families in FAMILIES.items():
        for family, entries in families.items():
            light = [e for e in entries if e.light] or entries
            for k in range(max(len(OPSETS), len(entries))):
                entry = entries[k] if k < len(entries) else light[(k - len(entries)) % len(light)]
                opset, fold = OPSETS[(k + f) % len(OPSETS)], (k + f) % 2 == 0
                name = f"{entry.tag}_op{opset}_{'fold' if fold else 'nofold'}"
                cases.append((name, group, family, entry, opset, fold, k == 0 and family in QUICK_FAMILIES))
            f += 1
    return cases


# ---- export -------------------------------------------------------------------------------------

def concrete(shape, batch, seq, tgt):
    return [{"batch": batch, "seq": seq, "tgt": tgt}.get(d, d) if isinstance(d, str) else d for d in shape]


def make_inputs(entry, gen, batch, seq, tgt):
    out = []
    for (dtype, _), shape in zip(entry.inputs, entry.shapes):
        dims = concrete(shape, batch, seq, tgt)
        if dtype == "int64":
            ids = torch.randint(1, VOCAB, dims, generator=gen)
            ids[:, -2:] = 0  # padding at the end of each row
            ids[0, 3:] = 0
            out.append(ids)
        else:
            out.append(torch.randn(dims, generator=gen))
    return out


def reset_zero_layers(model):
    """Give random weights to layers initialised to zero (ViT's head): an all-zero output says nothing."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)) and not m.weight.any():
            m.reset_parameters()


def calibrate_batchnorm(model, entry, gen):
    """Set BatchNorm's running statistics to those of one batch of random inputs. Left at 0 and 1
    under random weights, activations shrink layer by layer (EfficientNet-B0's logits come out near
    1e-14) and a relative error says nothing. The batch holds as many pixels as 4 images of 224x224:
    statistics from fewer samples (4 images of 64x64 leave 16 per channel at the last stage) make
    deep networks ill-conditioned (EfficientNetV2-S's logits in the thousands, PyTorch and ONNX
    Runtime 0.1 apart)."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average: after one batch, that batch's statistics
        m.train()  # only the norms: dropout and auxiliary heads stay as in eval mode
    with torch.no_grad():
        batch = max(4, round(4 * (224 / entry.image_size) ** 2)) if entry.image_size else 4
        model(*make_inputs(entry, gen, batch, SEQ, TGT))
    model.eval()


def uses_attention(model):
    """torch 1.13's eval fast path of nn.MultiheadAttention (_native_multi_head_attention) has no ONNX
    export: such models are exported, and run for the reference, with autograd on (the slow path)."""
    return any(isinstance(m, nn.MultiheadAttention) for m in model.modules())


def run_model(model, inputs):
    """PyTorch's outputs as a list."""
    with torch.set_grad_enabled(uses_attention(model)):
        y = model(*inputs)
    return [t.detach() for t in (y if isinstance(y, tuple) else (y,))]


def export_case(out, name, entry, opset, fold):
    seed = zlib.crc32(name.encode())
    torch.manual_seed(seed)
    model = entry.build().eval()
    names_in = [f"input_{i}" for i in range(len(entry.inputs))]
    names_out = [f"output_{i}" for i in range(len(entry.outputs))]
    gen = torch.Generator().manual_seed(seed + 1)
    reset_zero_layers(model)
    calibrate_batchnorm(model, entry, gen)
    tensors, sets = {}, []
    for suffix, batch in SETS:
        longer = entry.dynamic_seq and batch != 1
        xs = make_inputs(entry, gen, batch, SEQ_OTHER if longer else SEQ, TGT_OTHER if longer else TGT)
        for i, x in enumerate(xs):
            tensors[f"input_{i}{suffix}"] = x
        for i, y in enumerate(run_model(model, xs)):
            tensors[f"output_{i}{suffix}"] = y
        sets.append({"suffix": suffix, "batch": batch, "shapes": {n: list(x.shape) for n, x in zip(names_in, xs)}})
    trace = make_inputs(entry, gen, EXPORT_BATCH, SEQ, TGT)
    model_dir = os.path.join(out, name, "1")
    os.makedirs(model_dir, exist_ok=True)
    with torch.set_grad_enabled(uses_attention(model)):
        torch.onnx.export(model, tuple(trace), os.path.join(model_dir, "model.onnx"), opset_version=opset,
                          do_constant_folding=fold, input_names=names_in, output_names=names_out,
                          dynamic_axes={**{n: axes for n, (_, axes) in zip(names_in, entry.inputs)},
                                        **dict(zip(names_out, entry.outputs))})
    write_safetensors(os.path.join(out, name + ".safetensors"), tensors)
    scale = max(float(t.abs().max()) for k, t in tensors.items() if k.startswith("output_") and t.numel())
    return depth(model), sets, scale


def describe(name, group, family, entry, opset, fold):
    d = {"name": name, "group": group, "family": family, "model": entry.model, "opset": opset,
         "constant_folding": fold}
    if entry.image_size is not None:
        d["image_size"] = entry.image_size
    else:
        d["dynamic_seq"] = entry.dynamic_seq
    d["inputs"] = [{"name": f"input_{i}", "dtype": dtype, "dynamic_axes": axes}
                   for i, (dtype, axes) in enumerate(entry.inputs)]
    d["outputs"] = [{"name": f"output_{i}", "dynamic_axes": axes} for i, axes in enumerate(entry.outputs)]
    return d


def script_digest():
    h = hashlib.sha256()
    for path in (os.path.abspath(__file__), os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_zoo.py")):
        with open(path, "rb") as f:
            h.update(f.read())
    h.update(f"torch {torch.__version__} torchvision {torchvision.__version__}".encode())
    return h.hexdigest()


def read_stamp(stamps, name, digest):
    """The case's cases.json entry when its files were written by this script, else None."""
    path = os.path.join(stamps, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        saved = json.load(f)
    return saved["case"] if saved["digest"] == digest else None


def write_json(path, value):
    with open(path + ".tmp", "w") as f:
        json.dump(value, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description="PyTorch ONNX exports for bench/onnx_coverage.py")
    ap.add_argument("out_dir")
    ap.add_argument("--quick", action="store_true", help="about 10 small cases (a test fixture)")
    ap.add_argument("--only", metavar="REGEX", help="the cases whose name matches REGEX")
    ap.add_argument("--list", action="store_true", help="print the selected cases and exit")
    args = ap.parse_args()
    cases = [c for c in matrix() if (not args.quick or c[6]) and (not args.only or re.search(args.only, c[0]))]
    if not cases:
        sys.exit("onnx_exports.py: no case selected")
    if args.list:
        for name, group, family, *_ in cases:
            print(f"{name}  ({group}/{family})")
        return
    out = args.out_dir
    stamps = os.path.join(out, ".stamps")
    os.makedirs(stamps, exist_ok=True)
    digest = script_digest()
    torch.set_num_threads(2)
    warnings.filterwarnings("ignore")  # torchvision init and exporter warnings, one per case
    failed, start = 0, time.time()
    for i, (name, group, family, entry, opset, fold, _) in enumerate(cases):
        d = read_stamp(stamps, name, digest)
        if d is not None:
            failed += "export_error" in d
            print(f"[{i + 1}/{len(cases)}] {name}: up to date", flush=True)
            continue
        d, t0 = describe(name, group, family, entry, opset, fold), time.time()
        try:
            d["depth"], d["sets"], d["output_scale"] = export_case(out, name, entry, opset, fold)
            status = "exported" + (f" (outputs only up to {d['output_scale']:.1e})" if d["output_scale"] < 1e-3 else "")
        except Exception as e:  # an export torch cannot do is a result too: the case records it
            failed += 1
            shutil.rmtree(os.path.join(out, name), ignore_errors=True)
            if os.path.exists(os.path.join(out, name + ".safetensors")):
                os.remove(os.path.join(out, name + ".safetensors"))
            d["export_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            status = f"EXPORT FAILED: {d['export_error']}"
        d["export_seconds"] = round(time.time() - t0, 2)
        write_json(os.path.join(stamps, name + ".json"), {"digest": digest, "case": d})
        print(f"[{i + 1}/{len(cases)}] {name}: {status} in {d['export_seconds']:.1f} s", flush=True)
    current = [d for d in (read_stamp(stamps, c[0], digest) for c in matrix()) if d is not None]
    write_json(os.path.join(out, "cases.json"), current)
    print(f"{out}: {len(cases)} cases ({failed} export failures) in {time.time() - start:.0f} s; "
          f"cases.json lists {len(current)}")


if __name__ == "__main__":
    main()
