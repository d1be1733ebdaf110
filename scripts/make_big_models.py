#!/usr/bin/env python3
"""Write the spectral-fingerprint study's models at full size with random weights, in the hub's
real layouts.

    .venv/bin/python scripts/make_big_models.py               # all three into bench-data/ (needs numpy)
    .venv/bin/python scripts/make_big_models.py --only pythia-1b --out /tmp/big
    .venv/bin/python scripts/make_big_models.py --tiny --out /tmp/tiny  # same layouts, shrunk

| name           | layout written                                                                  | size    |
|----------------|---------------------------------------------------------------------------------|---------|
| pythia-1b      | one f16 model.safetensors as converted by transformers 4.24: rotary_pct /       | 2.0 GB  |
|                | rotary_emb_base keys, buffers attention.bias (BOOL), masked_bias (0-d), inv_freq |         |
| llama-3.2-1b   | one bf16 model.safetensors, tied (no lm_head), head_dim 64, rope_scaling llama3  | 2.5 GB  |
| llama-3-8b     | bf16 in 4 shards with model.safetensors.index.json, untied                       | 16.1 GB |

The configs are the hub's own (EleutherAI/pythia-1b, meta-llama/Llama-3.2-1B,
meta-llama/Meta-Llama-3-8B), written from memory of their published config.json; no tokenizer is
written (headprint then works on token ids). Weights are N(0, 0.02) as Hugging Face initialises
them, norms near 1, seeded per tensor (the bytes do not depend on --jobs). Only numpy is needed;
tensors are written in row blocks by a pool of processes (all cores by default), so memory stays
under ~200 MB a process whatever the model's size.
"""
import argparse
import json
import multiprocessing
import os
import struct
import sys
from pathlib import Path

import numpy as np

BLOCK_ELEMENTS = 1 << 24  # elements generated at a time (64 MB of f32)

PYTHIA_1B = {
    "architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0,
    "hidden_act": "gelu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 8192, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
    "model_type": "gpt_neox", "num_attention_heads": 8, "num_hidden_layers": 16,
    "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": False,
    "torch_dtype": "float16", "transformers_version": "4.24.0", "use_cache": True,
    "use_parallel_residual": True, "vocab_size": 50304,
}
LLAMA_32_1B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": 128256,
}
LLAMA_3_8B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 8192,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.40.0.dev0", "use_cache": True, "vocab_size": 128256,
}


