#!/usr/bin/env python3
"""Build headprint's test fixtures: tiny random models + reference outputs.

    .venv/bin/python scripts/make_fixtures.py                 # -> tests/fixtures/<name>/
    .venv/bin/python scripts/make_fixtures.py --only gptchar llama
    .venv/bin/python scripts/make_fixtures.py --gpt2-small [DIR]   # benchmark model (~500 MB),
                                                                   # default bench-data/gpt2-small

Deterministic (fixed seeds), offline (HF_HUB_OFFLINE=1; models are built from config objects,
never downloaded). Every fixture directory gets an expected.json with the reference values that
the Rust tests compare against (definitions: docs/methods.md).

Reference pipeline (independent of the Rust engine):
  * weights -> TransformerLens layout with TL 3.9's own converters (convert_gpt2_weights,
    convert_neox_weights, convert_llama_weights; a hand-written one for the character GPT);
  * "folded" = TL's ProcessWeights.fold_layer_norm (the fold_ln step; LN models: fold biases and
    centre the reading weights, RMS models: scale only), no centre_writing_weights, no
    centre_unembed.  It is run here in float64 (TL's load_and_process_state_dict would do it in
    float32); the result is checked against TL's own float32 load_and_process_state_dict(fold_ln=True,
    center_writing_weights=False, center_unembed=False);
  * "raw" = the weights exactly as stored;
  * eigenvalues from TL's FactoredMatrix.eigenvalues (float64), cross-checked against numpy
    eigvals of the full matrix; eigenvector condition and departure from normality from the full
    matrix with numpy (float64);
  * forward pass with the Hugging Face model (or the PyTorch gpt.py model), cross-checked against
    the TL model's patterns and logits.
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import warnings
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)
warnings.filterwarnings("ignore", category=DeprecationWarning)

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"

# Attention heads of these random models: W_Q and W_K are drawn with std 1/sqrt(fan_in) like the
# other matrices, then multiplied by QK_GAIN, giving attention logits with std ~ QK_GAIN^2, i.e.
# peaked but not one-hot patterns.  (Hugging Face's own init, std 0.02, would need ~4-8x.)
QK_GAIN = 1.6
EMB_STD = 0.5
INDUCTION_N = 8
INDUCTION_SEQUENCES = 4  # given first copies in the induction reference (the tool's default is 8 seeded)
PAIRS = [(2, 3), (3, 2), (0, 1), (5, 7), (-1, 0)]  # (i, j) for ov_token_logits; -1 = last token

# --------------------------------------------------------------------------------------------
# helpers


def randn(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float32)


def ln_weight(gen, n):
    return 1.0 + 0.3 * randn(gen, n)


def small_bias(gen, n):
    return 0.1 * randn(gen, n)


def flt(x):
    return float(x)


def cplx_list(lam):
    return [[flt(z.real), flt(z.imag)] for z in lam]


def canonical_sort(lam):
    """Sort by |lambda| descending; conjugate pairs (equal |lambda|) with Im > 0 first."""
    lam = np.asarray(lam, dtype=np.complex128)
    mags = np.abs(lam)
    top = mags.max() if mags.size and mags.max() > 0 else 1.0
    key_mag = -np.round(mags / top, 9)
    order = np.lexsort((-lam.imag, key_mag))
    return lam[order]


def match_error(a, b):
    """Max |a_i - b_pi(i)| over a greedy nearest matching, relative to max |a|."""
    a = list(np.asarray(a, dtype=np.complex128))
    b = list(np.asarray(b, dtype=np.complex128))
    assert len(a) == len(b)
    scale = max(max(abs(z) for z in a), 1e-300)
    worst = 0.0
    for z in sorted(a, key=lambda z: -abs(z)):
        j = int(np.argmin([abs(z - w) for w in b]))
        worst = max(worst, abs(z - b[j]))
        b.pop(j)
    return worst / scale


class Checks:
    def __init__(self):
        self.eig_rel = 0.0  # TL FactoredMatrix vs numpy eigvals of the full matrix
        self.trace_rel = 0.0  # sum(lambda) vs trace(BA)
        self.fold_vs_tl32 = 0.0  # float64 fold vs TL's float32 load_and_process_state_dict
        self.forward_pattern = 0.0  # HF vs TL
        self.forward_logits = 0.0
        self.f16_vs_f32 = 0.0  # |copying score (f16 weights) - copying score (f32)|
        self.kappa_small_rel = 0.0  # kappa on full M vs on the d_head x d_head R B Q
        self.fro2_trace_rel = 0.0  # ||M||_F^2 vs tr((A^T A)(B B^T))
        # 1 / smallest relative gap between a copy-fidelity candidate and the true token: the
        # Rust f32 ranks can only differ from these f64 ones where the gap is below ~1e-5
        self.copy_rank_gap_inv = 0.0

    def upd(self, name, v):
        setattr(self, name, max(getattr(self, name), float(v)))


CHECKS = Checks()

# --------------------------------------------------------------------------------------------
# fingerprints


def fingerprint(A, B, tl_eigs, d_head):
    """A: n x r, B: r x n (float64 numpy), M = A B.  tl_eigs: TL FactoredMatrix eigenvalues."""
    M = A @ B
    w, V = np.linalg.eig(M)
    order = np.argsort(-np.abs(w), kind="stable")[:d_head]
    w_top, V_top = w[order], V[:, order]
    lam = canonical_sort(tl_eigs)
    assert lam.shape == (d_head,), lam.shape
    CHECKS.upd("eig_rel", match_error(lam, w_top))
    tr = np.trace(B @ A)
    CHECKS.upd("trace_rel", abs(lam.sum() - tr) / np.abs(lam).sum())
    s = float(np.abs(lam).sum())
    fro2 = float(np.sum(M * M))
    dep = math.sqrt(max(0.0, fro2 - float(np.sum(np.abs(lam) ** 2)))) / math.sqrt(fro2)
    Q, R = np.linalg.qr(A, mode="reduced")
    C = Q.conj().T @ V_top
    C = C / np.linalg.norm(C, axis=0, keepdims=True)
    kappa = float(np.linalg.cond(C))
    # the same two numbers the way docs/methods.md#3-the-fingerprint-of-a-circuit computes them
    # (small matrices only)
    _, Vs = np.linalg.eig(R @ B @ Q)
    Vs = Vs / np.linalg.norm(Vs, axis=0, keepdims=True)
    CHECKS.upd("kappa_small_rel", abs(np.linalg.cond(Vs) - kappa) / kappa)
    CHECKS.upd("fro2_trace_rel", abs(np.trace((A.T @ A) @ (B @ B.T)) - fro2) / fro2)
    return {
        "eigenvalues": cplx_list(lam),
        "copying_score": flt(lam.real.sum() / s),
        "imaginary_fraction": flt(np.abs(lam.imag).sum() / s),
        "eigenvector_condition": kappa,
        "departure_from_normality": dep,
        "scale": s,
    }


def tl_eigs(fm, d_head):
    from transformer_lens import FactoredMatrix

    assert isinstance(fm, FactoredMatrix), type(fm)
    assert fm.mdim == d_head, f"factored matrix lost its factorisation (mdim {fm.mdim})"
    assert fm.A.dtype == torch.float64
    return fm.eigenvalues.detach().cpu().numpy()


def head_fingerprints(model):
    """All heads of a (float64) TL model: the circuits of docs/methods.md#2-circuits-of-one-head."""
    cfg = model.cfg
    dh = cfg.d_head
    W_E = model.W_E.detach().double()
    W_U = model.W_U.detach().double()
    W_Q, W_K, W_V, W_O = (t.detach().double() for t in (model.W_Q, model.W_K, model.W_V, model.W_O))
    QK, OV = model.QK, model.OV
    heads = []
    for l in range(cfg.n_layers):
        for h in range(cfg.n_heads):
            wq, wk, wv, wo = (t[l, h].numpy() for t in (W_Q, W_K, W_V, W_O))
            we, wu = W_E.numpy(), W_U.numpy()
            qk_fm = QK[l, h]
            ov_fm = OV[l, h]
            ovt_fm = W_E @ ov_fm @ W_U
            qkt_fm = W_E @ qk_fm @ W_E.T
            heads.append(
                {
                    "layer": l,
                    "head": h,
                    "qk": fingerprint(wq, wk.T, tl_eigs(qk_fm, dh), dh),
                    "ov": fingerprint(we @ wv, wo @ wu, tl_eigs(ovt_fm, dh), dh),
                    "ov_residual": fingerprint(wv, wo, tl_eigs(ov_fm, dh), dh),
                    "qk_token": fingerprint(we @ wq, wk.T @ we.T, tl_eigs(qkt_fm, dh), dh),
                }
            )
    return {"heads": heads}


def ov_token_logit_heads(cfg):
    """Three heads across layers (both ends of the head range; for GQA models they read
    different KV heads)."""
    last = cfg.n_layers - 1
    return [(0, 1 % cfg.n_heads), (last, 0), (last, cfg.n_heads - 1)]


