# What the multi-process e2e tests compare (data_parallel.sh, pipeline_parallel.sh, tensor_parallel.sh,
# expert_parallel.sh): a run's logged losses, grad norms, params norms and zero-gradient counts (its --log-jsonl file) and the fp32 tensors of its final
# checkpoint, under the work folder W, and the checks that two runs agree.
import array
import json
import struct


def losses(w, name):
    """(iteration, key, value) of every logged loss, grad norm, params norm and count of zero gradients (the last two
    with --log-params-norm / --log-num-zeros-in-grad), validation entries tagged."""
    out = []
    for line in open(f"{w}/{name}.jsonl"):
        r = json.loads(line)
        it, tag = (r["iteration"], "") if "iteration" in r else (r["validation_iteration"], "validation ")
        out += [(it, tag + k, v) for k, v in sorted(r.items())
                if (("loss" in k or k in ("grad_norm", "params_norm")) and isinstance(v, float)) or k == "num_zeros"]
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


def close(w, name, ref, first=1, tol=1e-5):
    """Every logged value of `name` (losses) within tol relative of `ref`'s (from iteration `first` on)."""
    got, want = losses(w, name), [x for x in losses(w, ref) if x[0] >= first]
    assert [x[:2] for x in got] == [x[:2] for x in want], (name, got[:3], want[:3])
    for (i, k, a), (_, _, b) in zip(want, got):
        agree(name, ref, i, k, a, b, tol)


def agree(name, ref, i, k, a, b, tol=1e-5):
    """One logged value `b` of `name` against `ref`'s `a`: within tol relative. Zero-gradient counts are compared at
    the first iteration alone, within 2: there the weights are the same and the gradients differ only in the order
    of their sums, but later some gradients are pure rounding noise (the first layer's mHC mapping, whose streams
    are equal), exactly zero in one run and not in another; counting a parameter twice, or the padding, would move
    the count by hundreds."""
    if k == "num_zeros":
        assert i != 1 or abs(a - b) <= 2, f"{name}: iteration 1 num_zeros: {b} against {ref}'s {a}"
        return
    assert abs(a - b) <= tol * abs(a), f"{name}: iteration {i} {k}: {b} against {ref}'s {a}"


def weights_close(w, name, ref, tol=1e-5):
    """The final weights of `name` within tol of `ref`'s, relative L2 over all tensors (same keys, same order)."""
    want, got = tensors(w, ref), tensors(w, name)
    assert list(got.keys()) == list(want.keys()), f"{name}: the checkpoint's tensors differ from {ref}'s"
    d2 = n2 = 0.0
    for k, a in want.items():
        d2 += sum((x - y) ** 2 for x, y in zip(a, got[k]))
        n2 += sum(x * x for x in a)
    rel = (d2 / n2) ** 0.5
    assert rel <= tol, f"{name}: the final weights differ from {ref}'s by {rel:.2e} relative"
    print(f"{name}: final weights {rel:.2e} relative to {ref}'s")
