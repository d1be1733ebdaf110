"""A model with TransformerLens's attribute names, built from the GPT-2 fixture's weights with
numpy alone: headprint reads it as TransformerLens holds it ("as given") and finds what it finds
in the files themselves."""

import json
from types import SimpleNamespace

import numpy as np

import headprint
from conftest import FIXTURES


def read_safetensors(path):
    data = path.read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    body = data[8 + size :]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        start, end = entry["data_offsets"]
        assert entry["dtype"] == "F32"
        tensors[name] = np.frombuffer(body[start:end], dtype=np.float32).reshape(entry["shape"])
    return tensors


def hooked_gpt2(folder):
    """GPT-2's Conv1D weights (in x out) in TransformerLens's shapes, LayerNorms unfolded."""
    config = json.loads((folder / "config.json").read_text())
    w = read_safetensors(folder / "model.safetensors")
    d, heads, layers = config["n_embd"], config["n_head"], config["n_layer"]
    d_head = d // heads
    split = lambda m: np.ascontiguousarray(m.reshape(d, heads, d_head).transpose(1, 0, 2))
    stacked = {k: [] for k in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")}
    blocks = []
    for l in range(layers):
        p = f"transformer.h.{l}."
        qkv, bias = w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"]
        for i, name in enumerate("QKV"):
            stacked[f"W_{name}"].append(split(qkv[:, i * d : (i + 1) * d]))
            stacked[f"b_{name}"].append(bias[i * d : (i + 1) * d].reshape(heads, d_head))
        stacked["W_O"].append(w[p + "attn.c_proj.weight"].reshape(heads, d_head, d))
        stacked["b_O"].append(w[p + "attn.c_proj.bias"])
        norm = lambda n: SimpleNamespace(w=w[p + n + ".weight"], b=w[p + n + ".bias"])
        mlp = SimpleNamespace(
            W_in=w[p + "mlp.c_fc.weight"], b_in=w[p + "mlp.c_fc.bias"],
            W_out=w[p + "mlp.c_proj.weight"], b_out=w[p + "mlp.c_proj.bias"],
        )
        blocks.append(SimpleNamespace(ln1=norm("ln_1"), ln2=norm("ln_2"), mlp=mlp))
    cfg = SimpleNamespace(
        n_layers=layers, d_model=d, n_heads=heads, d_head=d_head, d_mlp=4 * d, d_vocab=config["vocab_size"],
        n_ctx=config["n_positions"], act_fn="gelu_new", normalization_type="LN",
        positional_embedding_type="standard", eps=config["layer_norm_epsilon"], model_name="gpt2-fixture",
    )
    return SimpleNamespace(
        cfg=cfg, W_E=w["transformer.wte.weight"], W_pos=w["transformer.wpe.weight"], blocks=blocks,
        ln_final=SimpleNamespace(w=w["transformer.ln_f.weight"], b=w["transformer.ln_f.bias"]),
        W_U=np.ascontiguousarray(w["transformer.wte.weight"].T), b_U=np.zeros(config["vocab_size"], dtype=np.float32),
        **{k: np.stack(v) for k, v in stacked.items()},
    )


def test_transformer_lens_names_read_as_given(cli):
    folder = FIXTURES / "gpt2"
    model = hooked_gpt2(folder)
    frame = headprint.fingerprint(model, backend="cpu")
    assert frame.attrs["mode"] == "as given"
    assert frame.attrs["model"]["family"] == "transformer_lens"
    # As given means unfolded here: the files' raw fingerprint. Not bit for bit: the files tie
    # W_U to W_E, which this object holds untied, and the token Grams take another path.
    expected = cli("fingerprint", folder, "--raw", "--backend", "cpu")
    close = lambda a, b: abs(a - b) <= 1e-12 * max(1.0, abs(b))
    for head in expected["heads"]:
        row = frame.loc[(head["layer"], head["head"])]
        for circuit in ("ov", "qk", "ov_residual", "qk_token"):
            for key in ("copying_score", "imaginary_fraction", "departure_from_normality", "scale"):
                assert close(row[f"{circuit}_{key}"], head[circuit][key]), (circuit, key)
    values = headprint.eigenvalues(model, "ov", backend="cpu")
    for head in expected["heads"]:
        listed = np.array([complex(re, im) for re, im in head["ov"]["eigenvalues"]])
        got = values[head["layer"], head["head"], : len(listed)]
        assert np.abs(got - listed).max() <= 1e-12 * max(1.0, np.abs(listed).max())


def test_transformer_lens_names_run_the_same_forward_pass(cli):
    folder = FIXTURES / "gpt2"
    reference = json.loads((folder / "expected.json").read_text())["forward"]
    patterns = headprint.attention(hooked_gpt2(folder), reference["tokens"], bos=False, backend="cpu")
    assert np.abs(patterns - np.array(reference["patterns"])).max() <= 1e-4
    from_files = headprint.attention(folder, reference["tokens"], bos=False, backend="cpu")
    assert np.abs(patterns - from_files).max() <= 1e-6


def test_a_refused_transformer_lens_feature_is_named():
    model = hooked_gpt2(FIXTURES / "gpt2")
    model.cfg.attn_scores_soft_cap = 50.0
    try:
        headprint.fingerprint(model)
    except headprint.Error as error:
        assert "attn_scores_soft_cap" in str(error)
    else:
        raise AssertionError("a soft cap was ignored")
