r"""Every row of Table 3 ("Variations on the Transformer architecture") as a delta over base.

  python -m transformer_jax.summary --config=configs/table3.py:C2
  python -m transformer_jax.summary --config=configs/table3.py --all_rows   # every row

Row ids follow the table's order: base, A1-A4 (heads, with d_k = d_v = d_model / h), B1-B2
(d_k only; d_v stays 64), C1-C7 (N, d_model, d_ff), D1-D4 (dropout, label smoothing),
E (learned positions), big. Table 3 reports newstest2013 BLEU with beam search and no
checkpoint averaging, and perplexity per word-piece.

A row of your own is one entry in `ROWS`, e.g. two heads of d_k = d_v = 256:

    'A5': Row(_heads(2)),

`summary` counts it (`--config=configs/table3.py:A5`, `--all_rows`); the miniature sweeps
(experiments/table3_multi30k/sweep.py, experiments/table3_regularised/sweep.py) train it scaled
by their rule, with its seeds; experiments/table3_multi30k/trends.py tabulates it as not in the
paper, in no trend.
"""

import dataclasses

import ml_collections

from transformer_jax.config import loading

base = loading.import_sibling(__file__, 'base')
big = loading.import_sibling(__file__, 'big')


@dataclasses.dataclass(frozen=True)
class Row:
  """One row: the config fields it changes over base (`delta`, flattened names) and, for the
  paper's rows, the paper's figures; a row of your own leaves them out (shown blank)."""

  delta: dict
  ppl: float | None = None  # dev perplexity per word-piece
  bleu: float | None = None  # dev BLEU
  params_millions: float | None = None  # "params ×10^6" (blank cells inherit base's 65)


def _heads(h: int) -> dict:
  return {'model.num_heads': h, 'model.d_k': 512 // h, 'model.d_v': 512 // h}


ROWS = {
    'base': Row({}, ppl=4.92, bleu=25.8, params_millions=65),
    'A1': Row(_heads(1), ppl=5.29, bleu=24.9, params_millions=65),
    'A2': Row(_heads(4), ppl=5.00, bleu=25.5, params_millions=65),
    'A3': Row(_heads(16), ppl=4.91, bleu=25.8, params_millions=65),
    'A4': Row(_heads(32), ppl=5.01, bleu=25.4, params_millions=65),
    'B1': Row({'model.d_k': 16}, ppl=5.16, bleu=25.1, params_millions=58),
    'B2': Row({'model.d_k': 32}, ppl=5.01, bleu=25.4, params_millions=60),
    'C1': Row({'model.num_layers': 2}, ppl=6.11, bleu=23.7, params_millions=36),
    'C2': Row({'model.num_layers': 4}, ppl=5.19, bleu=25.3, params_millions=50),
    'C3': Row({'model.num_layers': 8}, ppl=4.88, bleu=25.5, params_millions=80),
    'C4': Row({'model.d_model': 256, 'model.d_k': 32, 'model.d_v': 32},
              ppl=5.75, bleu=24.5, params_millions=28),
    'C5': Row({'model.d_model': 1024, 'model.d_k': 128, 'model.d_v': 128},
              ppl=4.66, bleu=26.0, params_millions=168),
    'C6': Row({'model.d_ff': 1024}, ppl=5.12, bleu=25.4, params_millions=53),
    'C7': Row({'model.d_ff': 4096}, ppl=4.75, bleu=26.2, params_millions=90),
    'D1': Row({'model.dropout_rate': 0.0}, ppl=5.77, bleu=24.6, params_millions=65),
    'D2': Row({'model.dropout_rate': 0.2}, ppl=4.95, bleu=25.5, params_millions=65),
    'D3': Row({'train.label_smoothing': 0.0}, ppl=4.67, bleu=25.3, params_millions=65),
    'D4': Row({'train.label_smoothing': 0.2}, ppl=5.47, bleu=25.7, params_millions=65),
    'E': Row({'model.position_encoding': 'learned'}, ppl=4.92, bleu=25.7, params_millions=65),
    'big': Row(big.DELTA, ppl=4.33, bleu=26.4, params_millions=213),
}

# The paper's (dev perplexity, dev BLEU) of its rows, as the sweep runner reads them
# (transformer_jax.sweep), and its params column, as `summary --all_rows` prints it beside ours.
PAPER = {row: (r.ppl, r.bleu) for row, r in ROWS.items() if r.ppl is not None}
PAPER_PARAMS = {row: r.params_millions for row, r in ROWS.items()
                if r.params_millions is not None}

# Table 3's parts, (A) to (E) and big, by the letter a row's id starts with (`part`).
PARTS = {'A': 'A: heads', 'B': 'B: d_k', 'C': 'C: N, d_model, d_ff',
         'D': 'D: dropout, label smoothing', 'E': 'E: learned positions', 'big': 'big'}


def part(row: str) -> str:
  """The part of Table 3 that `row` belongs to: its id without the trailing number ('A5' ->
  'A'); a row of another name is a part of its own."""
  return row.rstrip('0123456789') or row


def get_config(row: str = 'base') -> ml_collections.ConfigDict:
  if row not in ROWS:
    raise ValueError(f'unknown Table 3 row {row!r}; the rows are: {", ".join(ROWS)}')
  config = base.get_config()
  config.update_from_flattened_dict(ROWS[row].delta)
  config.decode.average_last = 1  # §6.2: Table 3's rows average no checkpoints
  return config
