"""The local policy's vocabulary, from the harness: its data files' characters plus the declared special tokens.

Nothing about the alphabet is fixed in code. The texts that make the vocabulary:

- train and val rows: ``prompt``, and ``ground_truth`` when it is a scalar (the policy must be able to
  write every answer; structured ground truths such as test cases are not text the policy writes);
- warm-start rows: ``prompt`` and ``response`` (a run that warm-starts);
- the written form of the declared answer protocol (``answer.render("")``), so the policy can write it;
- for an agentic harness (``env:``), what the policy writes and reads around tools (`env_tokens`): the
  call's end (``call_end``), the literal text a call opens with (the part of ``call_pattern`` before its
  first group, when it is plain text) and the observation template's literal parts are special tokens (one
  id each, when longer than one character), and the declared tool names' characters are in the alphabet.

The vocabulary is ``<pad> <bos> <eos>``, the manifest's ``special_tokens`` (one id each, in order), then the
environment's special tokens the manifest does not list already (in the order above), the manifest's
``alphabet`` (in order), then every other character found, sorted. A harness without ``env:`` gets exactly
the vocabulary it had before agentic harnesses existed. A run that continues a
policy (pilot, resume) reads text with the vocabulary stored in that policy's checkpoint instead: a
character it lacks is a `VocabularyError` naming the file, row, field and character, which the trainer
classifies as ``candidate_error`` (the data is the harness's, never our infrastructure's).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.env import EnvSpec
from harness.files import inside
from harness.manifest import MANIFEST_NAME, Harness
from trainer_backend.local.model import CharTokenizer, TokenizerError


@dataclass(frozen=True, slots=True)
class HarnessText:
    """One text the policy reads or writes, and where it comes from (`row` is the 1-based line number)."""

    path: str
    row: int
    field: str
    text: str


class VocabularyError(ValueError):
    """A harness text holds a character the policy's vocabulary lacks; `path` is the harness-relative file."""

    def __init__(self, item: HarnessText, err: TokenizerError, why: str) -> None:
        super().__init__(
            f"{item.path}:{item.row}: field '{item.field}' has character {err.char!r} (U+{ord(err.char):04X}) "
            f"at position {err.index}, which is not in {why}; remove it from the data, or start a fresh policy "
            "(a root run builds its vocabulary from the data files and the manifest's special_tokens/alphabet)"
        )
        self.path = item.path


def _rows(root: Path, relative: str) -> Iterable[tuple[int, dict[str, object]]]:
    path = inside(root, relative)  # the one path rule (harness/files.py)
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{relative}:{number}: not valid JSON ({exc.msg}); fix the row") from None
        if isinstance(row, dict):
            yield number, row


def harness_texts(harness: Harness, warmstart_data: str | None) -> list[HarnessText]:
    """Every text of the harness the policy reads or writes (see the module docstring).

    Raises:
        ValueError: a data line is not JSON (named by file and line).
    """
    out: list[HarnessText] = []
    for relative in harness.manifest.data.files:
        for number, row in _rows(harness.root, relative):
            if isinstance(row.get("prompt"), str):
                out.append(HarnessText(relative, number, "prompt", str(row["prompt"])))
            truth = row.get("ground_truth")
            if isinstance(truth, str | int | float) and not isinstance(truth, bool):
                out.append(HarnessText(relative, number, "ground_truth", str(truth)))
    if warmstart_data is not None and harness.path(warmstart_data).is_file():
        for number, row in _rows(harness.root, warmstart_data):
            for name in ("prompt", "response"):
                if isinstance(row.get(name), str):
                    out.append(HarnessText(warmstart_data, number, name, str(row[name])))
    answer = harness.manifest.answer
    if answer is not None:
        out.append(HarnessText(MANIFEST_NAME, 0, "answer", answer.render("")))
    if harness.manifest.env is not None:
        specials, chars = env_tokens(harness.manifest.env)
        out.extend(HarnessText(MANIFEST_NAME, 0, "env", text) for text in (*specials, chars))
    return out


def env_tokens(spec: EnvSpec) -> tuple[tuple[str, ...], str]:
    """What an agentic policy must be able to write and read: `(special tokens, other characters)`.

    Specials: the call's opening text (when `call_pattern` starts with plain text), `call_end`, and the
    observation template's text before and after ``{result}``, each when longer than one character (a
    single character is an ordinary character). Characters: those one-character pieces and the tool names.
    """
    prefix, _, suffix = spec.observation.partition("{result}")
    pieces = [literal_prefix(spec.call_pattern), spec.call_end, prefix, suffix]
    specials = tuple(dict.fromkeys(p for p in pieces if len(p) > 1 and not p.isspace()))
    chars = "".join(p for p in pieces if len(p) == 1 or (p and p.isspace())) + "".join(t.name for t in spec.tools)
    return specials, chars


_META = set(".^$*+?{}[]|()")


def literal_prefix(pattern: str) -> str:
    r"""The plain text a regular expression starts with before its first group (``<call>`` of
    ``<call>(\w+) (.*?)</call>``); "" when that part is not plain text."""
    body = re.sub(r"^(\^|\\A)", "", pattern)
    out: list[str] = []
    i = 0
    while i < len(body) and body[i] != "(":
        ch = body[i]
        if ch == "\\":
            nxt = body[i + 1 : i + 2]
            if not nxt or nxt.isalnum():
                return ""
            out.append(nxt)
            i += 2
            continue
        if ch in _META:
            return ""
        out.append(ch)
        i += 1
    return "".join(out)


def build_tokenizer(harness: Harness, texts: Sequence[HarnessText]) -> CharTokenizer:
    """The vocabulary of a fresh policy: `texts`' characters plus the manifest's (and its environment's)
    special tokens and alphabet."""
    manifest = harness.manifest
    specials = manifest.special_tokens
    if manifest.env is not None:
        specials = (*specials, *(t for t in env_tokens(manifest.env)[0] if t not in specials))
    return CharTokenizer.build((t.text for t in texts), specials, manifest.alphabet)


def check_encodable(tok: CharTokenizer, texts: Iterable[HarnessText], why: str) -> None:
    """Encode every text once; the first that fails raises `VocabularyError` (`why` names the vocabulary).

    Raises:
        VocabularyError: naming the file, row, field and character.
    """
    for item in texts:
        try:
            tok.encode(item.text)
        except TokenizerError as exc:
            raise VocabularyError(item, exc, why) from None


def tokenizer_for(harness: Harness, warmstart_data: str, policy_vocab: Sequence[str] | None) -> CharTokenizer:
    """The tokenizer of a run: the continued policy's (`policy_vocab`, checked against the prompts), else built.

    Raises:
        VocabularyError: a prompt holds a character the continued policy's vocabulary lacks.
        ValueError: a data line is not JSON.
    """
    if policy_vocab is None:
        return build_tokenizer(harness, harness_texts(harness, warmstart_data))
    tok = CharTokenizer(policy_vocab)
    prompts = [t for t in harness_texts(harness, None) if t.field == "prompt"]
    check_encodable(tok, prompts, f"the vocabulary of the policy this run continues ({len(tok)} tokens)")
    return tok
