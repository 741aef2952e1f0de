"""Issue #8: `evotrainer report` builds one self-contained HTML page from a real store, git repo and artefacts.

A synthetic session is written through `store.repository` into a migrated SQLite store, with a real git
repository (main line, two candidate branches with decision notes, a merge) and tiny run folders
(`metrics.jsonl` + val rollouts). The page must show every section, recompute the decision CI from the
rollouts, survive a deleted run folder, load nothing from the network, and render its figures in
headless Chromium.
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
from agent.reporting.gather import gather_session
from agent.reporting.html import NO_LLM, render_html
from diagnostics.schema import Rollout, append_metrics, write_rollouts
from store import models, repository
from store.engine import make_engine, session_scope, upgrade

SID = "s1"
N_VAL = 12


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


def _make_repo(repo: Path) -> dict[str, str]:
    """Main line v0, candidate 1 (reward change, merged into v1), candidate 2 (trainer change, pruned)."""
    (repo / "harness").mkdir(parents=True)
    (repo / "harness" / "reward.py").write_text("def compute_score(*a):\n    return 1.0  # lenient\n")
    (repo / "harness" / "trainer.yaml").write_text("max_new_tokens: 16\n")
    _git(repo, "init", "-q", "-b", f"evo/{SID}/main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "v0")
    v0 = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "-b", f"evo/{SID}/v0.1-strict-reward")
    (repo / "harness" / "reward.py").write_text("def compute_score(*a):\n    return 0.0  # strict extraction\n")
    _git(repo, "commit", "-q", "-am", "strict reward")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "decision: merge (improvement)\n\nstrict up")
    _git(repo, "checkout", "-q", f"evo/{SID}/main")
    _git(repo, "checkout", "-q", "-b", f"evo/{SID}/v0.2-length")
    (repo / "harness" / "trainer.yaml").write_text("max_new_tokens: 48\n")
    _git(repo, "commit", "-q", "-am", "length budget")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "decision: prune (insufficient)\n\nCI spans 0")
    _git(repo, "checkout", "-q", f"evo/{SID}/main")
    _git(repo, "merge", "-q", "--no-ff", "-m", "v1: merge strict-reward", f"evo/{SID}/v0.1-strict-reward")
    return {"v0": v0, "v1": _git(repo, "rev-parse", "HEAD")}


def _write_run(run_dir: Path, run_id: str, steps: int, correct: int, reward: float) -> None:
    """Metrics every step and val rollouts at the last step: `correct` of N_VAL prompts strictly right."""
    for step in range(steps + 1):
        data = {
            "critic/score/mean": reward * step / steps,
            "rollout/dead_group_ratio": 0.5 - 0.02 * step,
            "rollout/truncation_rate": 0.2,
            "response_length/mean": 12.0 + step,
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


def build_store(tmp_path: Path, *, llm: bool = False) -> tuple[str, Path]:
    """A migrated SQLite store holding one finished session; returns (url, runs folder)."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    repo = tmp_path / "repo"
    commits = _make_repo(repo)
    runs = tmp_path / "runs"
    specs = {  # run id -> (kind, steps, strict-correct, final reward, candidate)
        f"{SID}-v0": ("full", 10, 4, 0.6, None),
        f"{SID}-i1-control": ("pilot", 5, 5, 0.7, None),
        f"{SID}-i1-k1.1-strict-reward": ("pilot", 5, 11, 0.5, f"{SID}-v0.1-strict-reward"),
        f"{SID}-i1-k1.2-length": ("pilot", 5, 6, 0.8, f"{SID}-v0.2-length"),
    }
    engine = make_engine(url)
    with session_scope(engine) as db:
        repository.create_session(
            db, session_id=SID, harness_path="examples/arithmetic", repo_path=str(repo), max_iterations=2,
            max_train_steps=100, main_branch=f"evo/{SID}/main", policy="llm" if llm else "heuristic",
            llm_model="gpt-test" if llm else None,
        )  # fmt: skip
        v0 = repository.add_version(db, session_id=SID, branch=f"evo/{SID}/main", commit_sha=commits["v0"])
        skill = models.Skill(
            name="strict-extraction", domain="math", trigger="hack_rate > 0.1", factor="reward",
            patch_kind="template", patch="...", expected_outcome="strict up", validation_rule="CI > 0",
        )  # fmt: skip
        created = models.Skill(
            name="my-new-skill", domain="math", trigger="t", factor="trainer", patch_kind="diff", patch="...",
            expected_outcome="e", validation_rule="v", provenance=f"session {SID}, candidate v0.1",
        )  # fmt: skip
        db.add_all([skill, created])
        db.flush()
        for k, (slug, factor) in enumerate((("strict-reward", "reward"), ("length", "trainer")), start=1):
            repository.add_candidate(
                db, candidate_id=f"{SID}-v0.{k}-{slug}", session_id=SID, parent_version_id=v0.id, iteration=1,
                slug=slug, branch=f"evo/{SID}/v0.{k}-{slug}", worktree_path=str(tmp_path / f"wt{k}"),
                hypothesis=f"hypothesis {slug}", factor=factor, success_criterion="strict CI above 0",
                skill_id=skill.id if k == 1 else None,
            )  # fmt: skip
        for run_id, (kind, steps, correct, reward, cand) in specs.items():
            _write_run(runs / run_id, run_id, steps, correct, reward)
            repository.add_run(
                db, run_id=run_id, session_id=SID, backend="local", kind=kind, steps=steps,
                artefact_dir=str(runs / run_id), candidate_id=cand,
                version_id=v0.id if run_id.endswith("-v0") else None,
            )  # fmt: skip
            repository.finish_run(
                db, run_id, outcome="ok", strict_acc=correct / N_VAL, train_reward=reward, wall_time_s=3.0
            )
        v0.run_id, v0.strict_score, v0.train_score = f"{SID}-v0", 4 / N_VAL, 0.6
        v1 = repository.add_version(
            db, session_id=SID, branch=f"evo/{SID}/main", commit_sha=commits["v1"], parent_id=v0.id,
            run_id=f"{SID}-i1-k1.1-strict-reward", diff_stat=(1, 1, 1),
        )  # fmt: skip
        repository.record_decision(
            db, v1.id, decision="merge", outcome="improvement", strict_score=11 / N_VAL, train_score=0.5,
            rationale=f"merged {SID}-v0.1-strict-reward: strict 0.417 → 0.917 (Δ +0.500)",
        )  # fmt: skip
        repository.update_candidate_status(db, f"{SID}-v0.1-strict-reward", "merged")
        repository.update_candidate_status(db, f"{SID}-v0.2-length", "pruned")
        repository.add_case(
            db, session_id=SID, kind="negative_evidence", domain="math", signature={}, outcome="insufficient",
            summary="length: prune (insufficient): CI spans 0", candidate_id=f"{SID}-v0.2-length",
        )  # fmt: skip
        repository.add_backtest(
            db, candidate_id=f"{SID}-v0.1-strict-reward", rollouts_run_id=f"{SID}-v0", artefact_dir=str(tmp_path),
            verdict="pass", outcome="ok", dead_group_ratio_before=0.5, dead_group_ratio_after=0.3,
            rank_violations_before=9, rank_violations_after=0, hack_max_score=0.0, reasons=["hack corpus scores 0"],
        )  # fmt: skip
        repository.add_health_report(
            db, session_id=SID, run_id=f"{SID}-v0", path=str(runs / f"{SID}-v0" / "health_report.json"),
            findings=[
                {"alert_id": "score.reward_hacking", "layer": "score", "severity": "critical", "value": 0.4,
                 "threshold": 0.1, "message": "reward up, strict flat"},
                {"alert_id": "signal.dead_groups", "layer": "signal", "severity": "warning", "value": 0.5,
                 "threshold": 0.3, "message": "half the groups are dead"},
                {"alert_id": "behaviour.truncation", "layer": "behaviour", "severity": "ok", "message": "fine"},
            ],
        )  # fmt: skip
        db.add(models.SkillUse(skill_id=skill.id, session_id=SID, candidate_id=f"{SID}-v0.1-strict-reward",
                               matched_metrics={"hack_rate": 0.4}, result="win"))  # fmt: skip
        if llm:
            for node, tokens in (("propose", 1000), ("propose", 500), ("diagnose", 200)):
                repository.add_llm_usage(
                    db, session_id=SID, node=node, model="gpt-test", prompt_tokens=tokens, completion_tokens=100,
                    cost_usd=0.01,
                )  # fmt: skip
    engine.dispose()
    return url, runs


