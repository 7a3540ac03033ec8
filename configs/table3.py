r"""Every row of Table 3 ("Variations on the Transformer architecture") as a delta over base.

  python -m transformer_jax.summary --config=configs/table3.py:C2
  python -m transformer_jax.summary --config=configs/table3.py --all_rows   # every row

Row ids follow the table's order: base, A1-A4 (heads, with d_k = d_v = d_model / h), B1-B2
(d_k only; d_v stays 64), C1-C7 (N, d_model, d_ff), D1-D4 (dropout, label smoothing),
E (learned positions), big. Table 3 reports newstest2013 BLEU with beam search and no
checkpoint averaging, and perplexity per word-piece.
"""

import dataclasses

import ml_collections

from transformer_jax.config import loading

base = loading.import_sibling(__file__, 'base')
big = loading.import_sibling(__file__, 'big')


@dataclasses.dataclass(frozen=True)
class Row:
  """One Table 3 row: the paper's figures and the config fields it changes."""

  ppl: float  # dev perplexity per word-piece
  bleu: float  # dev BLEU
  params_millions: float  # the paper's "params ×10^6" column (blank cells inherit base's 65)
  delta: dict


def _heads(h: int) -> dict:
  return {'model.num_heads': h, 'model.d_k': 512 // h, 'model.d_v': 512 // h}


ROWS = {
    'base': Row(4.92, 25.8, 65, {}),
    'A1': Row(5.29, 24.9, 65, _heads(1)),
    'A2': Row(5.00, 25.5, 65, _heads(4)),
    'A3': Row(4.91, 25.8, 65, _heads(16)),
    'A4': Row(5.01, 25.4, 65, _heads(32)),
    'B1': Row(5.16, 25.1, 58, {'model.d_k': 16}),
    'B2': Row(5.01, 25.4, 60, {'model.d_k': 32}),
    'C1': Row(6.11, 23.7, 36, {'model.num_layers': 2}),
    'C2': Row(5.19, 25.3, 50, {'model.num_layers': 4}),
    'C3': Row(4.88, 25.5, 80, {'model.num_layers': 8}),
    'C4': Row(5.75, 24.5, 28, {'model.d_model': 256, 'model.d_k': 32, 'model.d_v': 32}),
    'C5': Row(4.66, 26.0, 168, {'model.d_model': 1024, 'model.d_k': 128, 'model.d_v': 128}),
    'C6': Row(5.12, 25.4, 53, {'model.d_ff': 1024}),
    'C7': Row(4.75, 26.2, 90, {'model.d_ff': 4096}),
    'D1': Row(5.77, 24.6, 65, {'model.dropout_rate': 0.0}),
    'D2': Row(4.95, 25.5, 65, {'model.dropout_rate': 0.2}),
    'D3': Row(4.67, 25.3, 65, {'train.label_smoothing': 0.0}),
    'D4': Row(5.47, 25.7, 65, {'train.label_smoothing': 0.2}),
    'E': Row(4.92, 25.7, 65, {'model.position_encoding': 'learned'}),
    'big': Row(4.33, 26.4, 213, big.DELTA),
}

# (dev perplexity, dev BLEU) of each row, as the sweep runner reads them (transformer_jax.sweep).
PAPER = {row: (figures.ppl, figures.bleu) for row, figures in ROWS.items()}
# The params column, as `transformer_jax.summary --all_rows` prints it beside ours.
PAPER_PARAMS = {row: figures.params_millions for row, figures in ROWS.items()}


def get_config(row: str = 'base') -> ml_collections.ConfigDict:
  if row not in ROWS:
    raise ValueError(f'unknown Table 3 row {row!r}; the rows are: {", ".join(ROWS)}')
  config = base.get_config()
  config.update_from_flattened_dict(ROWS[row].delta)
  config.decode.average_last = 1  # §6.2: Table 3's rows average no checkpoints
  return config
