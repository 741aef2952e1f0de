"""Single-factor probe drafts, one builder per kind of knob (`agent/decisions/knobs.py`).

A `Draft` (`agent/policies/draft.py`) is one move of one knob, with its template patch ops and params, the
effects it has (matched against the symptom table, `agent/policies/symptoms.py`), a hypothesis's "what" and
"why", and the symptoms that support it once ranked (`agent/policies/explore.py`):

- trainer settings, and the constants the reward, filter and env code declare (`harness/code_knobs.py`, edited
  by a `set_constant` op): a value outside its documented safe range is moved back to its default (the
  `OUT_OF_RANGE` symptom is built here); otherwise each declared move (`harness.knobs`) in each magnitude,
  kept inside the safe range;
- the group filter: `KEEP_LIVE_FILTER` (keep every group whose rewards vary) and the standard
  StdGroupFilter;
- the data weights: zero the entry whose groups are most often dead, or set the mix to the held-out set's;
- the reward: its own builders (`agent/policies/reward_drafts.py`).

Pure: no I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent.decisions.knobs import HarnessKnobs, TrainerKnob
from agent.policies.draft import ENTRY, Draft
from agent.policies.heuristic import Metrics
from agent.policies.reward_drafts import reward_drafts
from agent.policies.symptoms import OUT_OF_RANGE, OUT_OF_RANGE_WEIGHT, Symptom
from diagnostics.sources import HELDOUT_SOURCE_SHARE
from harness.code_knobs import CodeKnob
from harness.knobs import KnobSpec

# The minimal group filter a filter probe installs: drop only groups without reward variance.
KEEP_LIVE_FILTER = '''"""Group filter: keep every group whose rewards vary; drop only zero-variance ("dead") groups.