def _gather(url: str):
    engine = make_engine(url)
    try:
        with session_scope(engine) as db:
            return gather_session(db, SID)
    finally:
        engine.dispose()


def test_report_shows_every_section_with_evidence_and_diffs(tmp_path: Path) -> None:
    url, _ = build_store(tmp_path)
    report = _gather(url)
    page = render_html(report)

    for section in ("summary", "lineage", "curves", "alerts", "decisions", "skills", "llm-usage"):
        assert f'<section id="{section}">' in page
    for table in ("lineage-table", "candidates-table", "alerts-table", "decisions-table", "skills-table"):
        assert f'id="{table}"' in page
    # lineage graph + version curves + one pilot iteration, each a plotly div
    assert len(re.findall(r'class="plotly-graph-div"', page)) == 3
    assert [v.lineage_steps for v in report.versions] == [10, 15]
    # the merged candidate's CI is recomputed from the val rollouts: 5/12 -> 11/12 on 12 paired prompts
    merged = next(c for c in report.candidates if c.status == "merged")
    assert merged.comparison is not None and merged.comparison.n == N_VAL
    assert merged.comparison.delta == pytest.approx(0.5) and merged.comparison.ci_low > 0
    assert "Δ +0.500 [" in page
    # diffs come from git: parent commit -> candidate branch tip
    assert "strict extraction" in merged.diff and "-    return 1.0  # lenient" in merged.diff
    assert "decision: merge (improvement)" in page
    assert "length: prune (insufficient): CI spans 0" in page
    assert "score.reward_hacking" in page and "half the groups are dead" in page
    assert "strict-extraction" in page and "my-new-skill" in page
    assert NO_LLM in page
    assert "DGR 0.50 → 0.30" in page
    # offline: plotly.js is inlined once; outside it nothing is loaded from anywhere (no src/href/URL)
    assert page.count(get_plotlyjs()) == 1
    rest = page.replace(get_plotlyjs(), "")
    assert "<script src" not in rest and "cdn.plot.ly" not in rest and "http" not in rest
    assert 'rel="stylesheet"' not in rest


