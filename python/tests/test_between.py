"""The circuits between heads from Python: composition scores against dense float64 numpy on a
TransformerLens-named object (its weights as given), against the CLI on the files, the table's
ratios, and the singular directions against numpy's SVD."""

import numpy as np
import pytest

import headprint
from conftest import FIXTURES
from test_transformer_lens_names import hooked_gpt2


def dense_composition(model):
    """TransformerLens's definition with dense d_model x d_model matrices: [l1, h1, l2, h2]."""
    ov = np.einsum("lhmd,lhdn->lhmn", model.W_V.astype(np.float64), model.W_O.astype(np.float64))
    qk = np.einsum("lhmd,lhnd->lhmn", model.W_Q.astype(np.float64), model.W_K.astype(np.float64))
    layers, heads = ov.shape[:2]
    out = {kind: np.zeros((layers, heads, layers, heads)) for kind in "qkv"}
    fro = np.linalg.norm
    for l1 in range(layers):
        for h1 in range(heads):
            a = ov[l1, h1]
            for l2 in range(l1 + 1, layers):
                for h2 in range(heads):
                    for kind, b in (("q", qk[l2, h2]), ("k", qk[l2, h2].T), ("v", ov[l2, h2])):
                        out[kind][l1, h1, l2, h2] = fro(a @ b) / (fro(a) * fro(b))
    return out


def test_composition_is_the_dense_definition_on_weights_as_given():
    model = hooked_gpt2(FIXTURES / "gpt2")
    expected = dense_composition(model)
    for kind in "qkv":
        ours = headprint.composition(model, kind, backend="cpu")
        assert ours.dtype == np.float64 and ours.shape == expected[kind].shape
        assert np.abs(ours - expected[kind]).max() <= 1e-10, kind
        for l1 in range(ours.shape[0]):
            assert (ours[l1, :, : l1 + 1, :] == 0).all(), "only later heads read earlier ones"


def test_composition_is_the_clis_on_the_files(cli):
    folder = FIXTURES / "llama"
    report = cli("composition", folder, "--backend", "cpu")
    for kind in "qkv":
        assert (headprint.composition(folder, kind, backend="cpu") == np.array(report["scores"][kind])).all()
    raw = cli("composition", folder, "--raw", "--backend", "cpu")
    assert (headprint.composition(folder, "k", raw=True, backend="cpu") == np.array(raw["scores"]["k"])).all()


def test_the_table_lists_every_pair_with_its_ratio_to_the_baseline():
    folder = FIXTURES / "gptchar-induction"
    table = headprint.composition_table(folder, backend="cpu")
    layers, heads = 2, 2
    assert len(table) == 3 * (layers * (layers - 1) // 2) * heads * heads
    for kind, rows in table.groupby("kind", sort=False):
        base = table.attrs["baseline"][kind]["mean"]
        assert np.allclose(rows["ratio"], rows["score"] / base, rtol=1e-14)
        assert (np.diff(rows["score"].to_numpy()) <= 0).all(), "strongest first"
        assert (rows["layer_from"] < rows["layer_to"]).all()
    best_k = table[(table.kind == "k") & (table.to == "L1H0")].iloc[0]
    assert best_k["from"] in ("L0H0", "L0H1") and best_k["ratio"] > 1.2
    assert table.attrs["mode"] == "folded"
    with pytest.raises(headprint.Error):
        headprint.composition(folder, "x")


def test_singular_directions_are_numpys_svd():
    model = hooked_gpt2(FIXTURES / "gpt2")
    for circuit in ("ov", "qk"):
        ours = headprint.svd(model, "L1H1", circuit)
        a, b = (model.W_V[1, 1], model.W_O[1, 1]) if circuit == "ov" else (model.W_Q[1, 1], model.W_K[1, 1].T)
        dense = a.astype(np.float64) @ b.astype(np.float64)
        theirs = np.linalg.svd(dense, compute_uv=False)[: a.shape[1]]
        assert np.abs(ours.singular_values - theirs).max() <= 1e-12 * theirs[0]
        rebuilt = ours.U @ np.diag(ours.singular_values) @ ours.V.T
        assert np.abs(rebuilt - dense).max() <= 1e-12 * np.abs(dense).max()
        assert sorted(i for block in ours.blocks for i in block) == list(range(a.shape[1]))
    both = headprint.svd(FIXTURES / "gpt2", "L0H1", "both", tokens=3)
    assert both.mode == "folded" and both.ov.head == "L0H1"
    first = both.ov.directions[0]
    assert len(first.input_top) == 3 and first.output_top[0][2] >= first.output_top[-1][2]
    with pytest.raises(headprint.Error, match="unknown head"):
        headprint.svd(FIXTURES / "gpt2", "L7H0")
