"""Checks a few heads of `headprint fingerprint --raw --json` on a full-size checkpoint against
float64 numpy, computed independently of headprint's route (no Gram matrices, no factored
trick for the residual circuits):

- QK (residual) and OV (residual): every eigenvalue of the full d_model x d_model matrix
  W_Q W_K^T and W_V W_O (numpy `eigvals`); the rank-d_head part must be headprint's.
- OV (token space) W_E W_V W_O W_U: its nonzero eigenvalues are those of the d_head x d_head
  (W_O W_U)(W_E W_V), formed from the vocabulary-sized factors themselves.

Eigenvalues are compared as multisets to `--tolerance` x the largest |λ|.

Each circuit's eigenvector condition κ and departure from normality are checked too, through a
QR factorisation instead of headprint's Gram matrices and Cholesky factors: with A = Q R, M's
nonzero eigenvectors are Q times those of R B Q (LAPACK's `geev` through numpy), so κ is the
condition number of the latter's unit eigenvectors, and ‖M‖_F = ‖R B‖_F. κ to
`--kappa-tolerance` relative, the departure to `--tolerance`. This assumes what random weights
give: A of full column rank and no repeated eigenvalues (headprint drops directions of A below
1e-10 of its largest and orthonormalises the eigenvectors of a repeated eigenvalue; this does
neither). A circuit headprint reports as defective (κ above 1e5, `null`) passes only when numpy's
κ is above 1e4 too.

GPT-NeoX (Pythia) and Llama layouts, one file or shards; f32, f16 and bf16. Needs only numpy
(Debian's python3-numpy will do). Exits non-zero with one line per mismatch.

    target/release/headprint fingerprint bench-data/pythia-1b --raw --json > /tmp/fp.json
    .venv/bin/python scripts/check_big_model.py bench-data/pythia-1b /tmp/fp.json --heads L0H0 L15H7
"""

import argparse
import json
import struct
import sys
from pathlib import Path

import numpy as np