def test_report_notes_missing_artefacts_instead_of_crashing(tmp_path: Path) -> None:
    url, runs = build_store(tmp_path)
    shutil.rmtree(runs / f"{SID}-i1-k1.2-length")
    shutil.rmtree(tmp_path / "repo")
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
    assert out.is_file() and "2 versions, 2 candidates, 2 alerts" in result.output
    missing = CliRunner().invoke(app, ["report", "nope", "--out", str(out), "--db", url])
    assert missing.exit_code == 1 and "no session 'nope'" in missing.output


CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install -y chromium)")
def test_report_renders_its_figures_in_headless_chromium(tmp_path: Path) -> None:
    url, _ = build_store(tmp_path)
    out = tmp_path / "report.html"
    out.write_text(render_html(_gather(url)), encoding="utf-8")
    cmd = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=15000", "--dump-dom", out.as_uri(),
    ]  # fmt: skip
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    # plotly.js ran offline and drew an SVG into each of the three figure divs
    assert dom.count('class="main-svg"') >= 3, dom[:2000]
    for div_id in ("lineage-graph", "curves-versions", "curves-iteration-1"):
        assert re.search(rf'id="{div_id}"[^>]*class="[^"]*js-plotly-plot', dom) or re.search(
            rf'class="[^"]*js-plotly-plot[^"]*"[^>]*id="{div_id}"', dom
        ), f"{div_id} was not rendered by plotly"
    for table in ("lineage-table", "decisions-table", "alerts-table"):
        assert f'id="{table}"' in dom
