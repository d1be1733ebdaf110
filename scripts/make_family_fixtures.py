#!/usr/bin/env python3
"""Build the decoder-family fixtures: one tiny random model per family, from transformers' own
config and model classes, with its reference outputs.

    .venv/bin/python scripts/make_family_fixtures.py            # -> tests/fixtures/families/<name>/
    .venv/bin/python scripts/make_family_fixtures.py --only qwen3 gemma2

Deterministic and offline, like scripts/make_fixtures.py (whose helpers it uses). Every model is
small, its parameters re-drawn (norm weights around 1, biases, Q and K scaled so that attention
is peaked) and saved with save_pretrained in the Hub's layout. Each expected.json holds:

  * forward: attention patterns and logits of transformers' eager forward pass in float32 on a
    sequence longer than any sliding window of the fixture;
  * folded / raw: every head's four circuits and their fingerprints, computed here in float64
    numpy from the saved weights, following docs/methods.md (the families section) with code
    written independently of the Rust engine: the input norms folded into the reading weights,
    the query/key norms' weights into W_Q/W_K's columns, the attention output's norm's weight and
    a residual multiplier into W_O's columns (their scales and mean removal left out), ln_final into W_U; W_E is the embedding as the residual stream
    receives it (times its multiplier, through its norm), in both modes;
  * parameters: num_parameters().
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fixtures import CHECKS, EMB_STD, FIXTURES, QK_GAIN, fingerprint, randn  # noqa: E402

torch.set_num_threads(1)

OUT = FIXTURES / "families"
WINDOW = 5
# The BOS and 13 tokens: longer than every window (5) by more than twice.
SEQUENCE = 14
SPECIALS = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
SMALL = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=4,
             intermediate_size=48, vocab_size=64, max_position_embeddings=64, **SPECIALS)


def is_norm(name):
    return any(s in name for s in ("norm", "ln_", "ln_f", "layernorm", "layer_norm"))


def randomise(model, gen, plus_one=False):
    """Every parameter re-drawn: matrices std 1/sqrt(fan_in) (Q and K times QK_GAIN), embeddings
    std EMB_STD, norm weights 1 + 0.3 N (a `1 + w` norm stores 0.3 N), biases 0.1 N."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                if is_norm(name) and name.endswith("weight"):
                    p.copy_(0.3 * randn(gen, p.shape[0]) + (0.0 if plus_one else 1.0))
                else:
                    p.copy_(0.1 * randn(gen, p.shape[0]))
            elif any(s in name for s in ("embed_tokens", "wte", "wpe", "word_embeddings.", "embed_positions")):
                p.copy_(EMB_STD * randn(gen, *p.shape))
            else:
                p.copy_(randn(gen, *p.shape) / math.sqrt(p.shape[-1]))
                if any(s in name for s in ("q_proj", "k_proj", "qkv_proj", "query_key_value")):
                    p.mul_(QK_GAIN)


# --------------------------------------------------------------------------------------------
# The canonical weights of a family's checkpoint, in float64: what the circuits read.


def f64(t):
    return t.detach().double().numpy()


def linear(sd, name):
    """An nn.Linear weight (out x in) as the row-vector map (in x out)."""
    return f64(sd[name]).T


def vec(sd, name, n=None):
    return f64(sd[name]) if name in sd else (np.zeros(n) if n else None)


def layer_norm_rows(x, w, b, eps):
    x = x - x.mean(-1, keepdims=True)
    x = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return x * w + (0 if b is None else b)


def split_fused(w, groups, queries, keys, dh):
    """A fused QKV map (d_model x (Q + 2 KV)) in `groups` groups of [q x queries, k x keys, v x keys]."""
    qs, ks, vs = [], [], []
    width = (queries + 2 * keys) * dh
    for g in range(groups):
        block = w[:, g * width:(g + 1) * width]
        qs.append(block[:, :queries * dh])
        ks.append(block[:, queries * dh:(queries + keys) * dh])
        vs.append(block[:, (queries + keys) * dh:])
    return np.concatenate(qs, 1), np.concatenate(ks, 1), np.concatenate(vs, 1)


