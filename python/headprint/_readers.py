"""What headprint reads from Python objects: a path or link, a TransformerLens
HookedTransformer (or any object with its attribute names), or a transformers model.

torch, transformers and transformer_lens are never imported here unless the object given
comes from them (then they are already imported)."""

from __future__ import annotations

import json
import os
import sys
import weakref
from typing import Any, Optional

import numpy as np

from . import _headprint
from ._headprint import Error, Model

# TransformerLens's config fields that decide how the model computes; the rest (device, seed,
# checkpoint facts) say nothing about the numbers.
_TL_KEYS = (
    "n_layers", "d_model", "n_heads", "d_head", "d_mlp", "d_vocab", "d_vocab_out", "n_ctx", "act_fn",
    "normalization_type", "positional_embedding_type", "rotary_dim", "rotary_base", "rotary_adjacent_pairs",
    "gated_mlp", "parallel_attn_mlp", "attn_only", "use_attn_scale", "attn_scale", "eps", "final_rms",
    "original_architecture", "model_name", "attention_dir", "use_normalization_before_and_after",
    "attn_scores_soft_cap", "output_logits_soft_cap", "use_qk_norm", "use_local_attn", "num_experts",
    "post_embedding_ln", "scale_attn_by_inverse_layer_idx", "use_logn_attn", "use_NTK_by_parts_rope",
    "use_dynamic_ntk_rope", "use_yarn_rope", "use_attention_sinks", "clip_qkv",
)

_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.float64): "F64"}

# Models made from Python objects, kept while the object lives and its tensors are unchanged.
_made: "weakref.WeakKeyDictionary[Any, tuple[Any, Model]]" = weakref.WeakKeyDictionary()


def _array(value: Any, name: str) -> tuple[str, np.ndarray]:
    """A tensor or array as (safetensors dtype, C-contiguous numpy array), without a copy where
    its memory already is one."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor
        tensor = value.detach()
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        tensor = tensor.contiguous()
        if str(tensor.dtype) == "torch.bfloat16":
            torch = sys.modules["torch"]
            return "BF16", tensor.view(torch.int16).numpy()
        value = tensor.numpy()
    array = np.ascontiguousarray(np.asarray(value))
    dtype = _DTYPES.get(array.dtype)
    if dtype is None:
        raise Error(f"{name}: dtype {array.dtype} is not one headprint reads (float32, float16, bfloat16, float64)")
    return dtype, array


def _tensors(named: list[tuple[str, Any]]) -> list[tuple[str, str, list[int], np.ndarray]]:
    out = []
    for name, value in named:
        dtype, array = _array(value, name)
        out.append((name, dtype, list(array.shape), array))
    return out


def _signature(obj: Any) -> Optional[tuple]:
    """What says a torch module's weights are unchanged: each parameter's memory and version."""
    parameters = getattr(obj, "parameters", None)
    if parameters is None or not callable(parameters):
        return None
    try:
        return tuple((p.data_ptr(), p._version) for p in parameters())
    except (AttributeError, TypeError):
        return None


def _tokenizer_json(tokenizer: Any) -> Optional[bytes]:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    return backend.to_str().encode()


def _plain(value: Any) -> Any:
    """A config value as JSON can hold it."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def is_transformer_lens(obj: Any) -> bool:
    return hasattr(obj, "cfg") and hasattr(obj, "W_Q") and hasattr(obj, "W_E")


def from_transformer_lens(model: Any, tokenizer: Any = None) -> Model:
    """A HookedTransformer as it holds its weights (fold_ln, centring: as the user loaded it)."""
    config, named, tokenizer_json, label = transformer_lens_parts(model, tokenizer)
    return _headprint.from_tensors(json.dumps(config), _tensors(named), tokenizer_json, label)


