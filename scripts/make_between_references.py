#!/usr/bin/env python3
"""References for the circuits between heads, in float64 numpy, for every family fixture:

    .venv/bin/python scripts/make_between_references.py   # -> tests/fixtures/families/<name>/between.json

Reads each fixture as transformers saved it, takes its weights as scripts/make_family_fixtures.py
does (its `canonical` and folds: the same per-family reading the fingerprint references use) and
computes, with dense d_model x d_model matrices and nothing factored (code independent of the Rust
engine):

  * composition: for every head h1 of layer l1 and h2 of a later layer l2,
    Q ||OV1 QK2||_F / (||OV1||_F ||QK2||_F), K the same with QK2^T, V with OV2, with
    OV = W_V W_O and QK = W_Q W_K^T (row vectors), nested [l1][h1][l2][h2], 0 unless l1 < l2;
  * svd: every head's singular values of OV and QK (the largest d_head of the dense matrix's).

Both modes: folded (input norms into the reading weights, query/key norms, output norms and the
residual multiplier as in make_family_fixtures.py) and raw.
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_family_fixtures import OUT, canonical, family_of, head_weights  # noqa: E402


def between(c, folded):
    heads = head_weights(c, folded)
    L, H, dh = len(c["layers"]), c["heads"], c["d_head"]
    ov = {(l, h): v @ o for l, h, q, k, v, o in heads}
    qk = {(l, h): q @ k.T for l, h, q, k, v, o in heads}
    scores = {kind: np.zeros((L, H, L, H)) for kind in "qkv"}
    fro = np.linalg.norm
    for (l1, h1), a in ov.items():
        for (l2, h2) in ov:
            if l1 >= l2:
                continue
            for kind, b in (("q", qk[l2, h2]), ("k", qk[l2, h2].T), ("v", ov[l2, h2])):
                scores[kind][l1, h1, l2, h2] = fro(a @ b) / (fro(a) * fro(b))
    svd = [{"layer": l, "head": h,
            "ov": np.linalg.svd(ov[l, h], compute_uv=False)[:dh].tolist(),
            "qk": np.linalg.svd(qk[l, h], compute_uv=False)[:dh].tolist()} for l, h, *_ in heads]
    return {"composition": {k: v.tolist() for k, v in scores.items()}, "svd": svd}


def main():
    from transformers import AutoModelForCausalLM

    for folder in sorted(p for p in OUT.iterdir() if (p / "config.json").exists()):
        name = folder.name
        model = AutoModelForCausalLM.from_pretrained(str(folder))
        c = canonical(family_of(name) if not name.startswith("falcon") else name, model, model.config)
        result = {"folded": between(c, True), "raw": between(c, False)}
        with open(folder / "between.json", "w") as f:
            json.dump(result, f, allow_nan=False)
            f.write("\n")
        print(f"{name:12} {(folder / 'between.json').stat().st_size:8d} bytes")


if __name__ == "__main__":
    sys.exit(main())
