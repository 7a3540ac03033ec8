r"""Table 3 at full scale: every row of the paper's Table 3 on WMT 2014 EN->DE.

  python -m transformer_jax.sweep --sweep=experiments/table3_wmt14/sweep.py --workdir=DIR \
      [--rows=A1,C3] [--results=DIR/rows]

Rows are `configs/table3.py`'s (the paper's base plus each row's changes), trained for the
paper's steps (100K; big 300K) with ~25000 + 25000-token batches, and evaluated on newstest2013
as Table 3 was (beam 4, α 0.6, no checkpoint averaging, per-token perplexity).

Expected cost, from the paper's measured step times: 0.4 s/step for base on 8 P100 GPUs
(12 hours for 100K steps) and 1.0 s/step for big (3.5 days, 84 hours, for 300K). The other
rows are scaled from base by their forward FLOPs per token (`costs.flops_per_token` at 27
tokens, about a WMT14 sentence): B1 0.89, B2 0.92, C1 0.53, C2 0.77, C3 1.23, C4 0.43, C5 2.59,
C6 0.80, C7 1.40, the rest 1.00. That is 235 hours for the 19 rows near base size plus 84 for
big: about 319 hours, 13.3 days of 8 P100s (FLOPs would put big at 122 hours; its measured 84
shows that wider matrices use a GPU better, so the wide rows C5 and C7 may cost less than
scaled). Measured on one NVIDIA H200 in bfloat16 at the paper's batch (docs/performance.md):
37.4 ms per base step and 86.0 ms per big step with the fused loss (`train.loss_chunk` 16),
about 1.0 and 7.2 hours for 100K and 300K steps.
"""

import ml_collections

from transformer_jax.config import loading

table3 = loading.import_sibling(__file__, '../../configs/table3')

ROWS = tuple(table3.ROWS)

PAPER = table3.PAPER
PAPER_PARAMS = table3.PAPER_PARAMS


def get_config(row: str = 'base') -> ml_collections.ConfigDict:
  return table3.get_config(row)