def ov_token_logits(model, mode):
    """The token-space OV circuit read as logits for three heads of a (float64) TL model in
    one mode, from the full vocab x vocab matrix."""
    W_E = model.W_E.detach().double().numpy()
    W_U = model.W_U.detach().double().numpy()
    entries = []
    for layer, head in ov_token_logit_heads(model.cfg):
        wv = model.W_V[layer, head].detach().double().numpy()
        wo = model.W_O[layer, head].detach().double().numpy()
        M = (W_E @ wv) @ (wo @ W_U)
        vocab = M.shape[0]
        diag = np.diag(M)
        norm = diag / (np.linalg.norm(W_E, axis=1) * np.linalg.norm(W_U, axis=0))
        pairs = []
        for i, j in PAIRS:
            i, j = i % vocab, j % vocab
            assert i != j
            pairs.append([i, j, flt(M[i, j])])
        entries.append({
            "mode": mode,
            "head": f"L{layer}H{head}",
            "diagonal": [flt(x) for x in diag],
            "normalised_diagonal": [flt(x) for x in norm],
            "pairs": pairs,
            "row": {"token": 3, "values": [flt(x) for x in M[3]]},
        })
    return entries


# --------------------------------------------------------------------------------------------
# TransformerLens models


def tl_config(spec, dtype):
    from transformer_lens import HookedTransformerConfig

    # Our probes prepend the BOS id themselves and hand TL token tensors (never strings), so
    # this flag only documents the convention: prepend_bos=True, as TL's induction demo.
    return HookedTransformerConfig(dtype=dtype, device="cpu", default_prepend_bos=True, **spec)


def tl_model(spec, sd_tl, mode):
    """Float64 TL model with exact weights: mode 'raw' (as stored) or 'folded' (fold_ln in f64)."""
    from transformer_lens import HookedTransformer
    from transformer_lens.weight_processing import ProcessWeights

    cfg = tl_config(spec, torch.float64)
    model = HookedTransformer(cfg)
    sd = {k: v.detach().to(torch.float64).clone() for k, v in sd_tl.items()}
    sd = model.fill_missing_keys(sd)
    if mode == "folded":
        is_ln = cfg.normalization_type == "LN"
        sd = ProcessWeights.fold_layer_norm(sd, cfg, fold_biases=is_ln, center_weights=is_ln)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    params = {n for n, _ in model.named_parameters()}
    assert not unexpected, unexpected
    assert not (set(missing) & params), set(missing) & params
    model.eval()
    return model


def tl_model_reference_fold(spec, sd_tl):
    """TL's own pipeline in float32, to validate the float64 fold above."""
    from transformer_lens import HookedTransformer

    model = HookedTransformer(tl_config(spec, torch.float32))
    sd = {k: v.detach().to(torch.float32).clone() for k, v in sd_tl.items()}
    model.load_and_process_state_dict(
        sd, fold_ln=True, center_writing_weights=False, center_unembed=False
    )
    model.eval()
    return model


def compare_folds(m64, m32):
    for name in ("W_E", "W_U", "W_Q", "W_K", "W_V", "W_O"):
        a = getattr(m64, name).detach().double()
        b = getattr(m32, name).detach().double()
        err = ((a - b).abs().max() / a.abs().max()).item()
        assert err < 1e-5, (name, err)
        CHECKS.upd("fold_vs_tl32", err)


def tl_forward(model, tokens):
    toks = torch.tensor([tokens])
    logits, cache = model.run_with_cache(toks)
    pats = torch.stack([cache["pattern", l][0] for l in range(model.cfg.n_layers)])
    return logits[0].detach().double().numpy(), pats.detach().double().numpy()


# --------------------------------------------------------------------------------------------
# forward / induction references


def forward_block(run, tokens, tl_models):
    logits, pats = run(tokens)  # [T, V], [L, H, T, T]
    for m in tl_models:
        tl_logits, tl_pats = tl_forward(m, tokens)
        ep = np.abs(tl_pats - pats).max()
        el = np.abs(tl_logits - logits).max()
        assert ep < 1e-4 and el < 1e-4, (ep, el)
        CHECKS.upd("forward_pattern", ep)
        CHECKS.upd("forward_logits", el)
    T = len(tokens)
    assert np.allclose(pats.sum(-1), 1.0, atol=1e-5)
    assert np.all(np.triu(pats, 1)[..., :T, :T] == 0)
    return logits, pats


def ordinary_ids(rows, tok=None, config_specials=()):
    """Ids random probe tokens come from: the tokenizer's tokens below the embedding's row count,
    minus special tokens and the ids config.json names bos/eos/pad (all rows without a tokenizer)."""
    if tok is None:
        known = range(rows)
        specials = set()
    else:
        known = [i for i in tok.get_vocab(with_added_tokens=True).values() if i < rows]
        specials = {i for i, t in tok.get_added_tokens_decoder().items() if t.special}
    excluded = specials | set(config_specials)
    return sorted(i for i in set(known) if i not in excluded)


def spread(values):
    v = np.asarray(values, dtype=np.float64)
    return {"std": flt(v.std()), "min": flt(v.min()), "max": flt(v.max())}


def copy_fidelity_ranks(tl_folded, tokens, first, second_copy):
    """Per head, per second-copy position t with a next token: the rank of tokens[t+1] among the
    first copy's distinct tokens by the head's direct logit contribution at t, from
    TransformerLens: stack_head_results -> apply_ln_to_stack (centre for LN, divide by
    ln_final's cached scale at t) -> @ W_U of the fold_ln model (ln_final weight folded in).
    Rank 1 = strictly above every other candidate.  Also ln_final's scale at every position, and
    the smallest |gap| between the true
    token's value and the best other candidate, relative to the largest |value| at t."""
    _, cache = tl_folded.run_with_cache(torch.tensor([tokens]))
    results = cache.stack_head_results(layer=-1, pos_slice=None)  # [heads, 1, pos, d_model]
    contrib = (cache.apply_ln_to_stack(results, layer=-1, pos_slice=None) @ tl_folded.W_U)[:, 0]
    contrib = contrib.detach().double().numpy()  # [heads, pos, vocab]
    scale = cache["ln_final.hook_scale"][0, :, 0].detach().double().numpy()
    cands = sorted(set(first))
    ranks, min_gap = [], float("inf")
    for h in range(contrib.shape[0]):
        row = []
        for t in range(second_copy, len(tokens) - 1):
            vals = contrib[h, t, cands]
            truth = cands.index(tokens[t + 1])
            others = np.delete(vals, truth)
            row.append(int(1 + np.sum(others >= vals[truth])))
            if others.size:
                min_gap = min(min_gap, abs(vals[truth] - others.max()) / np.abs(vals).max())
        ranks.append(row)
    return ranks, min_gap, scale


def induction_block(run, vocab, tl_models, ordinary=None, bos=None):
    """INDUCTION_SEQUENCES first copies of n tokens drawn here (numpy, seed 0) from `ordinary`,
    each run as [BOS] + copy + copy.  Attention scores: means over the n second-copy positions;
    prefix-copy accuracy and copy fidelity over the n - 1 of them that have a next token.  The
    tool's means and spreads (population std, min, max) over the sequences are recorded."""
    n = INDUCTION_N
    ordinary = list(range(vocab)) if ordinary is None else ordinary
    rng = np.random.default_rng(0)
    tl_folded = tl_models[0]
    sequences = []
    for _ in range(INDUCTION_SEQUENCES):
        first = [int(x) for x in rng.choice(ordinary, n)]
        tokens = ([bos] if bos is not None else []) + first + first
        logits, pats = forward_block(run, tokens, tl_models)
        second = len(tokens) - n
        L, H = pats.shape[:2]
        ts = range(second, second + n)
        qs = range(second, len(tokens) - 1)
        ranks, gap, final_scale = copy_fidelity_ranks(tl_folded, tokens, first, second)
        CHECKS.upd("copy_rank_gap_inv", 1.0 / max(gap, 1e-300))
        heads = []
        for l in range(L):
            for h in range(H):
                A = pats[l, h]
                r = ranks[l * H + h]
                heads.append(
                    {
                        "layer": l,
                        "head": h,
                        "induction_score": flt(np.mean([A[t, t - n + 1] for t in ts])),
                        "previous_token_score": flt(np.mean([A[t, t - 1] for t in ts])),
                        "duplicate_token_score": flt(np.mean([A[t, t - n] for t in ts])),
                        "copy_fidelity": flt(np.mean([x == 1 for x in r])),
                        "copy_ranks": r,
                    }
                )
        acc = np.mean([int(np.argmax(logits[t]) == tokens[t + 1]) for t in qs])
        sequences.append({"first_copy": first, "tokens": tokens, "heads": heads, "prefix_copy_accuracy": flt(acc),
                          "final_scale": [flt(x) for x in final_scale]})
    metrics = ("induction_score", "previous_token_score", "duplicate_token_score", "copy_fidelity")
    mean_heads, spread_heads = [], []
    for i, h0 in enumerate(sequences[0]["heads"]):
        per = {m: [s["heads"][i][m] for s in sequences] for m in metrics}
        mean_heads.append({"layer": h0["layer"], "head": h0["head"], **{m: flt(np.mean(per[m])) for m in metrics}})
        spread_heads.append({m: spread(per[m]) for m in metrics})
    accs = [s["prefix_copy_accuracy"] for s in sequences]
    return {
        "bos": bos,
        "first_copy": sequences[0]["first_copy"],
        "sequences": sequences,
        "heads": mean_heads,
        "heads_spread": spread_heads,
        "prefix_copy_accuracy": flt(np.mean(accs)),
        "prefix_copy_accuracy_spread": spread(accs),
    }


