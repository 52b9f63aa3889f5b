"""Shared by every test folder: the helper modules of ``tests/support/`` import by their names
(``import servers``, ``from raw_h2 import RawClient``) from any folder below ``tests/``."""
from __future__ import annotations

import os
import sys

_SUPPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support")
if _SUPPORT not in sys.path:
    sys.path.insert(0, _SUPPORT)
