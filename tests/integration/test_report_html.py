"""`evotrainer report` builds one self-contained HTML page from a real store, git repo and artefacts.

A synthetic session is written through `store.repository` into a migrated SQLite store, with a real git
repository (main line, two candidate branches with decision notes, a merge) and tiny run folders
(`metrics.jsonl` with verl's metric names + train/val rollouts, replicates included). The page must show
every section, recompute the decision CI from the rollouts, survive a deleted run folder, load nothing from
the network, and render in headless Chromium: health and optimisation curves (KL, entropy, loss, learning
rate, gradient norm), the rollout viewer (escaped, bounded), one legend entry per run, the lineage colours'
legend, a health row for every version, skills per candidate, rounded numbers. Sessions named in the old run
id scheme (`<session>-i<i>-k<i>.<k>-<slug>`) still read; two sessions compare on one page.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from plotly.offline import get_plotlyjs
from typer.testing import CliRunner

from agent.cli import app
from agent.policies.alert_aims import ALERT_ANSWERS
from agent.reporting.artefacts import MAX_TEXT_CHARS
from agent.reporting.figures import curves_figure, optim_figure
from agent.reporting.gather import gather_session
from agent.reporting.html import NO_LLM, render_html
from diagnostics.schema import Rollout, append_metrics, write_rollouts
from store import models, repository
from store.engine import make_engine, session_scope, upgrade

SID = "s1"
N_VAL = 12
HOSTILE = '<script>document.title="pwned"</script><img src=x onerror="document.title=1">'
LONG_FLOAT = 0.123456789012345


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


def _make_repo(repo: Path, sid: str) -> dict[str, str]:
    """Main line v0, candidate 1 (reward change, merged into v1), candidate 2 (trainer change, pruned)."""
    (repo / "harness").mkdir(parents=True)
    (repo / "harness" / "reward.py").write_text("def compute_score(*a):\n    return 1.0  # lenient\n")
    (repo / "harness" / "trainer.yaml").write_text("max_new_tokens: 16\n")
    _git(repo, "init", "-q", "-b", f"evo/{sid}/main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "v0")
    v0 = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "-b", f"evo/{sid}/v1.1-strict-reward")
    (repo / "harness" / "reward.py").write_text("def compute_score(*a):\n    return 0.0  # strict extraction\n")
    _git(repo, "commit", "-q", "-am", "strict reward")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "decision: merge (improvement)\n\nstrict up")
    _git(repo, "checkout", "-q", f"evo/{sid}/main")
    _git(repo, "checkout", "-q", "-b", f"evo/{sid}/v1.2-length")
    (repo / "harness" / "trainer.yaml").write_text("max_new_tokens: 48\n")
    _git(repo, "commit", "-q", "-am", "length budget")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "decision: prune (insufficient)\n\nCI spans 0")
    _git(repo, "checkout", "-q", f"evo/{sid}/main")
    _git(repo, "merge", "-q", "--no-ff", "-m", "v1: merge strict-reward", f"evo/{sid}/v1.1-strict-reward")
    return {"v0": v0, "v1": _git(repo, "rev-parse", "HEAD")}


def _write_run(run_dir: Path, run_id: str, steps: int, correct: int, reward: float, hostile: bool = False) -> None:
    """Metrics every step; val and train rollouts at the last step: `correct` of N_VAL prompts strictly right."""
    for step in range(steps + 1):
        data = {
            "critic/score/mean": reward * step / steps,
            "rollout/dead_group_ratio": 0.5 - 0.02 * step,
            "rollout/truncation_rate": 0.2,
            "response_length/mean": 12.0 + step,
            "actor/kl_loss": 0.001 * step,
            "actor/ppo_kl": 0.0005,
            "actor/entropy": 0.4 - 0.01 * step,
            "actor/pg_loss": -0.01 * step,
            "actor/lr": 1.0e-4,
            "actor/grad_norm": 0.5 + 0.1 * step,
            "actor/pg_clipfrac": 0.002,
        }
        if step in (0, steps):
            data["val/strict_acc"] = correct / N_VAL if step == steps else 0.1
        append_metrics(run_dir / "metrics.jsonl", step, data)
    rollouts = [
        Rollout(run_id, steps, "val", f"p{i}", f"p{i}", 0, "1+1=>", "<ans>2</ans>", "2", 0.0,
                strict_score=1.0 if i < correct else 0.0)
        for i in range(N_VAL)
    ]  # fmt: skip
    write_rollouts(run_dir / "rollouts" / "val" / f"step_{steps}.jsonl", rollouts)
    response = (HOSTILE + "A" * 3000) if hostile else "<ans>3</ans>"
    train = [
        Rollout(run_id, steps, "train", f"t{i}", f"g{i}", 0, "1+2=>", response, "3", 1.0, strict_score=0.0,
                truncated=hostile)
        for i in range(4)
    ]  # fmt: skip
    write_rollouts(run_dir / "rollouts" / "train" / f"step_{steps}.jsonl", train)
    (run_dir / "checkpoints").mkdir(exist_ok=True)  # a finished local run's last policy (what "use vN" points at)
    (run_dir / "checkpoints" / "last.pt").write_bytes(b"")


def _run_ids(sid: str, legacy: bool) -> dict[str, str]:
    """Run ids by role, in the one-name scheme (`<session>-v1.1-strict-reward`) or the old one (`-i1-k1.1-…`)."""
    if legacy:
        return {"control": f"{sid}-i1-control", "c1": f"{sid}-i1-k1.1-strict-reward", "c2": f"{sid}-i1-k1.2-length",
                "control_r1": f"{sid}-i1-control-r1", "c1_r1": f"{sid}-i1-k1.1-strict-reward-r1"}  # fmt: skip
    return {"control": f"{sid}-v1.0-control", "c1": f"{sid}-v1.1-strict-reward", "c2": f"{sid}-v1.2-length",
            "control_r1": f"{sid}-v1.0-control-r1", "c1_r1": f"{sid}-v1.1-strict-reward-r1"}  # fmt: skip


def build_store(tmp_path: Path, *, llm: bool = False, legacy: bool = False, sid: str = SID) -> tuple[str, Path]:
    """A migrated SQLite store (created once per tmp_path) holding one finished session; returns (url, runs)."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    repo = tmp_path / sid / "repo"
    commits = _make_repo(repo, sid)
    runs = tmp_path / sid / "runs"
    ids = _run_ids(sid, legacy)
    c1, c2 = f"{sid}-v1.1-strict-reward", f"{sid}-v1.2-length"
    specs = {  # run id -> (kind, steps, strict-correct, final reward, candidate)
        f"{sid}-v0": ("full", 10, 4, 0.6, None),
        ids["control"]: ("pilot", 5, 5, 0.7, None),
        ids["c1"]: ("pilot", 5, 11, 0.5, c1),
        ids["c2"]: ("pilot", 5, 6, 0.8, c2),
        ids["control_r1"]: ("pilot", 5, 4, 0.7, None),
        ids["c1_r1"]: ("pilot", 5, 10, 0.5, c1),
    }
    engine = make_engine(url)
    with session_scope(engine) as db:
        repository.create_session(
            db, session_id=sid, harness_path="examples/arithmetic", repo_path=str(repo), max_iterations=2,
            max_train_steps=100, main_branch=f"evo/{sid}/main", policy="llm" if llm else "heuristic",
            llm_model="gpt-test" if llm else None,
        )  # fmt: skip
        v0 = repository.add_version(db, session_id=sid, branch=f"evo/{sid}/main", commit_sha=commits["v0"])
        skill = db.query(models.Skill).filter_by(name="strict-extraction").first()
        if skill is None:
            skill = models.Skill(
                name="strict-extraction", domain="math", trigger="hack_rate > 0.1", factor="reward",
                patch_kind="template", patch="...", expected_outcome="strict up", validation_rule="CI > 0",
            )  # fmt: skip
            length = models.Skill(
                name="raise-length", domain="math", trigger="truncation_rate > 0.15", factor="trainer",
                patch_kind="template", patch="...", expected_outcome="fewer cut answers", validation_rule="CI > 0",
            )  # fmt: skip
            created = models.Skill(
                name="my-new-skill", domain="math", trigger="t", factor="trainer", patch_kind="diff", patch="...",
                expected_outcome="e", validation_rule="v", provenance=f"session {sid}, candidate v1.1",
            )  # fmt: skip
            db.add_all([skill, length, created])
            db.flush()
        length = db.query(models.Skill).filter_by(name="raise-length").one()
        for k, (slug, factor) in enumerate((("strict-reward", "reward"), ("length", "trainer")), start=1):
            repository.add_candidate(
                db, candidate_id=f"{sid}-v1.{k}-{slug}", session_id=sid, parent_version_id=v0.id, iteration=1,
                slug=slug, branch=f"evo/{sid}/v1.{k}-{slug}", worktree_path=str(tmp_path / sid / f"wt{k}"),
                hypothesis=f"hypothesis {slug}", factor=factor, success_criterion="strict CI above 0",
            )  # fmt: skip
        for run_id, (kind, steps, correct, reward, cand) in specs.items():
            _write_run(runs / run_id, run_id, steps, correct, reward, hostile=run_id == ids["c2"])
            repository.add_run(
                db, run_id=run_id, session_id=sid, backend="local", kind=kind, steps=steps,
                artefact_dir=str(runs / run_id), candidate_id=cand,
                version_id=v0.id if run_id.endswith("-v0") else None,
            )  # fmt: skip
            repository.finish_run(
                db, run_id, outcome="ok", strict_acc=correct / N_VAL, train_reward=reward, wall_time_s=3.0
            )
        v0.run_id, v0.strict_score, v0.train_score = f"{sid}-v0", 4 / N_VAL, 0.6
        v1 = repository.add_version(
            db, session_id=sid, branch=f"evo/{sid}/main", commit_sha=commits["v1"], parent_id=v0.id,
            run_id=ids["c1"], diff_stat=(1, 1, 1),
        )  # fmt: skip
        repository.record_decision(
            db, v1.id, decision="merge", outcome="improvement", strict_score=11 / N_VAL, train_score=0.5,
            rationale=f"merged {c1}: strict 0.417 → 0.917 (Δ +0.500)",
        )  # fmt: skip
        repository.update_candidate_status(db, c1, "merged")
        repository.update_candidate_status(db, c2, "pruned")
        repository.add_case(
            db, session_id=sid, kind="negative_evidence", domain="math", signature={}, outcome="insufficient",
            summary="length: prune (insufficient): CI spans 0", candidate_id=c2,
        )  # fmt: skip
        repository.add_case(
            db, session_id=sid, kind="pattern", domain="math", summary="iteration 1: critical alerts ...",
            signature={"iteration": 1, ALERT_ANSWERS: {
                "score.reward_hacking": {"candidates": [c1], "reason": ""},
                "behaviour.runs_past_answer": {"candidates": [], "reason": "no move is known to address it"},
            }},
        )  # fmt: skip
        repository.add_backtest(
            db, candidate_id=c1, rollouts_run_id=f"{sid}-v0", artefact_dir=str(tmp_path),
            verdict="pass", outcome="ok", dead_group_ratio_before=0.5, dead_group_ratio_after=0.3,
            rank_violations_before=9, rank_violations_after=0, hack_max_score=0.0, reasons=["hack corpus scores 0"],
        )  # fmt: skip
        repository.add_health_report(
            db, session_id=sid, run_id=f"{sid}-v0", path=str(runs / f"{sid}-v0" / "health_report.json"),
            findings=[
                {"alert_id": "score.reward_hacking", "layer": "score", "severity": "critical", "value": 0.4,
                 "threshold": 0.1, "message": "reward up, strict flat"},
                {"alert_id": "signal.dead_groups", "layer": "signal", "severity": "warning", "value": 0.5,
                 "threshold": 0.3, "message": "half the groups are dead"},
            ],
        )  # fmt: skip
        db.add(models.SkillUse(skill_id=skill.id, session_id=sid, candidate_id=c1,
                               matched_metrics={"hack_rate": LONG_FLOAT}, result="win"))  # fmt: skip
        db.add(models.SkillUse(skill_id=length.id, session_id=sid, candidate_id=c2,
                               matched_metrics={"truncation_rate": 0.4}, result="pending"))  # fmt: skip
        if llm:
            for node, tokens in (("propose", 1000), ("propose", 500), ("diagnose", 200)):
                repository.add_llm_usage(
                    db, session_id=sid, node=node, model="gpt-test", prompt_tokens=tokens, completion_tokens=100,
                    cost_usd=0.01,
                )  # fmt: skip
    engine.dispose()
    return url, runs