Installed by an EvoTrainer exploration probe: the harness's filter dropped groups that carry signal.
Contract: filter_groups(group_rewards, state) -> one keep flag per group; `state` is unused.
"""

from statistics import pstdev

ZERO_STD = 1e-6


def filter_groups(group_rewards, state):
    """Return one keep flag per group (True = use the group for the policy update)."""
    return [len(g) > 1 and pstdev(g) > ZERO_STD for g in group_rewards]
'''


@dataclass(frozen=True)
class _Dial:
    """What a draft needs of a knob with a declared spec: a trainer setting or a constant in harness code."""

    spec: KnobSpec
    current: float
    factor: str  # the intervention factor a move changes
    prefix: str  # the probe id's first part ("trainer", "reward", "filter")
    where: str  # how a hypothesis names the knob's place ("" for a trainer setting)
    restarts: bool
    op: Callable[[str], dict[str, object]]  # the template op that sets the knob to a value expression

    @property
    def in_range(self) -> bool:
        return self.spec.in_range(self.current)


def _trainer(knobs: Sequence[TrainerKnob]) -> list[Draft]:
    return _dials([
        _Dial(k.spec, k.current, "trainer", "trainer", "", k.restarts, functools.partial(_set, k)) for k in knobs
    ])  # fmt: skip


# The factor a constant of each harness code file belongs to (`agent/decisions/factors.py`).
CODE_FACTORS = {"@reward": "reward", "@group_filter": "filter", "@env": "env"}


def _code(knobs: Sequence[CodeKnob]) -> list[Draft]:
    """Moves of the constants the reward, filter and env code declare as knobs (`harness/code_knobs.py`)."""
    return _dials([
        _Dial(k.spec, k.current, CODE_FACTORS[k.role], CODE_FACTORS[k.role], f" in {k.path}", False,
              functools.partial(_set_constant, k))
        for k in knobs if k.role in CODE_FACTORS
    ])  # fmt: skip


def _set_constant(knob: CodeKnob, value: str) -> dict[str, object]:
    return {"op": "set_constant", "file": knob.role, "name": knob.spec.key, "value": value}


def _dials(knobs: Sequence[_Dial]) -> list[Draft]:
    out: list[Draft] = []
    for knob in knobs:
        spec = knob.spec
        lo, hi = spec.safe_min, spec.safe_max
        if not knob.in_range:
            direction = "up" if knob.current < lo else "down"
            rel = "above" if direction == "down" else "below"
            symptom = Symptom(
                OUT_OF_RANGE,
                f"setting__{spec.key} {'>' if direction == 'down' else '<'} {hi if direction == 'down' else lo}",
                OUT_OF_RANGE_WEIGHT,
                (),
                text=f"{spec.key} = {knob.current:g} is {rel} its safe range [{lo:g}, {hi:g}]",
            )
            value = "{{ int(default) }}" if spec.kind == "int" else "{{ default }}"
            out.append(
                Draft(
                    probe_id=f"{knob.prefix}:{spec.key}:default",
                    knob=f"{knob.prefix}:{spec.key}",
                    factor=knob.factor,
                    slug=f"{spec.key}-default",
                    ops=[knob.op(value)],
                    params={"default": spec.default},
                    effects=(),
                    what=f"set {spec.key}{knob.where} from {knob.current:g} back to its documented default "
                    f"{spec.default:g}",
                    why=f"{spec.key} lies {rel} the range "
                    + ("this backend trains well in" if knob.factor == "trainer" else "its declaration calls safe"),
                    own_symptom=symptom,
                )
            )
            continue
        for move in spec.moves:
            for rung, factor in enumerate(move.factors):
                base = spec.from_zero if knob.current == 0 and move.direction == "up" and spec.from_zero else None
                new = _clamp(base if base is not None else knob.current * factor, lo, hi, spec.kind)
                if new == knob.current:
                    break  # at the edge of the safe range: no move left this way
                expr = (
                    f"max(current * {factor!r}, from_zero)" if spec.from_zero and move.direction == "up" else
                    f"current * {factor!r}"
                )  # fmt: skip
                bounded = f"min(max({expr}, safe_min), safe_max)"
                moved = "up-from-zero" if base is not None else f"{move.direction}-x{factor:g}".replace(".", "p")
                slug = f"{spec.key}-{moved}"
                value = f"{{{{ int({bounded}) }}}}" if spec.kind == "int" else f"{{{{ {bounded} }}}}"
                params: dict[str, float | int | str] = {"safe_min": lo, "safe_max": hi}
                if spec.from_zero:
                    params["from_zero"] = spec.from_zero
                out.append(
                    Draft(
                        probe_id=f"{knob.prefix}:{spec.key}:{move.direction}:m{rung}",
                        rung=rung,
                        knob=f"{knob.prefix}:{spec.key}",
                        factor=knob.factor,
                        slug=slug,
                        ops=[knob.op(value)],
                        params=params,
                        effects=move.effects,
                        what=f"move {spec.key}{knob.where} {move.direction} from {knob.current:g} to {new:g} ("
                        + ("its value to start from, " if base is not None else f"x{factor:g}, ")
                        + f"kept in its safe range [{lo:g}, {hi:g}])"
                        + ("; the pilot restarts from the model as it ships" if knob.restarts else ""),
                        why=move.why,
                        restarts=knob.restarts,
                    )
                )
    return out


def _set(knob: TrainerKnob, value: str) -> dict[str, object]:
    """The op that sets a knob. It always may create the key, reading the backend's default as its current
    value (what the trainer uses when the key is absent): a skill learned from this probe must also apply to
    a harness whose settings file does not write the key."""
    return {
        "op": "set_yaml_key",
        "file": knob.file,
        "key": knob.spec.key,
        "value": value,
        "create": True,
        "default": knob.spec.default,
    }


def _clamp(value: float, lo: float, hi: float, kind: str) -> float:
    bounded = min(max(value, lo), hi)
    return float(int(bounded)) if kind == "int" else bounded


def _filter(knobs: HarnessKnobs) -> list[Draft]:
    if knobs.filter_file is None or knobs.filter_source.strip() == KEEP_LIVE_FILTER.strip():
        return []
    from skills.seeds import STD_GROUP_FILTER

    out = [
        Draft(
            probe_id="filter:keep-live",
            knob="@group_filter",
            factor="filter",
            slug="filter-keep-live",
            ops=[{"op": "replace_file", "file": "@group_filter", "content": KEEP_LIVE_FILTER}],
            params={},
            effects=("filter_keep_live", "more_signal"),
            what="replace the group filter with one that keeps every group whose rewards vary",
            why="every group with reward variance carries GRPO signal; dropping them starves the update",
        )
    ]
    if not knobs.filter_noop and knobs.filter_source.strip() != STD_GROUP_FILTER.strip():
        out.append(
            Draft(
                probe_id="filter:std",
                knob="@group_filter",
                factor="filter",
                slug="filter-std",
                ops=[{"op": "replace_file", "file": "@group_filter", "content": STD_GROUP_FILTER}],
                params={},
                effects=("filter_std",),
                what="replace the group filter with the standard StdGroupFilter (paper App. C)",
                why="StdGroupFilter drops dead and low-information groups but keeps at least half of the live ones",
            )
        )
    return out


def _data(knobs: HarnessKnobs, metrics: Metrics) -> list[Draft]:
    """Data-selection probes: zero the positive-weight entry whose training groups are most often dead
    (per-source table), or set the mix to the held-out set's (when the two mixes differ)."""
    if knobs.data_file is None:
        return []
    return [*_data_drop(knobs, metrics), *_data_cover(metrics)]


