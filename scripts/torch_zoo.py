#!/usr/bin/python3
"""PyTorch definitions of the hgraph model zoo (models/zoo.h), shared by the test-data scripts,
the ONNX export and the benchmarks. Module names equal the C++ zoo's, so state_dict keys match.

    import sys; sys.path.insert(0, "scripts")
    from torch_zoo import LeNet5, BertClassifier, resnet18, write_safetensors
    net = LeNet5().eval()                               # input [N, 1, 32, 32] -> logits [N, 10]
    bert = BertClassifier().eval()                      # ids I64 [N, S], S <= 128 -> logits [N, 2]
    write_safetensors("w.safetensors", net.state_dict())

GPT lives in scripts/torch_gpt.py.
"""
import json
import os
import struct

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

SAFETENSORS_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.int32: "I32"}


class LeNet5(nn.Module):
    """conv1 - relu - maxpool 2 - conv2 - relu - maxpool 2 - flatten - fc1 - relu - fc2 - relu - fc3."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(400, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x):  # x [N, 1, 32, 32]
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class BertClassifier(nn.Module):
    """Token + learned position embeddings, a post-norm GELU nn.TransformerEncoder, a final
    LayerNorm, mean over the sequence, a linear head. No padding mask."""

    def __init__(self, vocab=1000, d_model=128, nhead=4, layers=2, ff=512, max_len=128, classes=2):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, ff, dropout=0.1, activation="gelu",
                                           batch_first=True, norm_first=False)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, classes)

    def forward(self, ids):  # ids I64 [N, S]
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = self.encoder(self.tok_emb(ids) + self.pos_emb(pos))
        return self.head(self.norm(h).mean(dim=1))


def resnet18(num_classes=1000):
    """torchvision's ResNet-18 (random weights); the C++ zoo::resnet18 has its state_dict keys."""
    return torchvision.models.resnet18(weights=None, num_classes=num_classes)


def write_safetensors(path, tensors):
    """Independent safetensors writer (struct + json + numpy), atomic: 8-byte little-endian
    header length, JSON header padded to 8 bytes, raw little-endian data in dict order."""
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.detach().cpu().contiguous().numpy().tobytes()
        header[name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob + b"".join(chunks))
    os.replace(path + ".tmp", path)