def _gather(url: str, sid: str = SID):  # type: ignore[no-untyped-def]
    engine = make_engine(url)
    try:
        with session_scope(engine) as db:
            return gather_session(db, sid)
    finally:
        engine.dispose()


def _visible(page: str) -> str:
    """The page without its scripts (plotly's figure data holds raw floats; the tables must not)."""
    return re.sub(r"<script\b.*?</script>", "", page, flags=re.S)


def test_report_shows_every_section_with_evidence_and_diffs(tmp_path: Path) -> None:
    url, _ = build_store(tmp_path)
    report = _gather(url)
    page = render_html(report)

    for section in ("summary", "lineage", "curves", "rollouts", "alerts", "decisions", "skills", "llm-usage"):
        assert f'<section id="{section}">' in page
    for table in ("lineage-table", "candidates-table", "health-table", "alerts-table", "decisions-table"):
        assert f'id="{table}"' in page
    # lineage graph + version health/optimisation curves + one pilot iteration's two, each a plotly div
    assert len(re.findall(r'class="plotly-graph-div"', page)) == 5
    assert [v.lineage_steps for v in report.versions] == [10, 15]
    # the merged candidate's CI is recomputed from the val rollouts: 5/12 -> 11/12 on 12 paired prompts
    merged = next(c for c in report.candidates if c.status == "merged")
    assert merged.comparison is not None and merged.comparison.n == N_VAL
    assert merged.comparison.delta == pytest.approx(0.5) and merged.comparison.ci_low > 0
    assert merged.became == 1 and merged.name == "v1.1-strict-reward"
    assert "Δ +0.500 [" in page
    # diffs come from git: parent commit -> candidate branch tip
    assert "strict extraction" in merged.diff and "-    return 1.0  # lenient" in merged.diff
    assert "decision: merge (improvement)" in page
    assert "length: prune (insufficient): CI spans 0" in page
    assert "score.reward_hacking" in page and "half the groups are dead" in page
    assert "strict-extraction" in page and "my-new-skill" in page
    assert NO_LLM in page
    assert "DGR 0.50 → 0.30" in page
    # each iteration's critical alerts and what answers them
    answers = _visible(page).split('id="alert-answers-table"', 1)[1].split("</table>", 1)[0]
    assert "<code>score.reward_hacking</code>" in answers and "<code>v1.1-strict-reward</code>" in answers
    assert "no candidate: no move is known to address it" in answers
    # offline: plotly.js is inlined once; outside it nothing is loaded from anywhere (no src/href/URL)
    assert page.count(get_plotlyjs()) == 1
    rest = page.replace(get_plotlyjs(), "")
    assert "<script src" not in rest and "cdn.plot.ly" not in rest and "http" not in rest
    assert 'rel="stylesheet"' not in rest


