#!/usr/bin/python3
"""The serving benchmark's peer: a FastAPI + uvicorn + PyTorch server doing the same inference as
hgraph-serve on the same models and weights, with the same KServe v2 JSON request and response
shape, so that one wrk script (bench/serve/post.lua) drives both.

    HG_PEER_DATA=build-bench/zoo HG_PEER_THREADS=1 /usr/bin/python3 bench/serve/fastapi_peer.py \
        --port 8001 --workers 2

The launcher runs uvicorn (one process per worker, uvicorn's supervisor) on a listening socket it
binds itself with protocol IPPROTO_TCP: uvicorn's own `--workers N` binding leaves the protocol 0,
so asyncio does not set TCP_NODELAY on the accepted connections and every keep-alive answer
waits ~40 ms for the client's delayed ACK (uvicorn issue #3149; `python3 -m uvicorn
fastapi_peer:app --workers 1` is not affected).

HG_PEER_DATA is the zoo benchmark's data (`bench/torch_zoo_bench.py prepare DATA`); the models
are built as bench/torch_zoo_bench.py builds them (scripts/torch_zoo.py) and load the zoo
packages' weights.safetensors, the files hgraph-serve loads: identity ([N, 16]), mlp (the digits
MLP), lenet5, resnet18 (also as resnet18_64, for 64x64 images), bert (also as bert_s16).
HG_PEER_THREADS (default 1) sets torch.set_num_threads in each uvicorn worker (inter-op 1).

Endpoints: GET /v2/health/live, GET /v2/health/ready, POST /v2/models/{model}/infer (one input,
"data" flat or nested, FP32 or INT64; the request "id" echoed; output "logits" as FP32 data).
The handler is the plain fast path: the body parsed with json.loads (no pydantic model), the
forward under torch.inference_mode() on the event loop (uvicorn runs one request at a time per
worker, as the model would anyway), the answer written with json.dumps.
"""
import argparse
import json
import os
import socket
import sys

import numpy as np
import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import torch_zoo_bench  # noqa: E402  (bench/torch_zoo_bench.py)

DTYPES = {"FP32": np.float32, "INT64": np.int64, "INT32": np.int32, "FP64": np.float64}


def load_models(data):
    models = {"identity": torch.nn.Identity().eval()}
    for name in ("mlp", "lenet5", "resnet18", "bert"):
        net = torch_zoo_bench.build(name)
        weights = os.path.join(data, name, "zoo", "weights.safetensors")
        net.load_state_dict(torch_zoo_bench.load_safetensors(weights))
        models[name] = net.eval()
    models["resnet18_64"] = models["resnet18"]  # the same networks on smaller inputs
    models["bert_s16"] = models["bert"]
    return models


MODELS = {}
app = FastAPI()


@app.on_event("startup")
def startup():  # in each worker
    torch.set_num_threads(int(os.environ.get("HG_PEER_THREADS", "1")))
    torch.set_num_interop_threads(1)
    MODELS.update(load_models(os.environ["HG_PEER_DATA"]))


def error(status, message):
    return JSONResponse({"error": message}, status_code=status)


@app.get("/v2/health/live")
async def live():
    return {"live": True}


@app.get("/v2/health/ready")
async def ready():
    return {"ready": bool(MODELS)}


@app.post("/v2/models/{name}/infer")
async def infer(name: str, request: Request):
    net = MODELS.get(name)
    if net is None:
        return error(404, f"unknown model '{name}'")
    try:
        req = json.loads(await request.body())
        inp = req["inputs"][0]
        x = torch.from_numpy(np.asarray(inp["data"], dtype=DTYPES[inp["datatype"]]).reshape(inp["shape"]))
    except (ValueError, KeyError, IndexError, TypeError) as e:
        return error(400, f"bad request: {type(e).__name__}: {e}")
    with torch.inference_mode():
        y = net(x)
    out = {"model_name": name, "model_version": "1",
           "outputs": [{"name": "output" if name == "identity" else "logits", "datatype": "FP32",
                        "shape": list(y.shape), "data": y.reshape(-1).tolist()}]}
    if "id" in req:
        out["id"] = req["id"]
    return Response(json.dumps(out), media_type="application/json")


def main():
    parser = argparse.ArgumentParser(description="FastAPI + uvicorn + PyTorch KServe v2 peer")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    sys.path.insert(0, HERE)
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    config = uvicorn.Config("fastapi_peer:app", host=args.host, port=args.port, workers=args.workers,
                            access_log=False, log_level="warning")
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.set_inheritable(True)
    server = uvicorn.Server(config)
    if args.workers > 1:
        Multiprocess(config, target=server.run, sockets=[sock]).run()
    else:
        server.run(sockets=[sock])


if __name__ == "__main__":
    main()
