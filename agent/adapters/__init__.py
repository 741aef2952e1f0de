"""I/O the campaign's nodes go through: the store, training runs, the held-out rule, the sandboxed analyzers.

`ledger.py` is the store adapter nodes call (SQL lives in `store/`), `runs.py` launches and reads training
runs idempotently through the session backend's plug-in, `memory.py` starts no more of them side by side
than the machine's memory holds, `pilots.py` names and plans pilot runs,
`held_out.py` states what of a run untrusted code (the model, its scripts, a harness's analyzers) may read,
and `analyzers.py` runs a harness's own analyzers in the sandbox and validates their metrics.
"""
