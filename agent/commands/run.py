"""`evotrainer run`, `evotrainer resume` and `evotrainer approve`: start, continue and answer sessions.

`run` checks everything a user can get wrong (the store, the harness, the repository:
`agent.launch.input_checks`, `agent.launch.repos`; the chosen backend's settings: `agent.launch.preflight`)
before it creates anything, then saves the session's start input and settings (`input.json`,
`context.json`) before the repository, branch and store rows exist, so `resume` can continue from any instant
after `run` started. The graph's progress is shown live (`agent.commands.progress`); `--quiet`
prints only where the session lives and its end.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from agent.commands.db import DbOption
from agent.commands.output import EXIT_BAD_INPUT, EXIT_FAILED, console, fail, no_session
from harness.atomic import write_atomic
from harness.manifest import BackendName
from sandboxes.modes import SandboxMode
from store.vocab import SessionMode

DEMO_HARNESS = Path(__file__).resolve().parents[2] / "examples" / "arithmetic"
CONTEXT_FILE = "context.json"
INPUT_FILE = "input.json"  # the graph input `run` started the session with (for a resume before the first checkpoint)

Quiet = Annotated[
    bool, typer.Option("--quiet", "-q", help="no live progress: only where the session lives and its end")
]
ProgressEvery = Annotated[
    float,
    typer.Option(
        "--progress-every",
        metavar="SECONDS",
        min=0.5,
        help="without a terminal: seconds between progress lines of each training run",
    ),
]


def register(app: typer.Typer) -> None:
    """Add `run`, `resume` and `approve` to the CLI."""
    app.command("run")(run)
    app.command("resume")(resume)
    app.command("approve")(approve)


def run(
    harness: Annotated[
        Path | None,
        typer.Option(metavar="DIR", help="harness folder (default: the demo, a fresh copy of examples/arithmetic)"),
    ] = None,
    repo: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            help="git repository the session works in (default: ./evotrainer-demo for the demo; the harness "
            "itself when it is a git repository; else ./evotrainer-NAME, NAME from its manifest)",
            show_default=False,
        ),
    ] = None,
    mode: Annotated[SessionMode, typer.Option(help="score-only: the paper's score-only baseline")] = "evotrainer",
    llm: Annotated[
        str, typer.Option(metavar="MODEL", help="drive the session with this model on an OpenAI-compatible server")
    ] = "",
    sandbox: Annotated[
        SandboxMode,
        typer.Option(help="where agent-written candidate code runs (process: weaker isolation; none: trusted code)"),
    ] = "docker",
    gate: Annotated[Literal["none", "launch", "promote", "all"], typer.Option(help="human gates")] = "none",
    iterations: Annotated[int, typer.Option(metavar="N", help="iteration budget")] = 4,
    max_steps: Annotated[int, typer.Option(metavar="N", help="training-step budget (all runs together)")] = 1200,
    max_wall: Annotated[
        float, typer.Option("--max-wall", metavar="SECONDS", help="wall-time budget; checked after each iteration")
    ] = 3600.0,
    base_steps: Annotated[int, typer.Option(metavar="N", help="training steps of v0")] = 60,
    pilot_steps: Annotated[int, typer.Option(metavar="N", help="training steps of each pilot")] = 60,
    candidates: Annotated[int, typer.Option(metavar="N", help="candidates per iteration")] = 3,
    seed: Annotated[int, typer.Option(metavar="N", help="training seed")] = 0,
    db: DbOption = None,
    max_llm_tokens: Annotated[int, typer.Option(metavar="N", help="LLM token budget of the session (0 = none)")] = 0,
    max_cost: Annotated[float, typer.Option(metavar="USD", help="LLM cost budget (0 = none)")] = 0.0,
    price_per_1k: Annotated[
        float | None, typer.Option(metavar="USD", help="USD per 1k LLM tokens (default: price table, else 0)")
    ] = None,
    llm_timeout: Annotated[
        float, typer.Option("--llm-timeout", metavar="SECONDS", help="most seconds one model call may take in all")
    ] = 120.0,
    llm_max_turns: Annotated[int, typer.Option(metavar="N", help="model calls per propose step")] = 30,
    escalate_after: Annotated[
        int, typer.Option(metavar="N", help="failed iterations in a row before every gate turns on (0 = never)")
    ] = 2,
    min_effect: Annotated[
        float,
        typer.Option(
            metavar="DELTA",
            help="smallest strict-accuracy delta a decision counts (seed-noise floor; benchmarks/null_candidates.py)",
        ),
    ] = 0.05,
    replicates: Annotated[
        int,
        typer.Option(
            metavar="N", help="fresh-seed re-runs of a merge candidate and the control before it merges (0 = one seed)"
        ),
    ] = 1,
    backend: Annotated[
        BackendName | None,
        typer.Option(help="trains every run (default: the manifest's trainer.backend)"),
    ] = None,
    ray_address: Annotated[
        str,
        typer.Option(
            metavar="URL",
            help="Ray Jobs address (http://HEAD:8265): every run of an iteration is a Ray job, submitted together",
        ),
    ] = "",
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="validate and print the command of every run iteration 1 would launch, then exit"
        ),
    ] = False,
    quiet: Quiet = False,
    progress_every: ProgressEvery = 10.0,
) -> None:
    """Run an autonomous session; with no arguments, the demo on the bundled defective harness."""
    from agent.commands.cost import print_cost_line
    from agent.context import Context
    from agent.launch import preflight
    from agent.launch.bootstrap import ensure_session, new_session_id
    from agent.launch.input_checks import SetupError, check_harness, check_store
    from agent.launch.repos import DEMO_REPO, check_repo, choose_repo

    # Every check before anything is created, each one line and exit 2 (a `BadInput`: agent/cli.py).
    source = (harness or DEMO_HARNESS).resolve()
    checked = check_harness(source)  # the harness first: its manifest names the default backend
    manifest = checked.manifest
    try:
        ctx = Context(
            workdir=".",
            db_url=db or "",
            mode=mode,
            policy="llm" if llm else "heuristic",
            llm_model=llm,
            sandbox=sandbox,
            gate=gate,
            seed=seed,
            base_steps=base_steps,
            pilot_steps=pilot_steps,
            max_candidates=candidates,
            max_iterations=iterations,
            max_train_steps=max_steps,
            max_wall_s=max_wall,
            max_llm_tokens=max_llm_tokens,
            max_cost_usd=max_cost,
            price_per_1k=price_per_1k,
            llm_timeout_s=llm_timeout,
            escalate_after=escalate_after,
            min_effect=min_effect,
            replicates=replicates,
            llm_max_turns=llm_max_turns,
            backend=backend or manifest.trainer.backend,
            ray_address=ray_address,
        )
        preflight.check_backend(ctx.backend, source)
    except ValueError as exc:
        fail(str(exc))
    if dry_run:
        report, valid = preflight.plan_session(ctx, source)
        print(report)
        raise typer.Exit(0 if valid else EXIT_BAD_INPUT)
    if llm and not os.environ.get("OPENAI_API_KEY"):
        fail("--llm needs OPENAI_API_KEY (any value for a local server) and OPENAI_BASE_URL for a non-OpenAI endpoint")
    from agent.adapters import ledger

    out = console()
    print_cost_line(out, checked, ctx.backend, base_steps)  # before any work: a GPU-sized run on a CPU takes hours
    workdir = Path(ctx.workdir).resolve()
    url = ledger.store_url(ctx)
    check_store(url)
    if harness is None and repo is None:
        _move_old_demo(out, workdir / DEMO_REPO)
    root = choose_repo(source, repo or (DEMO_REPO if harness is None else None), manifest.name, workdir)
    check_repo(source, root, workdir)
    client = _docker_client() if sandbox == "docker" else None
    session_id = new_session_id()
    # Where everything will be, before the slow set-up (the sandbox image, the repository copy, the store's
    # migrations, then the graph's imports): the first lines come within seconds.
    _print_where(out, ctx, session_id, str(source), root, url)
    if client is not None:
        _ensure_sandbox_image(out, client)
    start = {"session_id": session_id, "harness": str(source), "repo": str(root)}
    _save_context(ctx, session_id, start)
    try:
        ensure_session(ctx, session_id, source, root)
    except SetupError as exc:
        fail(f"{exc} (session {session_id} was not created; `evotrainer resume {session_id}` retries)")
    _drive(ctx, session_id, {"session_id": session_id, "harness_dir": str(root)}, start, quiet, progress_every)


def resume(
    session: Annotated[str, typer.Argument(metavar="SESSION", help="session id (`evotrainer status` lists them)")],
    db: DbOption = None,
    quiet: Quiet = False,
    progress_every: ProgressEvery = 10.0,
) -> None:
    """Continue a killed or paused session from its last checkpoint (or from its start, if it had none)."""
    from agent.adapters import ledger
    from agent.launch.bootstrap import recorded_repo

    ctx, start = _load_context(session, db)
    url = ledger.store_url(ctx)
    root = recorded_repo(url, session) or Path(start.get("repo", ""))
    _print_where(console(), ctx, session, start.get("harness", ""), root, url)
    _drive(ctx, session, None, start, quiet, progress_every)


def approve(
    session: Annotated[str, typer.Argument(metavar="SESSION", help="session id")],
    reject: Annotated[bool, typer.Option("--reject", help="reject instead of approve")] = False,
    note: Annotated[str, typer.Option(metavar="TEXT", help="note recorded with the answer")] = "",
    db: DbOption = None,
    resume_now: Annotated[
        bool, typer.Option("--resume/--no-resume", help="continue the session after answering")
    ] = True,
    quiet: Quiet = False,
    progress_every: ProgressEvery = 10.0,
) -> None:
    """Answer the session's pending gate (launch or promote), then resume it."""
    from langgraph.types import Command

    from agent.adapters import ledger
    from store.repository import answer_gate, pending_gate

    ctx, start = _load_context(session, db)
    with ledger.db(ledger.db_url(ctx.db_url, ctx.workdir)) as s:
        gate = pending_gate(s, session)
        if gate is None:
            fail(f"session {session} has no pending gate")
        answer_gate(s, gate.id, approved=not reject, note=note or None)
        kind = gate.gate
    console().print(f"{'rejected' if reject else 'approved'} the {kind} gate of {session}", markup=False)
    if resume_now:
        _drive(ctx, session, Command(resume={"approve": not reject, "note": note}), start, quiet, progress_every)


