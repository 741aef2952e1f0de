"""What the controller decides by.

The keep/merge evidence rules (`evidence.py`), what a candidate may change and which factor it is
(`factors.py`), checking and committing candidates (`candidates.py`), the harness's declared knobs as the
controller reads them (`knobs.py`), the variables skill triggers read and the triggers they could not decide
(`triggers.py`) and rollback to an earlier policy (`rollback.py`). What a decided candidate teaches the store
is `agent/policies/learning.py`.
"""