def test_report_fixes_the_defects_users_saw(tmp_path: Path) -> None:
    """Skills per candidate, uncounted pruned uses, rounded numbers, unique legends, replicate
    labels, a health row for the last version, no '0 further checks', a legend for the lineage colours."""
    url, _ = build_store(tmp_path)
    report = _gather(url)
    page = render_html(report)
    visible = _visible(page)

    by_name = {c.name: c for c in report.candidates}
    assert by_name["v1.1-strict-reward"].skills == ["strict-extraction"]
    assert by_name["v1.2-length"].skills == ["raise-length"]
    candidates = re.search(r'<table id="candidates-table">.*?</table>', page, re.S)
    assert candidates is not None and "raise-length" in candidates[0] and "strict-extraction" in candidates[0]
    uses = {u.candidate_name: u.result for u in report.skill_uses}
    assert uses == {"v1.1-strict-reward": "win", "v1.2-length": "not counted: pruned on insufficient evidence"}
    assert "pending" not in re.search(r'<table id="skills-table">.*?</table>', page, re.S)[0]  # type: ignore[index]
    assert str(LONG_FLOAT) not in visible and "hack_rate=0.1235" in visible
    assert not re.search(r"\d\.\d{6,}", visible), re.findall(r".{40}\d\.\d{6,}.{20}", visible)[:3]
    # one legend entry per run; replicates named after their candidate, never by raw run id
    for iteration_runs in report.pilot_runs.values():
        labels = [r.label for r in iteration_runs]
        assert len(labels) == len(set(labels)), labels
        for fig in (curves_figure(iteration_runs, "t", False), optim_figure(iteration_runs, "t", False)):
            names = [t.name for t in fig.data if t.showlegend is not False]
            assert len(names) == len(set(names)), names
    labels = {r.label for runs in report.pilot_runs.values() for r in runs}
    assert labels == {
        "v1.0-control", "v1.0-control replicate 1", "v1.1-strict-reward → v1",
        "v1.1-strict-reward replicate 1", "v1.2-length",
    }  # fmt: skip
    # a health row for every version, the last (never stored) one included; counts only where known
    assert [h.index for h in report.health] == [0, 1]
    assert report.health[0].source == "store" and report.health[0].n_ok is None
    assert report.health[1].source == "computed" and report.health[1].n_checks
    assert "further checks" not in page and "not recorded" in visible
    # the lineage colours are explained
    legend = re.search(r'<ul id="lineage-legend">.*?</ul>', page, re.S)
    assert legend is not None and "merged" in legend[0] and "pruned" in legend[0]
    # which version to use, and the final checkpoint
    assert 'id="verdict"' in page and "use v1:" in visible
    assert report.final_checkpoint.endswith(f"{SID}-v1.1-strict-reward/checkpoints/last.pt")


