"""Every function on the fixtures, against the CLI's JSON (bit for bit) and the fixtures'
references; bad input raises headprint.Error."""

import json
import math

import numpy as np
import pandas as pd
import pytest

import headprint
from conftest import FIXTURES

MODELS = ["gpt2", "llama", "pythia", "families/qwen3", "families/gemma2", "families/mixtral"]
CIRCUITS = ["ov", "qk", "ov_residual", "qk_token"]


def same(python_value, cli_value):
    """Equal, bit for bit; a missing number (κ of a defective circuit) is missing in both."""
    if cli_value is None:
        return python_value is None or (isinstance(python_value, float) and math.isnan(python_value))
    return python_value == cli_value


@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize("name", MODELS)
def test_fingerprint_is_the_cli_fingerprint(cli, name, raw):
    path = FIXTURES / name
    expected = cli("fingerprint", path, "--backend", "cpu", *(["--raw"] if raw else []))
    frame = headprint.fingerprint(path, raw=raw, backend="cpu")
    assert isinstance(frame, pd.DataFrame)
    assert len(frame) == len(expected["heads"])
    assert frame.attrs["mode"] == ("raw" if raw else "folded")
    assert frame.attrs["model"] == expected["model"]
    for head in expected["heads"]:
        row = frame.loc[(head["layer"], head["head"])]
        assert row["name"] == f"L{head['layer']}H{head['head']}"
        for circuit in CIRCUITS:
            for key, value in head[circuit].items():
                if key == "eigenvalues":
                    continue
                assert same(row[f"{circuit}_{key}"], value), (name, head["layer"], head["head"], circuit, key)


@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize("name", MODELS)
def test_eigenvalues_are_the_cli_eigenvalues(cli, name, raw):
    path = FIXTURES / name
    expected = cli("fingerprint", path, "--backend", "cpu", *(["--raw"] if raw else []))
    facts = expected["model"]
    # A fresh model for each circuit: the residual-space ones are then read without the
    # vocabulary's Grams, the token-space ones through the whole fingerprint.
    for circuit in CIRCUITS:
        values = headprint.eigenvalues(headprint.load(path), circuit, raw=raw, backend="cpu")
        assert values.dtype == np.complex128
        assert values.shape == (facts["layers"], facts["heads"], facts["d_head"])
        for head in expected["heads"]:
            listed = [complex(re, im) for re, im in head[circuit]["eigenvalues"]]
            got = values[head["layer"], head["head"]]
            assert list(got[: len(listed)]) == listed, (circuit, head["layer"], head["head"])
            assert np.isnan(got[len(listed):]).all()


@pytest.mark.parametrize("name", ["gpt2", "families/qwen2", "families/gemma2", "families/falcon-rw", "families/mixtral"])
def test_attention_matches_the_reference_forward_pass(name):
    reference = json.loads((FIXTURES / name / "expected.json").read_text())["forward"]
    patterns = headprint.attention(FIXTURES / name, reference["tokens"], bos=False, backend="cpu")
    expected = np.array(reference["patterns"], dtype=np.float64)
    assert patterns.shape == expected.shape
    assert patterns.dtype == np.float32
    assert np.abs(patterns - expected).max() <= 1e-4


def test_attention_is_the_cli_attention(cli):
    path = FIXTURES / "gpt2"
    expected = cli("attention", path, "--tokens", "3,1,4,1,5,9,2,6", "--backend", "cpu")
    patterns = headprint.attention(path, [3, 1, 4, 1, 5, 9, 2, 6], backend="cpu")
    assert np.array_equal(patterns, np.array(expected["patterns"], dtype=np.float32))
    text = headprint.attention(path, "the dog", bos=False, backend="cpu")
    by_text = cli("attention", path, "--text", "the dog", "--no-bos", "--backend", "cpu")
    assert np.array_equal(text, np.array(by_text["patterns"], dtype=np.float32))