def canonical(name, model, cfg):
    """{norm, heads, kv_heads, d_head, layers: [{ln1, wq, wk, wv, wo, q_norm, k_norm,
    out_norm}], we, wu, ln_final, res_mult}: norms as (weight, bias) with the stored `1 + w`
    already added, bias None for RMSNorm."""
    sd = model.state_dict()
    H = cfg.num_attention_heads
    KV = getattr(cfg, "num_key_value_heads", None) or H
    D = cfg.hidden_size
    dh = getattr(cfg, "head_dim", None) or D // H
    plus = 1.0 if name.startswith("gemma") else 0.0
    kind = "rms"
    res_mult = 1.0
    layers = []

    def norm(prefix, bias=True):
        if prefix + ".weight" not in sd:
            return None
        return (f64(sd[prefix + ".weight"]) + plus, vec(sd, prefix + ".bias") if bias else None)

    L = cfg.num_hidden_layers
    if name in ("qwen2", "qwen3", "mistral", "mixtral", "gemma", "gemma2", "gemma3", "olmo", "olmo2",
                "granite", "smollm3", "stablelm", "phi3"):
        we = f64(sd["model.embed_tokens.weight"])
        wu = linear(sd, "lm_head.weight") if "lm_head.weight" in sd and not cfg.tie_word_embeddings else we.T
        kind = "ln" if name in ("olmo", "stablelm") else "rms"
        if name.startswith("gemma"):
            we = we * np.float64(np.float32(D ** 0.5))
        if name == "granite":
            we = we * cfg.embedding_multiplier
            res_mult = cfg.residual_multiplier
        ln_final = norm("model.norm") if name != "olmo" else (np.ones(D), None)
        for l in range(L):
            p = f"model.layers.{l}."
            if name == "phi3":
                wq, wk, wv = split_fused(linear(sd, p + "self_attn.qkv_proj.weight"), 1, H, KV, dh)
            else:
                wq, wk, wv = (linear(sd, p + f"self_attn.{x}_proj.weight") for x in "qkv")
            ln1 = {"olmo": (np.ones(D), None), "olmo2": None}.get(name, norm(p + "input_layernorm"))
            out_norm = None
            if name in ("gemma2", "gemma3", "olmo2"):
                out_norm = norm(p + "post_attention_layernorm")
            q_norm = k_norm = None
            if name in ("qwen3", "gemma3"):
                q_norm = (np.tile(f64(sd[p + "self_attn.q_norm.weight"]) + plus, H), None)
                k_norm = (np.tile(f64(sd[p + "self_attn.k_norm.weight"]) + plus, KV), None)
            if name == "olmo2":
                q_norm, k_norm = norm(p + "self_attn.q_norm"), norm(p + "self_attn.k_norm")
            if name == "stablelm" and cfg.qk_layernorm:
                def per_head(which, n):
                    w = np.concatenate([f64(sd[p + f"self_attn.{which}.norms.{h}.weight"]) for h in range(n)])
                    return (w, np.zeros_like(w))
                q_norm, k_norm = per_head("q_layernorm", H), per_head("k_layernorm", KV)
            layers.append(dict(ln1=ln1, wq=wq, wk=wk, wv=wv, wo=linear(sd, p + "self_attn.o_proj.weight"),
                               q_norm=q_norm, k_norm=k_norm, out_norm=out_norm))
    elif name == "phi":
        kind = "ln"
        we = f64(sd["model.embed_tokens.weight"])
        wu = linear(sd, "lm_head.weight")
        ln_final = norm("model.final_layernorm")
        for l in range(L):
            p = f"model.layers.{l}."
            qn = kn = None
            if cfg.qk_layernorm:
                qn = tuple(np.tile(x, H) for x in norm(p + "self_attn.q_layernorm"))
                kn = tuple(np.tile(x, KV) for x in norm(p + "self_attn.k_layernorm"))
            layers.append(dict(ln1=norm(p + "input_layernorm"),
                               wq=linear(sd, p + "self_attn.q_proj.weight"), wk=linear(sd, p + "self_attn.k_proj.weight"),
                               wv=linear(sd, p + "self_attn.v_proj.weight"), wo=linear(sd, p + "self_attn.dense.weight"),
                               q_norm=qn, k_norm=kn, out_norm=None))
    elif name == "gptj":
        kind = "ln"
        we = f64(sd["transformer.wte.weight"])
        wu = linear(sd, "lm_head.weight")
        ln_final = norm("transformer.ln_f")
        for l in range(L):
            p = f"transformer.h.{l}."
            layers.append(dict(ln1=norm(p + "ln_1"), wq=linear(sd, p + "attn.q_proj.weight"),
                               wk=linear(sd, p + "attn.k_proj.weight"), wv=linear(sd, p + "attn.v_proj.weight"),
                               wo=linear(sd, p + "attn.out_proj.weight"), q_norm=None, k_norm=None, out_norm=None))
    elif name == "gptneo":
        kind = "ln"
        we = f64(sd["transformer.wte.weight"])
        wu = we.T
        ln_final = norm("transformer.ln_f")
        for l in range(L):
            p = f"transformer.h.{l}.attn.attention."
            layers.append(dict(ln1=norm(f"transformer.h.{l}.ln_1"), wq=linear(sd, p + "q_proj.weight"),
                               wk=linear(sd, p + "k_proj.weight"), wv=linear(sd, p + "v_proj.weight"),
                               wo=linear(sd, p + "out_proj.weight"), q_norm=None, k_norm=None, out_norm=None))
    elif name == "opt":
        kind = "ln"
        we = f64(sd["model.decoder.embed_tokens.weight"])
        wu = we.T
        ln_final = norm("model.decoder.final_layer_norm")
        for l in range(L):
            p = f"model.decoder.layers.{l}."
            layers.append(dict(ln1=norm(p + "self_attn_layer_norm"), wq=linear(sd, p + "self_attn.q_proj.weight"),
                               wk=linear(sd, p + "self_attn.k_proj.weight"), wv=linear(sd, p + "self_attn.v_proj.weight"),
                               wo=linear(sd, p + "self_attn.out_proj.weight"), q_norm=None, k_norm=None, out_norm=None))
    elif name in ("bloom",) or name.startswith("falcon"):
        kind = "ln"
        stored = f64(sd["transformer.word_embeddings.weight"])
        wu = linear(sd, "lm_head.weight") if "lm_head.weight" in sd and not cfg.tie_word_embeddings else stored.T
        we = stored
        if name == "bloom":
            w, b = norm("transformer.word_embeddings_layernorm")
            we = layer_norm_rows(stored, w, b, cfg.layer_norm_epsilon)
        ln_final = norm("transformer.ln_f")
        for l in range(L):
            p = f"transformer.h.{l}."
            fused = linear(sd, p + "self_attention.query_key_value.weight")
            if name == "bloom" or (not cfg.new_decoder_architecture and not cfg.multi_query):
                wq, wk, wv = split_fused(fused, H, 1, 1, dh)
            elif cfg.new_decoder_architecture:
                KV = cfg.num_kv_heads
                wq, wk, wv = split_fused(fused, KV, H // KV, 1, dh)
            else:
                KV = 1
                wq, wk, wv = split_fused(fused, 1, H, 1, dh)
            ln1 = norm(p + "ln_attn") if name.startswith("falcon") and cfg.new_decoder_architecture else norm(p + "input_layernorm")
            layers.append(dict(ln1=ln1, wq=wq, wk=wk, wv=wv, wo=linear(sd, p + "self_attention.dense.weight"),
                               q_norm=None, k_norm=None, out_norm=None))
    else:
        raise ValueError(name)
    return dict(kind=kind, heads=H, kv_heads=KV, d_head=dh, layers=layers, we=we, wu=wu,
                ln_final=ln_final, res_mult=res_mult)


def fold_rows(w, norm, kind):
    """An input norm folded into a reading weight (d_model x n): rows scaled, then (LayerNorm)
    every column centred over d_model."""
    out = w * norm[0][:, None]
    return out - out.mean(0, keepdims=True) if kind == "ln" else out


def fold_cols(w, norm):
    """A norm's weight on `x W` folded into W: the columns scaled (its scale and, for a
    LayerNorm, its mean removal left out)."""
    return w * norm[0][None, :]


def head_weights(c, folded):
    """[(layer, head, W_Q, W_K, W_V, W_O)] in one mode, each query head with its group's K and V:
    the input norms folded into the reading weights, the query/key norms into their columns, the
    attention output's norm and the residual multiplier into W_O's."""
    H, KV, dh, kind = c["heads"], c["kv_heads"], c["d_head"], c["kind"]
    out = []
    for l, layer in enumerate(c["layers"]):
        wq, wk, wv, wo = layer["wq"], layer["wk"], layer["wv"], layer["wo"]
        if folded:
            if layer["ln1"] is not None:
                wq, wk, wv = (fold_rows(w, layer["ln1"], kind) for w in (wq, wk, wv))
            if layer["q_norm"] is not None:
                wq = fold_cols(wq, layer["q_norm"])
                wk = fold_cols(wk, layer["k_norm"])
            if layer["out_norm"] is not None:
                wo = fold_cols(wo, layer["out_norm"])
            wo = wo * c["res_mult"]
        for h in range(H):
            kv = h // (H // KV)
            out.append((l, h, wq[:, h * dh:(h + 1) * dh], wk[:, kv * dh:(kv + 1) * dh],
                        wv[:, kv * dh:(kv + 1) * dh], wo[h * dh:(h + 1) * dh, :]))
    return out


def circuits(c, folded):
    dh, kind = c["d_head"], c["kind"]
    we = c["we"]
    wu = fold_rows(c["wu"], c["ln_final"], kind) if folded else c["wu"]

    def fp(A, B):
        return fingerprint(A, B, np.linalg.eigvals(B @ A), dh)

    heads = [{"layer": l, "head": h, "qk": fp(q, k.T), "ov": fp(we @ v, o @ wu),
              "ov_residual": fp(v, o), "qk_token": fp(we @ q, k.T @ we.T)}
             for l, h, q, k, v, o in head_weights(c, folded)]
    return {"heads": heads}


# --------------------------------------------------------------------------------------------
# The families


def configs():
    import transformers as tf

    small = dict(SMALL)
    nokv = {k: v for k, v in small.items() if k != "num_key_value_heads"}
    neo = dict(hidden_size=32, num_heads=4, num_layers=4, vocab_size=64, max_position_embeddings=64,
               intermediate_size=48, **SPECIALS)
    return {
        "qwen2": tf.Qwen2Config(**small, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=2,
                                tie_word_embeddings=True),
        "qwen3": tf.Qwen3Config(**small, head_dim=12, tie_word_embeddings=False),
        "mistral": tf.MistralConfig(**small, sliding_window=WINDOW),
        "mixtral": tf.MixtralConfig(**small, num_local_experts=4, num_experts_per_tok=2, sliding_window=WINDOW),
        "gemma": tf.GemmaConfig(**{**small, "num_key_value_heads": 1}, head_dim=12),
        "gemma2": tf.Gemma2Config(**small, head_dim=8, sliding_window=WINDOW, query_pre_attn_scalar=12,
                                  attn_logit_softcapping=4.0, final_logit_softcapping=3.0),
        "gemma3": tf.Gemma3TextConfig(**small, head_dim=8, sliding_window=WINDOW, query_pre_attn_scalar=8,
                                      layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                                   "sliding_attention"],
                                      rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                       "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}),
        "phi": tf.PhiConfig(**small, partial_rotary_factor=0.5, qk_layernorm=True),
        "phi3": tf.Phi3Config(**small, sliding_window=WINDOW),
        "olmo": tf.OlmoConfig(**small),
        "olmo2": tf.Olmo2Config(**small),
        "gptj": tf.GPTJConfig(n_embd=32, n_head=4, n_layer=4, rotary_dim=4, vocab_size=64, n_positions=64,
                              **SPECIALS),
        "gptneo": tf.GPTNeoConfig(**neo, attention_types=[[["global", "local"], 2]], window_size=WINDOW),
        "opt": tf.OPTConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=4, ffn_dim=48, vocab_size=64,
                            max_position_embeddings=64, word_embed_proj_dim=32, **SPECIALS),
        "stablelm": tf.StableLmConfig(**small, partial_rotary_factor=0.25, use_qkv_bias=True, qk_layernorm=True),
        "bloom": tf.BloomConfig(hidden_size=32, n_head=4, n_layer=4, vocab_size=64, **SPECIALS),
        "falcon-rw": tf.FalconConfig(**nokv, alibi=True, multi_query=False, parallel_attn=False,
                                     new_decoder_architecture=False, bias=True),
        "falcon-mq": tf.FalconConfig(**nokv, alibi=False, multi_query=True, parallel_attn=True,
                                     new_decoder_architecture=False, bias=False),
        "falcon-new": tf.FalconConfig(**nokv, alibi=False, new_decoder_architecture=True, num_kv_heads=2,
                                      bias=False),
        "granite": tf.GraniteConfig(**small, embedding_multiplier=6.0, attention_multiplier=0.3,
                                    residual_multiplier=0.5, logits_scaling=2.5),
        "smollm3": tf.SmolLM3Config(**small, no_rope_layer_interval=2),
    }


