"""Sweeps: a sweep file's rows run (`run`), planned (`plan`), side by side (`slots`), a group
as one program (`group`), its programs compiled ahead (`ahead`), tabulated (`results`).

The `sweep` command (`__main__`) parses the flags and says how a sweep runs.
"""
