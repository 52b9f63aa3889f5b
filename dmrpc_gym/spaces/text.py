"""``PrintableText``: the gymnasium space of a dm_env_rpc STRING scalar."""
from __future__ import annotations

import functools
import unicodedata
from typing import Any

import numpy as np
from gymnasium import spaces as gs

__all__ = ["PrintableText", "TEXT_MAX_LENGTH"]

#: The ``max_length`` of the :class:`PrintableText` a STRING spec maps to. The
#: wire sets no limit; this admits any realistic text (a multi-kilobyte JSON
#: blob included) while ``sample()`` stays cheap.
TEXT_MAX_LENGTH = 65536


_WHITESPACE_CONTROLS = "\t\n\x0b\x0c\r"


@functools.lru_cache(maxsize=None)
def _printable_prototype() -> gs.Text:
    """One ``Text`` over the printable charset; its lookup tables are shared by every PrintableText."""
    chars = [c for c in map(chr, range(0x110000))
             if c.isprintable() or c in _WHITESPACE_CONTROLS
             or unicodedata.category(c) in ("Cf", "Zl", "Zp")]
    return gs.Text(1, min_length=0, charset="".join(chars))


class PrintableText(gs.Text):
    """A ``Text`` admitting any printable text: the space of a STRING scalar spec.

    Its charset is every assigned Unicode character except control characters
    (tab, newline, carriage return, vertical tab and form feed are kept),
    surrogates and private-use characters: ~150k characters, so that
    ``contains()`` (which checks each character against the charset) accepts
    real text in any script, emoji and joiners included. The lookup tables are
    built once per process (a fraction of a second, on first use) and shared;
    ``repr`` and pickles leave them out.

    >>> space = PrintableText()
    >>> space.contains("héllo wörld\\n✓ 🙂"), space.contains("\\x00"), space.contains("")
    (True, False, True)
    >>> space
    PrintableText(0, 65536)
    """

    def __init__(self, max_length: int = TEXT_MAX_LENGTH, *, min_length: int = 0,
                 seed: int | np.random.Generator | None = None):
        super().__init__(max_length, min_length=min_length, charset=" ", seed=seed)
        self.__dict__.update(self._shared_tables())

    @staticmethod
    def _shared_tables() -> dict[str, Any]:
        return {k: v for k, v in vars(_printable_prototype()).items() if k.startswith("_char")}

    def __repr__(self) -> str:
        return f"PrintableText({self.min_length}, {self.max_length})"

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_char")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.update(self._shared_tables())


