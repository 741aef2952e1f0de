"""Per-row features that need a response's text, computed column-wise while the text is still in memory.

The run table (`diagnostics/table.py`) keeps numbers, not text: each chunk of rollout lines is parsed,
these features are added as columns, and the text columns are dropped before the next chunk is read. A
metric that needs text (or turn text) gets its per-row feature here; the layer modules aggregate features.

Features (columns of the run table):

- `length`: `response_tokens` when the backend recorded it (> 0), else the whitespace word count;
- `empty`: the response is empty or whitespace only;
- `bigram_rep`: bigram repetition rate `1 - unique bigrams / bigrams` of the response's words (0 with fewer
  than `BIGRAM_MIN` bigrams); `degenerate`: repetition above `BIGRAM_REPETITION_DEGENERATE`, a word repeated
  `TOKEN_RUN_DEGENERATE` times in a row, or a non-space character `CHAR_RUN_DEGENERATE` times in a row;
- `answers` (number of matches of the declared answer pattern) and `answer_ok` (the protocol extracts a
  non-empty answer): null when the harness declares no answer protocol, never guessed.

Words are what Python's `str.split()` returns (runs of non-whitespace, `\\x1c`-`\\x1f` counting as
whitespace); `repetition` is the reference definition of the degeneration features, and the column-wise
version below reproduces it exactly (tests/unit/test_diag_columnar_metrics.py checks both on crafted text).
"""

from __future__ import annotations

import itertools
import re
import string

import polars as pl

from harness.answers import AnswerProtocol

# Degeneration (paper §6.2 bigram_repetition_rate; template collapse): a response is degenerate when its
# bigram repetition exceeds this (with enough bigrams), a word repeats this many times in a row, or a
# character repeats this many times in a row.
BIGRAM_REPETITION_DEGENERATE = 0.5
BIGRAM_MIN = 8
TOKEN_RUN_DEGENERATE = 8
CHAR_RUN_DEGENERATE = 20

_CHAR_RUN_RE = re.compile(r"(\S)\1{" + str(CHAR_RUN_DEGENERATE - 1) + ",}")
# Python's str.split() whitespace = Unicode White_Space (what the Rust regex's \s means) plus \x1c-\x1f.
_WORD = r"[^\s\x1c-\x1f]+"
_NON_SPACE = r"[^\s\x1c-\x1f]"
# A run of one ASCII non-space character: a literal alternation, which the Rust regex engine scans fast.
_ASCII_NON_SPACE = [c for c in map(chr, range(128)) if not c.isspace()]
_ASCII_CHAR_RUN = "|".join(re.escape(c * CHAR_RUN_DEGENERATE) for c in _ASCII_NON_SPACE)
_NON_ASCII = r"[^\x00-\x7f]"
_ROW = "__row"
assert set(string.whitespace) <= {c for c in map(chr, range(128)) if c.isspace()}


def repetition(text: str) -> tuple[float, int, bool]:
    """Return `(bigram_repetition_rate, longest_same_word_run, has_long_char_run)` of one response."""
    tokens = text.split()
    bigrams = list(itertools.pairwise(tokens))
    rep = 1.0 - len(set(bigrams)) / len(bigrams) if len(bigrams) >= BIGRAM_MIN else 0.0
    longest = run = 1 if tokens else 0
    for prev, cur in itertools.pairwise(tokens):
        run = run + 1 if cur == prev else 1
        longest = max(longest, run)
    return rep, longest, _CHAR_RUN_RE.search(text) is not None


def is_degenerate(text: str) -> bool:
    """Return True when a response is repetitive spam (see the thresholds above)."""
    rep, run, char_run = repetition(text)
    return rep > BIGRAM_REPETITION_DEGENERATE or run >= TOKEN_RUN_DEGENERATE or char_run


def text_features(frame: pl.DataFrame, answer: AnswerProtocol | None) -> pl.DataFrame:
    """Return `frame` (with `response`, `response_tokens`) plus the feature columns listed above."""
    response = pl.col("response")
    out = frame.with_columns(
        _words=response.str.count_matches(_WORD),
        empty=~response.str.contains(_NON_SPACE),
    ).with_columns(
        length=pl.when(pl.col("response_tokens") > 0).then(pl.col("response_tokens")).otherwise(pl.col("_words")),
    )
    out = out.with_columns(*_degeneration(out), *_answer_columns(answer)).drop("_words")
    return out.unnest("_protocol") if answer is not None else out


