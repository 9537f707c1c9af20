#!/usr/bin/python3
"""The zoo benchmark's data and its PyTorch peers (bench/run_zoo.sh runs both), and the same for
the models users bring (bench/run_brought.sh).

    /usr/bin/python3 bench/torch_zoo_bench.py prepare DIR [SET]
    /usr/bin/python3 bench/torch_zoo_bench.py run DIR THREADS SECONDS [MODEL,...] [BATCH,...]

prepare writes, for each MODEL of SET (zoo, the default, or brought; once, and again when this
script or the scripts it uses change):
  DIR/MODEL/model.onnx          exported by scripts/testdata_onnx.py's export (opset 17, dynamic
                                batch; bert_base a dynamic sequence too): the one file hgraph's
                                Predictor and ONNX Runtime load
  DIR/MODEL/input.npy           the inputs, batch 32 (zoo) or 8 (brought) (ONNX Runtime); a batch-b
                                run takes rows 0..b-1
  DIR/MODEL/input.safetensors   the same array as "input" (hgraph)
  DIR/MODEL/output.safetensors  PyTorch's output for them as "output" (hg_zoo_bench compares its
                                replay's output with it)
  DIR/MODEL/zoo/                the same weights as a model package (model.json + weights.safetensors)
                                for hgraph's native modules: zoo graph, mlp sequential (zoo set, not identity)
  DIR/meta.json                 {MODEL: {"flops": forward FLOPs of one sample (2 x the multiply-adds
                                of convolutions, linear layers, attention and LSTM cells), "shape": ...}}
The zoo set: mlp = the bundled digits MLP 64-64-10 (its trained weights), lenet5 [N, 1, 32, 32],
resnet18 [N, 3, 224, 224], bert = BertClassifier (2 layers, d_model 128, 4 heads) on token ids
[N, 128], identity [N, 64]; weights from scripts/torch_zoo.py, seeded and perturbed as the zoo
test data are (scripts/testdata_zoo.py).
The brought set, the models users bring: torchvision's resnet50, mobilenet_v2, mobilenet_v3_large,
efficientnet_b0 and vit_b_16 [N, 3, 224, 224] (random weights, seeded; BatchNorm statistics of
random images and ViT's zero head made random, as scripts/onnx_exports.py does), bert_base =
BertClassifier at BERT-base size (12 layers, d_model 768, 12 heads, ff 3072, vocab 30522) on
token ids [N, 128] exported with a dynamic sequence axis, bert_base_hf = the same sizes written as
Hugging Face's modeling_bert is (separate q/k/v Linear layers, heads by view + permute, attention
by torch.matmul + softmax), lstm = a 2-layer LSTM (batch first, 64
features, hidden 256) over [N, 64, 64] with a linear head on its last step.

run prints one JSON line per (runtime, model, batch): runtime "pytorch" (eager, inference_mode)
or, for the zoo set, "torchscript" (torch.jit.freeze of torch.jit.script, trace where script
fails), median_ms, p99_ms and n, the per-call wall times over SECONDS (at least 5 calls) after a
warm-up; each call returns its output as a NumPy array, as the other runtimes return host buffers.
MODELs default to those DIR/meta.json lists, BATCHes to 1,8,32.
"""
import json
import os
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import onnx_exports  # noqa: E402
import testdata_onnx  # noqa: E402
import testdata_util  # noqa: E402
import torch_zoo  # noqa: E402
from testdata_zoo import perturb  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np  # noqa: E402

MAX_BATCH = 32
OPSET = 17
DIGITS = os.path.join(ROOT, "models/repository/digits_mlp/1/weights.safetensors")


def load_safetensors(path):
    """name -> tensor of a safetensors file."""
    return {k: torch.from_numpy(v.copy()) for k, v in safetensors_np.read(path).items()}


def mlp():
    net = testdata_onnx.mlp()
    net.load_state_dict(load_safetensors(DIGITS))
    return net.eval()


