"""The session report: gather a session's evidence, then render it as one static HTML file.

`gather.py` reads the store, the run artefact folders (`artefacts.py`: curves, sampled rollouts, health
reports) and the session's git repository into typed records (`records.py`); `figures.py` draws them with
plotly and `html.py` turns them into a self-contained HTML page (plotly.js inlined, nothing loaded from
the network), for one session or several compared; `cells.py` holds the escaped cells its sections share and
`rollouts_html.py` the rollout viewer (chat text with special tokens set apart). `summary.py` says which
version to use and why; the report and the end of `evotrainer run` both print it. Gathering never fails on
a missing artefact: it records a note that the page shows instead.
"""