def _move_old_demo(out: Any, demo: Path) -> None:
    """The demo starts from a fresh copy; the previous one keeps its branches under a dated name."""
    if demo.exists():
        kept = demo.with_name(f"{demo.name}.{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.move(str(demo), str(kept))
        out.print(f"previous demo repository (its session branches) kept as {kept}", markup=False)


def _print_where(out: Any, ctx: Any, session_id: str, harness: str, root: Path, url: str) -> None:
    """Where the session lives: its repository, run folders and logs, store, and how to follow it."""
    from rich.text import Text

    from agent.commands.output import display_url

    runs = ctx.session_dir(session_id) / "runs"
    llm = f" {ctx.llm_model}" if ctx.llm_model else ""
    head = f" (mode {ctx.mode}, policy {ctx.policy}{llm}, sandbox {ctx.sandbox}, gates {ctx.gate})"
    out.print(Text.assemble(("session ", "bold"), (session_id, "bold"), head), soft_wrap=True)
    rows = [
        ("harness", harness or "(as recorded in the store)"),
        ("repository", f"{root}   (git -C {root} log --graph --oneline --all)"),
        ("runs, logs", f"{runs}/RUN/train.log (metrics.jsonl, rollouts/ next to it)"),
        ("store", display_url(url)),
        ("follow", f"evotrainer status {session_id}; evotrainer report {session_id} --out report.html"),
    ]
    for key, value in rows:  # one line each, never wrapped: paths stay copy-pasteable
        out.print(Text.assemble((f"  {key:<11}", "dim"), value), soft_wrap=True)


def _drive(ctx: Any, session_id: str, graph_input: Any, start: dict[str, Any], quiet: bool, every: float) -> None:
    """Run the graph with the live display; print the gate, the failure or the summary at the end."""
    from rich.text import Text

    from agent.adapters.session_lock import SessionBusyError
    from agent.commands.progress import SessionProgress, SessionView, choose_form
    from agent.launch.input_checks import SetupError
    from agent.session import run_graph

    out = console()
    started = time.time()
    view = SessionView(session_id, ctx.max_iterations, ctx.max_train_steps)
    progress = SessionProgress(
        out,
        view,
        ctx.session_dir(session_id) / "runs",
        choose_form(out, quiet),
        plain_every_s=every,
        describe=functools.partial(_describe, session_id),
    )
    try:
        values = run_graph(ctx, session_id, graph_input, progress, start_input=start or None)
    except (SetupError, SessionBusyError) as exc:
        progress.stop()
        fail(str(exc))
    except KeyboardInterrupt:
        progress.stop()
        _say_interrupted(ctx, session_id)
        raise typer.Exit(130) from None
    except Exception as exc:
        progress.stop()
        log = _write_traceback(ctx, session_id)
        fail(
            f"session {session_id} stopped: {type(exc).__name__}: {exc}; traceback in {log}; "
            f"`evotrainer resume {session_id}` continues from the last checkpoint",
            EXIT_FAILED,
        )
    progress.stop()
    _print_llm_usage(ctx, session_id, values)
    if values.get("__interrupt__"):
        pack = values["__interrupt__"][0]
        out.print(
            Text.assemble(
                (f"paused at the {pack.get('gate')} gate", "yellow"),
                f": evotrainer approve {session_id} [--reject] [--note TEXT]",
            )
        )
        out.print_json(json.dumps(pack, default=str))
        return
    if values.get("status") == "failed":
        out.print(Text.assemble((f"session {session_id} failed", "bold red"), f": {values.get('stop_reason', '')}"))
        raise typer.Exit(EXIT_FAILED)
    from agent.reporting.summary import print_summary

    print_summary(ctx, session_id, values.get("stop_reason", ""), time.time() - started, out)


def _say_interrupted(ctx: Any, session_id: str) -> None:
    """Ctrl-C: the session's trainers outlive the controller; say which still run and how to stop them."""
    from agent.commands.stop import live_runs

    alive = live_runs(ctx.session_dir(session_id) / "runs")
    lines = [f"evotrainer: interrupted; `evotrainer resume {session_id}` continues the session"]
    if alive:
        lines.append(f"these runs continue in the background ({len(alive)}):")
        lines += [f"  {r.run_id} ({r.where}) {r.out_dir}" for r in alive]
        lines.append(
            f"`evotrainer stop {session_id}` stops them after their current step (the session stays resumable)"
        )
    print("\n".join(lines), file=sys.stderr, flush=True)


def _write_traceback(ctx: Any, session_id: str) -> Path:
    import traceback

    folder = Path(ctx.session_dir(session_id))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "controller-error.log"
    with open(path, "a") as fh:
        fh.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')}\n{traceback.format_exc()}\n")
    return path


def _describe(session_id: str, node: str, update: Any) -> str:
    """One line for a node's update; candidates by their one name (`v<i>.<k>-<slug>`, the control `v<i>.0-control`)."""
    from agent.adapters.pilots import candidate_name, control_name
    from agent.routing import CONTROL_ID

    def name(candidate_id: str, iteration: int = 0) -> str:
        if candidate_id == CONTROL_ID:
            return control_name(iteration)
        return candidate_name(session_id, candidate_id)

    if not isinstance(update, dict):
        return ""
    if node == "setup" and update.get("harness_dir"):
        return f"session {update.get('session_id', '')} ready in {update['harness_dir']}"
    if node == "observe" and update.get("status") == "failed":
        return str(update.get("stop_reason", "v0 training failed"))
    if node == "observe" and update.get("version"):
        v = update["version"]
        return f"v{v['index']} trained: strict {v['strict_acc']:.3f}, reward {v['train_reward']:.3f}"
    if node == "diagnose":
        alerts = [f["alert_id"] for f in update["report"]["findings"] if f["severity"] != "ok"]
        return f"alerts: {', '.join(alerts) or 'none'}" + ("  (diagnostic gap)" if update.get("gap") else "")
    if node == "propose":
        if update.get("llm_stop_reason"):
            return f"no proposal: {update['llm_stop_reason']}"
        made = update.get("candidates", [])  # the whole list: show this iteration's (the newest) only
        newest = max((c["iteration"] for c in made), default=0)
        shown = [c for c in made if c["iteration"] == newest and c["status"] in ("proposed", "refused")]
        return "; ".join(f"{name(c['id'])} [{c['status']}] {c['reason']}".strip() for c in shown) or "no candidate"
    if node == "backtest":
        return "; ".join(f"{name(b['candidate_id'])}: {b['verdict']}" for b in update.get("backtests", []))
    if node in ("train", "replicate"):
        return "; ".join(
            f"{name(p['candidate_id'], p['iteration'])}{'-r' + str(p['replicate']) if p.get('replicate') else ''}: "
            f"{p['outcome']} strict {p['strict_acc']:.3f} reward {p['train_reward']:.3f}"
            for p in update.get("pilots", [])
        )
    if node in ("decide", "confirm"):
        decisions = update.get("decisions", [])
        if node == "confirm":  # only the replicated candidate changed; `decide` printed the rest
            decisions = [d for d in decisions if "replicat" in d["rationale"]]
        return "; ".join(
            f"{name(d['candidate_id'])}: {d['decision']} ({d['outcome']}) {d['rationale']}" for d in decisions
        )
    if node == "record" and update.get("history"):
        h = update["history"][-1]
        stop = f"  → stop: {update['stop_reason']}" if update.get("stop_reason") else ""
        return f"iteration {h['iteration']}: now v{h['version']} (strict {h['strict_acc']:.3f}){stop}"
    return ""


def _print_llm_usage(ctx: Any, session_id: str, values: dict[str, Any]) -> None:
    """Tokens and cost of the session's LLM calls, per node (only for sessions that called a model)."""
    from rich.table import Table
    from rich.text import Text

    from agent.adapters import ledger
    from agent.llm import accounting

    with ledger.db(ledger.db_url(ctx.db_url, ctx.workdir)) as db:
        per_node = accounting.usage_by_node(db, session_id)
    if not per_node and ctx.policy != "llm":
        return
    table = Table(title=f"LLM usage ({ctx.llm_model or 'no model'})")
    for col in ("node", "calls", "prompt tokens", "completion tokens", "cost (USD)"):
        table.add_column(col)
    for node, u in [*per_node.items(), ("total", accounting.total(per_node.values()))]:
        table.add_row(node, str(u.calls), str(u.prompt_tokens), str(u.completion_tokens), f"{u.cost_usd:.4f}")
    out = console()
    out.print(table)
    if values.get("llm_stop_reason"):
        out.print(Text(f"LLM budget: {values['llm_stop_reason']}", style="yellow"))


def _save_context(ctx: Any, session_id: str, start: dict[str, Any] | None = None) -> None:
    """Write the session's start input (when given) and then its settings, each atomically."""
    from agent.session import context_to_json

    folder = ctx.session_dir(session_id)
    folder.mkdir(parents=True, exist_ok=True)
    if start is not None:
        _write_atomic(folder / INPUT_FILE, start)
    _write_atomic(folder / CONTEXT_FILE, context_to_json(ctx))


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=2))