# The zoo set: model -> (builder, seed, input maker, zoo package graph or None, output count)
MODELS = {
    "mlp": (mlp, None, lambda g: torch.rand(MAX_BATCH, 64, generator=g),
            {"type": "sequential", "layers": [{"op": "linear", "name": "0", "in_features": 64, "out_features": 64},
                                              {"op": "relu", "name": "1"},
                                              {"op": "linear", "name": "2", "in_features": 64, "out_features": 10}]},
            10),
    "lenet5": (torch_zoo.LeNet5, 10, lambda g: torch.randn(MAX_BATCH, 1, 32, 32, generator=g),
               {"type": "zoo", "model": "lenet5", "config": {"classes": 10}}, 10),
    "resnet18": (torch_zoo.resnet18, 11, lambda g: torch.randn(MAX_BATCH, 3, 224, 224, generator=g),
                 {"type": "zoo", "model": "resnet18", "config": {"num_classes": 1000}}, 1000),
    "bert": (torch_zoo.BertClassifier, 12, lambda g: torch.randint(0, 1000, (MAX_BATCH, 128), generator=g),
             {"type": "zoo", "model": "bert_classifier",
              "config": {"vocab": 1000, "d_model": 128, "nhead": 4, "layers": 2, "ff": 512, "max_len": 128,
                         "classes": 2}}, 2),
    "identity": (torch.nn.Identity, None, lambda g: torch.rand(MAX_BATCH, 64, generator=g), None, 64),
}


def torchvision_model(name):
    """torchvision's classifier at 224x224 with the ONNX coverage exports' weights treatment."""
    entry = onnx_exports.classifier(name, 224)
    net = entry.build()
    onnx_exports.reset_zero_layers(net)
    onnx_exports.calibrate_batchnorm(net, entry, torch.Generator().manual_seed(7))
    return net.eval()


def bert_base():
    """BertClassifier at BERT-base size. nn.TransformerEncoder deep-copies one layer: each layer is
    given weights of its own (the exporter would store identical ones once, and they would stay in
    cache)."""
    net = torch_zoo.BertClassifier(vocab=30522, d_model=768, nhead=12, layers=12, ff=3072, max_len=512)
    for layer in net.encoder.layers:
        for m in layer.modules():
            if isinstance(m, torch.nn.Linear):
                m.reset_parameters()
        layer.self_attn._reset_parameters()
    return perturb(net)


class HfSelfAttention(torch.nn.Module):
    """Self-attention as Hugging Face's BertSelfAttention writes it: separate query, key and value
    Linear layers, heads split by view + permute, softmax(q k^T / sqrt(d)) v by torch.matmul."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.query, self.key, self.value = (torch.nn.Linear(d, d) for _ in range(3))

    def forward(self, x):  # x [B, S, d]
        b, s, _ = x.shape

        def split(t):
            return t.view(b, s, self.heads, self.dh).permute(0, 2, 1, 3)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        p = (torch.matmul(q, k.transpose(-1, -2)) / self.dh ** 0.5).softmax(-1)
        return torch.matmul(p, v).permute(0, 2, 1, 3).reshape(b, s, -1)


class HfLayer(torch.nn.Module):
    """BertLayer: attention, output dense, residual + LayerNorm, GELU feed-forward, residual +
    LayerNorm (post-norm)."""

    def __init__(self, d, heads, ff):
        super().__init__()
        self.attention = HfSelfAttention(d, heads)
        self.attn_out = torch.nn.Linear(d, d)
        self.norm1 = torch.nn.LayerNorm(d, eps=1e-12)
        self.intermediate = torch.nn.Linear(d, ff)
        self.output = torch.nn.Linear(ff, d)
        self.norm2 = torch.nn.LayerNorm(d, eps=1e-12)

    def forward(self, x):
        h = self.norm1(x + self.attn_out(self.attention(x)))
        return self.norm2(h + self.output(torch.nn.functional.gelu(self.intermediate(h))))


class HfBert(torch.nn.Module):
    """BERT-base written the way Hugging Face's modeling_bert is (separate q/k/v projections; no
    padding mask), token ids in, a linear head on the first token's state."""

    def __init__(self, vocab=30522, d=768, heads=12, layers=12, ff=3072, max_len=512, classes=2):
        super().__init__()
        self.tok_emb = torch.nn.Embedding(vocab, d)
        self.pos_emb = torch.nn.Embedding(max_len, d)
        self.norm = torch.nn.LayerNorm(d, eps=1e-12)
        self.layers = torch.nn.ModuleList(HfLayer(d, heads, ff) for _ in range(layers))
        self.head = torch.nn.Linear(d, classes)

    def forward(self, ids):  # ids I64 [N, S]
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = self.norm(self.tok_emb(ids) + self.pos_emb(pos))
        for layer in self.layers:
            h = layer(h)
        return self.head(h[:, 0])


