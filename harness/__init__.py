"""The harness contract on the ground floor: the manifest (`manifest.py`), how trusted code calls candidate
harness code and checks what comes back (`calls.py`), and the failure classes (`failures.py`).

Every other package imports this one; it imports none of them (`tests/unit/test_architecture_layers.py`).
"""
