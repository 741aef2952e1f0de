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
- `answers` (number of matches of the declared answer pattern), `answer_ok` (the protocol extracts a
  non-empty answer) and `answer_ends` (only whitespace follows the last match: `AnswerProtocol.ends_with_answer`,
  whatever `final` says): null when the harness declares no answer protocol, never guessed;
- `response_hash` (UInt32): a hash of the response text, so within-group diversity (distinct responses
  per group, `diagnostics/groups.py`) needs no text; two different responses share it with odds ~2^-32.

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
_SPACE = r"[\s\x1c-\x1f]"
_AT_LEAST_WORDS = rf"(?:{_WORD}{_SPACE}+){{{min(BIGRAM_MIN + 1, TOKEN_RUN_DEGENERATE) - 1}}}{_NON_SPACE}"
_LONG_WORD = _NON_SPACE + "{" + str(CHAR_RUN_DEGENERATE) + "}"
_CANDIDATE = f"{_AT_LEAST_WORDS}|{_LONG_WORD}"
PY_WHITESPACE = "".join(c for c in map(chr, range(0x3001)) if c.isspace())  # what str.strip() removes
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


NEEDS_TEXT = "__needs_text"  # rows whose features need the eager pass below (most rows do not)


_NO_ANSWER = (
    pl.lit(None, dtype=pl.UInt32).alias("answers"),
    pl.lit(None, dtype=pl.Boolean).alias("answer_ok"),
    pl.lit(None, dtype=pl.Boolean).alias("answer_ends"),
)


def native_features(answer: AnswerProtocol | None) -> list[pl.Expr]:
    """Feature expressions polars evaluates while it parses (over `response`, `response_tokens`).

    `length` is null where the backend recorded no token count, and `NEEDS_TEXT` marks the rows that
    `complete_features` must finish: those, the responses long enough for a repetition rate or a word run,
    those with a word long enough for a character run, and every row when the protocol's pattern has to be
    read by Python.
    """
    response, tokens = pl.col("response").fill_null(""), pl.col("response_tokens").fill_null(0)
    needs = (tokens <= 0) | response.str.contains(_CANDIDATE)
    exprs = [
        (response.str.strip_chars(PY_WHITESPACE).str.len_bytes() == 0).alias("empty"),
        pl.when(tokens > 0).then(tokens).alias("length"),
        pl.lit(0.0).alias("bigram_rep"),
        pl.lit(False).alias("degenerate"),
        (response.hash(seed=0) % (1 << 32)).cast(pl.UInt32).alias("response_hash"),
    ]
    pattern = rust_pattern(answer.pattern) if answer is not None else None
    if answer is None:
        exprs += [*_NO_ANSWER]
    elif pattern is None:
        exprs += [*_NO_ANSWER]
        needs = pl.lit(True)
    else:
        answer_exprs, several = _answer_exprs(response, pattern, answer.final)
        exprs += answer_exprs
        needs = needs | several
    return [*exprs, needs.alias(NEEDS_TEXT)]


def complete_features(rows: pl.DataFrame, answer: AnswerProtocol | None) -> pl.DataFrame:
    """Finish the features of the `NEEDS_TEXT` rows: `rows` holds their `response` and `response_tokens`.

    Returns `length`, `bigram_rep`, `degenerate` (and, when Python reads the protocol, `answers`,
    `answer_ok` and `answer_ends`) for those rows, in their order.
    """
    response = rows["response"].fill_null("")
    words = response.str.count_matches(_WORD).cast(pl.Int64)
    tokens = rows["response_tokens"].fill_null(0)
    out = pl.DataFrame({"length": pl.select(pl.when(tokens > 0).then(tokens).otherwise(words)).to_series()})
    out = out.with_columns(*_degeneration(response.to_frame("response")))
    pattern = rust_pattern(answer.pattern) if answer is not None else None
    if answer is not None and pattern is None:
        texts = response.to_list()
        out = out.with_columns(
            pl.Series("answers", [len(answer.answers(t)) for t in texts], dtype=pl.UInt32),
            pl.Series("answer_ok", [bool(answer.extract(t)) for t in texts], dtype=pl.Boolean),
            pl.Series("answer_ends", [answer.ends_with_answer(t) for t in texts], dtype=pl.Boolean),
        )
    elif pattern is not None:  # responses with several matches: the last one is the answer
        out = out.with_columns(_last_answer(response.to_frame("response"), pattern, answer.final))  # type: ignore[union-attr]
    return out


def text_features(frame: pl.DataFrame, answer: AnswerProtocol | None) -> pl.DataFrame:
    """Return `frame` (with `response`, `response_tokens`) plus the feature columns listed above, every row."""
    out = frame.with_columns(native_features(answer))
    return out.with_columns(*complete_features(out, answer).get_columns()).drop(NEEDS_TEXT)


