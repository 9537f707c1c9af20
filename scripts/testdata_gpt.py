#!/usr/bin/python3
"""Test data for tests/gpt_test.cpp, made by PyTorch (scripts/torch_gpt.py) at test time.

Usage: /usr/bin/python3 scripts/testdata_gpt.py OUT_DIR

Writes into OUT_DIR:
  weights.safetensors  the state_dict of GPT() (default config) with seeded random weights
                       (LayerNorm weights and all biases perturbed so that loading them matters)
  keys.json            its state_dict keys in PyTorch's order
  io.safetensors       "ids" I64 [2, 24] and their "logits" F32 [2, 24, 256]; "prompt" I64 [1, 12]
                       and "greedy" I64 [1, 12 + 20]: the prompt with 20 argmax tokens appended
                       by full recomputation
  tokenizer.json       byte strings (valid and invalid UTF-8) with Python's
                       bytes.decode("utf-8", errors="replace") of each, re-encoded as UTF-8
  stamp                hash of this script, torch_gpt.py and torch_zoo.py; outputs are not remade while it matches
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT  # noqa: E402
from torch_zoo import write_safetensors  # noqa: E402
import testdata_util  # noqa: E402

UTF8_CASES = [
    b"",
    b"hello, world",
    "h\u00e9llo \u20ac \U0001F600 \u4e2d\u6587".encode(),  # 2-, 3- and 4-byte sequences
    b"\xff",                    # never valid
    b"a\x80b",                  # lone continuation byte
    b"\xc3",                    # truncated 2-byte sequence at the end
    b"\xe2\x82",                # truncated 3-byte sequence (one maximal subpart)
    b"\xe2\x82x\xf0\x9f\x98",   # truncated sequences followed by more text
    b"\xc0\xaf",                # overlong encoding of '/'
    b"\xe0\x80\xaf",            # overlong 3-byte
    b"\xed\xa0\x80",            # UTF-16 surrogate
    b"\xf4\x90\x80\x80",        # above U+10FFFF
    b"\xf0\x9f\x98\x80\xf0\x9f",  # a valid emoji then a truncated one
    bytes(range(256)),
]


def write_json(path, value):
    with open(path + ".tmp", "w") as f:
        json.dump(value, f)
    os.replace(path + ".tmp", path)


def make(out):
    torch.manual_seed(0)
    model = GPT().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif "ln" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
    write_safetensors(os.path.join(out, "weights.safetensors"), model.state_dict())
    write_json(os.path.join(out, "keys.json"), list(model.state_dict()))

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 256, (2, 24), generator=gen)
    prompt = torch.tensor([list(b"Hello, hgraph")[:12]])
    with torch.no_grad():
        logits = model(ids)
    greedy = model.generate_greedy(prompt, 20)
    write_safetensors(os.path.join(out, "io.safetensors"),
                      {"ids": ids, "logits": logits, "prompt": prompt, "greedy": greedy})

    cases = [{"bytes": list(b), "replaced": list(b.decode("utf-8", errors="replace").encode())}
             for b in UTF8_CASES]
    write_json(os.path.join(out, "tokenizer.json"), cases)


if __name__ == "__main__":
    testdata_util.run(make, ["testdata_gpt.py", "torch_gpt.py", "torch_zoo.py"])
