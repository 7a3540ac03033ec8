"""Sweeps: a sweep file's rows trained and evaluated in one process (`run`), grouped and
planned (`plan`), each group's programs compiled ahead (`ahead`), tabulated (`results`).

The `sweep` command (`__main__`) parses the flags and says how a sweep runs.
"""
