"""The package's functions, re-exported by ``headprint/__init__.py``: the names imported here
(numpy, pandas, typing's) stay out of ``dir(headprint)``. The extension hands back the core's
reports as typed objects (``_headprint.FingerprintReport``, ``InductionReport``, ``Comparison``,
``OvLogits``, ``AttentionPatterns``); the tables are built from them here."""

from __future__ import annotations

import warnings
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np
import pandas as pd

from . import _headprint, _progress
from ._headprint import DEFAULT_LENGTH, DEFAULT_SEED, DEFAULT_SEQUENCES, Error, Model
from ._readers import as_model, given_as

CIRCUITS = ("ov", "qk", "ov_residual", "qk_token")
# A circuit's scalars and a head's scores, in the order of the CLI's JSON keys (alphabetical),
# which the tables' columns have always followed.
_SPECTRUM_FIELDS = ("copying_score", "defective", "departure_from_normality", "eigenvector_condition", "error",
                    "imaginary_fraction", "scale")
_SCORES = ("copy_fidelity", "duplicate_token_score", "induction_score", "previous_token_score")
# The core's, as the CLI's --threshold defaults to it.
INDUCTION_HEAD_THRESHOLD: float = _headprint.INDUCTION_HEAD_THRESHOLD


class NetworkNote(UserWarning):
    """What the network did on the way: a request retried after a 503, a server that fell silent."""


_headprint.configure_links(False, lambda note: warnings.warn(note, NetworkNote, stacklevel=2))


def load(model: Any, *, tokenizer: Any = None) -> Model:
    """The model as headprint holds it. ``tokenizer`` (a transformers tokenizer) lets a model
    given as a Python object read text."""
    return as_model(model, tokenizer)


def _run(call, *args):
    report = _progress.reporter()
    try:
        return call(*args, report)
    finally:
        _progress.finish(report)


def _as_stored(model: Any, raw: bool) -> bool:
    """Whether the weights are read as stored: asked for, or a HookedTransformer's, which are
    used as TransformerLens holds them (its own fold_ln, if any)."""
    return raw or given_as(model) == "as given"


def _mode(model: Any, raw: bool) -> str:
    if given_as(model) == "as given":
        return "as given"
    return "raw" if raw else "folded"


def _fingerprint_report(model: Any, raw: bool, backend: str):
    held = as_model(model)
    return held, _run(held.fingerprint, _as_stored(model, raw), backend)


class FingerprintFrame(pd.DataFrame):
    """A fingerprint's table; in Jupyter it shows the layer x head grid of OV copying scores
    above the table. Anything computed from it is a plain DataFrame."""

    _metadata = ["_grid"]

    @property
    def _constructor(self):
        return pd.DataFrame

    def _repr_html_(self) -> Optional[str]:
        table = super()._repr_html_()
        grid = getattr(self, "_grid", None)
        return f"<div>{grid}</div>{table}" if grid else table


def fingerprint(model: Any, *, raw: bool = False, backend: str = "auto") -> pd.DataFrame:
    """Every head's spectral fingerprint: one row per head, indexed by (layer, head), with its
    name (``L5H1``) and one column per scalar of the CLI's per-head JSON, its path joined by
    ``_`` (``ov_copying_score``, ``qk_token_eigenvector_condition``, ...).

    ``raw``: the weights as stored; by default LayerNorm is folded as TransformerLens's fold_ln
    does. A HookedTransformer's weights are always used as given. ``backend``: "auto", "gpu" or
    "cpu". ``df.attrs`` holds the model's facts, the mode and the backend."""
    held, report = _fingerprint_report(model, raw, backend)
    rows = []
    for head in report.heads:
        row = {"layer": head.layer, "head": head.head, "name": head.name}
        for circuit in CIRCUITS:
            spectrum = getattr(head, circuit)
            for field in _SPECTRUM_FIELDS:
                row[f"{circuit}_{field}"] = getattr(spectrum, field)
        rows.append(row)
    frame = FingerprintFrame(pd.DataFrame(rows).set_index(["layer", "head"]))
    frame.attrs.update(
        model=report.model,
        label=held.label,
        mode=_mode(model, raw),
        backend=report.backend,
        model_link=report.model_link,
    )
    title = f"{held.label}: OV copying score of every head ({frame.attrs['mode']})"
    frame._grid = held.grid_svg(_as_stored(model, raw), backend, title)
    return frame


def eigenvalues(model: Any, circuit: str = "ov", *, raw: bool = False, backend: str = "auto") -> np.ndarray:
    """A circuit's eigenvalues, complex128 of shape [layers, heads, d_head] (TransformerLens's
    ``model.OV.eigenvalues``): ``circuit`` is "ov", "qk", "ov_residual" or "qk_token". A head
    whose circuit could not be read has NaN."""
    if circuit not in CIRCUITS:
        raise Error(f'circuit "{circuit}": choose one of {", ".join(CIRCUITS)}')
    held = as_model(model)
    # The residual-space circuits need no vocabulary Gram: they are read alone unless the whole
    # fingerprint is already held; the numbers are the fingerprint's either way.
    return _run(held.circuit, circuit, _as_stored(model, raw), backend).eigenvalues(circuit)


