"""The EvoTrainer controller: LangGraph campaign graph, nodes, routers, tools, policies and the CLI.

Importing `agent` must stay cheap: no torch, verl, docker or LangGraph at import time (tested).
"""