def _load_context(session_id: str, db: str | None) -> tuple[Any, dict[str, Any]]:
    """The session's saved settings (with `--db` applied) and its start input ({} for older sessions)."""
    from agent.context import Context

    folder = Path(".").resolve() / ".evotrainer" / "sessions" / session_id
    path = folder / CONTEXT_FILE
    if not path.exists():
        from agent.commands.db import open_store_url

        fail(no_session(session_id, open_store_url(db), folder.parent))
    data = json.loads(path.read_text())
    if db:
        data["db_url"] = db
    start = json.loads((folder / INPUT_FILE).read_text()) if (folder / INPUT_FILE).exists() else {}
    start = start or {"session_id": session_id}  # older sessions: `setup` finds the row in the store
    try:
        return Context(**data), start
    except (TypeError, ValueError) as exc:
        fail(f"{path}: {exc}; the settings file of session {session_id} is damaged")


def _docker_client() -> Any:
    """A Docker client whose engine answers, or exit 2 naming the fix."""
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception as exc:
        fail(f"no Docker engine reachable ({exc}); start dockerd, or pass --sandbox process (weaker isolation)")
    return client


def _ensure_sandbox_image(out: Any, client: Any) -> None:
    """Build the sandbox image unless the engine has it (minutes, once), and say which image runs candidates."""
    from sandboxes.image import ensure_image

    out.print(f"  {'sandbox':<11}image {ensure_image(client)}", markup=False)
