"""Sweeps: a sweep file's rows trained and evaluated in one process (`run`), grouped and
planned (`plan`), the next group compiled while one trains (`ahead`), tabulated (`results`).

The `sweep` command (`__main__`) parses the flags and says how a sweep runs.
"""
