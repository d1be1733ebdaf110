"""The circuits between heads against TransformerLens 3.9 itself: `all_composition_scores` and
`tools/analysis/svd_circuits.decompose_head` on HookedTransformers built offline from fixtures
(multi-head GPT-2 folded and centred as from_pretrained leaves it; TransformerLens's own
converters, unprocessed and folded, for grouped-query Qwen2 and for GPT-J). Needs torch,
transformers and transformer_lens: `scripts/python_tests.sh --torch`."""

import shutil

import numpy as np
import pytest

import headprint
from conftest import FIXTURES
from test_torch import hooked_gpt2

pytestmark = pytest.mark.torch
try:
    import torch
    import transformers
except ImportError:  # deselected by `-m "not torch"`
    torch = transformers = None

# TransformerLens computes in float32.
TOLERANCE = 2e-5


def theirs(model, kind):
    return model.all_composition_scores(kind.upper()).detach().double().numpy()


def test_composition_equals_all_composition_scores_as_given():
    model = hooked_gpt2()
    for kind in "qkv":
        ours = headprint.composition(model, kind, backend="cpu")
        assert np.abs(ours - theirs(model, kind)).max() <= TOLERANCE, kind


def converted(name, tmp_path, fold):
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.loading_from_pretrained import convert_hf_model_config
    from transformer_lens.pretrained import weight_conversions

    folder = tmp_path / "fixture"
    if not folder.exists():
        shutil.copytree(FIXTURES / f"families/{name}", folder)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder)
    fields = convert_hf_model_config(str(folder))
    cfg = HookedTransformerConfig(**{k: v for k, v in fields.items() if k in HookedTransformerConfig.__dataclass_fields__})
    tl = HookedTransformer(cfg)
    conversions = {"qwen2": "convert_qwen2_weights", "gptj": "convert_gptj_weights"}
    tl.load_and_process_state_dict(
        getattr(weight_conversions, conversions[name])(hf, cfg),
        fold_ln=fold, center_writing_weights=False, center_unembed=False, fold_value_biases=False,
    )
    return folder, tl


@pytest.mark.parametrize("name", ["qwen2", "gptj"])
@pytest.mark.parametrize("fold", [False, True])
def test_the_files_composition_equals_transformer_lens(name, fold, tmp_path):
    """headprint on the files, raw or folded, against TransformerLens's converter of the same
    model unprocessed or with fold_ln: Qwen2 has grouped-query attention (4 query heads on 2
    key/value heads)."""
    folder, tl = converted(name, tmp_path, fold)
    for kind in "qkv":
        ours = headprint.composition(folder, kind, raw=not fold, backend="cpu")
        assert np.abs(ours - theirs(tl, kind)).max() <= TOLERANCE, (name, fold, kind)


def test_singular_directions_equal_decompose_head():
    from transformer_lens.tools.analysis.svd_circuits import decompose_head

    model = hooked_gpt2()
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            decomposition = decompose_head(model, layer, head)
            for circuit, reference in (("ov", decomposition.OV), ("qk", decomposition.QK)):
                ours = headprint.svd(model, f"L{layer}H{head}", circuit)
                S = reference.S.detach().double().numpy()
                assert np.abs(ours.singular_values - S).max() <= 1e-5 * S[0], (layer, head, circuit)
                blocks = [[row.idx for row in reference.rank_report if row.block_id == b]
                          for b in sorted({row.block_id for row in reference.rank_report})]
                assert ours.blocks == blocks, (layer, head, circuit)
                # Lone directions agree up to the joint sign of U_i and V_i.
                for block in blocks:
                    if len(block) == 1:
                        i = block[0]
                        u = reference.U[:, i].detach().double().numpy()
                        sign = np.sign(u @ ours.U[:, i])
                        assert np.abs(sign * ours.U[:, i] - u).max() <= 1e-4
                        v = reference.V[:, i].detach().double().numpy()
                        assert np.abs(sign * ours.V[:, i] - v).max() <= 1e-4