def transformer_lens_parts(model: Any, tokenizer: Any = None) -> tuple[dict, list, Optional[bytes], str]:
    """What headprint reads of a HookedTransformer: the config, the named tensors in the
    `transformer_lens` family's layout, the tokenizer's JSON and a label."""
    cfg = model.cfg
    config = {key: _plain(getattr(cfg, key)) for key in _TL_KEYS if hasattr(cfg, key)}
    config["model_type"] = "hooked_transformer"
    tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is not None:
        config["bos_token_id"] = int(bos)
    named: list[tuple[str, Any]] = [("embed.W_E", model.W_E)]
    if config.get("positional_embedding_type", "standard") == "standard":
        named.append(("pos_embed.W_pos", model.W_pos))
    attention = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")
    # A HookedTransformer's blocks hold their own weights (grouped-query K and V repeated by
    # their properties); the model's stacked W_Q and the rest copy every layer's. An object
    # with only the stacked names is read through them.
    per_block = all(hasattr(getattr(block, "attn", None), "W_Q") for block in model.blocks)
    stacked = {} if per_block else {name: getattr(model, name) for name in attention}
    for layer in range(config["n_layers"]):
        block = model.blocks[layer]
        for name in attention:
            value = getattr(block.attn, name) if per_block else stacked[name][layer]
            named.append((f"blocks.{layer}.attn.{name}", value))
        for norm in ("ln1", "ln2"):
            module = getattr(block, norm, None)
            for short, long in (("w", "weight"), ("b", "bias")):
                value = getattr(module, short, None)
                if value is not None:
                    named.append((f"blocks.{layer}.{norm}.{long}", value))
        mlp = getattr(block, "mlp", None)
        for name in ("W_in", "b_in", "W_gate", "W_out", "b_out"):
            value = getattr(mlp, name, None)
            if value is not None:
                named.append((f"blocks.{layer}.mlp.{name}", value))
    ln_final = getattr(model, "ln_final", None)
    for short, long in (("w", "weight"), ("b", "bias")):
        value = getattr(ln_final, short, None)
        if value is not None:
            named.append((f"ln_final.{long}", value))
    # TransformerLens holds W_U as [d_model, d_vocab]; headprint reads the vocabulary by rows.
    w_u = model.W_U
    named.append(("unembed.W_U", w_u.T.contiguous() if hasattr(w_u, "contiguous") else np.ascontiguousarray(w_u.T)))
    named.append(("unembed.b_U", model.b_U))
    label = f"HookedTransformer {config.get('model_name', '')}".strip()
    return config, named, _tokenizer_json(tokenizer), label


def is_transformers(obj: Any) -> bool:
    return hasattr(obj, "config") and hasattr(obj, "state_dict") and hasattr(obj.config, "to_dict")


def from_transformers(model: Any, tokenizer: Any = None) -> Model:
    """A transformers model read as its saved files would be: the state dict with transformers'
    own conversions undone and tied copies dropped, as save_pretrained writes them."""
    config = model.config.to_dict()
    state = model.state_dict()
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:  # transformers 4 holds weights as it saves them
        revert_weight_conversion = None
    if revert_weight_conversion is not None:
        state = revert_weight_conversion(model, state)
    # save_pretrained writes a tied weight once, under its source's name: the keys of
    # transformers' tied-weights map are the copies (a list of names in transformers 4).
    tied = getattr(model, "all_tied_weights_keys", None) or getattr(model, "_tied_weights_keys", None) or ()
    copies = set(tied.keys() if isinstance(tied, dict) else tied)
    storages: dict = {}
    for name, tensor in state.items():
        storages.setdefault((tensor.data_ptr(), tuple(tensor.shape)), []).append(name)
    dropped = set()
    for names in storages.values():
        if len(names) > 1:
            kept = [n for n in names if n not in copies] or names[:1]
            dropped.update(n for n in names if n != kept[0])
    named = [
        (name, tensor)
        for name, tensor in state.items()
        if name not in dropped and getattr(tensor, "is_floating_point", lambda: True)()
    ]
    label = f"{type(model).__name__} {config.get('_name_or_path', '')}".strip()
    return _headprint.from_tensors(json.dumps(config, default=str), _tensors(named), _tokenizer_json(tokenizer), label)


def as_model(model: Any, tokenizer: Any = None) -> Model:
    """Whatever the user gave, as a headprint Model."""
    if isinstance(model, Model):
        return model
    if isinstance(model, (str, os.PathLike)):
        return _headprint.open(os.fspath(model))
    if is_transformer_lens(model):
        make = from_transformer_lens
    elif is_transformers(model):
        make = from_transformers
    else:
        raise Error(
            f"headprint reads a path, a link, a TransformerLens HookedTransformer or a transformers model, "
            f"not a {type(model).__name__}"
        )
    signature = _signature(model)
    if signature is not None and tokenizer is None:
        try:
            held = _made.get(model)
        except TypeError:
            held = None
        if held is not None and held[0] == signature:
            return held[1]
    made = make(model, tokenizer)
    if signature is not None and tokenizer is None:
        try:
            _made[model] = (signature, made)
        except TypeError:
            pass
    return made


def given_as(model: Any) -> str:
    """How the weights reached headprint: TransformerLens's are used as given."""
    return "as given" if is_transformer_lens(model) else "files"