def test_report_rollout_viewer_is_escaped_and_bounded(tmp_path: Path) -> None:
    url, _ = build_store(tmp_path)
    report = _gather(url)
    page = render_html(report)
    assert [r.label for r in report.rollouts][:2] == ["v0", "v1"]
    assert len(report.rollouts) == 2 + 5  # versions, then every pilot of iteration 1
    hostile = next(r for r in report.rollouts if r.label == "v1.2-length")
    train = [s for s in hostile.samples if s.split == "train"]
    assert train and all(len(s.response) < MAX_TEXT_CHARS + 40 for s in train) and "more]" in train[0].response
    assert HOSTILE not in page and "&lt;script&gt;document.title" in page
    assert "<img src=x" not in page
    val = [s for s in hostile.samples if s.split == "val"]
    assert {s.strict_score for s in val} == {0.0, 1.0}  # wrong and right answers both shown


def test_report_reads_sessions_named_before_candidates_had_one_name(tmp_path: Path) -> None:
    url, _ = build_store(tmp_path, legacy=True)
    report = _gather(url)
    merged = next(c for c in report.candidates if c.status == "merged")
    assert merged.comparison is not None and merged.comparison.delta == pytest.approx(0.5)
    assert list(report.pilot_runs) == [1]
    labels = {r.label for r in report.pilot_runs[1]}
    assert "v1.0-control replicate 1" in labels and "v1.1-strict-reward → v1" in labels