def peakedness(pats):
    """Mean of the row maxima of the attention patterns over rows with >= 4 keys."""
    T = pats.shape[-1]
    return float(pats[..., 3:, :].max(-1).mean()) if T > 3 else float("nan")


def build_expected(family, config, run, sd_tl, spec, fwd_tokens, bos=None, ordinary=None):
    """bos: {"id", "token", "source"} of the model's BOS (None for character models); it is
    prepended to the forward tokens and to every induction sequence.  ordinary: the ids random
    probe tokens come from."""
    folded = tl_model(spec, sd_tl, "folded")
    raw = tl_model(spec, sd_tl, "raw")
    compare_folds(folded, tl_model_reference_fold(spec, sd_tl))
    bos_id = bos["id"] if bos else None
    ordinary = list(range(config["vocab"])) if ordinary is None else ordinary
    fwd_tokens = ([bos_id] if bos else []) + list(fwd_tokens)
    logits, pats = forward_block(run, fwd_tokens, [folded, raw])
    exp = {
        "family": family,
        "config": config,
        "folded": head_fingerprints(folded),
        "raw": head_fingerprints(raw),
        "ov_token_logits": ov_token_logits(folded, "folded") + ov_token_logits(raw, "raw"),
        "forward": {
            "tokens": [int(t) for t in fwd_tokens],
            "patterns": pats.tolist(),
            "logits": logits.tolist(),
        },
        "induction": induction_block(run, config["vocab"], [folded], ordinary, bos_id),
        "bos": bos,
        "ordinary_ids": ordinary,
        "notes": NOTES,
    }
    return exp, peakedness(pats)


NOTES = {
    "circuits": "qk = W_Q W_K^T (residual, unscaled); ov = W_E W_V W_O W_U (token space); "
    "ov_residual = W_V W_O; qk_token = W_E W_Q W_K^T W_E^T (token space; W_E is never folded, "
    "W_Q/W_K are folded like qk). Row-vector convention, "
    "TransformerLens layout; GQA: query head h uses KV head h // (heads / kv_heads).",
    "modes": "folded = TL fold_ln (LN: scale + fold biases + centre W_Q/W_K/W_V and W_U over "
    "d_model; RMS: scale only), no centre_writing_weights, no centre_unembed, computed in float64; "
    "raw = weights as stored. W_E is never changed; in folded mode W_U is diag(ln_f.w) W_U "
    "(centred for LN), so a tied unembedding is no longer tied.",
    "eigenvalues": "TL FactoredMatrix.eigenvalues in float64, sorted by |lambda| desc, conjugate "
    "pairs Im>0 first; eigenvector_condition and departure_from_normality from the full matrix.",
    "forward": "patterns [layer][head][query][key] and logits [pos][vocab] from the HF / PyTorch "
    "model in float32; tokens start with the BOS where the model has one (prepend_bos=True).",
    "induction": "each first copy run as [BOS] + copy + copy (BOS where the model has one); with "
    "s = start of the second copy, attention scores average over t = s..s+n-1, "
    "prefix_copy_accuracy and copy_fidelity over t = s..len-2 (argmax logits[t] == tokens[t+1]; "
    "rank 1 of tokens[t+1] among the first copy's distinct tokens by the head's direct logit "
    "contribution, TL stack_head_results -> apply_ln_to_stack -> @ W_U of the fold_ln model). "
    "heads / prefix_copy_accuracy: means over the sequences; *_spread: population std, min, max.",
    "ov_token_logits": "for each mode and three heads: entries of W_E W_V W_O W_U from the full "
    "matrix; normalised by ||W_E[i]|| ||W_U[:, i]|| with that mode's W_U.",
    "parameters": "Hugging Face num_parameters() (gpt.py: the module's own parameters); a tied "
    "unembedding counts once.",
}


def parameter_count(model):
    """Parameters as the model itself counts them: Hugging Face's num_parameters(), or the
    PyTorch module's own (unique) parameters for gpt.py. A tied unembedding counts once."""
    n = model.num_parameters() if hasattr(model, "num_parameters") else sum(p.numel() for p in model.parameters())
    assert n == sum(p.numel() for p in model.parameters()), "num_parameters counts shared tensors once"
    return int(n)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, allow_nan=False)
        f.write("\n")


def fresh_dir(name):
    d = FIXTURES / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


# --------------------------------------------------------------------------------------------
# 0. hostile token texts: gptchar's weights with a vocabulary, and a tokenizer.json, of strings
#    that would be markup, script, XML-breaking, CSV-breaking or text-reordering if the page
#    wrote them unescaped (tests/hostile_tokens.rs and the browser test load these files).

# The same list as HOSTILE in tests/hostile_tokens.rs (checked there).
HOSTILE_VOCAB = ["<img src=x onerror=window.__pwned=1>", "</script>", "]]>", '"', "'", "\u202eevil", "a\u0000b",
                 "&amp;", "<![CDATA[x", "\uffff", "<!--", " ", "\u2066x"]
# Words a prompt can hold (WordLevel on whitespace): ids 0..12, all within gptchar's 13 rows.
HOSTILE_WORDS = ["[UNK]", "<script>window.__pwned=3</script>", "\"><img/src=x/onerror=window.__pwned=4>",
                 "</title><svg/onload=window.__pwned=5>", "]]><!--", "<style>*{display:none!important}</style>",
                 "'\"`", "\u202eevil\u202c", "nul\u0000byte", "=cmd|'/C calc'!A0", "a,b;\"c\"",
                 "&lt;&amp;", "\u2066rtl\u2069"]


def safetensors_with_vocab(src, vocab_json):
    """`src`'s bytes with the header's __metadata__.vocab replaced by the text `vocab_json`."""
    data = src.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    header["__metadata__"]["vocab"] = "VOCAB"
    text = json.dumps(header).replace('"VOCAB"', json.dumps(vocab_json))
    text += " " * ((8 - len(text) % 8) % 8)
    return len(text).to_bytes(8, "little") + text.encode() + data[8 + n:]


def make_hostile():
    d = fresh_dir("hostile")
    src = FIXTURES / "gptchar" / "model.safetensors"
    (d / "model.safetensors").write_bytes(safetensors_with_vocab(src, json.dumps(HOSTILE_VOCAB)))
    # JSON can spell a lone surrogate; no Rust (or UTF-8) string can hold one: a clear error.
    lone = json.dumps(HOSTILE_VOCAB).replace('"]]>"', '"\\ud800"')
    (d / "lone-surrogate.safetensors").write_bytes(safetensors_with_vocab(src, lone))
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(HOSTILE_WORDS)}, "unk_token": "[UNK]"},
    }
    write_json(d / "tokenizer.json", tokenizer)
    return d, 0.0


# --------------------------------------------------------------------------------------------
# 1. character GPT, the model of Karpathy's "Let's build GPT" gpt.py


class Head(nn.Module):
    def __init__(self, n_embd, head_size, block_size):
        super().__init__()
        self.key = nn.Linear(n_embd, head_size, bias=False)
        self.query = nn.Linear(n_embd, head_size, bias=False)
        self.value = nn.Linear(n_embd, head_size, bias=False)
        self.register_buffer("tril", torch.tril(torch.ones(block_size, block_size)))
        self.last_pattern = None

    def forward(self, x):
        B, T, C = x.shape
        k = self.key(x)
        q = self.query(x)
        wei = q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5
        wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
        wei = F.softmax(wei, dim=-1)
        self.last_pattern = wei
        v = self.value(x)
        return wei @ v


class MultiHeadAttention(nn.Module):
    def __init__(self, n_embd, num_heads, head_size, block_size):
        super().__init__()
        self.heads = nn.ModuleList([Head(n_embd, head_size, block_size) for _ in range(num_heads)])
        self.proj = nn.Linear(head_size * num_heads, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([h(x) for h in self.heads], dim=-1))