@pytest.mark.parametrize("name", ["gpt2", "families/qwen2"])
def test_induction_is_the_cli_probe(cli, name):
    path = FIXTURES / name
    expected = cli("probe", path, "--induction", "--len", 12, "--sequences", 3, "--seed", 5, "--backend", "cpu")
    frame = headprint.induction(path, length=12, sequences=3, seed=5, backend="cpu")
    assert frame.attrs["prefix_copy_accuracy"] == expected["prefix_copy_accuracy"]
    assert frame.attrs["induction_heads"] == expected["induction_heads"]
    for head in expected["heads"]:
        row = frame.loc[(head["layer"], head["head"])]
        for key in ("induction_score", "previous_token_score", "duplicate_token_score", "copy_fidelity"):
            assert row[key] == head[key], (name, key)
        assert row["spread_induction_score_std"] == head["spread"]["induction_score"]["std"]


def test_ov_logits_is_the_cli_ov_logits(cli):
    path = FIXTURES / "gpt2"
    expected = cli("ov-logits", path, "--head", "L1H0", "--top", 5)
    frame = headprint.ov_logits(path, "L1H0", top=5)
    assert frame.attrs["head"] == "L1H0"
    for which in ("raw", "normalised"):
        listed = expected[f"top_{which}"]
        assert list(frame[(which, "id")]) == [e["id"] for e in listed]
        assert list(frame[(which, "value")]) == [e["value"] for e in listed]
        assert list(frame[(which, "token")]) == [e["token"] for e in listed]


def test_compare_is_the_cli_table(cli):
    paths = [FIXTURES / "gpt2", FIXTURES / "families/qwen2"]
    expected = cli("compare", *paths, "--len", 10, "--sequences", 2, "--backend", "cpu")
    frame = headprint.compare(*paths, length=10, sequences=2, backend="cpu")
    assert list(frame.index) == [m["model"] for m in expected["models"]]
    assert list(frame["mode"]) == ["folded", "folded"]
    for entry in expected["models"]:
        row = frame.loc[entry["model"]]
        for key in ("parameters", "heads", "mean_qk_imaginary_fraction", "induction_heads", "prefix_copy_accuracy", "sequence"):
            assert row[key] == entry[key], key
        for correlation in entry["spearman"]:
            column = f"rho_{correlation['spectral'].replace('.', '_')}_{correlation['behavioural']}"
            assert same(row[column], correlation["rho"]), column


def test_a_model_keeps_what_it_computed():
    model = headprint.load(FIXTURES / "gpt2")
    first = headprint.fingerprint(model, backend="cpu")
    again = headprint.fingerprint(model, backend="cpu")
    pd.testing.assert_frame_equal(first, again)
    grid = first._repr_html_()
    assert grid.startswith("<div><svg") and "L" in grid and "<table" in grid


def test_bad_input_raises_headprint_errors(tmp_path):
    assert issubclass(headprint.Error, ValueError)
    broken = tmp_path / "model.safetensors"
    broken.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    cases = [
        lambda: headprint.fingerprint(tmp_path / "missing"),
        lambda: headprint.fingerprint(broken),
        lambda: headprint.fingerprint(FIXTURES / "gpt2", backend="tpu"),
        lambda: headprint.eigenvalues(FIXTURES / "gpt2", "vo"),
        lambda: headprint.ov_logits(FIXTURES / "gpt2", "L9H9"),
        lambda: headprint.attention(FIXTURES / "gpt2", [10_000]),
        lambda: headprint.fingerprint(object()),
        lambda: headprint.fingerprint("hf:not a link"),
    ]
    messages = []
    for case in cases:
        with pytest.raises(headprint.Error) as raised:
            case()
        message = str(raised.value)
        assert message and "\n" not in message
        messages.append(message)
    assert "tpu" in messages[2] and "vo" in messages[3] and "L9H9" in messages[4]
    # The interpreter and the package go on working after every one of them.
    assert len(headprint.fingerprint(FIXTURES / "gpt2", backend="cpu")) == 4


def test_progress_is_silent_when_not_interactive():
    from headprint import _progress

    assert _progress.reporter() is None
