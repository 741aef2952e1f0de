"""Store vocabularies light enough for the CLI's import path (no SQLAlchemy): the session modes.

`store/types.py` re-exports them next to the column types that use them.
"""

from __future__ import annotations

from typing import Literal

SessionMode = Literal["evotrainer", "score-only"]  # evotrainer, or the paper's score-only baseline