class FeedFoward(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.ReLU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        return self.net(x)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        head_size = n_embd // n_head
        self.sa = MultiHeadAttention(n_embd, n_head, head_size, block_size)
        self.ffwd = FeedFoward(n_embd)
        self.ln1 = nn.LayerNorm(n_embd)
        self.ln2 = nn.LayerNorm(n_embd)

    def forward(self, x):
        x = x + self.sa(self.ln1(x))
        x = x + self.ffwd(self.ln2(x))
        return x


class GPTLanguageModel(nn.Module):
    def __init__(self, vocab_size, n_embd, n_head, n_layer, block_size):
        super().__init__()
        self.token_embedding_table = nn.Embedding(vocab_size, n_embd)
        self.position_embedding_table = nn.Embedding(block_size, n_embd)
        self.blocks = nn.Sequential(*[Block(n_embd, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size)

    def forward(self, idx):
        B, T = idx.shape
        tok_emb = self.token_embedding_table(idx)
        pos_emb = self.position_embedding_table(torch.arange(T, device=idx.device))
        x = tok_emb + pos_emb
        x = self.blocks(x)
        x = self.ln_f(x)
        return self.lm_head(x)


GPTCHAR = dict(vocab=[" ", '"', "(", ")", "a", "b", "c", "d", "e", "f", "g", "h", "i"],
               n_embd=16, n_head=2, n_layer=2, block_size=24)


def gptchar_randomise(model, gen):
    sd = model.state_dict()
    new = {}
    for k, v in sd.items():
        if k.endswith(".tril"):
            new[k] = v
        elif "embedding_table" in k:
            new[k] = EMB_STD * randn(gen, *v.shape)
        elif ".ln" in k or k.startswith("ln_f"):
            new[k] = ln_weight(gen, v.shape[0]) if k.endswith("weight") else small_bias(gen, v.shape[0])
        elif k.endswith(".bias"):
            new[k] = small_bias(gen, v.shape[0])
        else:
            w = randn(gen, *v.shape) / math.sqrt(v.shape[1])
            if k.endswith(("query.weight", "key.weight")):
                w = w * QK_GAIN
            new[k] = w
    model.load_state_dict(new)


def gptchar_to_tl(sd, n_layer, n_head):
    """gpt.py state dict -> TransformerLens state dict (hand-written converter)."""
    d = sd["token_embedding_table.weight"].shape[1]
    dh = d // n_head
    out = {
        "embed.W_E": sd["token_embedding_table.weight"],
        "pos_embed.W_pos": sd["position_embedding_table.weight"],
    }
    for l in range(n_layer):
        p = f"blocks.{l}."
        out[p + "ln1.w"], out[p + "ln1.b"] = sd[p + "ln1.weight"], sd[p + "ln1.bias"]
        out[p + "ln2.w"], out[p + "ln2.b"] = sd[p + "ln2.weight"], sd[p + "ln2.bias"]
        for tl_name, name in (("W_Q", "query"), ("W_K", "key"), ("W_V", "value")):
            out[p + "attn." + tl_name] = torch.stack(
                [sd[f"{p}sa.heads.{h}.{name}.weight"].T for h in range(n_head)]
            )
        for b in ("b_Q", "b_K", "b_V"):
            out[p + "attn." + b] = torch.zeros(n_head, dh)
        out[p + "attn.W_O"] = sd[p + "sa.proj.weight"].T.reshape(n_head, dh, d)
        out[p + "attn.b_O"] = sd[p + "sa.proj.bias"]
        out[p + "mlp.W_in"] = sd[p + "ffwd.net.0.weight"].T
        out[p + "mlp.b_in"] = sd[p + "ffwd.net.0.bias"]
        out[p + "mlp.W_out"] = sd[p + "ffwd.net.2.weight"].T
        out[p + "mlp.b_out"] = sd[p + "ffwd.net.2.bias"]
    out["ln_final.w"], out["ln_final.b"] = sd["ln_f.weight"], sd["ln_f.bias"]
    out["unembed.W_U"] = sd["lm_head.weight"].T
    out["unembed.b_U"] = sd["lm_head.bias"]
    return out


def make_gptchar():
    from safetensors.torch import load_file, save_file

    c = GPTCHAR
    gen = torch.Generator().manual_seed(1001)
    torch.manual_seed(1001)
    V = len(c["vocab"])
    model = GPTLanguageModel(V, c["n_embd"], c["n_head"], c["n_layer"], c["block_size"])
    gptchar_randomise(model, gen)
    model.eval()
    d = fresh_dir("gptchar")
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    meta = {"vocab": json.dumps(c["vocab"])}
    save_file(sd, str(d / "model.safetensors"), metadata=meta)
    # Reduced-precision copies live in subfolders: a folder's .safetensors files are one model.
    for sub, dtype in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        (d / sub).mkdir()
        save_file({k: v.to(dtype) for k, v in sd.items()}, str(d / sub / "model.safetensors"), metadata=meta)
    back = load_file(str(d / "model.safetensors"))
    assert all(torch.equal(back[k], sd[k]) for k in sd)

    spec = dict(n_layers=c["n_layer"], d_model=c["n_embd"], n_ctx=c["block_size"],
                d_head=c["n_embd"] // c["n_head"], n_heads=c["n_head"], d_mlp=4 * c["n_embd"],
                d_vocab=V, act_fn="relu", normalization_type="LN",
                positional_embedding_type="standard", eps=1e-5)
    config = {"layers": c["n_layer"], "heads": c["n_head"], "kv_heads": c["n_head"],
              "d_model": c["n_embd"], "d_head": c["n_embd"] // c["n_head"], "vocab": V,
              "n_ctx": c["block_size"]}

    def run(tokens):
        with torch.no_grad():
            logits = model(torch.tensor([tokens]))[0]
        pats = [[h.last_pattern[0] for h in blk.sa.heads] for blk in model.blocks]
        pats = torch.stack([torch.stack(p) for p in pats])
        return logits.double().numpy(), pats.double().numpy()

    text = 'a "b(c)" d(e)'
    stoi = {ch: i for i, ch in enumerate(c["vocab"])}
    fwd = [stoi[ch] for ch in text]
    exp, peak = build_expected("gptchar", config, run, gptchar_to_tl(sd, c["n_layer"], c["n_head"]),
                               spec, fwd)
    exp["forward"]["text"] = text
    exp["vocab"] = c["vocab"]
    exp["parameters"] = parameter_count(model)
    # fingerprints of the float16 / bfloat16 copies (weights rounded, then f64 as usual)
    for key, dt, mode in (("folded_f16", torch.float16, "folded"), ("folded_bf16", torch.bfloat16, "folded"),
                          ("raw_f16", torch.float16, "raw"), ("raw_bf16", torch.bfloat16, "raw")):
        sd_r = {k: v.to(dt).to(torch.float32) for k, v in sd.items()}
        m = tl_model(spec, gptchar_to_tl(sd_r, c["n_layer"], c["n_head"]), mode)
        exp[key] = head_fingerprints(m)
        if key == "folded_f16":
            for a, b in zip(exp["folded"]["heads"], exp[key]["heads"]):
                for circ in ("qk", "ov", "ov_residual"):
                    CHECKS.upd("f16_vs_f32", abs(a[circ]["copying_score"] - b[circ]["copying_score"]))
    write_json(d / "expected.json", exp)
    return d, peak


# --------------------------------------------------------------------------------------------
# 2./3. GPT-2 (Hugging Face) and the same weights in nanoGPT's layout

TOKENIZER_SENTENCES = [
    "the cat sat on the mat",
    "the dog sat on the log",
    "a cat and a dog sat on a mat",
    "the cat and the dog ran to the log",
    "a dog ran and a cat sat",
    "on the mat the cat sat and the dog ran",
    "the red hat is on the bed",
    "a big dog had a red ball",
    "the sun is hot and the cat is not",
    "she said the dog ate the bread",
    "he hid the hat in the shed",
]
TOKENIZER_SAMPLE = "the red dog hid the ball in the shed!"  # "!" is not in the alphabet -> [UNK]


def train_tokenizer(vocab_size, special_tokens=("[UNK]",)):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(special_tokens), show_progress=False)
    tok.train_from_iterator(TOKENIZER_SENTENCES, trainer)
    assert tok.get_vocab_size() == vocab_size, tok.get_vocab_size()
    return tok


def hf_randomise(model, gen, conv1d):
    """Re-draw every parameter (HF's init is std 0.02 everywhere, too flat to test anything)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                is_norm = "norm" in name or ".ln_" in name or "ln_f" in name or name.endswith("_layernorm.weight")
                if is_norm and name.endswith("weight"):
                    p.copy_(ln_weight(gen, p.shape[0]))
                else:
                    p.copy_(small_bias(gen, p.shape[0]))
            elif any(s in name for s in ("wte", "wpe", "embed_in", "embed_tokens")):
                p.copy_(EMB_STD * randn(gen, *p.shape))
            else:
                fan_in = p.shape[0] if conv1d else p.shape[1]
                p.copy_(randn(gen, *p.shape) / math.sqrt(fan_in))


# GPT-2's BOS (= EOS) is its one special token <|endoftext|>; the fixture's tokenizer has it too,
# as id 1 after [UNK] (the trainer numbers special tokens first, in this order).
GPT2_SPECIALS = ("[UNK]", "<|endoftext|>")
GPT2_EOT = 1


def gpt2_config():
    from transformers import GPT2Config

    return GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=40, n_positions=32,
                      bos_token_id=GPT2_EOT, eos_token_id=GPT2_EOT, attn_implementation="eager")


def hf_run(model):
    def run(tokens):
        with torch.no_grad():
            out = model(torch.tensor([tokens]), output_attentions=True)
        pats = torch.stack([a[0] for a in out.attentions])
        return out.logits[0].double().numpy(), pats.double().numpy()

    return run


def hf_config_dict(model):
    return model.config.to_dict()


def make_gpt2():
    from safetensors.torch import load_file, save_file
    from transformers import GPT2LMHeadModel
    from transformer_lens.pretrained.weight_conversions import convert_gpt2_weights

    torch.manual_seed(2002)
    gen = torch.Generator().manual_seed(2002)
    cfg = gpt2_config()
    model = GPT2LMHeadModel(cfg)
    hf_randomise(model, gen, conv1d=True)
    n = cfg.n_embd
    with torch.no_grad():
        for blk in model.transformer.h:
            blk.attn.c_attn.weight[:, : 2 * n] *= QK_GAIN  # Q and K columns (Conv1D: in x out)
    model.eval()
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()

    d = fresh_dir("gpt2")
    model.save_pretrained(str(d), safe_serialization=True)
    tok = train_tokenizer(cfg.vocab_size, GPT2_SPECIALS)
    assert tok.token_to_id("<|endoftext|>") == GPT2_EOT
    tok.save(str(d / "tokenizer.json"))
    sample_ids = tok.encode(TOKENIZER_SAMPLE).ids

    # reload check
    re = GPT2LMHeadModel.from_pretrained(str(d), attn_implementation="eager")
    for k, v in model.state_dict().items():
        assert torch.equal(re.state_dict()[k], v), k
    stored = load_file(str(d / "model.safetensors"))

    spec = dict(n_layers=cfg.n_layer, d_model=n, n_ctx=cfg.n_positions, d_head=n // cfg.n_head,
                n_heads=cfg.n_head, d_mlp=4 * n, d_vocab=cfg.vocab_size, act_fn="gelu_new",
                normalization_type="LN", positional_embedding_type="standard",
                eps=cfg.layer_norm_epsilon, original_architecture="GPT2LMHeadModel")
    config = {"layers": cfg.n_layer, "heads": cfg.n_head, "kv_heads": cfg.n_head, "d_model": n,
              "d_head": n // cfg.n_head, "vocab": cfg.vocab_size, "n_ctx": cfg.n_positions}
    sd_tl = convert_gpt2_weights(model, tl_config(spec, torch.float32))
    fwd = sample_ids if 10 <= len(sample_ids) <= 16 else None
    assert fwd is not None, sample_ids
    bos = {"id": GPT2_EOT, "token": "<|endoftext|>", "source": "config.json bos_token_id"}
    exp, peak = build_expected("gpt2", config, hf_run(model), sd_tl, spec, fwd, bos,
                               ordinary_ids(cfg.vocab_size, tok, [GPT2_EOT]))
    exp["tokenizer"] = {"text": TOKENIZER_SAMPLE, "ids": [int(i) for i in sample_ids]}
    exp["parameters"] = parameter_count(model)
    exp["forward"]["text"] = TOKENIZER_SAMPLE
    write_json(d / "expected.json", exp)

    # nanoGPT layout: nn.Linear (out x in), transformer. prefix, lm_head.weight = wte (a copy)
    dn = fresh_dir("gpt2-nanogpt")
    sd = model.state_dict()
    nano = {}
    for k, v in sd.items():
        if k == "lm_head.weight":
            continue
        if not k.startswith("transformer."):
            raise AssertionError(k)
        if k.endswith(".weight") and v.ndim == 2 and (".attn." in k or ".mlp." in k):
            v = v.T
        nano[k] = v.detach().clone().contiguous()
    nano["lm_head.weight"] = sd["transformer.wte.weight"].detach().clone().contiguous()
    save_file(nano, str(dn / "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(d / "config.json", dn / "config.json")
    exp_n = dict(exp)
    exp_n.pop("tokenizer")
    # no tokenizer beside these weights: the BOS is named by config.json alone (shown as #id),
    # and random probe tokens come from every row except config.json's special ids
    exp_n["bos"] = dict(bos, token=f"#{GPT2_EOT}")
    exp_n["ordinary_ids"] = ordinary_ids(cfg.vocab_size, None, [GPT2_EOT])
    write_json(dn / "expected.json", exp_n)
    back = load_file(str(dn / "model.safetensors"))
    assert set(back) == set(sd), set(back) ^ set(sd)
    for k, v in sd.items():
        b = back[k]
        if k.endswith(".weight") and v.ndim == 2 and (".attn." in k or ".mlp." in k):
            b = b.T
        assert torch.equal(b, v), k
    return (d, peak), (dn, peak), sorted(stored)


# --------------------------------------------------------------------------------------------
# 4. Pythia / GPT-NeoX


PYTHIA_TOKENIZER_SIZE = 44


def make_pythia():
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
    from transformer_lens.pretrained.weight_conversions import convert_neox_weights

    torch.manual_seed(3003)
    gen = torch.Generator().manual_seed(3003)
    cfg = GPTNeoXConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=2,
                        intermediate_size=64, vocab_size=50, max_position_embeddings=64,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                         "partial_rotary_factor": 0.25},
                        use_parallel_residual=True, tie_word_embeddings=False,
                        bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    model = GPTNeoXForCausalLM(cfg)
    hf_randomise(model, gen, conv1d=False)
    H, dh = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
    with torch.no_grad():
        for layer in model.gpt_neox.layers:
            qkv = layer.attention.query_key_value
            w = qkv.weight.view(H, 3, dh, cfg.hidden_size)  # rows: (head, q/k/v, d_head)
            w[:, 0] *= QK_GAIN
            w[:, 1] *= QK_GAIN
            b = qkv.bias.view(H, 3, dh)
            b[:, 0] = 0.5 * randn(gen, H, dh)
            b[:, 1] = 3.0 * randn(gen, H, dh)  # large b_K
            b[:, 2] = 0.3 * randn(gen, H, dh)
    model.eval()
    d = fresh_dir("pythia")
    model.save_pretrained(str(d), safe_serialization=True)
    re = GPTNeoXForCausalLM.from_pretrained(str(d), attn_implementation="eager")
    for k, v in model.state_dict().items():
        assert torch.equal(re.state_dict()[k], v), k
    saved_cfg = json.loads((d / "config.json").read_text())
    rotary_key = ("rope_parameters.partial_rotary_factor"
                  if "partial_rotary_factor" in saved_cfg.get("rope_parameters", {}) else
                  "rotary_pct" if "rotary_pct" in saved_cfg else None)
    assert rotary_key is not None, saved_cfg

    rotary_dim = int(dh * 0.25)
    spec = dict(n_layers=cfg.num_hidden_layers, d_model=cfg.hidden_size, n_ctx=64, d_head=dh,
                n_heads=H, d_mlp=cfg.intermediate_size, d_vocab=cfg.vocab_size, act_fn="gelu",
                normalization_type="LN", positional_embedding_type="rotary", rotary_dim=rotary_dim,
                rotary_base=10000, rotary_adjacent_pairs=False, parallel_attn_mlp=True,
                eps=cfg.layer_norm_eps, original_architecture="GPTNeoXForCausalLM")
    config = {"layers": cfg.num_hidden_layers, "heads": H, "kv_heads": H, "d_model": cfg.hidden_size,
              "d_head": dh, "vocab": cfg.vocab_size, "n_ctx": 64, "rotary_dim": rotary_dim}
    sd_tl = convert_neox_weights(model, tl_config(spec, torch.float32))
    # As Pythia's: <|endoftext|> (id 0) is BOS and EOS, and the tokenizer knows fewer tokens
    # (PYTHIA_TOKENIZER_SIZE) than the embedding has rows (50): rows past it are padding.
    tok = train_tokenizer(PYTHIA_TOKENIZER_SIZE, ("<|endoftext|>", "<|padding|>", "[UNK]"))
    assert tok.token_to_id("<|endoftext|>") == 0 and tok.get_vocab_size() < cfg.vocab_size
    tok.save(str(d / "tokenizer.json"))
    fwd = [int(x) for x in np.random.default_rng(3).integers(0, cfg.vocab_size, 14)]
    bos = {"id": 0, "token": "<|endoftext|>", "source": "config.json bos_token_id"}
    exp, peak = build_expected("neox", config, hf_run(model), sd_tl, spec, fwd, bos,
                               ordinary_ids(cfg.vocab_size, tok, [0]))
    exp["parameters"] = parameter_count(model)
    write_json(d / "expected.json", exp)
    return d, peak, rotary_key


# --------------------------------------------------------------------------------------------
# 5. Llama (GQA, RMSNorm, SwiGLU), sharded


def make_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformer_lens.pretrained.weight_conversions import convert_llama_weights

    torch.manual_seed(4004)
    gen = torch.Generator().manual_seed(4004)
    cfg = LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                      num_hidden_layers=2, intermediate_size=48, vocab_size=50,
                      max_position_embeddings=64, rms_norm_eps=1e-5,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                      tie_word_embeddings=False, attn_implementation="eager")
    model = LlamaForCausalLM(cfg)
    hf_randomise(model, gen, conv1d=False)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight *= QK_GAIN
            layer.self_attn.k_proj.weight *= QK_GAIN
    model.eval()
    d = fresh_dir("llama")
    model.save_pretrained(str(d), safe_serialization=True, max_shard_size="24KB")
    shards = sorted(p.name for p in d.glob("model-*.safetensors"))
    assert (d / "model.safetensors.index.json").exists() and len(shards) >= 2, shards
    re = LlamaForCausalLM.from_pretrained(str(d), attn_implementation="eager")
    for k, v in model.state_dict().items():
        assert torch.equal(re.state_dict()[k], v), k

    H, KV = cfg.num_attention_heads, cfg.num_key_value_heads
    dh = cfg.hidden_size // H
    spec = dict(n_layers=cfg.num_hidden_layers, d_model=cfg.hidden_size, n_ctx=64, d_head=dh,
                n_heads=H, n_key_value_heads=KV, d_mlp=cfg.intermediate_size,
                d_vocab=cfg.vocab_size, act_fn="silu", gated_mlp=True, normalization_type="RMS",
                final_rms=True, positional_embedding_type="rotary", rotary_dim=dh,
                rotary_base=10000, rotary_adjacent_pairs=False, eps=cfg.rms_norm_eps,
                original_architecture="LlamaForCausalLM")
    config = {"layers": cfg.num_hidden_layers, "heads": H, "kv_heads": KV, "d_model": cfg.hidden_size,
              "d_head": dh, "vocab": cfg.vocab_size, "n_ctx": 64, "rotary_dim": dh}
    sd_tl = convert_llama_weights(model, tl_config(spec, torch.float32))
    fwd = [int(x) for x in np.random.default_rng(4).integers(0, cfg.vocab_size, 16)]
    # No tokenizer: the BOS is config.json's bos_token_id (Llama's <s> = 1), shown as #1.
    assert (cfg.bos_token_id, cfg.eos_token_id) == (1, 2)
    bos = {"id": 1, "token": "#1", "source": "config.json bos_token_id"}
    exp, peak = build_expected("llama", config, hf_run(model), sd_tl, spec, fwd, bos,
                               ordinary_ids(cfg.vocab_size, None, [1, 2]))
    exp["parameters"] = parameter_count(model)
    # GQA: TL repeats KV heads with repeat_interleave, query head h reads KV head h // (H // KV)
    m = tl_model(spec, sd_tl, "raw")
    for l, layer in enumerate(model.model.layers):
        wk = layer.self_attn.k_proj.weight.detach().double()  # [KV * dh, d_model]
        for h in range(H):
            kv = h // (H // KV)
            assert torch.equal(m.W_K[l, h], wk[kv * dh:(kv + 1) * dh].T)
    write_json(d / "expected.json", exp)
    return d, peak, shards


# --------------------------------------------------------------------------------------------
# 6. Hub layouts of the spectral-fingerprint study's models: an older-transformers Pythia file
#    (f16, old config keys, the buffers it carries) and a Llama-3.2-style model (tied, bf16,
#    head_dim, llama3 rope)


def make_pythia_hub():
    """Pythia as checkpoints converted by older transformers store it: f16 weights, config keys
    rotary_pct / rotary_emb_base (no rope_parameters), and per-layer buffers attention.bias
    (BOOL causal mask), attention.masked_bias (0-dimensional) and attention.rotary_emb.inv_freq."""
    from safetensors.torch import save_file
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
    from transformer_lens.pretrained.weight_conversions import convert_neox_weights

    torch.manual_seed(3113)
    gen = torch.Generator().manual_seed(3113)
    rotary_pct, base, n_ctx = 0.5, 10000.0, 64
    cfg = GPTNeoXConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=2,
                        intermediate_size=64, vocab_size=50, max_position_embeddings=n_ctx,
                        rope_parameters={"rope_type": "default", "rope_theta": base,
                                         "partial_rotary_factor": rotary_pct},
                        use_parallel_residual=True, tie_word_embeddings=False,
                        attn_implementation="eager")
    model = GPTNeoXForCausalLM(cfg)
    hf_randomise(model, gen, conv1d=False)
    H, dh = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
    with torch.no_grad():
        for layer in model.gpt_neox.layers:
            w = layer.attention.query_key_value.weight.view(H, 3, dh, cfg.hidden_size)
            w[:, 0] *= QK_GAIN
            w[:, 1] *= QK_GAIN
        # The file is f16: the reference model runs on the rounded weights.
        for p in model.parameters():
            p.copy_(p.half().float())
    model.eval()
    d = fresh_dir("pythia-hub")
    rotary_dim = int(dh * rotary_pct)
    tensors = {k: v.detach().half().contiguous() for k, v in model.state_dict().items()}
    tensors["embed_out.weight"] = tensors.pop("lm_head.weight")  # the hub's name for it
    for l in range(cfg.num_hidden_layers):
        p = f"gpt_neox.layers.{l}.attention"
        tensors[f"{p}.bias"] = torch.tril(torch.ones(n_ctx, n_ctx, dtype=torch.bool)).view(1, 1, n_ctx, n_ctx)
        tensors[f"{p}.masked_bias"] = torch.tensor(-1e9)
        tensors[f"{p}.rotary_emb.inv_freq"] = 1.0 / base ** (torch.arange(0, rotary_dim, 2).float() / rotary_dim)
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    old_config = {
        "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "bos_token_id": 0,
        "eos_token_id": 0, "hidden_act": "gelu", "hidden_size": cfg.hidden_size,
        "initializer_range": 0.02, "intermediate_size": cfg.intermediate_size,
        "layer_norm_eps": cfg.layer_norm_eps, "max_position_embeddings": n_ctx,
        "num_attention_heads": H, "num_hidden_layers": cfg.num_hidden_layers,
        "rotary_emb_base": int(base), "rotary_pct": rotary_pct, "tie_word_embeddings": False,
        "torch_dtype": "float16", "transformers_version": "4.24.0", "use_cache": True,
        "use_parallel_residual": True, "vocab_size": cfg.vocab_size,
    }
    (d / "config.json").write_text(json.dumps(old_config, indent=2) + "\n")
    spec = dict(n_layers=cfg.num_hidden_layers, d_model=cfg.hidden_size, n_ctx=n_ctx, d_head=dh,
                n_heads=H, d_mlp=cfg.intermediate_size, d_vocab=cfg.vocab_size, act_fn="gelu",
                normalization_type="LN", positional_embedding_type="rotary", rotary_dim=rotary_dim,
                rotary_base=int(base), rotary_adjacent_pairs=False, parallel_attn_mlp=True,
                eps=cfg.layer_norm_eps, original_architecture="GPTNeoXForCausalLM")
    config = {"layers": cfg.num_hidden_layers, "heads": H, "kv_heads": H, "d_model": cfg.hidden_size,
              "d_head": dh, "vocab": cfg.vocab_size, "n_ctx": n_ctx, "rotary_dim": rotary_dim}
    sd_tl = convert_neox_weights(model, tl_config(spec, torch.float32))
    fwd = [int(x) for x in np.random.default_rng(31).integers(0, cfg.vocab_size, 14)]
    # No tokenizer: the BOS is config.json's bos_token_id (0, which is also the eos).
    bos = {"id": 0, "token": "#0", "source": "config.json bos_token_id"}
    exp, peak = build_expected("neox", config, hf_run(model), sd_tl, spec, fwd, bos,
                               ordinary_ids(cfg.vocab_size, None, [0]))
    exp["parameters"] = parameter_count(model)
    write_json(d / "expected.json", exp)
    return d, peak


def rope_inverse_frequencies():
    """transformers' own rotary inverse frequencies for each scaling headprint applies, the
    reference for crates/core/src/model's RopeScaling (checked in tests/hub_layouts.rs)."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cases = {
        "default": {"rope_type": "default", "rope_theta": 500000.0},
        "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
        "llama3": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192},
    }
    out = {}
    for name, rope in cases.items():
        cfg = LlamaConfig(hidden_size=2048, num_attention_heads=32, head_dim=64,
                          rope_parameters=dict(rope), max_position_embeddings=131072)
        fn = ROPE_INIT_FUNCTIONS.get(rope["rope_type"])
        if rope["rope_type"] == "default":
            from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
            inv, scaling = LlamaRotaryEmbedding.compute_default_rope_parameters(cfg)
        else:
            inv, scaling = fn(cfg, "cpu")
        assert scaling == 1.0, (name, scaling)
        out[name] = {"rope_parameters": rope, "head_dim": 64,
                     "inverse_frequencies": [float(x) for x in inv.float()]}
    return out


