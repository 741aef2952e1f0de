"""The EvoTrainer controller: LangGraph campaign graph, nodes, routers, tools, policies and the CLI.

Importing `agent` must stay cheap: no torch, verl, docker or LangGraph at import time (tested).
"""

import diagnostics  # noqa: F401  # first, so its allocator setting precedes any import of polars (cheap: no polars)
