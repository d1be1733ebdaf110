#!/usr/bin/env python3
"""Python beside the CLI and TransformerLens, side by side in one run, on GPT-2 Small's shapes
with random weights (written once to bench-data/gpt2-small-random by transformers'
save_pretrained):

    scripts/python_tests.sh --torch   # once: .venv with torch, transformers, transformer-lens, headprint
    .venv/bin/python scripts/bench_python.py [--rounds 3]

Each round, in turn on the same files, on the CPU:
- cli:        `headprint fingerprint DIR --json --backend cpu` (a process: load, Grams, 144 heads);
- cli-tl:     the same on the HookedTransformer's weights written to a folder in the layout the
              package hands the core (the `transformer_lens` family): folded and centred, W_U no
              longer tied to W_E, so three vocabulary Grams where the files' tied GPT-2 needs one;
- py-path:    `headprint.fingerprint(DIR, backend="cpu")`, the same from Python;
- py-tl:      `headprint.fingerprint(tl_model, backend="cpu")` on a HookedTransformer holding the
              same weights, folded and centred as `from_pretrained` leaves them (read anew each
              round: the package's cache of Python models is cleared);
- py-ov-qk:   `headprint.eigenvalues(tl_model, "ov_residual")` and `(…, "qk")` on a model read anew:
              the same two circuits as tl-ov-qk (no vocabulary Grams), with every metric of each;
- tl-ov-qk:   TransformerLens's own `model.OV.eigenvalues` and `model.QK.eigenvalues` (the
              residual-space circuits only, which is what the issue's target names);
- tl-four:    TransformerLens on the four circuits headprint reports: those two and the
              token-space `(W_E @ OV @ W_U)` and `(W_E @ QK @ W_E.T)` eigenvalues.
The HookedTransformer is built once, offline, as `from_pretrained` builds it (the hub's config of
gpt2, TransformerLens's GPT-2 weight conversion, `load_and_process_state_dict`), and not timed.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import transformers
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformer_lens.pretrained.weight_conversions.gpt2 import convert_gpt2_weights

import headprint
from headprint import _readers

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "bench-data" / "gpt2-small-random"
TL_FOLDER = ROOT / "bench-data" / "gpt2-small-random-as-transformer-lens"


def write_model():
    if (FOLDER / "model.safetensors").exists():
        return
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
    transformers.GPT2LMHeadModel(config).save_pretrained(FOLDER)


def hooked():
    hf = transformers.GPT2LMHeadModel.from_pretrained(FOLDER)
    cfg = HookedTransformerConfig(
        n_layers=12, d_model=768, n_heads=12, d_head=64, d_mlp=3072, d_vocab=50257, n_ctx=1024,
        act_fn="gelu_new", normalization_type="LN", eps=1e-5, original_architecture="GPT2LMHeadModel",
    )
    model = HookedTransformer(cfg)
    model.load_and_process_state_dict(
        convert_gpt2_weights(hf, cfg), fold_ln=True, center_writing_weights=True, center_unembed=True
    )
    return model


def write_as_transformer_lens(model):
    """The HookedTransformer's weights as the package reads them, written as files."""
    from safetensors.numpy import save_file

    config, named, _, _ = _readers.transformer_lens_parts(model)
    TL_FOLDER.mkdir(parents=True, exist_ok=True)
    (TL_FOLDER / "config.json").write_text(json.dumps(config))
    save_file({name: _readers._array(value, name)[1] for name, value in named}, TL_FOLDER / "model.safetensors")


def timed(work):
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    write_model()
    model = hooked()
    write_as_transformer_lens(model)
    cli = ROOT / "target" / "release" / "headprint"

    def tl_eigenvalues():
        with torch.no_grad():
            model.OV.eigenvalues
            model.QK.eigenvalues

    def tl_four():
        with torch.no_grad():
            model.OV.eigenvalues
            model.QK.eigenvalues
            (model.W_E @ model.OV @ model.W_U).eigenvalues
            (model.W_E @ model.QK @ model.W_E.T).eigenvalues

    def python_tl():
        _readers._made.clear()
        headprint.fingerprint(model, backend="cpu")

    def python_ov_qk():
        _readers._made.clear()
        held = headprint.load(model)
        headprint.eigenvalues(held, "ov_residual", backend="cpu")
        headprint.eigenvalues(held, "qk", backend="cpu")

    runs = {
        "cli": lambda: subprocess.run([cli, "fingerprint", FOLDER, "--json", "--backend", "cpu"], check=True, capture_output=True),
        "cli-tl": lambda: subprocess.run([cli, "fingerprint", TL_FOLDER, "--json", "--backend", "cpu"], check=True, capture_output=True),
        "py-path": lambda: headprint.fingerprint(FOLDER, backend="cpu"),
        "py-tl": python_tl,
        "py-ov-qk": python_ov_qk,
        "tl-ov-qk": tl_eigenvalues,
        "tl-four": tl_four,
    }
    times = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, work in runs.items():
            times[name].append(timed(work))
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, values in times.items():
        print(f"{name:<10} median {medians[name]:7.3f} s   rounds {' '.join(f'{v:.3f}' for v in values)}")
    print(
        f"py-path / cli: {medians['py-path'] / medians['cli']:.2f}   py-tl / cli-tl: {medians['py-tl'] / medians['cli-tl']:.2f}"
        f"   py-ov-qk / tl-ov-qk: {medians['py-ov-qk'] / medians['tl-ov-qk']:.2f}"
        f"   py-tl / tl-four: {medians['py-tl'] / medians['tl-four']:.2f}"
    )
    print(json.dumps({"rounds": times, "torch_threads": torch.get_num_threads()}))


if __name__ == "__main__":
    sys.exit(main())
