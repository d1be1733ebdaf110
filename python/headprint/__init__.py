"""headprint: every attention head's spectral fingerprint (the eigenvalues of its QK and OV
circuits, copying score, imaginary fraction, κ) next to what the head does when the model runs.

Every function takes a model as a path (a .safetensors file or a folder), a link
(``hf:ORG/NAME@REV``, an http(s) folder), a TransformerLens ``HookedTransformer``, a
transformers model, or a ``headprint.Model`` from :func:`load`. A Model keeps what was
computed, so asking for the eigenvalues after the fingerprint computes nothing again.
"""

from importlib.metadata import version as _version

from ._api import (
    CIRCUITS,
    INDUCTION_HEAD_THRESHOLD,
    FingerprintFrame,
    NetworkNote,
    attention,
    compare,
    eigenvalues,
    fingerprint,
    induction,
    load,
    ov_logits,
)
from ._between import HeadSvd, composition, composition_table, svd
from ._sweep import read_sweep, sweep
from ._headprint import CircuitSvd, Error, Model

# The installed distribution's version, which maturin takes from crates/python/Cargo.toml
# (pyproject.toml declares it dynamic): the crate is the one place it is written.
__version__: str = _version(__name__)

__all__ = [
    "Error",
    "Model",
    "NetworkNote",
    "FingerprintFrame",
    "CIRCUITS",
    "INDUCTION_HEAD_THRESHOLD",
    "load",
    "fingerprint",
    "eigenvalues",
    "attention",
    "induction",
    "ov_logits",
    "compare",
    "composition",
    "composition_table",
    "svd",
    "CircuitSvd",
    "HeadSvd",
    "sweep",
    "read_sweep",
]

# They were defined in headprint itself before the private module held them; reprs, help()
# and pickles keep naming them headprint.X.
for _name in ("NetworkNote", "FingerprintFrame", "load", "fingerprint", "eigenvalues", "attention", "induction",
              "ov_logits", "compare", "composition", "composition_table", "svd", "HeadSvd", "sweep", "read_sweep"):
    globals()[_name].__module__ = __name__
del _name