def shrink(config):
    """The same layout at toy size, for a quick self-test of the layouts."""
    c = dict(config)
    heads = c["num_attention_heads"] // 4 or 1
    c.update(hidden_size=64 if "head_dim" not in c else 48, num_attention_heads=heads,
             intermediate_size=96, num_hidden_layers=2, vocab_size=300, max_position_embeddings=64)
    if "num_key_value_heads" in c:
        c["num_key_value_heads"] = max(1, heads // 4)
    if "head_dim" in c:
        c["head_dim"] = 16
    for key in ("bos_token_id", "eos_token_id"):  # Llama 3's ids lie beyond the toy vocabulary
        if key in c:
            c[key] = min(c[key], c["vocab_size"] - 1)
    if c.get("rope_scaling"):
        c["rope_scaling"] = dict(c["rope_scaling"], original_max_position_embeddings=32)
    return c


# A tensor to write: name, dtype ("F16", "BF16", "F32", "BOOL"), shape, and how to fill it.
class Spec:
    def __init__(self, name, dtype, shape, fill="normal", value=None):
        self.name, self.dtype, self.shape, self.fill, self.value = name, dtype, list(shape), fill, value

    @property
    def nbytes(self):
        return int(np.prod(self.shape, dtype=np.int64)) * {"F16": 2, "BF16": 2, "F32": 4, "BOOL": 1}[self.dtype]


def neox_tensors(c, dtype):
    d, f, v, n = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["max_position_embeddings"]
    rotary_dim = int(d // c["num_attention_heads"] * c["rotary_pct"])
    specs = [Spec("gpt_neox.embed_in.weight", dtype, [v, d])]
    for l in range(c["num_hidden_layers"]):
        p = f"gpt_neox.layers.{l}"
        specs += [
            Spec(f"{p}.input_layernorm.weight", dtype, [d], "norm"),
            Spec(f"{p}.input_layernorm.bias", dtype, [d], "bias"),
            Spec(f"{p}.post_attention_layernorm.weight", dtype, [d], "norm"),
            Spec(f"{p}.post_attention_layernorm.bias", dtype, [d], "bias"),
            Spec(f"{p}.attention.bias", "BOOL", [1, 1, n, n], "causal"),
            Spec(f"{p}.attention.masked_bias", "F32", [], "constant", -1e9),
            Spec(f"{p}.attention.rotary_emb.inv_freq", "F32", [rotary_dim // 2], "inv_freq",
                 (c["rotary_emb_base"], rotary_dim)),
            Spec(f"{p}.attention.query_key_value.weight", dtype, [3 * d, d]),
            Spec(f"{p}.attention.query_key_value.bias", dtype, [3 * d], "bias"),
            Spec(f"{p}.attention.dense.weight", dtype, [d, d]),
            Spec(f"{p}.attention.dense.bias", dtype, [d], "bias"),
            Spec(f"{p}.mlp.dense_h_to_4h.weight", dtype, [f, d]),
            Spec(f"{p}.mlp.dense_h_to_4h.bias", dtype, [f], "bias"),
            Spec(f"{p}.mlp.dense_4h_to_h.weight", dtype, [d, f]),
            Spec(f"{p}.mlp.dense_4h_to_h.bias", dtype, [d], "bias"),
        ]
    specs += [
        Spec("gpt_neox.final_layer_norm.weight", dtype, [d], "norm"),
        Spec("gpt_neox.final_layer_norm.bias", dtype, [d], "bias"),
        Spec("embed_out.weight", dtype, [v, d]),
    ]
    return specs


def llama_tensors(c, dtype):
    d, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    h, kv = c["num_attention_heads"], c["num_key_value_heads"]
    dh = c.get("head_dim") or d // h
    specs = [Spec("model.embed_tokens.weight", dtype, [v, d])]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}"
        specs += [
            Spec(f"{p}.input_layernorm.weight", dtype, [d], "norm"),
            Spec(f"{p}.self_attn.q_proj.weight", dtype, [h * dh, d]),
            Spec(f"{p}.self_attn.k_proj.weight", dtype, [kv * dh, d]),
            Spec(f"{p}.self_attn.v_proj.weight", dtype, [kv * dh, d]),
            Spec(f"{p}.self_attn.o_proj.weight", dtype, [d, h * dh]),
            Spec(f"{p}.post_attention_layernorm.weight", dtype, [d], "norm"),
            Spec(f"{p}.mlp.gate_proj.weight", dtype, [f, d]),
            Spec(f"{p}.mlp.up_proj.weight", dtype, [f, d]),
            Spec(f"{p}.mlp.down_proj.weight", dtype, [d, f]),
        ]
    specs.append(Spec("model.norm.weight", dtype, [d], "norm"))
    if not c["tie_word_embeddings"]:
        specs.append(Spec("lm_head.weight", dtype, [v, d]))
    return specs


def to_bytes(values, dtype):
    if dtype == "F16":
        return values.astype("<f2").tobytes()
    if dtype == "F32":
        return values.astype("<f4").tobytes()
    if dtype == "BF16":
        bits = values.astype("<f4").view("<u4")
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
        return rounded.astype("<u2").tobytes()
    raise ValueError(dtype)


def write_tensor(out, spec, rng):
    total = int(np.prod(spec.shape, dtype=np.int64))
    if spec.fill == "causal":
        n = spec.shape[-1]
        for start in range(0, n, max(1, BLOCK_ELEMENTS // n)):
            rows = np.arange(start, min(n, start + max(1, BLOCK_ELEMENTS // n)))[:, None]
            out.write((np.arange(n)[None, :] <= rows).astype(np.uint8).tobytes())
        return
    if spec.fill == "constant":
        out.write(to_bytes(np.full(total, spec.value, dtype=np.float32), spec.dtype))
        return
    if spec.fill == "inv_freq":
        base, dim = spec.value
        out.write(to_bytes(1.0 / base ** (np.arange(0, dim, 2, dtype=np.float32) / dim), spec.dtype))
        return
    for start in range(0, total, BLOCK_ELEMENTS):
        count = min(BLOCK_ELEMENTS, total - start)
        values = rng.standard_normal(count, dtype=np.float32)
        if spec.fill == "normal":
            values *= 0.02
        elif spec.fill == "norm":
            values = 1.0 + 0.1 * values
        elif spec.fill == "bias":
            values *= 0.01
        out.write(to_bytes(values, spec.dtype))


def start_safetensors(path, specs):
    """Write the header and size the file; returns (offset in the file, spec) of each tensor."""
    header, offset = {}, 0
    for s in specs:
        header[s.name] = {"dtype": s.dtype, "shape": s.shape, "data_offsets": [offset, offset + s.nbytes]}
        offset += s.nbytes
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as the reference writer does
    start = 8 + len(text)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        out.truncate(start + offset)
    return [(start + header[s.name]["data_offsets"][0], s) for s in specs]


def fill_tensor(task):
    """One tensor, at its place in its file, from its own random stream (so the bytes do not
    depend on how many processes write)."""
    path, offset, spec, seed = task
    with open(path, "r+b") as out:
        out.seek(offset)
        write_tensor(out, spec, np.random.default_rng(seed))
    return spec.nbytes


def write_model(folder, config, specs, shards, seed, jobs):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    # Split in order into shards of about equal size, as save_pretrained does.
    target = sum(s.nbytes for s in specs) / shards
    groups, current, size = [], [], 0
    for s in specs:
        if current and size + s.nbytes > target and len(groups) < shards - 1:
            groups.append(current)
            current, size = [], 0
        current.append(s)
        size += s.nbytes
    groups.append(current)
    names = ["model.safetensors"] if shards == 1 else [
        f"model-{i:05d}-of-{len(groups):05d}.safetensors" for i in range(1, len(groups) + 1)]
    tasks, weight_map = [], {}
    for name, group in zip(names, groups):
        for offset, spec in start_safetensors(folder / name, group):
            tasks.append((folder / name, offset, spec, [seed, len(tasks)]))
        weight_map.update({s.name: name for s in group})
    # Largest first, so the last to finish is a small one.
    tasks.sort(key=lambda t: -t[2].nbytes)
    with multiprocessing.Pool(jobs) as pool:
        total = sum(pool.imap_unordered(fill_tensor, tasks))
    if shards > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    print(f"{folder}  {total / 1e9:.2f} GB in {len(groups)} file(s)", flush=True)


MODELS = {
    "pythia-1b": (PYTHIA_1B, lambda c: neox_tensors(c, "F16"), 1, 1001),
    "llama-3.2-1b": (LLAMA_32_1B, lambda c: llama_tensors(c, "BF16"), 1, 3201),
    "llama-3-8b": (LLAMA_3_8B, lambda c: llama_tensors(c, "BF16"), 4, 3008),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", choices=list(MODELS), help="write only these models")
    ap.add_argument("--out", default="bench-data", help="parent folder (default bench-data/)")
    ap.add_argument("--tiny", action="store_true", help="shrink every dimension (a quick self-test)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes writing tensors (default: all cores)")
    args = ap.parse_args()
    for name in args.only or list(MODELS):
        config, tensors, shards, seed = MODELS[name]
        if args.tiny:
            config = shrink(config)
        write_model(Path(args.out) / name, config, tensors(config), shards, seed, max(1, args.jobs))


if __name__ == "__main__":
    sys.exit(main())
