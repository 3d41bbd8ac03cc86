# What the multi-process e2e tests compare (data_parallel.sh, pipeline_parallel.sh): a run's logged losses and
# grad norms (its --log-jsonl file) and the fp32 tensors of its final checkpoint, under the work folder W.
import array
import json
import struct


def losses(w, name):
    """(iteration, key, value) of every logged loss and grad norm, validation entries tagged."""
    out = []
    for line in open(f"{w}/{name}.jsonl"):
        r = json.loads(line)
        it, tag = (r["iteration"], "") if "iteration" in r else (r["validation_iteration"], "validation ")
        out += [(it, tag + k, v) for k, v in sorted(r.items())
                if ("loss" in k or k == "grad_norm") and isinstance(v, float)]
    return out


def tensors(w, name, iteration=20):
    """The model tensors of the run's checkpoint at `iteration`, in file order."""
    with open(f"{w}/{name}/iter_{iteration:07d}/model.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (k, v["dtype"])
        out[k] = array.array("f", data[v["data_offsets"][0]:v["data_offsets"][1]])
    return out
