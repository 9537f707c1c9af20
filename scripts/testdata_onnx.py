#!/usr/bin/python3
"""Test data for tests/onnx_test.cpp: ONNX exports of the zoo models and PyTorch's outputs.

Usage: /usr/bin/python3 scripts/testdata_onnx.py OUT_DIR

Writes, for each case in CASES, OUT_DIR/<case>.onnx (torch.onnx.export, dynamic batch) and
OUT_DIR/<case>.safetensors holding "input" (the batch fed to PyTorch) and "output" (the
model's output in eval mode). Also:
  mlp_external.onnx + mlp_external.data   the MLP saved with save_as_external_data=True
  unsupported.onnx                         a graph with an op hgraph does not import (Det)
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


# case -> (model builder, opset, input maker); a spread of opsets 13-17 (BERT at 13 and 17: the
# decomposed LayerNorm and LayerNormalization).
CASES = {
    "mlp_op13": (mlp, 13, image((64,))),
    "lenet5_op15": (lambda: torch_zoo.LeNet5(), 15, image((1, 32, 32))),
    "resnet18_op17": (torch_zoo.resnet18, 17, image((3, 64, 64))),
    "bert_op13": (lambda: torch_zoo.BertClassifier(), 13, token_ids),
    "bert_op17": (lambda: torch_zoo.BertClassifier(), 17, token_ids),
    "lenet5_op14": (lambda: torch_zoo.LeNet5(), 14, image((1, 32, 32))),
    "bert_op16": (lambda: torch_zoo.BertClassifier(), 16, token_ids),
}


def export(model, x, path, opset):
    torch.onnx.export(model, (x,), path, opset_version=opset, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})


def unsupported_model(path):
    node = onnx.helper.make_node("Det", ["input"], ["output"], name="det_node")
    graph = onnx.helper.make_graph(
        [node], "unsupported",
        [onnx.helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, ["batch", 3, 3])],
        [onnx.helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, ["batch"])])
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 15)]), path)


def make(out):
    for i, (case, (build, opset, make_input)) in enumerate(CASES.items()):
        torch.manual_seed(i)
        model = build().eval()
        x = make_input(torch.Generator().manual_seed(100 + i))
        with torch.no_grad():
            y = model(x)
        export(model, x, os.path.join(out, case + ".onnx"), opset)
        torch_zoo.write_safetensors(os.path.join(out, case + ".safetensors"), {"input": x, "output": y})
        if case == "mlp_op13":  # the same model again, its weights in an external data file
            proto = onnx.load(os.path.join(out, case + ".onnx"))
            onnx.save(proto, os.path.join(out, "mlp_external.onnx"), save_as_external_data=True,
                      all_tensors_to_one_file=True, location="mlp_external.data", size_threshold=0)
    unsupported_model(os.path.join(out, "unsupported.onnx"))


if __name__ == "__main__":
    testdata_util.run(make, ["testdata_onnx.py", "torch_zoo.py"])