class LSTMHead(torch.nn.Module):
    """A 2-layer LSTM (batch first) over the sequence, a linear head on its last step."""

    def __init__(self, features=64, hidden=256, layers=2, classes=10):
        super().__init__()
        self.rnn = torch.nn.LSTM(features, hidden, num_layers=layers, batch_first=True)
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


BROUGHT_BATCH = 8


def image(g):
    return torch.randn(BROUGHT_BATCH, 3, 224, 224, generator=g)


# The brought set: model -> (builder, seed, input maker, dynamic sequence axis)
BROUGHT = {
    "resnet50": (lambda: torchvision_model("resnet50"), 20, image, False),
    "mobilenet_v2": (lambda: torchvision_model("mobilenet_v2"), 26, image, False),
    "mobilenet_v3_large": (lambda: torchvision_model("mobilenet_v3_large"), 21, image, False),
    "efficientnet_b0": (lambda: torchvision_model("efficientnet_b0"), 22, image, False),
    "vit_b_16": (lambda: torchvision_model("vit_b_16"), 23, image, False),
    "bert_base": (bert_base, 24, lambda g: torch.randint(0, 30522, (BROUGHT_BATCH, 128), generator=g), True),
    "bert_base_hf": (lambda: perturb(HfBert()), 27, lambda g: torch.randint(0, 30522, (BROUGHT_BATCH, 128), generator=g),
                     True),
    "lstm": (LSTMHead, 25, lambda g: torch.randn(BROUGHT_BATCH, 64, 64, generator=g), False),
}
# set -> (models, the scripts (in scripts/) its data comes from)
SETS = {"zoo": (MODELS, ["../bench/torch_zoo_bench.py", "testdata_onnx.py", "testdata_zoo.py", "torch_zoo.py"]),
        "brought": (BROUGHT, ["../bench/torch_zoo_bench.py", "testdata_onnx.py", "testdata_zoo.py", "torch_zoo.py",
                              "onnx_exports.py"])}


def build(name):
    if name in BROUGHT:
        torch.manual_seed(BROUGHT[name][1])
        return BROUGHT[name][0]().eval()
    make, seed, _, _, _ = MODELS[name]
    if seed is None:
        return make().eval()
    torch.manual_seed(seed)
    return perturb(make())


def flops_per_sample(net, x):
    """2 x multiply-adds of every Conv2d, Linear, nn.MultiheadAttention (projections and products)
    and LSTM for one sample; for the BERT encoder also its projections, feed-forward and attention
    products (PyTorch's fused encoder path has no Linear calls to hook)."""
    if isinstance(net, torch_zoo.BertClassifier):
        layer, s = net.encoder.layers[0], x.shape[1]
        d, ff = layer.linear1.in_features, layer.linear1.out_features
        per_token = 4 * d * d + 2 * d * ff + 2 * s * d  # q, k, v, out; ff in and out; q k^T and attn v
        return 2 * (s * per_token * len(net.encoder.layers) + d * net.head.out_features)
    total = [0]

    def hook(m, inputs, out):
        if isinstance(m, torch.nn.Conv2d):
            total[0] += out.numel() * m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1]
        elif isinstance(m, torch.nn.Linear):
            total[0] += out.numel() * m.in_features
        elif isinstance(m, torch.nn.MultiheadAttention):  # its projections are not Linear calls
            e = m.embed_dim
            s = out[0].numel() // e
            total[0] += 4 * s * e * e + 2 * s * s * e  # q, k, v, out; q k^T and attn v
        elif isinstance(m, HfSelfAttention):  # its projections are Linear calls, the products not
            s, e = out.shape[1], out.shape[2]
            total[0] += 2 * s * s * e  # q k^T and attn v
        elif isinstance(m, torch.nn.LSTM):
            steps = inputs[0].shape[1 if m.batch_first else 0]
            sizes = [m.input_size] + [m.hidden_size] * (m.num_layers - 1)
            total[0] += steps * sum(4 * m.hidden_size * (i + m.hidden_size) for i in sizes)

    handles = [m.register_forward_hook(hook) for m in net.modules()]
    with torch.no_grad():
        net(x[:1])
    for h in handles:
        h.remove()
    return 2 * total[0]


