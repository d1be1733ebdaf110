"""The circuits between heads: composition scores and singular directions (``composition``,
``composition_table``, ``svd``), over the core's typed reports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as _np
import pandas as _pd

from ._api import _as_stored, _mode, _run
from ._headprint import DEFAULT_SVD_TOKENS, CircuitSvd, Error
from ._readers import as_model

KINDS = ("q", "k", "v")


def _report(model: Any, raw: bool, backend: str):
    return _run(as_model(model).composition, _as_stored(model, raw), backend)


def composition(model: Any, kind: str = "k", *, raw: bool = False, backend: str = "auto") -> _np.ndarray:
    """One kind's composition scores, float64 [layers, heads, layers, heads] (TransformerLens's
    ``all_composition_scores(kind.upper())``): [l1, h1, l2, h2] is how much head h1 of layer l1
    writes into what head h2 of a later layer l2 reads with its queries (``kind`` "q"), keys
    ("k") or values ("v"); 0 unless l1 < l2. The three kinds are computed together, once per
    mode and backend."""
    if kind.lower() not in KINDS:
        raise Error(f'composition kind "{kind}": choose "q", "k" or "v"')
    return _report(model, raw, backend).scores(kind.lower())


def composition_table(model: Any, *, raw: bool = False, backend: str = "auto") -> _pd.DataFrame:
    """Every writer → reader pair of every kind, strongest first within a kind: ``kind``,
    ``from``, ``to`` (``L5H1``), their layers and heads, ``score`` and ``ratio`` (the score over
    the kind's random baseline). ``df.attrs`` holds each kind's baseline (mean, spread and
    1/√d_model), the mode and the backend."""
    report = _report(model, raw, backend)
    rows = [row for kind in KINDS for row in report.ranked(kind)]
    frame = _pd.DataFrame(rows, columns=["kind", "from", "to", "score", "ratio"])
    for side in ("from", "to"):
        parts = frame[side].str.extract(r"L(\d+)H(\d+)").astype(int)
        frame[f"layer_{side}"], frame[f"head_{side}"] = parts[0], parts[1]
    frame.attrs.update(
        baseline={kind: dict(zip(("mean", "spread", "rms"), report.baseline(kind))) for kind in KINDS},
        mode=_mode(model, raw),
        backend=report.backend,
    )
    return frame


@dataclass(frozen=True)
class HeadSvd:
    """Both circuits' singular directions of one head: ``ov`` and ``qk`` (each a ``CircuitSvd``
    with ``singular_values``, ``U``, ``V``, ``blocks``, ``null`` and ``directions``), the relative
    gap that separates blocks and the null tolerance."""

    head: str
    mode: str
    ov: CircuitSvd
    qk: CircuitSvd
    gap: float
    null_tolerance: float


def svd(model: Any, head: str, circuit: str = "ov", *, raw: bool = False, tokens: int = DEFAULT_SVD_TOKENS):
    """One head's singular directions (TransformerLens 3.9's ``decompose_head``): ``circuit``
    "ov" or "qk" gives that circuit's ``CircuitSvd``; "both" a ``HeadSvd`` with the two. Each
    block of directions is read out through the vocabulary, ``tokens`` at each end: a lone
    direction signed, a degenerate block (values within a relative gap of 1e-2) as a subspace."""
    if circuit not in ("ov", "qk", "both"):
        raise Error(f'circuit "{circuit}": choose "ov", "qk" or "both"')
    ov, qk, gap, null_tolerance = as_model(model).svd(head, _as_stored(model, raw), tokens)
    if circuit == "ov":
        return ov
    if circuit == "qk":
        return qk
    return HeadSvd(head=ov.head, mode=_mode(model, raw), ov=ov, qk=qk, gap=gap, null_tolerance=null_tolerance)
