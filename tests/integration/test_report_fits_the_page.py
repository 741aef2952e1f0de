"""The report of an agentic, multi-source session fits the page and draws its behaviour over steps.

A session of a lookup agent (one declared tool, three data sources) is written through `store.repository`
with real run folders: four versions and three pilot iterations, every training step's episodes shaped as
the local backend records them (`tests/unit/agentic_episodes.py`), validation rollouts of three data sources,
long unbroken ids, paths and model output. Headless Chromium renders the page at 1400 and 1920 px; a script
added for the test measures, after plotly drew, every element against the page: nothing may stick out of
the page's width or scroll inside its box (the "Agentic behaviour" table cut a column at 1400 px). The page
must draw turns, tool calls, tool failures and abandonment as curves over steps, and a held-out curve per
data source, for the versions and for each pilot iteration.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from agent.reporting.gather import gather_session
from agent.reporting.html import render_html
from diagnostics.schema import Rollout, append_metrics, write_rollouts
from store import repository
from store.engine import make_engine, session_scope, upgrade

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
import agentic_episodes as E

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
SID = "s12041821-28d4"
SOURCES = ("lookup/level1-single-hop", "lookup/level2-two-hops", "lookup/level3-three-hops-with-distractors")
STEPS = 6
LONG = "evotrainer-" + "-".join(f"lookup-agent-copy{i}" for i in range(8))  # one unbroken 160-character name

# Measures, once plotly drew, every element that sticks out of the page or scrolls inside its own box.
CHECK_JS = """
<script>
window.addEventListener("load", function () {
  setTimeout(function () {
    var page = document.documentElement.clientWidth, problems = [];
    if (document.documentElement.scrollWidth > page) {
      problems.push("page scrolls sideways: " + document.documentElement.scrollWidth + " > " + page);
    }
    document.querySelectorAll("body *").forEach(function (el) {
      var box = el.getBoundingClientRect();
      if (!box.width || el.closest("svg") || el.id === "overflow-check") { return; }
      var name = el.tagName.toLowerCase() + (el.id ? "#" + el.id : "");
      if (box.right > page + 0.5) { problems.push(name + " ends at " + Math.round(box.right) + " > " + page); }
      if (el.clientWidth && el.scrollWidth > el.clientWidth + 1) {
        problems.push(name + " content " + el.scrollWidth + " > box " + el.clientWidth);
      }
    });
    var out = document.createElement("pre");
    out.id = "overflow-check";
    out.textContent = JSON.stringify({width: page, problems: problems.slice(0, 40)});
    document.body.appendChild(out);
  }, 300);
});
</script>
"""


def _episodes(run_id: str, step: int, skill: float) -> list[Rollout]:
    """One training step of a lookup agent: `skill` of the episodes look the key up and answer right."""
    rows = []
    for g in range(6):
        for i in range(8):
            solved = (i + g) % 8 < round(8 * skill)
            if solved:
                calls = [("lookup", f"k{g}", True)] + ([("lookup", f"k{g + 1}", True)] if i % 3 == 0 else [])
            elif i % 2:
                calls = [("lookup", "zz", False)]  # a key the table lacks: a failed call
            else:
                calls = []  # answers without looking: abandonment
            ep = E.episode(step, g, i, calls, reward=float(solved), strict=float(solved), run=run_id)
            rows.append(replace(ep, data_source=SOURCES[g % 3], prompt_id=f"train-{g}"))
    return rows


def _val(run_id: str, step: int, skill: float) -> list[Rollout]:
    rows = []
    for n in range(30):
        source = SOURCES[n % 3]
        right = (n // 3) < round(10 * skill * (1.0 - 0.25 * (n % 3)))  # harder sources score lower
        response = ("A" * 600) if n == 0 else "<call>lookup e</call><obs>6</obs><ans>6</ans>"  # unbroken output
        rows.append(Rollout(run_id, step, "val", f"val-{n:04d}", f"val-{n:04d}", 0, "e=>", response, "6",
                            float(right), strict_score=float(right), data_source=source))  # fmt: skip
    return rows


def _write_run(folder: Path, run_id: str, start: float, end: float) -> None:
    for step in range(STEPS + 1):
        skill = start + (end - start) * step / STEPS
        data = {"critic/score/mean": skill, "response_length/mean": 20.0 + step, "actor/entropy": 0.5}
        if step in (0, STEPS):
            data["val/strict_acc"] = skill
            write_rollouts(folder / "rollouts" / "val" / f"step_{step}.jsonl", _val(run_id, step, skill))
        if step:
            write_rollouts(folder / "rollouts" / "train" / f"step_{step}.jsonl", _episodes(run_id, step, skill))
        append_metrics(folder / "metrics.jsonl", step, data)


def build_agentic_store(tmp_path: Path) -> str:
    """A finished agentic session: v0, then three iterations whose candidate pilot became v1, v2, v3."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    repo = tmp_path / LONG
    shutil.copytree(ROOT / "examples" / "lookup-agent", repo, ignore=shutil.ignore_patterns("__pycache__"))
    runs = tmp_path / "runs"
    engine = make_engine(url)
    with session_scope(engine) as db:
        repository.create_session(db, session_id=SID, harness_path=str(repo), repo_path=str(repo), max_iterations=3,
                                  max_train_steps=24, main_branch=f"evo/{SID}/main")  # fmt: skip
        v0_run = f"{SID}-v0"
        _write_run(runs / v0_run, v0_run, 0.2, 0.35)
        repository.add_run(db, run_id=v0_run, session_id=SID, backend="local", kind="full", steps=STEPS,
                           artefact_dir=str(runs / v0_run))  # fmt: skip
        repository.finish_run(db, v0_run, outcome="ok", strict_acc=0.35, train_reward=0.35, wall_time_s=30.0)
        version = repository.add_version(db, session_id=SID, branch=f"evo/{SID}/main", commit_sha="0" * 40,
                                         run_id=v0_run)  # fmt: skip
        repository.record_decision(db, version.id, decision="keep", outcome="insufficient", rationale="v0",
                                   strict_score=0.35, train_score=0.35)  # fmt: skip
        skill = 0.35
        for i in range(1, 4):
            slug = f"raise-turn-budget-and-observation-window-{i}"
            cand = f"{SID}-v{i}.1-{slug}"
            repository.add_candidate(
                db, candidate_id=cand, session_id=SID, parent_version_id=version.id, iteration=i, slug=slug,
                branch=f"evo/{SID}/v{i}.1-{slug}", worktree_path=str(tmp_path / f"wt{i}"),
                hypothesis=f"a longer turn budget lets the agent finish its lookups ({LONG})", factor="trainer",
                success_criterion="strict CI above 0",
            )  # fmt: skip
            for run_id, end, candidate in ((f"{SID}-v{i}.0-control", skill, None), (cand, skill + 0.15, cand)):
                _write_run(runs / run_id, run_id, skill, end)
                repository.add_run(db, run_id=run_id, session_id=SID, backend="local", kind="pilot", steps=STEPS,
                                   artefact_dir=str(runs / run_id), candidate_id=candidate)  # fmt: skip
                repository.finish_run(db, run_id, outcome="ok", strict_acc=end, train_reward=end, wall_time_s=20.0)
            skill += 0.15
            version = repository.add_version(db, session_id=SID, branch=f"evo/{SID}/main", commit_sha=f"{i}" * 40,
                                             parent_id=version.id, run_id=cand)  # fmt: skip
            repository.record_decision(db, version.id, decision="merge", outcome="improvement",
                                       rationale=f"merged {cand}: strict up", strict_score=skill,
                                       train_score=skill)  # fmt: skip
            repository.update_candidate_status(db, cand, "merged")
        repository.set_session_status(db, SID, "finished")
    engine.dispose()
    return url