def zoo_package(path, name, net, graph, x, classes):
    os.makedirs(path, exist_ok=True)
    torch_zoo.write_safetensors(os.path.join(path, "weights.safetensors"), net.state_dict())
    dtype = "INT64" if x.dtype == torch.int64 else "FP32"
    spec = {"format": "hgraph-model", "format_version": 1, "name": name, "platform": "hgraph_v1",
            "inputs": [{"name": "input", "datatype": dtype, "shape": [-1] + list(x.shape[1:])}],
            "outputs": [{"name": "logits", "datatype": "FP32", "shape": [-1, classes]}],
            "graph": graph, "metadata": {"source": "bench/torch_zoo_bench.py"}}
    with open(os.path.join(path, "model.json.tmp"), "w") as f:
        json.dump(spec, f, indent=1)
    os.replace(os.path.join(path, "model.json.tmp"), os.path.join(path, "model.json"))


def prepare(out, models):
    meta = {}
    for i, name in enumerate(models):
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        net = build(name)
        x = models[name][2](torch.Generator().manual_seed(200 + i))
        seq = name in BROUGHT and BROUGHT[name][3]
        testdata_onnx.export(net, x, os.path.join(d, "model.onnx"), OPSET, seq)
        np.save(os.path.join(d, "input.npy"), x.numpy())
        torch_zoo.write_safetensors(os.path.join(d, "input.safetensors"), {"input": x})
        with torch.no_grad():
            torch_zoo.write_safetensors(os.path.join(d, "output.safetensors"), {"output": net(x)})
        if name in MODELS and MODELS[name][3] is not None:
            zoo_package(os.path.join(d, "zoo"), name, net, MODELS[name][3], x, MODELS[name][4])
        meta[name] = {"flops": flops_per_sample(net, x), "shape": list(x.shape[1:])}
    with open(os.path.join(out, "meta.json.tmp"), "w") as f:
        json.dump(meta, f, indent=1)
    os.replace(os.path.join(out, "meta.json.tmp"), os.path.join(out, "meta.json"))


def time_calls(fn, seconds):
    """Warm-up (at least 3 calls and 0.5 s, at most 20 calls), then per-call times for `seconds`
    (at least 5 calls, at most 5000): median, p99 in ms and the count."""
    t0 = time.perf_counter()
    for i in range(20):
        fn()
        if i >= 2 and time.perf_counter() - t0 > 0.5:
            break
    times = []
    t0 = time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - t0 < seconds and len(times) < 5000):
        a = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - a)
    times.sort()
    return times[len(times) // 2] / 1e6, times[int(len(times) * 0.99)] / 1e6, len(times)


def torchscript(net, x):
    try:
        scripted = torch.jit.script(net)
    except Exception as e:  # noqa: BLE001 - any scripting failure falls back to tracing
        print(f"torch_zoo_bench: torch.jit.script failed ({type(e).__name__}), tracing", file=sys.stderr)
        scripted = torch.jit.trace(net, x)
    return torch.jit.freeze(scripted.eval())


def run(data, threads, seconds, models, batches):
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    for name in models:
        net = build(name)
        if name in MODELS and MODELS[name][3] is not None:
            net.load_state_dict(load_safetensors(os.path.join(data, name, "zoo", "weights.safetensors")))
        x_all = torch.from_numpy(np.load(os.path.join(data, name, "input.npy")))
        runtimes = [("pytorch", net)]
        if name in MODELS:
            with torch.inference_mode():
                runtimes.append(("torchscript", torchscript(net, x_all[:1])))
        for batch in batches:
            x = x_all[:batch].contiguous()
            for runtime, fn in runtimes:
                with torch.inference_mode():
                    median, p99, n = time_calls(lambda: fn(x).numpy(), seconds)
                print(json.dumps({"runtime": runtime, "model": name, "batch": batch, "threads": threads,
                                  "median_ms": round(median, 5), "p99_ms": round(p99, 5), "n": n}), flush=True)


def main():
    if len(sys.argv) in (3, 4) and sys.argv[1] == "prepare" and sys.argv[3:] in ([], ["zoo"], ["brought"]):
        models, sources = SETS[sys.argv[3] if len(sys.argv) == 4 else "zoo"]
        sys.argv = [sys.argv[0], sys.argv[2]]
        testdata_util.run(lambda out: prepare(out, models), sources, threads=2)
    elif len(sys.argv) >= 5 and sys.argv[1] == "run":
        models = sys.argv[5].split(",") if len(sys.argv) > 5 else list(json.load(open(os.path.join(sys.argv[2], "meta.json"))))
        batches = [int(b) for b in sys.argv[6].split(",")] if len(sys.argv) > 6 else [1, 8, 32]
        run(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), models, batches)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
