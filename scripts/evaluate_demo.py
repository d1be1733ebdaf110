#!/usr/bin/env python3
"""Evaluate the shipped demo model with PyTorch and numpy, independently of headprint.

    .venv/bin/python scripts/evaluate_demo.py     # -> docs/demo-eval.json

Measures what issue 3 asks of the model: validation loss (all non-overlapping 128-character
windows of the held-out last 10% of the corpus), induction / previous-token scores and prefix-copy
accuracy on 16 seeded sequences of 50 uniform random characters repeated once, and the same on
16 seeded 50-character windows of held-out text. Also stores reference fingerprints of a few heads
computed with numpy on the full vocab x vocab / d_model x d_model circuit matrices, which
tests/demo_model.rs checks headprint against.
"""
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "public" / "models" / "nietzsche-char.safetensors"
OUT = REPO / "docs" / "demo-eval.json"
REFERENCE_HEADS = ["L2H0", "L1H0", "L5H0"]
N, SEQUENCES = 50, 16

spec = importlib.util.spec_from_file_location("train_demo", REPO / "scripts" / "train_demo.py")
train_demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train_demo)
torch.set_num_threads(2)


def load():
    with safe_open(str(MODEL), "pt") as f:
        meta = f.metadata()
    chars = json.loads(meta["vocab"])
    model = train_demo.GPTLanguageModel(len(chars))
    state = {k: v.float() for k, v in load_file(str(MODEL)).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k.endswith("tril") for k in missing), (missing, unexpected)
    return model.eval(), chars, meta


@torch.no_grad()
def validation_loss(model, val):
    block = train_demo.BLOCK_SIZE
    starts = range(0, len(val) - block - 1, block)
    total, count = 0.0, 0
    for batch_start in range(0, len(starts), 64):
        idx = list(starts)[batch_start:batch_start + 64]
        x = torch.tensor(np.stack([val[i:i + block] for i in idx]))
        y = torch.tensor(np.stack([val[i + 1:i + block + 1] for i in idx]))
        logits, _ = model(x)
        total += torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum").item()
        count += y.numel()
    return total / count


@torch.no_grad()
def induction(model, firsts):
    seqs = torch.tensor(np.stack([np.concatenate([f, f]) for f in firsts]))
    model.set_capture(True)
    logits, _ = model(seqs)
    pats = model.patterns().numpy()  # [layer, head, batch, T, T]
    model.set_capture(False)
    t = np.arange(N, 2 * N)
    scores = {}
    for l in range(pats.shape[0]):
        for h in range(pats.shape[1]):
            p = pats[l, h]
            scores[f"L{l}H{h}"] = {
                "induction_score": float(p[:, t, t - N + 1].mean()),
                "previous_token_score": float(p[:, t, t - 1].mean()),
                "duplicate_token_score": float(p[:, t, t - N].mean()),
            }
    q = np.arange(N, 2 * N - 1)
    hits = (logits[:, q].argmax(-1).numpy() == seqs[:, q + 1].numpy()).mean()
    return {"prefix_copy_accuracy": float(hits), "heads": scores}


def fingerprint(m, rank):
    """Fingerprint quantities of a full circuit matrix (numpy, float64)."""
    eig = np.linalg.eigvals(m)
    eig = eig[np.argsort(-np.abs(eig))][:rank]
    scale = np.abs(eig).sum()
    fro2 = (m * m).sum()
    return {
        "copying_score": float(eig.real.sum() / scale),
        "imaginary_fraction": float(np.abs(eig.imag).sum() / scale),
        "departure_from_normality": float(np.sqrt(max(0.0, fro2 - (np.abs(eig) ** 2).sum())) / np.sqrt(fro2)),
        "scale": float(scale),
    }


def reference_fingerprints(state):
    """Folded as TransformerLens's fold_ln does: ln weights into the reading weights, centred."""
    w = {k: v.double().numpy() for k, v in state.items()}
    w_e = w["token_embedding_table.weight"]
    w_u = w["lm_head.weight"].T * w["ln_f.weight"][:, None]
    w_u = w_u - w_u.mean(0, keepdims=True)
    out = {}
    for name in REFERENCE_HEADS:
        l, h = int(name[1:name.index("H")]), int(name[name.index("H") + 1:])
        ln1 = w[f"blocks.{l}.ln1.weight"][:, None]

        def reading(kind):
            m = w[f"blocks.{l}.sa.heads.{h}.{kind}.weight"].T * ln1
            return m - m.mean(0, keepdims=True)

        d_head = reading("query").shape[1]
        w_o = w[f"blocks.{l}.sa.proj.weight"].T[h * d_head:(h + 1) * d_head]
        out[name] = {
            "qk": fingerprint(reading("query") @ reading("key").T, d_head),
            "ov": fingerprint(w_e @ reading("value") @ w_o @ w_u, d_head),
            "ov_residual": fingerprint(reading("value") @ w_o, d_head),
        }
    return out


def main():
    model, chars, meta = load()
    _, train, val = train_demo.load_corpus()
    rng = np.random.default_rng(0)
    uniform = [rng.integers(0, len(chars), N) for _ in range(SEQUENCES)]
    windows = [val[s:s + N] for s in rng.integers(0, len(val) - N, SEQUENCES)]
    report = {
        "model": str(MODEL.relative_to(REPO)),
        "metadata": meta,
        "validation_loss": validation_loss(model, val),
        "induction_uniform_random": induction(model, uniform),
        "induction_heldout_text": induction(model, windows),
        "reference_fingerprints_folded": reference_fingerprints(load_file(str(MODEL))),
    }
    for kind in ["induction_uniform_random", "induction_heldout_text"]:
        heads = report[kind]["heads"]
        best = max(heads, key=lambda k: heads[k]["induction_score"])
        report[kind]["best_head"] = best
        report[kind]["induction_heads"] = sorted(k for k, v in heads.items() if v["induction_score"] >= 0.4)
        print(f"{kind}: best {best} {heads[best]['induction_score']:.3f}, prefix-copy {report[kind]['prefix_copy_accuracy']:.3f}")
    print(f"validation loss {report['validation_loss']:.4f} nats/char")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(report, indent=1) + "\n")
    ok = report["validation_loss"] <= 1.7 and report["induction_uniform_random"]["induction_heads"] and \
        report["induction_uniform_random"]["prefix_copy_accuracy"] >= 0.5
    print("quality bars:", "met" if ok else "NOT met")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
