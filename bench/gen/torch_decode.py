#!/usr/bin/python3
"""The generation benchmark's PyTorch peer: the same GPT package's weights in scripts/torch_gpt.py's
model, decoding the same prompts greedily with a KV cache, batched at the concurrency as a simple
server would batch them (static batches of C: the prompts prefilled together, padded, then C
sequences decoded together, each at its own length); prints one JSON line like load.py's.

    torch_decode.py PACKAGE_DIR --concurrency 8 --requests 64 --max-tokens 128 --threads 1"""
import argparse
import json
import math
import os
import sys
import time

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, ".."))
sys.path.insert(0, os.path.join(here, "..", "..", "scripts"))
from prompts import prompts  # noqa: E402
from safetensors_np import read  # noqa: E402
from torch_gpt import GPT  # noqa: E402
from load import percentile  # noqa: E402


def step(model, ids, pos, cache):
    """ids, pos [B, S] -> logits [B, S, vocab]; writes each position's keys and values into cache."""
    x = model.tok_emb(ids) + model.pos_emb(pos)
    n, s, d = x.shape
    t = int(pos.max()) + 1
    visible = torch.arange(t)[None, None, None, :] <= pos[:, None, :, None]  # [B, 1, S, T]
    for blk, (kc, vc) in zip(model.blocks, cache):
        h = blk.attn.nhead
        q, k, v = blk.attn.qkv(blk.ln1(x)).split(d, dim=-1)
        q, k, v = (u.reshape(n, s, h, d // h).transpose(1, 2) for u in (q, k, v))
        where = pos[:, None, :, None].expand(n, h, s, d // h)
        kc.scatter_(2, where, k)
        vc.scatter_(2, where, v)
        scores = q @ kc[:, :, :t].transpose(-2, -1) / math.sqrt(d // h)
        att = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1) @ vc[:, :, :t]
        x = x + blk.attn.proj(att.transpose(1, 2).reshape(n, s, d))
        x = x + blk.fc2(torch.nn.functional.gelu(blk.fc1(blk.ln2(x))))
    return model.lm_head(model.ln_f(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("package")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--requests", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    spec = json.load(open(os.path.join(a.package, "model.json")))
    c = spec["graph"]["config"]
    model = GPT(vocab=c["vocab"], d_model=c["d_model"], nhead=c["nhead"], layers=c["layers"], ff=c["ff"],
                max_len=c["max_len"])
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in read(os.path.join(a.package, "weights.safetensors")).items()})
    model.eval()
    n = a.requests or max(8, 4 * a.concurrency)
    todo = prompts(n)
    ttft, gaps, tokens = [], [], 0
    start = time.perf_counter()
    with torch.inference_mode():
        for b in range(0, n, a.concurrency):
            batch = [list(p.encode("utf-8")) for p in todo[b:b + a.concurrency]]
            rows, longest = len(batch), max(len(p) for p in batch)
            t0 = time.perf_counter()
            hd = c["d_model"] // c["nhead"]
            cache = [(torch.zeros(rows, c["nhead"], c["max_len"], hd), torch.zeros(rows, c["nhead"], c["max_len"], hd))
                     for _ in range(c["layers"])]
            ids = torch.tensor([p + [0] * (longest - len(p)) for p in batch])
            lengths = torch.tensor([len(p) for p in batch])
            logits = step(model, ids, torch.arange(longest).expand(rows, longest).contiguous(), cache)
            nxt = logits[torch.arange(rows), lengths - 1].argmax(dim=-1)
            now = time.perf_counter()
            ttft += [(now - t0) * 1e3] * rows
            tokens += rows
            for _ in range(a.max_tokens - 1):
                t1 = time.perf_counter()
                logits = step(model, nxt[:, None], lengths[:, None], cache)
                nxt = logits[:, 0].argmax(dim=-1)
                lengths = lengths + 1
                gaps += [(time.perf_counter() - t1) * 1e3] * rows
                tokens += rows
    wall = time.perf_counter() - start
    print(json.dumps({"runtime": "pytorch " + torch.__version__, "concurrency": a.concurrency, "requests": n,
                      "errors": 0, "tokens": tokens, "seconds": wall, "tokens_per_s": tokens / wall,
                      "ttft_ms_p50": percentile(ttft, 50), "ttft_ms_p99": percentile(ttft, 99),
                      "itl_ms_p50": percentile(gaps, 50), "itl_ms_p99": percentile(gaps, 99)}))


if __name__ == "__main__":
    main()
