"""headprint given torch objects: a transformers model read as its files are, and a
TransformerLens HookedTransformer built offline from a fixture, against TransformerLens's own
eigenvalues and the fixture's reference. Needs torch, transformers and transformer_lens:
scripts/check_python_torch.sh runs these (`pytest -m torch`)."""

import json

import numpy as np
import pytest

import headprint
from conftest import FIXTURES

pytestmark = pytest.mark.torch
try:
    import torch
    import transformers
except ImportError:  # deselected by `-m "not torch"`; run with scripts/python_tests.sh --torch
    torch = transformers = None


@pytest.mark.parametrize("name", ["gpt2", "llama", "families/qwen3", "families/gemma2", "families/mixtral"])
def test_a_transformers_model_is_read_as_its_files(cli, name):
    folder = FIXTURES / name
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    expected = cli("fingerprint", folder, "--backend", "cpu")
    frame = headprint.fingerprint(model, backend="cpu")
    assert frame.attrs["mode"] == "folded"
    assert frame.attrs["model"] == expected["model"]
    for head in expected["heads"]:
        row = frame.loc[(head["layer"], head["head"])]
        for circuit in ("ov", "qk", "ov_residual", "qk_token"):
            assert row[f"{circuit}_copying_score"] == head[circuit]["copying_score"], (name, circuit)
    # The same object again, unchanged, is not read again; changed, it is.
    assert headprint.load(model) is headprint.load(model)
    before = headprint.load(model)
    with torch.no_grad():
        next(model.parameters()).mul_(2.0)
    assert headprint.load(model) is not before


def hooked_gpt2():
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.pretrained.weight_conversions.gpt2 import convert_gpt2_weights

    folder = FIXTURES / "gpt2"
    config = json.loads((folder / "config.json").read_text())
    hf = transformers.GPT2LMHeadModel.from_pretrained(folder)
    cfg = HookedTransformerConfig(
        n_layers=config["n_layer"], d_model=config["n_embd"], n_heads=config["n_head"],
        d_head=config["n_embd"] // config["n_head"], d_mlp=4 * config["n_embd"], d_vocab=config["vocab_size"],
        n_ctx=config["n_positions"], act_fn="gelu_new", normalization_type="LN", eps=config["layer_norm_epsilon"],
        original_architecture="GPT2LMHeadModel", default_prepend_bos=False,
    )
    model = HookedTransformer(cfg)
    model.load_and_process_state_dict(
        convert_gpt2_weights(hf, cfg), fold_ln=True, center_writing_weights=True, center_unembed=True
    )
    return model


def test_eigenvalues_equal_transformer_lens():
    """headprint's names against TransformerLens's factored circuits: `ov_residual` is
    `model.OV`, `qk` is `model.QK`, and the token-space `ov` and `qk_token` are the full
    circuits `W_E OV W_U` and `W_E QK W_E^T`."""
    model = hooked_gpt2()
    theirs_by_circuit = {
        "ov_residual": model.OV,
        "qk": model.QK,
        "ov": model.W_E @ model.OV @ model.W_U,
        "qk_token": model.W_E @ model.QK @ model.W_E.T,
    }
    for circuit, theirs in theirs_by_circuit.items():
        ours = headprint.eigenvalues(model, circuit, backend="cpu")
        theirs = theirs.eigenvalues.detach().numpy().astype(np.complex128)
        assert ours.shape == theirs.shape
        for layer in range(ours.shape[0]):
            for head in range(ours.shape[1]):
                a, b = np.sort_complex(ours[layer, head]), np.sort_complex(theirs[layer, head])
                assert np.abs(a - b).max() <= 1e-4 * max(1.0, np.abs(b).max()), (circuit, layer, head)


def test_a_hooked_transformer_runs_the_reference_forward_pass():
    model = hooked_gpt2()
    reference = json.loads((FIXTURES / "gpt2" / "expected.json").read_text())["forward"]
    ours = headprint.attention(model, reference["tokens"], bos=False, backend="cpu")
    _, cache = model.run_with_cache(torch.tensor([reference["tokens"]]))
    theirs = np.stack([cache["pattern", layer][0].detach().numpy() for layer in range(model.cfg.n_layers)])
    assert np.abs(ours - theirs).max() <= 1e-5
    assert np.abs(ours - np.array(reference["patterns"])).max() <= 1e-4
    frame = headprint.fingerprint(model, backend="cpu")
    assert frame.attrs["mode"] == "as given" and len(frame) == 4


CONVERTERS = {"families/qwen2": "convert_qwen2_weights", "families/gptj": "convert_gptj_weights", "families/opt": "convert_opt_weights"}


@pytest.mark.parametrize("name", sorted(CONVERTERS))
def test_family_weights_are_read_as_transformer_lens_converts_them(name, tmp_path):
    """TransformerLens's own weight converter for the family, unprocessed (no fold, no
    centring), against headprint's family file on the same transformers model: every head's
    four circuits the same, and TransformerLens's float32 eigenvalues beside them."""
    import shutil

    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.loading_from_pretrained import convert_hf_model_config
    from transformer_lens.pretrained import weight_conversions

    # TransformerLens picks hard-coded configs by words in a model's name: a neutral folder.
    folder = tmp_path / "fixture"
    shutil.copytree(FIXTURES / name, folder)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder)
    fields = convert_hf_model_config(str(folder))
    cfg = HookedTransformerConfig(**{k: v for k, v in fields.items() if k in HookedTransformerConfig.__dataclass_fields__})
    tl = HookedTransformer(cfg)
    converted = getattr(weight_conversions, CONVERTERS[name])(hf, cfg)
    tl.load_and_process_state_dict(
        converted, fold_ln=False, center_writing_weights=False, center_unembed=False, fold_value_biases=False
    )
    for circuit in ("ov", "qk", "ov_residual", "qk_token"):
        from_files = headprint.eigenvalues(hf, circuit, raw=True, backend="cpu")
        from_tl = headprint.eigenvalues(tl, circuit, backend="cpu")
        scale = max(1.0, np.abs(from_files).max())
        assert np.abs(np.sort_complex(from_files) - np.sort_complex(from_tl)).max() <= 1e-10 * scale, (name, circuit)
    for circuit, theirs in (("ov_residual", tl.OV), ("qk", tl.QK)):
        ours = np.sort_complex(headprint.eigenvalues(hf, circuit, raw=True, backend="cpu"))
        theirs = np.sort_complex(theirs.eigenvalues.detach().numpy().astype(np.complex128))
        assert np.abs(ours - theirs).max() <= 1e-4 * max(1.0, np.abs(theirs).max()), (name, circuit)
