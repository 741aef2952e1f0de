"""`evotrainer run`, `evotrainer resume` and `evotrainer approve`: start, continue and answer sessions."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import typer

DEMO_HARNESS = Path(__file__).resolve().parents[2] / "examples" / "arithmetic"
CONTEXT_FILE = "context.json"


def register(app: typer.Typer) -> None:
    """Add `run`, `resume` and `approve` to the CLI."""
    app.command("run")(run)
    app.command("resume")(resume)
    app.command("approve")(approve)


def run(
    harness: Path = typer.Option(None, help="harness folder (default: a fresh copy of examples/arithmetic)"),
    repo: Path = typer.Option(Path("evotrainer-demo"), help="git repository the session works in"),
    mode: str = typer.Option("evotrainer", help="evotrainer | score-only (the paper's score-only baseline)"),
    llm: str = typer.Option("", help="drive the session with this model on an OpenAI-compatible server"),
    sandbox: str = typer.Option("docker", help="where candidate code runs: docker | process | none"),
    gate: str = typer.Option("none", help="human gates: none | launch | promote | all"),
    iterations: int = typer.Option(4, help="iteration budget"),
    max_steps: int = typer.Option(1200, help="training-step budget (all runs together)"),
    base_steps: int = typer.Option(60, help="training steps of v0"),
    pilot_steps: int = typer.Option(60, help="training steps of each pilot"),
    candidates: int = typer.Option(3, help="candidates per iteration"),
    seed: int = typer.Option(0, help="training seed"),
    db: str = typer.Option("", help="store URL (default: SQLite under .evotrainer/; env EVOTRAINER_DB)"),
    max_llm_tokens: int = typer.Option(0, help="LLM token budget of the session (0 = none)"),
    max_cost: float = typer.Option(0.0, help="LLM cost budget in USD (0 = none)"),
    price_per_1k: float | None = typer.Option(None, help="USD per 1k LLM tokens (default: price table, else 0)"),
    escalate_after: int = typer.Option(2, help="failed iterations in a row before every gate turns on (0 = never)"),
    min_effect: float = typer.Option(
        0.05,
        help="smallest strict-accuracy delta a decision counts (seed-noise floor; see benchmarks/null_candidates.py)",
    ),
    replicates: int = typer.Option(
        1, help="fresh-seed re-runs of a merge candidate and the control before it merges (0 = one seed)"
    ),
    llm_max_turns: int = typer.Option(30, help="model calls per propose step"),
    backend: str = typer.Option("", help="trains every run: local | verl (default: the manifest's trainer.backend)"),
    ray_address: str = typer.Option(
        "", help="Ray Jobs URL (http://HEAD:8265): every run of an iteration is a Ray job there, submitted together"
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="validate and print the command of every run iteration 1 would launch, then exit"
    ),
) -> None:
    """Run an autonomous session; with no arguments, the demo on the bundled defective harness."""
    from agent import preflight
    from agent.context import Context, as_backend, as_gate, as_mode, as_sandbox
    from agent.session import start_session

    try:
        ctx = Context(
            workdir=".",
            db_url=db,
            mode=as_mode(mode),
            policy="llm" if llm else "heuristic",
            llm_model=llm,
            sandbox=as_sandbox(sandbox),
            gate=as_gate(gate),
            seed=seed,
            base_steps=base_steps,
            pilot_steps=pilot_steps,
            max_candidates=candidates,
            max_iterations=iterations,
            max_train_steps=max_steps,
            max_llm_tokens=max_llm_tokens,
            max_cost_usd=max_cost,
            price_per_1k=price_per_1k,
            escalate_after=escalate_after,
            min_effect=min_effect,
            replicates=replicates,
            llm_max_turns=llm_max_turns,
            backend=as_backend(backend or preflight.default_backend(harness or DEMO_HARNESS)),
            ray_address=ray_address,
        )
        preflight.check_backend(ctx.backend, harness or DEMO_HARNESS)
    except ValueError as exc:
        _fail(str(exc))
    if dry_run:
        report, valid = preflight.plan_session(ctx, harness or DEMO_HARNESS)
        print(report)
        raise typer.Exit(0 if valid else 2)
    if llm and not os.environ.get("OPENAI_API_KEY"):
        _fail("--llm needs OPENAI_API_KEY (any value for a local server) and OPENAI_BASE_URL for a non-OpenAI endpoint")
    source = harness or DEMO_HARNESS
    if harness is None and repo.exists():
        # The demo starts from a fresh copy; the previous one keeps its branches under a dated name.
        kept = repo.with_name(f"{repo.name}.{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.move(str(repo), str(kept))
        _console().print(f"previous demo repository (its session branches) kept as {kept}")
    if sandbox == "docker":
        _ensure_sandbox_image()
    session_id, root = start_session(ctx, source, repo)
    _save_context(ctx, session_id)
    _console().print(
        f"[bold]session {session_id}[/bold] on {root} (mode {mode}, policy {ctx.policy}, sandbox {sandbox})"
    )
    _drive(ctx, session_id, {"session_id": session_id, "harness_dir": str(root)})


def resume(
    session: str = typer.Argument(..., help="session id"),
    db: str = typer.Option("", help="store URL (default: SQLite under .evotrainer/; env EVOTRAINER_DB)"),
) -> None:
    """Continue a killed or paused session from its last checkpoint."""
    ctx = _load_context(session, db)
    _drive(ctx, session, None)


def approve(
    session: str = typer.Argument(..., help="session id"),
    reject: bool = typer.Option(False, "--reject", help="reject instead of approve"),
    note: str = typer.Option("", help="note recorded with the answer"),
    db: str = typer.Option("", help="store URL"),
    resume_now: bool = typer.Option(True, "--resume/--no-resume", help="continue the session after answering"),
) -> None:
    """Answer the session's pending gate (launch or promote), then resume it."""
    from langgraph.types import Command

    from agent import ledger
    from store.repository import answer_gate, pending_gate

    ctx = _load_context(session, db)
    with ledger.db(ledger.db_url(ctx.db_url, ctx.workdir)) as s:
        gate = pending_gate(s, session)
        if gate is None:
            _fail(f"session {session} has no pending gate")
        answer_gate(s, gate.id, approved=not reject, note=note or None)  # type: ignore[union-attr]
        kind = gate.gate  # type: ignore[union-attr]
    _console().print(f"{'rejected' if reject else 'approved'} the {kind} gate of {session}")
    if resume_now:
        _drive(ctx, session, Command(resume={"approve": not reject, "note": note}))


