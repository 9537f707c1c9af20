#!/usr/bin/python3
"""The GPT-style decoder language model of hgraph's zoo, in PyTorch (models/gpt.h mirrors it).

    from torch_gpt import GPT
    model = GPT()                                  # vocab=256 (bytes), d_model=128, nhead=4, layers=2
    logits = model(torch.tensor([[72, 105]]))      # ids [N, S] int64 -> logits [N, S, vocab]

Pre-norm blocks: x = x + attn.proj(causal_attention(attn.qkv(ln1(x))));
x = x + fc2(gelu(fc1(ln2(x)))) (GELU in its erf form); logits = lm_head(ln_f(x)).
Positions come from a learned table pos_emb of max_len rows. state_dict keys:
tok_emb.weight, pos_emb.weight, blocks.N.{ln1,attn.qkv,attn.proj,ln2,fc1,fc2}.{weight,bias},
ln_f.{weight,bias}, lm_head.{weight,bias}.
"""
import math

import torch
from torch import nn
from torch.nn import functional as F


class Attention(nn.Module):
    def __init__(self, d_model, nhead):
        super().__init__()
        self.nhead = nhead
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        n, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.reshape(n, s, self.nhead, d // self.nhead).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.nhead)
        causal = torch.ones(s, s, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(n, s, d))


class Block(nn.Module):
    def __init__(self, d_model, nhead, ff):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, nhead)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, ff)
        self.fc2 = nn.Linear(ff, d_model)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=256, d_model=128, nhead=4, layers=2, ff=512, max_len=256):
        super().__init__()
        self.max_len = max_len
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, nhead, ff) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab)

    def forward(self, ids):
        x = self.tok_emb(ids) + self.pos_emb(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    @torch.no_grad()
    def generate_greedy(self, ids, max_new_tokens):
        """Appends max_new_tokens argmax tokens to ids [1, S] by full recomputation."""
        for _ in range(max_new_tokens):
            nxt = self(ids)[:, -1].argmax(dim=-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
        return ids
