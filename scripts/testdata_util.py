"""The shared driver of the test-data scripts (scripts/testdata_<name>.py OUT_DIR, ctest fixtures):
make the data once, and again only when one of the scripts it comes from changes.

    testdata_util.run(make, ["testdata_zoo.py", "torch_zoo.py"], threads=2)  # make(out_dir)

OUT_DIR/stamp holds a SHA-256 of the named scripts (in scripts/); it is written last, atomically,
so an interrupted run is redone."""
import hashlib
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def sources_hash(sources):
    h = hashlib.sha256()
    for name in sources:
        with open(os.path.join(HERE, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def run(make, sources, threads=1):
    if len(sys.argv) != 2:
        sys.exit(f"usage: {os.path.basename(sys.argv[0])} OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    stamp = os.path.join(out, "stamp")
    digest = sources_hash(sources)
    if os.path.exists(stamp) and open(stamp).read() == digest:
        print(f"{out}: up to date")
        return
    torch.set_num_threads(threads)
    make(out)
    with open(stamp + ".tmp", "w") as f:
        f.write(digest)
    os.replace(stamp + ".tmp", stamp)
    print(f"{out}: written")