def _drive(ctx: Any, session_id: str, graph_input: Any) -> None:
    from agent.reporting.summary import print_summary
    from agent.session import run_graph

    console = _console()
    started = time.time()

    def on_update(node: str, update: Any) -> None:
        console.print(f"[dim]{time.time() - started:7.1f}s[/dim] {node:<20} {_describe(node, update)}")

    values = run_graph(ctx, session_id, graph_input, on_update)
    _print_llm_usage(ctx, session_id, values)
    if values.get("__interrupt__"):
        pack = values["__interrupt__"][0]
        console.print(
            f"[yellow]paused at the {pack.get('gate')} gate[/yellow]: "
            f"evotrainer approve {session_id} [--reject] [--note TEXT]"
        )
        console.print_json(json.dumps(pack, default=str))
        return
    print_summary(ctx, session_id, values.get("stop_reason", ""), time.time() - started, console)


def _describe(node: str, update: Any) -> str:
    if not isinstance(update, dict):
        return ""
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
        return "; ".join(f"{c['id']} [{c['status']}] {c['reason']}".strip() for c in shown) or "no candidate"
    if node == "backtest":
        return "; ".join(f"{b['candidate_id']}: {b['verdict']}" for b in update.get("backtests", []))
    if node in ("train", "replicate"):
        return "; ".join(
            f"{p['candidate_id']}: {p['outcome']} strict {p['strict_acc']:.3f} reward {p['train_reward']:.3f}"
            for p in update.get("pilots", [])
        )
    if node in ("decide", "confirm"):
        decisions = update.get("decisions", [])
        if node == "confirm":  # only the replicated candidate changed; `decide` printed the rest
            decisions = [d for d in decisions if "replicat" in d["rationale"]]
        return "; ".join(f"{d['candidate_id']}: {d['decision']} ({d['outcome']}) {d['rationale']}" for d in decisions)
    if node == "record" and update.get("history"):
        h = update["history"][-1]
        stop = f"  → stop: {update['stop_reason']}" if update.get("stop_reason") else ""
        return f"iteration {h['iteration']}: now v{h['version']} (strict {h['strict_acc']:.3f}){stop}"
    return ""


def _print_llm_usage(ctx: Any, session_id: str, values: dict[str, Any]) -> None:
    """Tokens and cost of the session's LLM calls, per node (only for sessions that called a model)."""
    from rich.table import Table

    from agent import accounting, ledger

    with ledger.db(ledger.db_url(ctx.db_url, ctx.workdir)) as db:
        per_node = accounting.usage_by_node(db, session_id)
    if not per_node and ctx.policy != "llm":
        return
    table = Table(title=f"LLM usage ({ctx.llm_model or 'no model'})")
    for col in ("node", "calls", "prompt tokens", "completion tokens", "cost (USD)"):
        table.add_column(col)
    for node, u in [*per_node.items(), ("total", accounting.total(per_node.values()))]:
        table.add_row(node, str(u.calls), str(u.prompt_tokens), str(u.completion_tokens), f"{u.cost_usd:.4f}")
    console = _console()
    console.print(table)
    if values.get("llm_stop_reason"):
        console.print(f"[yellow]LLM budget: {values['llm_stop_reason']}[/yellow]")


def _save_context(ctx: Any, session_id: str) -> None:
    from agent.session import context_to_json

    folder = ctx.session_dir(session_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONTEXT_FILE).write_text(json.dumps(context_to_json(ctx), indent=2))


def _load_context(session_id: str, db: str) -> Any:
    from agent.context import Context

    path = Path(".").resolve() / ".evotrainer" / "sessions" / session_id / CONTEXT_FILE
    if not path.exists():
        _fail(f"no session {session_id} under {path.parent.parent}; run `evotrainer status` to list sessions")
    data = json.loads(path.read_text())
    if db:
        data["db_url"] = db
    return Context(**data)


def _ensure_sandbox_image() -> None:
    from sandboxes.image import ensure_image

    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception as exc:
        _fail(f"no Docker engine reachable ({exc}); start dockerd, or pass --sandbox process (weaker isolation)")
    tag = ensure_image(client)
    _console().print(f"sandbox image {tag}")


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False)


def _fail(message: str) -> None:
    print(f"evotrainer: {message}", file=sys.stderr)
    raise typer.Exit(2)
