"""A sweep's finished rows as a table beside the paper's figures: `<name>.md`, `<name>.csv`
and `<name>.png`, named after the sweep file (`table_name`), each written whole or not at all.
"""

import csv
import io
import os
from typing import Any

from transformer_jax.storage import atomic

NOTE = ('dev_bleu: tokenized, compound-split, cased BLEU (the paper\'s); dev_sacrebleu: '
        'sacreBLEU on detokenized text; dev_ppl: per-token perplexity; beam 4, α 0.6, no '
        'checkpoint averaging. paper_*: Table 3 (newstest2013).')


def table_name(sweep_path: str) -> str:
  """The tables' name: the sweep file's folder where the file is named 'sweep'
  (experiments/table3_regularised/sweep.py: 'table3_regularised'), else the file's."""
  folder, file = os.path.split(os.path.abspath(sweep_path))
  stem = os.path.splitext(file)[0]
  return os.path.basename(folder) if stem == 'sweep' else stem


def shape_columns(row: str, model: dict, label_smoothing: float, steps: int) -> dict:
  """Table 3's columns that say what a row is (the model's shape, dropout, ε_ls, positions;
  steps), from its `model` fields."""
  return {'row': row, 'N': model['num_layers'], 'd_model': model['d_model'],
          'd_ff': model['d_ff'], 'h': model['num_heads'], 'd_k': model['d_k'],
          'd_v': model['d_v'], 'P_drop': model['dropout_rate'], 'eps_ls': label_smoothing,
          'positions': model['position_encoding'], 'steps': steps}


def paper_columns(sweep: Any, row: str) -> dict:
  """The paper's perplexity and BLEU for `row` (`sweep.PAPER`; None where it gives none)."""
  paper_ppl, paper_bleu = getattr(sweep, 'PAPER', {}).get(row, (None, None))
  return {'paper_ppl': paper_ppl, 'paper_bleu': paper_bleu}


def table_rows(sweep: Any, results: dict) -> list[dict]:
  """One row of Table 3's columns (`shape_columns`; training minutes, dev perplexity and BLEU;
  `paper_columns`) per finished row, in the sweep's order."""
  table = []
  for row in sweep.ROWS:
    if row not in results:
      continue
    r = results[row]
    table.append({**shape_columns(row, r['model'], r['label_smoothing'], r['steps']),
                  'train_minutes': round(r['train_seconds'] / 60, 1),
                  'dev_ppl': round(r['perplexity'], 2), 'dev_bleu': round(r['bleu_tokenized'], 2),
                  'dev_sacrebleu': round(r['bleu_detokenized'], 2),
                  **paper_columns(sweep, row)})
  return table


def write_table(sweep_path: str, sweep: Any, results: dict, directory: str) -> None:
  """`<table_name>.md`, `.csv` and `.png` in `directory` from the finished rows."""
  table = table_rows(sweep, results)
  if not table:
    return
  path = os.path.join(directory, table_name(sweep_path))
  columns = list(table[0])
  text = io.StringIO()
  writer = csv.DictWriter(text, columns, lineterminator='\n')
  writer.writeheader()
  writer.writerows(table)
  atomic.write(path + '.csv', text.getvalue())
  lines = ['| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
  lines += ['| ' + ' | '.join('' if r[c] is None else str(r[c]) for c in columns) + ' |'
            for r in table]
  atomic.write(path + '.md', '\n'.join(lines) + '\n\n' + NOTE + '\n')
  with atomic.replacing(path + '.png') as temporary:
    _plot(table, temporary)


def _plot(table: list[dict], path: str) -> None:
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  rows = [r['row'] for r in table]
  figure, axes = plt.subplots(2, 1, figsize=(max(6, 0.6 * len(rows)), 7), sharex=True)
  for ax, ours, paper, label in ((axes[0], 'dev_bleu', 'paper_bleu', 'dev BLEU'),
                                 (axes[1], 'dev_ppl', 'paper_ppl', 'dev PPL')):
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r[ours] for r in table], 0.4, label='ours')
    if any(r[paper] is not None for r in table):  # the sweep file gives PAPER's figures
      ax.bar([i + 0.2 for i in x], [r[paper] or 0 for r in table], 0.4, label='paper (WMT14)')
    ax.set_ylabel(label)
    ax.legend()
  axes[1].set_xticks(range(len(rows)), rows)
  figure.tight_layout()
  figure.savefig(path, dpi=100, format='png')
  plt.close(figure)