def make_llama32():
    """Llama-3.2-style: tied embedding (no lm_head in the file), head_dim from config (not
    hidden_size / heads), grouped-query attention, bf16 weights, llama3 rope scaling with a short
    original context so the scaling changes positions the test reaches."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformer_lens.pretrained.weight_conversions import convert_llama_weights

    torch.manual_seed(4224)
    gen = torch.Generator().manual_seed(4224)
    rope = {"rope_type": "llama3", "rope_theta": 500.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    cfg = LlamaConfig(hidden_size=24, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                      num_hidden_layers=2, intermediate_size=40, vocab_size=50,
                      max_position_embeddings=64, rms_norm_eps=1e-5, rope_parameters=dict(rope),
                      tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
                      attn_implementation="eager")
    model = LlamaForCausalLM(cfg)
    hf_randomise(model, gen, conv1d=False)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight *= QK_GAIN
            layer.self_attn.k_proj.weight *= QK_GAIN
        for p in model.parameters():
            p.copy_(p.bfloat16().float())
    model.eval()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    d = fresh_dir("llama32")
    # A bf16 copy is saved; the reference keeps running in f32 on the same (rounded) weights,
    # with its rotary buffers unrounded (casting the model itself would round inv_freq too).
    import copy
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(str(d), safe_serialization=True)
    from safetensors import safe_open
    with safe_open(str(d / "model.safetensors"), "pt") as f:
        names = list(f.keys())
        assert "lm_head.weight" not in names, names
        assert all(f.get_slice(n).get_dtype() == "BF16" for n in names)
    H, KV, dh = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    spec = dict(n_layers=cfg.num_hidden_layers, d_model=cfg.hidden_size, n_ctx=64, d_head=dh,
                n_heads=H, n_key_value_heads=KV, d_mlp=cfg.intermediate_size,
                d_vocab=cfg.vocab_size, act_fn="silu", gated_mlp=True, normalization_type="RMS",
                final_rms=True, positional_embedding_type="rotary", rotary_dim=dh,
                rotary_base=rope["rope_theta"], rotary_adjacent_pairs=False, eps=cfg.rms_norm_eps,
                use_NTK_by_parts_rope=True, NTK_by_parts_factor=rope["factor"],
                NTK_by_parts_low_freq_factor=rope["low_freq_factor"],
                NTK_by_parts_high_freq_factor=rope["high_freq_factor"],
                NTK_original_ctx_len=rope["original_max_position_embeddings"],
                original_architecture="LlamaForCausalLM")
    config = {"layers": cfg.num_hidden_layers, "heads": H, "kv_heads": KV, "d_model": cfg.hidden_size,
              "d_head": dh, "vocab": cfg.vocab_size, "n_ctx": 64, "rotary_dim": dh}
    sd_tl = convert_llama_weights(model, tl_config(spec, torch.float32))
    # Long enough (24 positions) that the low frequencies' scaling shows in the patterns.
    fwd = [int(x) for x in np.random.default_rng(42).integers(0, cfg.vocab_size, 24)]
    bos = {"id": 1, "token": "#1", "source": "config.json bos_token_id"}
    exp, peak = build_expected("llama", config, hf_run(model), sd_tl, spec, fwd, bos,
                               ordinary_ids(cfg.vocab_size, None, [1, 2]))
    exp["parameters"] = parameter_count(model)
    exp["rope_inverse_frequencies"] = rope_inverse_frequencies()
    write_json(d / "expected.json", exp)
    return d, peak


# --------------------------------------------------------------------------------------------
# benchmark model


def make_gpt2_small(out_dir):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(5005)
    cfg = GPT2Config()
    model = GPT2LMHeadModel(cfg).float().eval()
    out = Path(out_dir)
    if not out.is_absolute():
        out = REPO / out
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True, max_shard_size="2GB")
    for p in sorted(out.iterdir()):
        print(f"{p}  {p.stat().st_size / 1e6:.1f} MB")


# --------------------------------------------------------------------------------------------
# 6. a planted induction circuit in the character GPT layout (hand-built; MLPs zeroed)

# The characters of the built-in suites (public/suites/*.json), so the suites run for real on
# this model.
PLANTED_VOCAB = list(' "(),;ABCDabcdefghilmnorstuvwxy')
PLANTED = dict(n_embd=128, n_head=2, n_layer=2, block_size=128)
PLANTED_HEADS = {"previous_token": "L0H0", "second_previous_token": "L0H1", "induction": "L1H0", "marks": "L1H1"}
PLANTED_FREQS = [1, 3, 7, 12, 19, 27, 40, 55]  # x 2*pi / 256: distinct cos-sums for offsets < 128
PLANTED_INDUCTION_N = 20
MARK_CHARS = ['"', "(", ")"]


def planted_weights():
    """TransformerLens-layout weights of the planted circuit (row vectors, x W).

    Residual layout (d_model 128, V = 31 characters): T = one-hot current token, T1 = one-hot
    previous token (written by L0H0), T2 = one-hot token two back (L0H1), P = 8 sinusoid pairs of
    the position, C = a constant 1, R = position / block_size, J = a junk subspace L1H1 writes to.
      L0H0 previous token: query rotates P back by one step, key reads P; value T -> T1.
      L0H1 token two back: the same, rotated by two steps; value T -> T2.
      L1H0 induction: query (T, T1) x key (T1, T2): the key's two preceding tokens are the query's
           token and its predecessor; a small recency term (C x R) makes the most recent match
           win, and a penalty on position 0 (whose T1 holds its own token); value T -> T with
           gain, read by the unembedding, so the head's output predicts the next token.
      L1H1 quotes and brackets: attends to `"`, `(` and `)` (C x [token is a mark], plus a
           recency term) and to position 0 (a bonus that wins when no other key is a mark, or
           when position 0 is one); writes junk to J.
    """
    V, D, H, L, N = len(PLANTED_VOCAB), PLANTED["n_embd"], PLANTED["n_head"], PLANTED["n_layer"], PLANTED["block_size"]
    dh = D // H
    T, T1, T2 = 0, V, 2 * V
    P = 3 * V
    C, R, J = P + 16, P + 17, P + 18
    assert 2 * V + 2 <= dh and J < D
    thetas = [2 * math.pi * f / 256 for f in PLANTED_FREQS]
    gen = np.random.default_rng(606)
    W_E = np.zeros((V, D))
    W_E[np.arange(V), T + np.arange(V)] = 1.0
    W_E[:, C] = 1.0
    W_pos = np.zeros((N, D))
    for j, th in enumerate(thetas):
        W_pos[:, P + 2 * j] = np.cos(th * np.arange(N)) / math.sqrt(8)
        W_pos[:, P + 2 * j + 1] = np.sin(th * np.arange(N)) / math.sqrt(8)
    W_pos[:, R] = np.arange(N) / N
    p0 = W_pos[0, P:P + 16]
    Wq, Wk, Wv = (np.zeros((L, H, D, dh)) for _ in range(3))
    Wo = np.zeros((L, H, dh, D))
    g = PLANTED_GAINS
    # L0H0 and L0H1: the token one and two positions back
    for h, (steps, target) in enumerate(((1, T1), (2, T2))):
        for j, th in enumerate(thetas):
            c, s = math.cos(steps * th), math.sin(steps * th)
            Wq[0, h, P + 2 * j:P + 2 * j + 2, 2 * j:2 * j + 2] = g["prev"] * np.array([[c, -s], [s, c]])
            Wk[0, h, P + 2 * j:P + 2 * j + 2, 2 * j:2 * j + 2] = g["prev"] * np.eye(2)
        Wq[0, h, C, 16], Wk[0, h, R, 16] = g["recency"], g["recency"]
        Wv[0, h, T:T + V, :V] = np.eye(V)
        Wo[0, h, :V, target:target + V] = np.eye(V)
    # L1H0: induction on two tokens of context
    Wq[1, 0, T:T + V, :V] = g["induction"] * np.eye(V)
    Wk[1, 0, T1:T1 + V, :V] = g["induction"] * np.eye(V)
    Wq[1, 0, T1:T1 + V, V:2 * V] = g["induction"] * np.eye(V)
    Wk[1, 0, T2:T2 + V, V:2 * V] = g["induction"] * np.eye(V)
    Wq[1, 0, C, 2 * V], Wk[1, 0, R, 2 * V] = g["recency"], g["recency"]
    Wq[1, 0, C, 2 * V + 1], Wk[1, 0, P:P + 16, 2 * V + 1] = -g["key0"], p0
    Wv[1, 0, T:T + V, :V] = np.eye(V)
    Wo[1, 0, :V, T:T + V] = g["copy"] * np.eye(V)
    # L1H1: quotes and brackets, position 0 as the fallback
    marks = [PLANTED_VOCAB.index(ch) for ch in MARK_CHARS]
    Wq[1, 1, C, 0] = g["marks"]
    Wk[1, 1, [T + m for m in marks], 0] = g["marks"]
    Wq[1, 1, C, 1], Wk[1, 1, R, 1] = g["recency"], g["recency"]
    Wq[1, 1, C, 2], Wk[1, 1, P:P + 16, 2] = g["sink"], p0
    Wv[1, 1, T:T + V, :4] = gen.normal(0, 1, (V, 4))
    Wo[1, 1, :4, J:J + 4] = 0.05 * gen.normal(0, 1, (4, 4))
    W_U = np.zeros((D, V))
    W_U[T + np.arange(V), np.arange(V)] = g["unembed"]
    return dict(W_E=W_E, W_pos=W_pos, W_Q=Wq, W_K=Wk, W_V=Wv, W_O=Wo, W_U=W_U)


PLANTED_GAINS = dict(prev=4.0, recency=3.5, sink=2.0, induction=2.0, key0=3.0, copy=3.0, marks=3.0, unembed=1.0)


def planted_model():
    """The planted weights in a gpt.py GPTLanguageModel (nn.Linear stores out x in)."""
    w = planted_weights()
    c = PLANTED
    V, D, H = len(PLANTED_VOCAB), c["n_embd"], c["n_head"]
    model = GPTLanguageModel(V, D, H, c["n_layer"], c["block_size"])
    t = lambda a: torch.tensor(np.ascontiguousarray(a), dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.token_embedding_table.weight.copy_(t(w["W_E"]))
        model.position_embedding_table.weight.copy_(t(w["W_pos"]))
        for l, blk in enumerate(model.blocks):
            for ln in (blk.ln1, blk.ln2):
                ln.weight.fill_(1.0)
            for h, head in enumerate(blk.sa.heads):
                head.query.weight.copy_(t(w["W_Q"][l, h].T))
                head.key.weight.copy_(t(w["W_K"][l, h].T))
                head.value.weight.copy_(t(w["W_V"][l, h].T))
            blk.sa.proj.weight.copy_(t(np.concatenate([w["W_O"][l, h] for h in range(H)], axis=0).T))
        model.ln_f.weight.fill_(1.0)
        model.lm_head.weight.copy_(t(w["W_U"].T))
    model.eval()
    return model


def spec_verdict_labels(chars, query, key):
    """Every verdict label (docs/methods.md#6-verdict-tables) that applies to `key`, in that
    section's order, for a prompt of single characters. Written from its words."""
    found = []
    earlier = [j for j in range(query) if chars[j] == chars[query]]
    if earlier and key == max(earlier) + 1:
        found.append("induction successor")
    # Quotes pair up left to right; the query's partner is the quote still open before it, or,
    # when the query closes a pair, the quote that opened it.
    pending, partner = None, None
    for i in range(query + 1):
        if chars[i] == '"':
            if pending is None:
                pending = i
            else:
                if i == query:
                    partner = pending
                pending = None
    if pending is not None and pending != query:
        partner = pending
    if key == partner:
        found.append("matching quote")
    depth_open = []
    for i in range(query + 1):
        if chars[i] == "(":
            depth_open.append(i)
        elif chars[i] == ")" and depth_open:
            depth_open.pop()
    if key in depth_open:
        found.append("open bracket still to close")
    last_open = max([i for i in range(query + 1) if chars[i] == "("], default=None)
    last_close = max([i for i in range(query + 1) if chars[i] == ")"], default=None)
    if key in (last_open, last_close):
        found.append("most recent bracket")
    return found


def spec_verdict(chars, query, key):
    """(verdict, also): position 0 is always the sink, with the first other label beside it."""
    found = spec_verdict_labels(chars, query, key)
    if key == 0:
        return "position-0 sink", (found[0] if found else None)
    return (found[0] if found else "other"), None


def planted_verdicts(run, suite_name):
    suite = json.loads((REPO / "public" / "suites" / f"{suite_name}.json").read_text())
    stoi = {ch: i for i, ch in enumerate(PLANTED_VOCAB)}
    per_head = {}
    for prompt in suite["prompts"]:
        chars = list(prompt["text"])
        query = prompt.get("query", len(chars) - 1)
        _, pats = run([stoi[ch] for ch in chars])
        for l in range(PLANTED["n_layer"]):
            for h in range(PLANTED["n_head"]):
                row = pats[l, h, query, :query + 1]
                order = sorted(range(query + 1), key=lambda k: -row[k])
                # the ranking must not hinge on float rounding: top, runner-up and third apart
                gaps = [1 - row[order[i + 1]] / row[order[i]] for i in range(min(2, query))]
                assert all(gap > 1e-3 for gap in gaps), (suite_name, prompt["id"], l, h, gaps)

                def key_entry(k):
                    verdict, also = spec_verdict(chars, query, k)
                    return {"position": k, "token": chars[k], "weight": flt(row[k]), "verdict": verdict,
                            "also": also}

                per_head.setdefault(f"L{l}H{h}", []).append({
                    "id": prompt["id"],
                    "query_position": query,
                    "attention": [flt(x) for x in row],
                    "top": key_entry(order[0]),
                    "runner_up": key_entry(order[1]) if query >= 1 else None,
                })
    return per_head


def make_planted_induction():
    from safetensors.torch import save_file

    c = PLANTED
    V = len(PLANTED_VOCAB)
    model = planted_model()
    d = fresh_dir("gptchar-induction")
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(sd, str(d / "model.safetensors"), metadata={"vocab": json.dumps(PLANTED_VOCAB)})

    def run(tokens):
        with torch.no_grad():
            logits = model(torch.tensor([tokens]))[0]
        pats = torch.stack([torch.stack([h.last_pattern[0] for h in blk.sa.heads]) for blk in model.blocks])
        return logits.double().numpy(), pats.double().numpy()

    spec = dict(n_layers=c["n_layer"], d_model=c["n_embd"], n_ctx=c["block_size"],
                d_head=c["n_embd"] // c["n_head"], n_heads=c["n_head"], d_mlp=4 * c["n_embd"],
                d_vocab=V, act_fn="relu", normalization_type="LN",
                positional_embedding_type="standard", eps=1e-5)
    sd_tl = gptchar_to_tl(sd, c["n_layer"], c["n_head"])
    tl_models = [tl_model(spec, sd_tl, mode) for mode in ("raw", "folded")]

    def run_checked(tokens):
        logits, pats = run(tokens)
        for m in tl_models:
            tl_logits, tl_pats = tl_forward(m, tokens)
            ep, el = np.abs(tl_pats - pats).max(), np.abs(tl_logits - logits).max() / np.abs(logits).max()
            assert ep < 1e-4 and el < 1e-4, (ep, el)
            CHECKS.upd("forward_pattern", ep)
            CHECKS.upd("forward_logits", el)
        return logits, pats

    stoi = {ch: i for i, ch in enumerate(PLANTED_VOCAB)}
    text = 'the cat (a "b") saw the cat'
    fwd = [stoi[ch] for ch in text]
    logits, pats = run_checked(fwd)

    # induction probe: n uniformly random characters (seeded), repeated once, no BOS (character model)
    n = PLANTED_INDUCTION_N
    first = [int(x) for x in np.random.default_rng(20).integers(0, V, n)]
    tokens = first + first
    ind_logits, ind_pats = run_checked(tokens)
    heads = []
    for l in range(c["n_layer"]):
        for h in range(c["n_head"]):
            A = ind_pats[l, h]
            heads.append({
                "layer": l, "head": h,
                "induction_score": flt(np.mean([A[t, t - n + 1] for t in range(n, 2 * n)])),
                "previous_token_score": flt(np.mean([A[t, t - 1] for t in range(n, 2 * n)])),
                "duplicate_token_score": flt(np.mean([A[t, t - n] for t in range(n, 2 * n)])),
            })
    acc = float(np.mean([np.argmax(ind_logits[t]) == tokens[t + 1] for t in range(n, 2 * n - 1)]))
    top = max(heads, key=lambda s: s["induction_score"])
    assert acc >= 0.8 and f"L{top['layer']}H{top['head']}" == PLANTED_HEADS["induction"], (acc, top)
    assert top["induction_score"] >= 0.4, top

    config = {"layers": c["n_layer"], "heads": c["n_head"], "kv_heads": c["n_head"], "d_model": c["n_embd"],
              "d_head": c["n_embd"] // c["n_head"], "vocab": V, "n_ctx": c["block_size"]}
    exp = {
        "family": "gptchar",
        "config": config,
        "vocab": PLANTED_VOCAB,
        "planted_heads": PLANTED_HEADS,
        "forward": {"text": text, "tokens": fwd, "patterns": pats.tolist(), "logits": logits.tolist()},
        "induction": {"first_copy": first, "heads": heads, "prefix_copy_accuracy": acc},
        "verdicts": {name: planted_verdicts(run, name) for name in ("quote", "bracket", "swap")},
        "notes": {
            "model": planted_weights.__doc__.strip(),
            "forward": "PyTorch gpt.py model in float32, no BOS; cross-checked against TransformerLens "
            "(raw and fold_ln) to 1e-4.",
            "induction": "first_copy (uniform random characters) repeated once, no BOS; scores averaged over "
            "t = n..2n-1; prefix_copy_accuracy over t = n..2n-2.",
            "verdicts": "per suite and head: the query's attention row, top and runner-up keys with the "
            "labels of spec_verdict_labels (written from analyses.md section 4, independently of the Rust "
            "classify); top, runner-up and third differ by at least 0.1% of the larger weight.",
        },
    }
    write_json(d / "expected.json", exp)
    print(f"planted induction: prefix-copy {acc:.3f}, "
          + ", ".join(f"L{s['layer']}H{s['head']} ind {s['induction_score']:.3f} prev {s['previous_token_score']:.3f}"
                      for s in heads))
    return d, peakedness(pats)


# --------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpt2-small", nargs="?", const="bench-data/gpt2-small", metavar="DIR",
                    help="write a GPT-2-Small-shaped random model (float32, ~500 MB) into DIR instead")
    ap.add_argument("--only", nargs="*", choices=["gptchar", "gpt2", "pythia", "llama", "pythia-hub", "llama32", "gptchar-induction", "hostile"],
                    help="build only these fixtures (gpt2 also builds gpt2-nanogpt)")
    args = ap.parse_args()
    if args.gpt2_small:
        make_gpt2_small(args.gpt2_small)
        return

    import transformers
    import transformer_lens  # noqa: F401
    from importlib.metadata import version

    only = set(args.only or ["gptchar", "gpt2", "pythia", "llama", "pythia-hub", "llama32", "gptchar-induction", "hostile"])
    built, extra = [], {}
    if "gptchar" in only:
        built.append(make_gptchar())
    if "gpt2" in only:
        a, b, keys = make_gpt2()
        built += [a, b]
        extra["gpt2 stored keys (first 4)"] = keys[:4]
    if "pythia" in only:
        d, peak, rk = make_pythia()
        built.append((d, peak))
        extra["neox rotary config key"] = rk
    if "llama" in only:
        d, peak, shards = make_llama()
        built.append((d, peak))
        extra["llama shards"] = shards
    if "pythia-hub" in only:
        built.append(make_pythia_hub())
    if "llama32" in only:
        built.append(make_llama32())
    if "gptchar-induction" in only:
        built.append(make_planted_induction())
    if "hostile" in only:
        built.append(make_hostile())

    print(f"\ntorch {torch.__version__}, transformers {transformers.__version__}, "
          f"transformer_lens {version('transformer_lens')}, numpy {np.__version__}")
    print(f"{'fixture':14} {'file':38} {'bytes':>9}   mean row-max attention (fwd)")
    for d, peak in built:
        first = True
        for p in sorted(d.iterdir()):
            print(f"{d.name if first else '':14} {p.name:38} {p.stat().st_size:9d}"
                  + (f"   {peak:.3f}" if first else ""))
            first = False
    for k, v in extra.items():
        print(f"{k}: {v}")
    print("checks (max over all heads/circuits/fixtures):")
    for k, v in vars(CHECKS).items():
        print(f"  {k:16} {v:.3e}")


if __name__ == "__main__":
    sys.exit(main())
