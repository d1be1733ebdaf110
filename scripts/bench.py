#!/usr/bin/env python3
"""Side-by-side benchmark: headprint vs TransformerLens 3.9 on a GPT-2-Small-shaped model.

    .venv/bin/python scripts/bench.py            # prints a Markdown table for docs/benchmarks.md

Both sides start from the same files (bench-data/gpt2-small: config.json + model.safetensors,
random weights from `scripts/make_fixtures.py --gpt2-small`, made here if missing) and compute
the same results, each its own way:
  * fingerprint: load, fold LayerNorm, then the eigenvalues of the four circuits headprint
    reports for all 144 heads: QK and OV in the residual space, and the token-space circuits
    W_E QK W_E^T and W_E OV W_U (headprint also computes copying score, imaginary fraction, κ
    and departure from normality for each, which TL does not). A second row gives TL only the
    three circuits of its documentation (without W_E QK W_E^T) against headprint's four: a
    bound that favours TL;
  * probe: load, run the model on a 50-token random sequence repeated once (100 tokens) and
    read every head's attention (TL: run_with_cache).
TransformerLens loads as its users do (see load_tl); both sides fold LayerNorm. Both run on every
core (torch's default thread count; headprint's threads and faer's products): an earlier version gave
TransformerLens one thread, which doubled its time and the speed-up with it. Its times vary by
~25% from run to run on two cores, so it gets the best of TL_RUNS runs, as headprint the best of
RUNS. Wall and CPU time are both reported.
"""
import os

os.environ["HF_HUB_OFFLINE"] = "1"

import json
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "bench-data" / "gpt2-small"
BINARY = REPO / "target" / "release" / "headprint"
RUNS = 3
TL_RUNS = 2


def cpu_seconds():
    """CPU time used so far by this process and its finished children (user + system)."""
    import resource
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def best_of(fn, runs=RUNS):
    """Best wall time and best CPU time of `runs` runs (CPU time is fairer on a busy machine)."""
    walls, cpus = [], []
    for _ in range(runs):
        start, cpu = time.perf_counter(), cpu_seconds()
        fn()
        walls.append(time.perf_counter() - start)
        cpus.append(cpu_seconds() - cpu)
    return min(walls), min(cpus)


def load_tl():
    """As a TransformerLens user loads a local checkpoint: Hugging Face's `from_pretrained` from the
    folder, then TL's weight conversion and processing (fold_ln) into a HookedTransformer built
    without a random initialisation (`init_weights=False`, as TL's own `from_pretrained` does).
    TL 3.9's `HookedTransformer.from_pretrained` cannot be used offline with transformers 5 (its
    config conversion expects hub names), so the config is written from config.json by hand."""
    from transformers import GPT2LMHeadModel
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.pretrained.weight_conversions import convert_gpt2_weights

    hf = GPT2LMHeadModel.from_pretrained(str(MODEL))
    config = hf.config
    cfg = HookedTransformerConfig(
        n_layers=config.n_layer, d_model=config.n_embd, n_ctx=config.n_positions,
        d_head=config.n_embd // config.n_head, n_heads=config.n_head, d_mlp=4 * config.n_embd,
        d_vocab=config.vocab_size, act_fn="gelu_new", normalization_type="LN",
        eps=config.layer_norm_epsilon, original_architecture="GPT2LMHeadModel",
        default_prepend_bos=False, init_weights=False, device="cpu")
    model = HookedTransformer(cfg, move_to_device=False)
    model.load_and_process_state_dict(convert_gpt2_weights(hf, cfg), fold_ln=True,
                                      center_writing_weights=False, center_unembed=False)
    return model


def tl_fingerprint(token_qk=True):
    """The eigenvalues of every head's circuits, through TL's FactoredMatrix (its own way to
    these spectra): all four that headprint reports, or (token_qk=False) the three without
    W_E QK W_E^T."""
    model = load_tl()
    model.QK.eigenvalues
    model.OV.eigenvalues
    (model.W_E @ model.OV @ model.W_U).eigenvalues
    if token_qk:
        (model.W_E @ model.QK @ model.W_E.T).eigenvalues


def tl_probe():
    model = load_tl()
    generator = torch.Generator().manual_seed(0)
    first = torch.randint(1000, 10000, (1, 50), generator=generator)
    model.run_with_cache(torch.cat([first, first], dim=1))


def headprint(*args):
    subprocess.run([str(BINARY), *args, str(MODEL), "--json"], check=True, stdout=subprocess.DEVNULL)


def main():
    load_before = os.getloadavg()[0]
    if not (MODEL / "model.safetensors").exists():
        subprocess.run([sys.executable, str(REPO / "scripts" / "make_fixtures.py"), "--gpt2-small", str(MODEL)], check=True)
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=REPO, check=True)
    ours = best_of(lambda: headprint("fingerprint"))
    rows = [
        ("fingerprint, 144 heads: load + the same four circuits' spectra (QK, OV, QK and OV in token space)",
         ours, best_of(tl_fingerprint, runs=TL_RUNS)),
        ("fingerprint, TL given three circuits only (no token-space QK), headprint still four",
         ours, best_of(lambda: tl_fingerprint(token_qk=False), runs=TL_RUNS)),
        ("forward + induction probe, 2 x 50 tokens (load included)",
         best_of(lambda: headprint("probe", "--induction", "--len", "50", "--seed", "0", "--sequences", "1", "--no-bos")), best_of(tl_probe, runs=TL_RUNS)),
    ]
    print(f"1-minute load average before the runs: {load_before:.2f} ({os.cpu_count()} cores; torch threads: {torch.get_num_threads()})")
    print("| task | headprint wall (s) | TL 3.9 wall (s) | wall speed-up | headprint CPU (s) | TL CPU (s) | CPU speed-up |")
    print("|---|---|---|---|---|---|---|")
    for task, (ours, ours_cpu), (theirs, theirs_cpu) in rows:
        print(f"| {task} | {ours:.2f} | {theirs:.2f} | {theirs / ours:.1f}x | {ours_cpu:.2f} | {theirs_cpu:.2f} | {theirs_cpu / ours_cpu:.1f}x |")


if __name__ == "__main__":
    main()