# Below this total-variation distance between the training and held-out mixes there is nothing to cover.
MIN_COVER_GAP = 0.05


def _data_cover(metrics: Metrics) -> list[Draft]:
    gap = metrics.get("source_mix_gap")
    heldout = any(k.startswith(HELDOUT_SOURCE_SHARE) for k in metrics)
    if not heldout or not isinstance(gap, int | float) or not gap > MIN_COVER_GAP:
        return []
    return [
        Draft(
            probe_id="data:match-heldout",
            knob="@data_selection",
            factor="data",
            slug="data-match-heldout",
            ops=[{"op": "match_heldout_sources", "file": "@data_selection", "key": "weights"}],
            params={},
            effects=("data_cover",),
            what=f"set the training mix of data sources to the held-out set's ({gap:.0%} apart now)",
            why="the policy improves on what it practises, and the held-out set measures another mix",
        )
    ]


def _data_drop(knobs: HarnessKnobs, metrics: Metrics) -> list[Draft]:
    weights = knobs.data_weights
    if sum(1 for w in weights.values() if w > 0) < 2:
        return []
    ratios = {
        entry: float(v)
        for entry, w in weights.items()
        if w > 0 and isinstance(v := metrics.get(f"source_dead_ratio/{entry}"), int | float) and v == v
    }
    if not ratios:
        return []
    worst = max(ratios, key=lambda e: ratios[e])
    slug = "data-drop-" + ENTRY.sub("-", worst.lower()).strip("-")[-24:]
    return [
        Draft(
            probe_id=f"data:drop:{worst}",
            knob="@data_selection",
            factor="data",
            slug=slug,
            ops=[
                {
                    "op": "reweight_sources",
                    "file": "@data_selection",
                    "key": "weights",
                    "dead_at": "{{ dead_at }}",
                    "min_groups": "{{ min_groups }}",
                }
            ],
            params={"dead_at": round(max(min(ratios[worst], 1.0), 1e-3), 4), "min_groups": 8},
            effects=("data_drop",),
            what=f"set the weight of data entry {worst!r} to 0 ({ratios[worst]:.0%} of its groups dead), the others "
            "sharing its weight",
            why="a source whose groups are mostly dead spends the batch without signal",
        )
    ]


# The repair of an environment that carries state across episodes: every episode's environment from a fresh
# import of the env module (`harness/env.py`: isolation). Its backtest replays the run's calls
# (`sandboxes/env_replay.py: isolation_backtest`).
FRESH_MODULE = "fresh_module"


def _env(knobs: HarnessKnobs) -> list[Draft]:
    if knobs.env_isolation != "shared":
        return []  # no env, an unreadable declaration, or every episode isolated already
    return [
        Draft(
            probe_id=f"env:isolation:{FRESH_MODULE}",
            knob="@env:isolation",
            factor="env",
            slug="env-fresh-module",
            ops=[{"op": "set_env_isolation", "file": "@env", "value": FRESH_MODULE}],
            params={},
            effects=("env_isolate",),
            what="build every episode's environment from a fresh import of the env module "
            f"(EVOTRAINER_ENV_ISOLATION = {FRESH_MODULE!r})",
            why="an episode's environment must depend on its row only; state the module keeps (a cache, a shared "
            "random stream, a list that grows) reaches the next episode, and a fresh module per episode keeps none",
        )
    ]


def draft_probes(knobs: HarnessKnobs, metrics: Metrics) -> list[Draft]:
    """Every probe the harness's knobs allow, in declaration order (trainer settings, filter, data, reward):
    the order breaks score ties when probes are ranked."""
    drafts = [*_trainer(knobs.trainer), *_code(knobs.code), *_env(knobs), *_filter(knobs), *_data(knobs, metrics)]
    return reward_drafts(knobs, metrics, drafts)
