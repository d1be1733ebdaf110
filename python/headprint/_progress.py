"""Progress through tqdm, when tqdm is installed and the session is interactive (a terminal,
IPython or Jupyter); otherwise none at all."""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional


def _interactive() -> bool:
    if "ipykernel" in sys.modules or hasattr(sys, "ps1"):
        return True
    stream = sys.stderr
    return bool(stream is not None and hasattr(stream, "isatty") and stream.isatty())


class _Bars:
    """One bar per stage (Grams, heads, probe), each closed when the next begins."""

    def __init__(self, tqdm: Any) -> None:
        self._tqdm = tqdm
        self._bar: Any = None
        self._stage: Optional[str] = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage != self._stage:
            self.close()
            self._bar = self._tqdm(total=total, desc=stage, leave=False)
            self._stage = stage
        self._bar.total = total
        self._bar.n = done
        self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def reporter() -> Optional[Callable[[str, int, int], None]]:
    if not _interactive():
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return _Bars(tqdm)


def finish(report: Optional[Callable[[str, int, int], None]]) -> None:
    if isinstance(report, _Bars):
        report.close()