def test_report_notes_missing_artefacts_instead_of_crashing(tmp_path: Path) -> None:
    url, runs = build_store(tmp_path)
    shutil.rmtree(runs / f"{SID}-v1.2-length")
    shutil.rmtree(tmp_path / SID / "repo")
    report = _gather(url)
    page = render_html(report)

    pruned = next(c for c in report.candidates if c.status == "pruned")
    assert pruned.comparison is None and "pilot run folder missing" in pruned.comparison_note
    assert "run folder missing" in page
    assert "session repository" in page and "is missing" in page
    assert pruned.diff == "" and "session repository missing" in pruned.diff_note


def test_report_lists_llm_usage_and_cost(tmp_path: Path) -> None:
    url, _ = build_store(tmp_path, llm=True)
    page = render_html(_gather(url))
    assert 'id="llm-usage-table"' in page and NO_LLM not in page
    assert "total: 3 calls, 2000 tokens, $0.0300" in page


def test_report_cli_writes_the_page_and_rejects_unknown_sessions(tmp_path: Path) -> None:
    url, _ = build_store(tmp_path)
    out = tmp_path / "out" / "report.html"
    result = CliRunner().invoke(app, ["report", SID, "--out", str(out), "--db", url])
    assert result.exit_code == 0, result.output
    assert out.is_file() and "2 versions, 2 candidates" in result.output
    missing = CliRunner().invoke(app, ["report", "nope", "--out", str(out), "--db", url])
    assert missing.exit_code == 2 and "no session 'nope'" in missing.output


CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


def _render(page: Path, profile: Path) -> str:
    """The DOM after headless Chromium ran the page's scripts (offline, no network services)."""
    cmd = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
        "--virtual-time-budget=15000", "--dump-dom", page.as_uri(),
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=True).stdout


def _plotted(dom: str, div_id: str) -> str:
    """The rendered markup of one plotly figure (fails when plotly did not draw it)."""
    start = dom.find(f'id="{div_id}"')
    assert start >= 0, f"{div_id} missing"
    head = dom.rfind("<div", 0, start)
    assert "js-plotly-plot" in dom[head : dom.find(">", start)], f"{div_id} was not rendered by plotly"
    end = dom.find('class="plotly-graph-div', dom.find(">", start))
    return dom[start : end if end > 0 else len(dom)]


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install -y chromium)")
def test_report_renders_curves_viewer_and_legends_in_headless_chromium(tmp_path: Path) -> None:
    url, _ = build_store(tmp_path)
    out = tmp_path / "report.html"
    out.write_text(render_html(_gather(url)), encoding="utf-8")
    dom = _render(out, tmp_path / "profile")
    assert dom.count('class="main-svg"') >= 5, dom[:2000]
    for div_id in ("lineage-graph", "curves-versions", "curves-iteration-1"):
        _plotted(dom, div_id)
    # the optimisation curves: one panel per metric, one line per run, the learning rate on a log axis
    for div_id, n_runs in (("optim-versions", 2), ("optim-iteration-1", 5)):
        fig = _plotted(dom, div_id)
        for title in ("KL to reference", "entropy", "policy-gradient loss", "learning rate", "gradient norm"):
            assert title in fig, f"{div_id} lacks the {title} panel"
        legend = re.findall(r'class="legendtext"[^>]*>([^<]*)<', fig)
        assert len(legend) == n_runs == len(set(legend)), legend
        assert fig.count('class="js-line"') >= 6 * n_runs
    legend = re.findall(r'class="legendtext"[^>]*>([^<]*)<', _plotted(dom, "curves-iteration-1"))
    assert "v1.1-strict-reward replicate 1" in legend and len(legend) == len(set(legend)) == 5
    lineage = re.findall(r'class="legendtext"[^>]*>([^<]*)<', _plotted(dom, "lineage-graph"))
    assert any(x.startswith("merged") for x in lineage) and any(x.startswith("pruned") for x in lineage)
    # the rollout viewer: its script ran, one panel shown at a time, hostile text stayed text
    assert re.search(r'id="rollout-select"[^>]*data-ready="1"', dom)
    assert len(re.findall(r'class="rollout-panel shown"', dom)) == 1
    assert len(re.findall(r'class="rollout-panel', dom)) == 7
    assert "&lt;script&gt;document.title" in dom and "<title>EvoTrainer report s1</title>" in dom
    assert "<img src=" not in dom
    for table in ("lineage-table", "decisions-table", "alerts-table", "health-table", "rollout-table-0"):
        assert f'id="{table}"' in dom


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install -y chromium)")
def test_report_compares_two_sessions_on_one_page(tmp_path: Path) -> None:
    url, _ = build_store(tmp_path)
    build_store(tmp_path, sid="s2", legacy=True)
    out = tmp_path / "compare.html"
    result = CliRunner().invoke(app, ["report", SID, "s2", "--out", str(out), "--db", url])
    assert result.exit_code == 0 and "2 sessions compared" in result.output, result.output
    dom = _render(out, tmp_path / "profile")
    table = re.search(r'<table id="compare-table">.*?</table>', dom, re.S)
    assert table is not None and "s1" in table[0] and "s2" in table[0] and table[0].count("<tr>") == 3
    legend = re.findall(r'class="legendtext"[^>]*>([^<]*)<', _plotted(dom, "compare-curves"))
    assert legend == ["s1 (evotrainer)", "s2 (evotrainer)"]
    twice = CliRunner().invoke(app, ["report", SID, SID, "--out", str(out), "--db", url])
    assert twice.exit_code != 0 and "named twice" in twice.output