def attention(
    model: Any, tokens: Union[str, Sequence[int]], *, bos: bool = True, backend: str = "auto"
) -> np.ndarray:
    """Every head's attention pattern on ``tokens`` (token ids, or a string the model's tokenizer
    reads), float32 of shape [layers, heads, query, key]. ``bos``: start with the model's BOS
    token, as TransformerLens does."""
    held = as_model(model)
    if isinstance(tokens, str):
        ids, text = None, tokens
    else:
        ids, text = [int(t) for t in tokens], None
    return _run(held.attention, ids, text, bos, backend).patterns


def _induction_report(
    model: Any, length: int, sequences: int, seed: int, bos: bool, threshold: float, backend: str
):
    held = as_model(model)
    return _run(held.induction, length, sequences, seed, bos, threshold, backend)


def induction(
    model: Any,
    *,
    length: int = DEFAULT_LENGTH,
    sequences: int = DEFAULT_SEQUENCES,
    seed: int = DEFAULT_SEED,
    bos: bool = True,
    threshold: float = INDUCTION_HEAD_THRESHOLD,
    backend: str = "auto",
) -> pd.DataFrame:
    """The induction probe: random sequences of ``length`` tokens repeated twice, seeds ``seed``
    to ``seed + sequences - 1``; one row per head with its induction, previous-token and
    duplicate-token scores and copy fidelity (spreads over sequences as ``spread_*``).
    ``df.attrs`` holds the prefix-copy accuracy, the induction heads and the backend."""
    report = _induction_report(model, length, sequences, seed, bos, threshold, backend)
    rows = []
    for head in report.heads:
        row = {
            "name": head.name,
            "copy_fidelity": head.copy_fidelity,
            "duplicate_token_score": head.duplicate_token_score,
            "head": head.head,
            "induction_score": head.induction_score,
            "layer": head.layer,
            "previous_token_score": head.previous_token_score,
        }
        spread = head.spread
        if spread is not None:
            for score in _SCORES:
                of = getattr(spread, score)
                for stat in ("max", "min", "std"):
                    row[f"spread_{score}_{stat}"] = getattr(of, stat)
        rows.append(row)
    frame = pd.DataFrame(rows).set_index(["layer", "head"])
    frame.attrs.update(
        prefix_copy_accuracy=report.prefix_copy_accuracy,
        induction_heads=report.induction_heads,
        threshold=report.threshold,
        bos_token=report.bos_token,
        backend=report.backend,
    )
    return frame


def ov_logits(model: Any, head: str, *, top: int = 20, raw: bool = False) -> pd.DataFrame:
    """One head's token-space OV circuit read as self-copy logits: the ``top`` tokens by the
    raw diagonal and by the diagonal normalised by each row's spread, side by side."""
    held = as_model(model)
    report = held.ov_logits(head, top, _as_stored(model, raw))
    parts = {
        (which, field): [entry[i] for entry in getattr(report, f"top_{which}")]
        for which in ("raw", "normalised")
        for i, field in enumerate(("token", "id", "value"))
    }
    frame = pd.DataFrame(parts)
    frame.index.name = "rank"
    frame.attrs.update(head=report.head, mode=_mode(model, raw))
    return frame


def compare(
    *models: Any,
    raw: bool = False,
    length: int = DEFAULT_LENGTH,
    sequences: int = DEFAULT_SEQUENCES,
    seed: int = DEFAULT_SEED,
    bos: bool = True,
    threshold: float = INDUCTION_HEAD_THRESHOLD,
    backend: str = "auto",
) -> pd.DataFrame:
    """The spectral-fingerprint study's table: one row per model with its parameters, mean QK
    imaginary fraction, induction heads and prefix-copy accuracy, and the Spearman ρ of every
    spectral feature against every behavioural score across its heads (``rho_<feature>_<score>``),
    and the mode its spectra were read in (a HookedTransformer's weights are used as given)."""
    if not models:
        raise Error("compare needs at least one model")
    rows = []
    for given in models:
        held = as_model(given)
        entry = _run(held.compare, _as_stored(given, raw), length, sequences, seed, bos, threshold, backend)
        row: dict = {"mode": _mode(given, raw)}
        for key in ("model", "parameters", "heads", "mean_qk_imaginary_fraction", "induction_heads",
                    "prefix_copy_accuracy", "threshold", "sequence", "induction_head_names"):
            row[key] = getattr(entry, key)
        for spectral, behavioural, rho, _ in entry.spearman:
            row[f"rho_{spectral.replace('.', '_')}_{behavioural}"] = rho
        rows.append(row)
    return pd.DataFrame(rows).set_index("model")
