"""The session report (issue #8): gather a session's evidence, then render it as one static HTML file.

`gather.py` reads the store, the run artefact folders and the session's git repository into typed
records (`SessionReport`); `html.py` turns those records into a self-contained HTML page (plotly.js
inlined, nothing loaded from the network). Gathering never fails on a missing artefact: it records a
note that the page shows instead.
"""