def tensors(folder: Path):
    """name -> a loader of that tensor as float64, read from the safetensors files directly (a
    memory map; only the tensors asked for are touched). bf16 is widened through its bits."""
    where = {}
    for file in sorted(folder.glob("*.safetensors")):
        with open(file, "rb") as f:
            length = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(length))
        for name, entry in header.items():
            if name != "__metadata__":
                where[name] = (file, 8 + length, entry)

    def load(name):
        file, start, entry = where[name]
        first, last = entry["data_offsets"]
        dtype = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}[entry["dtype"]]
        raw = np.memmap(file, dtype=np.uint8, mode="r", offset=start + first, shape=(last - first,)).view(dtype)
        if entry["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        return raw.astype(np.float64).reshape(entry["shape"])

    return load


def head_weights(load, config, layer, head):
    """W_Q, W_K, W_V (d_model x d_head) and W_O (d_head x d_model), row-vector convention, raw."""
    d = config["hidden_size"]
    heads = config["num_attention_heads"]
    if config["model_type"] == "gpt_neox":
        d_head = d // heads
        qkv = load(f"gpt_neox.layers.{layer}.attention.query_key_value.weight")  # [3d, d], per head q,k,v
        block = lambda which: qkv[(3 * head + which) * d_head:(3 * head + which + 1) * d_head, :].T
        dense = load(f"gpt_neox.layers.{layer}.attention.dense.weight")  # [d, d] out x in
        return block(0), block(1), block(2), dense[:, head * d_head:(head + 1) * d_head].T
    d_head = config.get("head_dim") or d // heads
    kv = head // (heads // config.get("num_key_value_heads", heads))
    p = f"model.layers.{layer}.self_attn"
    rows = lambda w, h: w[h * d_head:(h + 1) * d_head, :].T
    o = load(f"{p}.o_proj.weight")
    return (rows(load(f"{p}.q_proj.weight"), head), rows(load(f"{p}.k_proj.weight"), kv),
            rows(load(f"{p}.v_proj.weight"), kv), o[:, head * d_head:(head + 1) * d_head].T)


def embeddings(load, config):
    """W_E (vocab x d) and W_U (d x vocab)."""
    if config["model_type"] == "gpt_neox":
        w_e = load("gpt_neox.embed_in.weight")
        names = ["embed_out.weight", "lm_head.weight"]
    else:
        w_e = load("model.embed_tokens.weight")
        names = ["lm_head.weight"]
    for name in names:
        try:
            return w_e, load(name).T
        except KeyError:
            pass
    return w_e, w_e.T


def unmatched(got, want, tolerance):
    """Greedy nearest matching of two eigenvalue multisets; the pairs further apart than tolerance."""
    want = list(want)
    bad = []
    for g in sorted(got, key=lambda z: -abs(z)):
        i = int(np.argmin([abs(g - w) for w in want]))
        if abs(g - want[i]) > tolerance:
            bad.append((g, want[i]))
        want.pop(i)
    return bad


def small_form(a, b):
    """κ of M = A B's unit eigenvectors (nonzero eigenvalues; A of full column rank) and M's
    departure from normality, sqrt(‖M‖_F² - Σ|λ|²) / ‖M‖_F."""
    q, r = np.linalg.qr(a, mode="reduced")
    values, vectors = np.linalg.eig(r @ b @ q)
    vectors = vectors / np.linalg.norm(vectors, axis=0, keepdims=True)
    frobenius2 = float(np.sum((r @ b) ** 2))
    departure = np.sqrt(max(0.0, frobenius2 - float(np.sum(np.abs(values) ** 2)))) / np.sqrt(frobenius2)
    return float(np.linalg.cond(vectors)), float(departure)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("fingerprint", type=Path, help="`headprint fingerprint MODEL --raw --json` output")
    parser.add_argument("--heads", nargs="+", default=["L0H0"])
    parser.add_argument("--tolerance", type=float, default=1e-6, help="relative to the largest |eigenvalue|")
    parser.add_argument("--kappa-tolerance", type=float, default=1e-6, help="relative to numpy's κ")
    args = parser.parse_args()
    config = json.loads((args.model / "config.json").read_text())
    report = json.loads(args.fingerprint.read_text())
    if report["mode"] != "raw":
        sys.exit("check_big_model: give the fingerprint of --raw mode")
    load = tensors(args.model)
    w_e, w_u = embeddings(load, config)
    failures = []
    worst = 0.0
    worst_kappa = worst_departure = 0.0
    for name in args.heads:
        layer, head = (int(x) for x in name[1:].split("H"))
        w_q, w_k, w_v, w_o = head_weights(load, config, layer, head)
        d_head = w_q.shape[1]
        got = next(h for h in report["heads"] if h["layer"] == layer and h["head"] == head)
        factors = {"qk": (w_q, w_k.T), "ov_residual": (w_v, w_o), "ov": (w_e @ w_v, w_o @ w_u)}
        references = {
            "qk": np.linalg.eigvals(w_q @ w_k.T),
            "ov_residual": np.linalg.eigvals(w_v @ w_o),
            "ov": np.linalg.eigvals(factors["ov"][1] @ factors["ov"][0]),
        }
        for circuit, full in references.items():
            kappa, departure = small_form(*factors[circuit])
            mine_kappa = got[circuit]["eigenvector_condition"]
            mine_departure = got[circuit]["departure_from_normality"]
            if mine_kappa is None:
                # Defective for headprint: numpy's κ must at least be far beyond a measurable one.
                if kappa < 1e4:
                    failures.append(f"{name} {circuit}: headprint says defective, numpy's κ is {kappa:.6g}")
            else:
                kappa_error = abs(mine_kappa - kappa) / kappa
                worst_kappa = max(worst_kappa, kappa_error)
                if not kappa_error <= args.kappa_tolerance:
                    failures.append(f"{name} {circuit}: κ headprint {mine_kappa} vs numpy {kappa:.9g}")
            if mine_departure is None:
                failures.append(f"{name} {circuit}: no departure from normality ({got[circuit].get('error')})")
            else:
                worst_departure = max(worst_departure, abs(mine_departure - departure))
                if abs(mine_departure - departure) > args.tolerance:
                    failures.append(
                        f"{name} {circuit}: departure headprint {mine_departure:.9g} vs numpy {departure:.9g}")
            want = sorted(full, key=lambda z: -abs(z))[:d_head]  # the rank-d_head part
            mine = [complex(re, im) for re, im in got[circuit]["eigenvalues"]]
            scale = max(abs(z) for z in want)
            bad = unmatched(mine, want, args.tolerance * scale)
            worst = max([worst] + [abs(g - w) / scale for g, w in unmatched(mine, want, 0.0)])
            if len(mine) != d_head:
                failures.append(f"{name} {circuit}: {len(mine)} eigenvalues, expected {d_head}")
            for g, w in bad[:3]:
                failures.append(f"{name} {circuit}: headprint {g:.6g} vs numpy {w:.6g} (scale {scale:.3g})")
        kappas = ", ".join("defective" if got[c]["eigenvector_condition"] is None
                           else f"{got[c]['eigenvector_condition']:.4g}" for c in factors)
        print(f"{name}: qk, ov_residual, ov checked ({d_head} eigenvalues each; κ {kappas})")
    print(f"largest relative difference: eigenvalues {worst:.2e} (tolerance {args.tolerance:g}), "
          f"κ {worst_kappa:.2e} (tolerance {args.kappa_tolerance:g}), departure {worst_departure:.2e}")
    if failures:
        print("\n".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
