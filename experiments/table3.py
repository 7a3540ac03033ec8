r"""Table 3 at full scale: every row of the paper's Table 3 on WMT 2014 EN->DE.

  python -m transformer_jax.sweep --sweep=experiments/table3.py --workdir=DIR \
      [--rows=A1,C3] [--results=DIR/rows]

Rows are `configs/table3.py`'s (the paper's base plus each row's changes), trained for the
paper's steps (100K; big 300K) with ~25000 + 25000-token batches, and evaluated on newstest2013
as Table 3 was (beam 4, α 0.6, no checkpoint averaging, per-token perplexity).

Expected cost: the paper reports 0.4 s/step for base on 8 P100 GPUs (12 hours for 100K steps)
and 1.0 s/step for big (3.5 days for 300K). Nineteen rows near base size and one big row are
therefore about 19 × 12 h + 84 h ≈ 13 days of 8 P100s; rows C5 (d_model 1024) and C7
(d_ff 4096) cost more than base, C1 and C4 less. This project has not yet measured an
accelerator step time to replace these paper figures.
"""

import ml_collections

from configs import table3

ROWS = tuple(table3.ROWS)

PAPER = table3.PAPER


def get_config(row: str = 'base') -> ml_collections.ConfigDict:
  return table3.get_config(row)
