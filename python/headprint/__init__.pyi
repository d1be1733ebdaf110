from typing import Any, Sequence, Union

import numpy as np
import pandas as pd

from ._headprint import CircuitSvd as CircuitSvd, Error as Error, Model as Model
from ._between import HeadSvd as HeadSvd

__version__: str
__all__: list[str]

CIRCUITS: tuple[str, ...]
INDUCTION_HEAD_THRESHOLD: float

class NetworkNote(UserWarning): ...

class FingerprintFrame(pd.DataFrame): ...

ModelLike = Union[str, Any]

def load(model: ModelLike, *, tokenizer: Any = ...) -> Model: ...
def fingerprint(model: ModelLike, *, raw: bool = ..., backend: str = ...) -> pd.DataFrame: ...
def eigenvalues(model: ModelLike, circuit: str = ..., *, raw: bool = ..., backend: str = ...) -> np.ndarray: ...
def attention(
    model: ModelLike, tokens: Union[str, Sequence[int]], *, bos: bool = ..., backend: str = ...
) -> np.ndarray: ...
def induction(
    model: ModelLike,
    *,
    length: int = ...,
    sequences: int = ...,
    seed: int = ...,
    bos: bool = ...,
    threshold: float = ...,
    backend: str = ...,
) -> pd.DataFrame: ...
def ov_logits(model: ModelLike, head: str, *, top: int = ..., raw: bool = ...) -> pd.DataFrame: ...
def compare(
    *models: ModelLike,
    raw: bool = ...,
    length: int = ...,
    sequences: int = ...,
    seed: int = ...,
    bos: bool = ...,
    threshold: float = ...,
    backend: str = ...,
) -> pd.DataFrame: ...
def composition(model: ModelLike, kind: str = ..., *, raw: bool = ..., backend: str = ...) -> np.ndarray: ...
def composition_table(model: ModelLike, *, raw: bool = ..., backend: str = ...) -> pd.DataFrame: ...
def svd(model: ModelLike, head: str, circuit: str = ..., *, raw: bool = ..., tokens: int = ...) -> Union[CircuitSvd, HeadSvd]: ...