def _degeneration(frame: pl.DataFrame) -> list[pl.Series]:
    """`bigram_rep` and `degenerate` columns: words of long-enough responses exploded, counted per row."""
    n = frame.height
    # Only responses with at least BIGRAM_MIN + 1 words have a repetition rate or a run of TOKEN_RUN_DEGENERATE.
    wordy = frame.select(pl.int_range(n, dtype=pl.UInt32).alias(_ROW), "response").filter(
        pl.col("response").str.contains(_AT_LEAST_WORDS)
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
    # a run of CHAR_RUN_DEGENERATE non-space characters lies inside one word at least that long
    candidates = frame.select(pl.int_range(frame.height, dtype=pl.UInt32).alias(_ROW), "response").filter(
        response.str.contains(_LONG_WORD)
    )
    flags = candidates.select(
        _ROW, "response", ascii=response.str.contains(_ASCII_CHAR_RUN), other=response.str.contains(_NON_ASCII)
    )
    hits = [False] * frame.height
    for row, text, ascii_run, non_ascii in flags.iter_rows():
        hits[row] = ascii_run or (non_ascii and _CHAR_RUN_RE.search(text) is not None)
    return pl.Series(hits, dtype=pl.Boolean)


def rust_pattern(pattern: str) -> str | None:
    """The protocol's pattern for the Rust regex engine polars runs, or None when it could match differently.

    Python's `\\s` also covers `\\x1c`-`\\x1f` (spelled out here); `\\w`, `\\b`, a `$` outside multiline mode
    (Python's also matches before a final newline), case folding and what Rust rejects (look-around,
    back-references) differ in edge cases, so those patterns are read row by row by the protocol itself.
    """
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt in "wWbB":
                return None
            out.append({"s": r"[\s\x1c-\x1f]", "S": r"[^\s\x1c-\x1f]"}.get(nxt, c + nxt))
            i += 2
            continue
        if c == "[":
            in_class = True
        elif c == "]":
            in_class = False
        elif c == "$" and not in_class:
            return None
        out.append(c)
        i += 1
    translated = "(?s)" + "".join(out)
    if re.search(r"\(\?[a-zA-Z]*i", pattern):
        return None
    try:
        pl.select(pl.lit("").str.contains(translated))
    except pl.exceptions.PolarsError:
        return None
    return translated


def _last_answer(frame: pl.DataFrame, pattern: str, final: bool) -> list[pl.Series]:
    """`answers`, `answer_ok` and `answer_ends` read from every match (the last one answers)."""
    text = pl.col("response")
    matches = text.str.extract_all(pattern)
    last = matches.list.last()
    group = last.str.extract(pattern, 1).str.strip_chars(PY_WHITESPACE)
    ok = group.is_not_null() & (group.str.len_bytes() > 0)
    ends = text.str.strip_chars_end(PY_WHITESPACE).str.ends_with(last.str.strip_chars_end(PY_WHITESPACE))
    if final:
        ok = ok & ends
    out = frame.select(
        matches.list.len().cast(pl.UInt32).alias("answers"),
        ok.fill_null(False).alias("answer_ok"),
        ends.fill_null(False).alias("answer_ends"),
    )
    return out.get_columns()


def _answer_exprs(text: pl.Expr, pattern: str, final: bool) -> tuple[list[pl.Expr], pl.Expr]:
    """The protocol read column-wise: `AnswerProtocol.answers` / `.extract` with the same pattern in Rust's engine.

    The last match is the answer (its group, stripped, must be non-empty); with `final`, only whitespace may
    follow it (`answer_ends`, recorded whatever `final` says). A response with one match is read here (its
    first match is its last); one with several is left to `complete_features` (the second expression marks
    those rows). `rust_pattern` says which patterns read the same in both engines.
    """
    count = text.str.count_matches(pattern)
    first = text.str.extract_groups(f"(?s)({pattern})").struct.rename_fields(["match", "answer"])
    group = first.struct.field("answer").str.strip_chars(PY_WHITESPACE)
    ok = group.is_not_null() & (group.str.len_bytes() > 0)
    whole = first.struct.field("match").str.strip_chars_end(PY_WHITESPACE)
    ends = text.str.strip_chars_end(PY_WHITESPACE).str.ends_with(whole)
    if final:
        ok = ok & ends
    answers = [
        count.cast(pl.UInt32).alias("answers"),
        ok.fill_null(False).alias("answer_ok"),
        ends.fill_null(False).alias("answer_ends"),
    ]
    return answers, count > 1
