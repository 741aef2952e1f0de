"""The campaign graph: wiring only. Nodes live in `agent/nodes/`, routers in `agent/routing.py`.

    setup → observe ─(v0 failed)→ END
      observe → diagnose ─(gap)→ upgrade_diagnostics ─┐
                  └─────────────────────────────────┴→ propose → backtest (fan-out) → launch_gate
      propose ─(no live candidate)→ train (the control alone) | record (the LLM budget stopped the policy)
      → train (fan-out: candidates + control) → evaluate → decide ─(a merge?)→ replicate (fan-out: the
      merge candidate + control on fresh seeds) → confirm ─┐
                                          └───────────────┴→ promote_gate → record → observe (budget left) | finish

`graph` (for `langgraph.json`) is compiled WITHOUT a checkpointer: `langgraph dev` refuses graphs that
bring their own (langgraph.md §4). The CLI compiles `builder` with a SQLite/Postgres checkpointer and passes
its own `Context`; `graph` takes a client's context, so its schema is `ServerContext` (the owner's settings,
the client's allowed choices: agent/launch/server_context.py).
The conditional edges come from `routing.ROUTES`, the one table of every node each router can return.
All nodes are sync `def`: git, Docker and training are blocking calls (langgraph.md §5).
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from agent import routing
from agent.context import Context
from agent.launch.server_context import ServerContext
from agent.nodes import (
    backtest,
    confirm,
    decide,
    diagnose,
    evaluate,
    gates,
    observe,
    propose,
    record,
    setup,
    train,
    upgrade,
)
from agent.state import InputState, State

builder = StateGraph(State, context_schema=Context, input_schema=InputState)
builder.add_node("setup", setup.setup)
builder.add_node("observe", observe.observe)
builder.add_node("diagnose", diagnose.diagnose)
builder.add_node("upgrade_diagnostics", upgrade.upgrade_diagnostics)
builder.add_node("propose", propose.propose)
builder.add_node("backtest", backtest.backtest)  # type: ignore[call-overload]  # Send-payload node: dict input, not State
builder.add_node("launch_gate", gates.launch_gate)
builder.add_node("train", train.train)  # type: ignore[call-overload]  # Send-payload node: dict input, not State
builder.add_node("evaluate", evaluate.evaluate)
builder.add_node("decide", decide.decide)
builder.add_node("replicate", train.train)  # type: ignore[call-overload]  # Send-payload node: dict input, not State
builder.add_node("confirm", confirm.confirm)
builder.add_node("promote_gate", gates.promote_gate)
builder.add_node("record", record.record)
builder.add_node("finish", record.finish)

builder.add_edge(START, "setup")
builder.add_edge("setup", "observe")
builder.add_edge("upgrade_diagnostics", "propose")
builder.add_edge("backtest", "launch_gate")
builder.add_edge("train", "evaluate")
builder.add_edge("evaluate", "decide")
builder.add_edge("replicate", "confirm")
builder.add_edge("confirm", "promote_gate")
builder.add_edge("promote_gate", "record")
builder.add_edge("finish", END)
for source, (router, targets) in routing.ROUTES.items():  # every node a router can return, Send targets too
    builder.add_conditional_edges(source, router, list(targets))

graph = builder.compile(name="evotrainer")
graph.context_schema = ServerContext  # the server builds every run's context from the client's JSON with it
