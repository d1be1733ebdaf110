#!/usr/bin/env python3
"""Composition scores beside TransformerLens, side by side in one run, on GPT-2 Small's shapes
with random weights (bench-data/gpt2-small-random, written by scripts/bench_python.py's
`write_model`), on the CPU, each contender in a process of its own so that its peak memory is
its own:

    scripts/python_tests.sh --torch   # once: .venv with torch, transformers, transformer-lens, headprint
    .venv/bin/python scripts/bench_composition.py [--rounds 3]

Each round, in turn:
- cli:    `headprint composition DIR --json --backend cpu` on the files (the three kinds, folded);
- py:     `headprint.composition(tl_model, kind)` for q, k and v on a HookedTransformer holding the
          same weights, folded and centred as `from_pretrained` leaves them (built in the
          process, not timed; the three kinds come from one report);
- tl:     TransformerLens's own `tl_model.all_composition_scores(kind)` for Q, K and V on the same
          HookedTransformer (built the same way, not timed).
The scores of py and tl are compared (largest absolute difference), so the work is the same work.
Peak memory: the CLI's maximum resident set (GNU time's); for py and tl, how far the process's
resident set rose above what it held once the model was built (Linux's VmHWM, reset through
/proc/self/clear_refs then, less VmRSS then): torch and the model's weights are not counted.
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

CHILD = r"""
import json, sys, time
sys.path.insert(0, {scripts!r})
import numpy as np, torch
import bench_python
which = sys.argv[1]
model = bench_python.hooked()
def status_kb(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
open("/proc/self/clear_refs", "w").write("5")
held = status_kb("VmRSS")
start = time.perf_counter()
if which == "py":
    import headprint
    scores = {{k: headprint.composition(model, k, backend="cpu") for k in "qkv"}}
else:
    with torch.no_grad():
        scores = {{k: model.all_composition_scores(k.upper()).double().numpy() for k in "qkv"}}
seconds = time.perf_counter() - start
peak = status_kb("VmHWM")
np.savez(sys.argv[2], **scores)
print(json.dumps({{"seconds": seconds, "peak_mb": (peak - held) / 1024}}))
"""


def child(which, out):
    code = CHILD.format(scripts=str(ROOT / "scripts"))
    done = subprocess.run([sys.executable, "-c", code, which, out], check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def cli_run(cli, folder):
    import time

    start = time.perf_counter()
    done = subprocess.run(
        ["/usr/bin/time", "-f", "%M", cli, "composition", folder, "--json", "--backend", "cpu", "--quiet"],
        check=True, capture_output=True, text=True,
    )
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "peak_mb": int(done.stderr.strip().splitlines()[-1]) / 1024}


def main():
    import numpy as np

    import bench_python

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    bench_python.write_model()
    cli = ROOT / "target" / "release" / "headprint"
    times = {"cli": [], "py": [], "tl": []}
    peaks = {"cli": [], "py": [], "tl": []}
    for round_ in range(args.rounds):
        result = cli_run(cli, bench_python.FOLDER)
        times["cli"].append(result["seconds"])
        peaks["cli"].append(result["peak_mb"])
        for which in ("py", "tl"):
            result = child(which, f"/tmp/composition-{which}.npz")
            times[which].append(result["seconds"])
            peaks[which].append(result["peak_mb"])
        ours, theirs = np.load("/tmp/composition-py.npz"), np.load("/tmp/composition-tl.npz")
        gap = max(float(np.abs(ours[k] - theirs[k]).max()) for k in "qkv")
        print(f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()) + f"; largest |py - tl| {gap:.2e}")
    print()
    print("| what | median time | peak memory |")
    print("|---|---|---|")
    for which in times:
        print(f"| {which} | {statistics.median(times[which]):.2f} s | {statistics.median(peaks[which]):.0f} MB |")
    print(f"\ntl / py: {statistics.median(times['tl']) / statistics.median(times['py']):.1f}x")


if __name__ == "__main__":
    sys.exit(main())
