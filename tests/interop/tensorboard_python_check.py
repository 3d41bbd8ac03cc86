#!/usr/bin/env python3
"""Interop check with TensorBoard's own reader (the `tensorboard` package of the GPU machines, never a hytra
dependency). Usage: tensorboard_python_check.py HYTRA_BINARY WORKDIR
hytra trains a tiny MoE + MTP model on the CPU for 6 iterations with --tensorboard-dir (every optional scalar on,
validation at 3 and 6) and --log-jsonl; EventAccumulator loads the event file. Every expected tag must be there at
its steps, and lm loss, grad norm and learning rate must equal the JSONL's per-iteration values (as fp32)."""
import json
import os
import shutil
import subprocess
import sys

import struct
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def main():
    hytra, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tb, jsonl = os.path.join(work, "tb"), os.path.join(work, "run.jsonl")
    subprocess.run([hytra, "train", "--config", "examples/tiny-dense/config.yaml", "--hybrid-layer-pattern",
                    "*E-E/*-", "--num-experts", "4", "--moe-ffn-hidden-size", "32", "--moe-aux-loss-coeff", "1e-2",
                    "--train-iters", "6", "--lr-warmup-iters", "1", "--log-interval", "1", "--eval-interval", "3",
                    "--eval-iters", "1", "--device", "cpu", "--tensorboard-dir", tb, "--log-jsonl", jsonl,
                    "--log-batch-size-to-tensorboard", "--log-world-size-to-tensorboard",
                    "--log-timers-to-tensorboard", "--log-memory-to-tensorboard", "--log-throughput",
                    "--log-validation-ppl-to-tensorboard", "--moe-per-layer-logging"],
                   check=True, stdout=subprocess.DEVNULL)
    acc = EventAccumulator(tb, size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    every = list(range(1, 7))
    records = [json.loads(line) for line in open(jsonl) if '"iteration"' in line]
    gbs = records[0]["global_batch_size"]
    samples = [gbs * i for i in every]
    expect = {}
    for tag in ("learning-rate", "batch-size", "lm loss", "loss-scale", "world-size", "grad-norm"):
        expect[tag] = every
        expect[tag + " vs samples"] = samples
    for tag in ("mtp_1 loss", "load_balancing_loss", "moe/load_balancing_loss_layer_1",
                "moe/load_balancing_loss_layer_3", "mem-reserved-bytes", "mem-allocated-bytes",
                "mem-max-allocated-bytes", "throughput", "iteration-time"):
        expect[tag] = every
    expect["lm loss validation"] = expect["lm loss validation ppl"] = [3, 6]
    expect["lm loss validation vs samples"] = [3 * gbs, 6 * gbs]
    missing = sorted(set(expect) - tags)
    assert not missing, f"tags TensorBoard did not find: {missing} (found {sorted(tags)})"
    for tag, steps in expect.items():
        got = [e.step for e in acc.Scalars(tag)]
        assert got == steps, f"{tag}: steps {got}, expected {steps}"
    by_iter = {r["iteration"]: r for r in records}
    for key, tag in (("lm loss", "lm loss"), ("grad_norm", "grad-norm"), ("lr", "learning-rate")):
        for e in acc.Scalars(tag):
            want = by_iter[e.step][key]
            assert e.value == struct.unpack("<f", struct.pack("<f", want))[0], f"{tag} at {e.step}: {e.value}, the log says {want}"
    print(f"ok: TensorBoard's EventAccumulator reads {len(tags)} scalar tags from hytra's event file, each at its "
          "steps; lm loss, grad-norm and learning-rate equal the run's log")


if __name__ == "__main__":
    main()
