#!/usr/bin/python3
"""The serving benchmark's model repository and request bodies (bench/serve/run_serve.sh).

    /usr/bin/python3 bench/serve/prepare.py DATA OUT [INSTANCES]

DATA is the zoo benchmark's data (`bench/torch_zoo_bench.py prepare DATA`): DATA/MODEL/zoo/ holds
a model package (model.json + weights.safetensors), DATA/MODEL/input.npy its inputs. Writes:

  OUT/repo/MODEL/config.json    the serving config (Triton field names, server/model_config.h)
  OUT/repo/MODEL/1/             the package: DATA's model.json, a symbolic link to its weights
  OUT/bodies/MODEL.json         one KServe v2 JSON inference request of batch 1: the input named,
                                shaped and typed as the package's input spec says, its data the
                                first row of DATA/MODEL/input.npy (identity: 16 seeded floats),
                                flat, row-major; FP32 values printed with 7 significant digits
  OUT/models.json               [{"name", "peer", "input", "shape"}] in run order: the model the
                                peer serves for the same request ("peer": null when none)

Models: identity (platform "identity", FP32 [-1, 16]), mlp (the digits MLP 64-64-10), lenet5,
resnet18 (3x224x224), resnet18_64 (the same network and weights on 3x64x64 images: the
top-left crop of the same input), bert (the BERT-style encoder on 128 token ids) with dynamic
batching and bert_b1, the same encoder with max_batch_size 1 (no batching: the baseline of the
batching target), bert_s16 and bert_s16_b1 alike on 16 token ids (the first 16 of the same row).
Every model runs INSTANCES (default 2) instances; the batched ones gather whatever waits when an
instance is free (max_queue_delay_microseconds 0 unless BERT_DELAY_US sets the encoder's).
"""
import json
import os
import sys

import numpy as np

IDENTITY_WIDTH = 16
# variant -> (the zoo model it serves, the input's trailing dimensions: the leading part of the
# zoo input, or None for the zoo's own), and whether the peer serves it (the _b1 baselines not)
VARIANTS = {"resnet18_64": ("resnet18", [3, 64, 64]), "bert_b1": ("bert", None),
            "bert_s16": ("bert", [16]), "bert_s16_b1": ("bert", [16])}


def configs(instances):
    group = [{"count": instances, "kind": "KIND_CPU"}]
    bert_delay = int(os.environ.get("BERT_DELAY_US", "0"))
    unbatched = {"max_batch_size": 1, "batch_buckets": [1], "instance_group": group}

    def batched(buckets, delay=0):
        return {"max_batch_size": buckets[-1], "batch_buckets": buckets,
                "dynamic_batching": {"max_queue_delay_microseconds": delay}, "instance_group": group}

    return {
        "identity": {"platform": "identity", **batched([1, 2, 4, 8, 16, 32]),
                     "input": [{"name": "input", "data_type": "TYPE_FP32", "dims": [IDENTITY_WIDTH]}],
                     "output": [{"name": "output", "data_type": "TYPE_FP32", "dims": [IDENTITY_WIDTH]}]},
        "mlp": batched([1, 2, 4, 8, 16, 32]),
        "lenet5": batched([1, 2, 4, 8, 16, 32]),
        "resnet18": batched([1, 2, 4, 8]),
        "resnet18_64": batched([1, 2, 4, 8, 16, 32]),
        "bert": batched([1, 2, 4, 8, 16], bert_delay),
        "bert_b1": unbatched,
        "bert_s16": batched([1, 2, 4, 8, 16], bert_delay),
        "bert_s16_b1": unbatched,
    }


def write_json(path, value, indent=1):
    with open(path + ".tmp", "w") as f:
        json.dump(value, f, indent=indent, separators=(",", ": ") if indent else (",", ":"))
        f.write("\n")
    os.replace(path + ".tmp", path)


def link(src, dst):  # replaces dst
    if os.path.lexists(dst):
        os.remove(dst)
    os.symlink(os.path.abspath(src), dst)


def body(name, datatype, shape, flat):
    if datatype == "FP32":
        data = [float(f"{v:.7g}") for v in flat.astype(np.float32).tolist()]
    else:
        data = [int(v) for v in flat.tolist()]
    return {"id": "bench", "inputs": [{"name": name, "shape": shape, "datatype": datatype, "data": data}]}


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    data, out = sys.argv[1], sys.argv[2]
    instances = int(sys.argv[3]) if len(sys.argv) == 4 else 2
    repo, bodies = os.path.join(out, "repo"), os.path.join(out, "bodies")
    os.makedirs(bodies, exist_ok=True)
    models = []
    for name, config in configs(instances).items():
        source, dims = VARIANTS.get(name, (name, None))
        version = os.path.join(repo, name, "1")
        os.makedirs(version, exist_ok=True)
        write_json(os.path.join(repo, name, "config.json"), {"name": name, **config})
        if name == "identity":
            spec = {"name": "input", "datatype": "FP32", "shape": [-1, IDENTITY_WIDTH]}
            flat = np.random.default_rng(6).random(IDENTITY_WIDTH, dtype=np.float32)
        else:
            package = os.path.join(data, source, "zoo")
            link(os.path.join(package, "weights.safetensors"), os.path.join(version, "weights.safetensors"))
            with open(os.path.join(package, "model.json")) as f:
                package_spec = json.load(f)
            x = np.load(os.path.join(data, source, "input.npy"))[0]
            if dims:  # the same network on a smaller input: the leading corner of the zoo's
                x = x[tuple(slice(0, d) for d in dims)]
                package_spec["inputs"][0]["shape"][1:] = dims
            package_spec["name"] = name
            write_json(os.path.join(version, "model.json"), package_spec)
            spec, flat = package_spec["inputs"][0], x.reshape(-1)
        shape = [1] + spec["shape"][1:]
        write_json(os.path.join(bodies, name + ".json"), body(spec["name"], spec["datatype"], shape, flat),
                   indent=None)
        models.append({"name": name, "peer": None if name.endswith("_b1") else name, "input": spec["name"],
                       "shape": shape})
    write_json(os.path.join(out, "models.json"), models)
    print(f"{out}: repository and bodies of {', '.join(m['name'] for m in models)}")


if __name__ == "__main__":
    main()