def _page(tmp_path: Path) -> str:
    url = build_agentic_store(tmp_path)
    engine = make_engine(url)
    try:
        with session_scope(engine) as db:
            return render_html(gather_session(db, SID))
    finally:
        engine.dispose()


def test_the_page_has_agentic_curves_and_a_held_out_curve_per_source(tmp_path: Path) -> None:
    page = _page(tmp_path)
    for suffix in ("versions", "iteration-1", "iteration-2", "iteration-3"):
        assert f'id="agentic-{suffix}"' in page and f'id="sources-{suffix}"' in page, suffix
    figure = page.split('id="agentic-versions"', 1)[1].split("</script>", 1)[0]
    for title in ("turns per episode", "tool calls per episode", "tool failure rate", "abandonment rate"):
        assert title in figure, title
    sources = page.split('id="sources-versions"', 1)[1].split("</script>", 1)[0]
    assert all(source.replace("/", "\\u002f") in sources for source in SOURCES)  # plotly's JSON escapes "/"
    table = page.split('<table id="agentic-table">', 1)[1].split("</table>", 1)[0]
    assert "<th>turns_mean</th>" in table and all(f"<th>v{i}</th>" for i in range(4))


def _check(page: str, tmp_path: Path, width: int) -> dict[str, object]:
    path = tmp_path / f"report-{width}.html"
    path.write_text(page.replace("</body>", CHECK_JS + "</body>"), encoding="utf-8")
    cmd = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
        f"--user-data-dir={tmp_path / f'profile-{width}'}", f"--window-size={width},1200",
        "--virtual-time-budget=20000", "--dump-dom", path.as_uri(),
    ]  # fmt: skip
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=True).stdout
    found = re.search(r'<pre id="overflow-check">(.*?)</pre>', dom, re.S)
    assert found is not None, "the check did not run: " + dom[-2000:]
    result: dict[str, object] = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    drawn = len(re.findall(r'class="plotly-graph-div js-plotly-plot"', dom))
    assert drawn == page.count('class="plotly-graph-div"') == 17, f"plotly drew {drawn} figures"  # measured after
    return result


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install -y chromium)")
@pytest.mark.parametrize("width", [1400, 1920])
def test_nothing_overflows_the_page_in_headless_chromium(tmp_path: Path, width: int) -> None:
    result = _check(_page(tmp_path), tmp_path, width)
    assert result["width"] == width, result
    assert result["problems"] == [], result["problems"]