def single_alibi_in_eager(model):
    """transformers' eager Falcon adds ALiBi twice (into the causal mask, and again to the
    scores before their scale), its SDPA path and the original model once: the eager layers are
    handed a zero ALiBi, leaving the one in the mask, so that their patterns are the SDPA model's."""
    for layer in model.transformer.h:
        forward = layer.forward

        def once(*args, _forward=forward, **kwargs):
            if kwargs.get("alibi") is not None:
                kwargs["alibi"] = torch.zeros_like(kwargs["alibi"])
            return _forward(*args, **kwargs)

        layer.forward = once


def family_of(name):
    return name.split("-")[0]


def make(name, cfg, seed):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    cfg._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float()
    randomise(model, gen, plus_one=name.startswith("gemma"))
    model.eval()
    d = OUT / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    model.save_pretrained(str(d), safe_serialization=True)
    reloaded = AutoModelForCausalLM.from_pretrained(str(d), attn_implementation="eager")
    for k, v in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[k], v), k
    tokens = [1] + [int(x) for x in np.random.default_rng(seed).integers(3, cfg.vocab_size, SEQUENCE - 1)]
    if getattr(cfg, "alibi", False) and name.startswith("falcon"):
        single_alibi_in_eager(model)
    with torch.no_grad():
        out = model(torch.tensor([tokens]), output_attentions=True)
    if getattr(cfg, "alibi", False) and name.startswith("falcon"):
        # The reference is the model users run (SDPA, transformers' default): its logits.
        sdpa = AutoModelForCausalLM.from_pretrained(str(d), attn_implementation="sdpa")
        with torch.no_grad():
            default = sdpa(torch.tensor([tokens])).logits[0]
        gap = (default - out.logits[0]).abs().max().item()
        assert gap < 1e-4, f"eager with one ALiBi is {gap} from SDPA"
    patterns = torch.stack([a[0] for a in out.attentions]).double().numpy()
    logits = out.logits[0].double().numpy()
    assert np.allclose(patterns.sum(-1), 1.0, atol=1e-5)
    c = canonical(family_of(name) if not name.startswith("falcon") else name, model, cfg)
    expected = {
        "family": family_of(name),
        "forward": {"tokens": tokens, "patterns": patterns.tolist(), "logits": logits.tolist()},
        "folded": circuits(c, True),
        "raw": circuits(c, False),
        "parameters": int(model.num_parameters()),
        "notes": __doc__.split("Each expected.json holds:")[1].strip(),
    }
    with open(d / "expected.json", "w") as f:
        json.dump(expected, f, allow_nan=False)
        f.write("\n")
    for p in d.glob("generation_config.json"):
        p.unlink()
    size = sum(p.stat().st_size for p in d.iterdir())
    print(f"{name:12} {size:9d} bytes, mean row-max attention {patterns.max(-1).mean():.3f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()
    import transformers

    for seed, (name, cfg) in enumerate(configs().items(), start=7000):
        if args.only and name not in args.only:
            continue
        make(name, cfg, seed)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}")
    print(f"eigenvalues vs full-matrix eig: {CHECKS.eig_rel:.2e}; trace: {CHECKS.trace_rel:.2e}")


if __name__ == "__main__":
    sys.exit(main())