def _degeneration(frame: pl.DataFrame) -> list[pl.Expr | pl.Series]:
    """`bigram_rep` and `degenerate` columns: words of long-enough responses exploded, counted per row."""
    n = frame.height
    # Only responses with at least BIGRAM_MIN + 1 words have a repetition rate or a run of TOKEN_RUN_DEGENERATE.
    wordy = frame.select(pl.int_range(n, dtype=pl.UInt32).alias(_ROW), "response", "_words").filter(
        pl.col("_words") >= min(BIGRAM_MIN + 1, TOKEN_RUN_DEGENERATE)
    )
    words = wordy.select(_ROW, w=pl.col("response").str.extract_all(_WORD)).explode("w")
    same_row = (pl.col(_ROW).shift(-1) == pl.col(_ROW)).fill_null(False)
    pairs = words.with_columns(same_row=same_row).with_columns(
        nw=pl.when("same_row").then(pl.col("w").shift(-1)),
    )
    # a run of k equal words is k - 1 equal neighbours in a row, inside one response
    eq = (pl.col("same_row") & (pl.col("w") == pl.col("nw"))).fill_null(False).cast(pl.UInt8)
    per_row = (
        pairs.with_columns(
            first=pl.struct(_ROW, "w", "nw").is_first_distinct() & pl.col("same_row"),
            run=eq.rolling_sum(TOKEN_RUN_DEGENERATE - 1).fill_null(0),
        )
        .group_by(_ROW)
        .agg(
            bigrams=pl.col("same_row").sum(),
            unique=pl.col("first").sum(),
            long_run=(pl.col("run") >= TOKEN_RUN_DEGENERATE - 1).any(),
        )
    )
    rows = pl.DataFrame({_ROW: pl.int_range(n, dtype=pl.UInt32, eager=True)}).join(
        per_row, on=_ROW, how="left", maintain_order="left"
    )
    bigrams = pl.col("bigrams")
    rep = rows.select(
        bigram_rep=pl.when(bigrams >= BIGRAM_MIN).then(1.0 - pl.col("unique") / bigrams).otherwise(0.0),
        long_run=pl.col("long_run").fill_null(False),
    )
    degenerate = (rep["bigram_rep"] > BIGRAM_REPETITION_DEGENERATE) | rep["long_run"] | _char_runs(frame)
    return [rep["bigram_rep"], degenerate.alias("degenerate")]


def _char_runs(frame: pl.DataFrame) -> pl.Series:
    """True where a non-space character repeats `CHAR_RUN_DEGENERATE` times in a row.

    ASCII runs are found by the column-wise literal scan; a response with non-ASCII text and a long enough
    word is checked by the reference regex (the Rust engine has no back-references).
    """
    response = pl.col("response")
    flags = frame.select(
        ascii=response.str.contains(_ASCII_CHAR_RUN),
        check=response.str.contains(_NON_ASCII) & response.str.contains(_NON_SPACE + "{" + str(CHAR_RUN_DEGENERATE) + ",}"),
    )
    hits = flags["ascii"].to_list()
    for i in flags["check"].arg_true().to_list():
        hits[i] = hits[i] or _CHAR_RUN_RE.search(frame["response"][i]) is not None
    return pl.Series(hits, dtype=pl.Boolean)


_PROTOCOL_FIELDS = {"answers": pl.UInt32, "answer_ok": pl.Boolean}
_PROTOCOL = pl.Struct(_PROTOCOL_FIELDS)


def _answer_columns(answer: AnswerProtocol | None) -> list[pl.Expr]:
    """`answers` and `answer_ok` from the declared protocol (null without one)."""
    if answer is None:
        return [pl.lit(None, dtype=pl.UInt32).alias("answers"), pl.lit(None, dtype=pl.Boolean).alias("answer_ok")]
    return [pl.col("response").map_batches(lambda s: _protocol(s, answer), return_dtype=_PROTOCOL).alias("_protocol")]


def _protocol(responses: pl.Series, answer: AnswerProtocol) -> pl.Series:
    """The declared protocol's own reading of each response (harness/answers.py is its only definition)."""
    texts = responses.to_list()
    counts = [len(answer.answers(text)) for text in texts]
    ok = [bool(answer.extract(text)) for text in texts]
    return pl.DataFrame({"answers": counts, "answer_ok": ok}, schema=_PROTOCOL_FIELDS).to_struct("_protocol")
