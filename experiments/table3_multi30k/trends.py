r"""The miniature Table 3 with seeds: each row's mean and spread over its seeds, and which of
the paper's headline trends (§6.2) reproduce beyond that spread.

  python experiments/table3_multi30k/trends.py --results=experiments/table3_multi30k/rows \
      --output=experiments/table3_multi30k/trends.md \
      [--plot=experiments/table3_multi30k/curves.png]

Reads the sweep's row files (`<row>.json` for seed 0, `<row>_seed<n>.json` for the other seeds;
see experiments/table3_multi30k/sweep.py). For each Table 3 row: the number of seeds, and dev
perplexity and dev BLEU (tokenized, the paper's) as mean, min and max over the seeds, and how
far dev perplexity still moved over the last 20% of the steps (`last_fifth_change`; the seed
that moved most): the step budget's criterion is within 1%.

"A is worse than B beyond the seed spread" means every seed of A is worse than every seed of
B: A's best BLEU is below B's worst (or A's lowest perplexity above B's highest). "A ≈ B" means
their seeds' ranges overlap. The trends, as the paper states them (§6.2, Table 3), each with
the metric in which the paper's own rows show it:
  1  one head is worse than eight: A1 worse than base, in BLEU and perplexity;
  2  too many heads are worse: A4 (32 heads) worse than base, in BLEU;
  3  a smaller d_k hurts: B1 and B2 worse than base, in BLEU;
  4  bigger models are better: along N (C1, C2, base), d_model (C4, base) and d_ff (C6, base)
     every step up lowers perplexity, and the bigger rows (C3, C5, C7) are no worse than base
     (the paper's perplexities fall at every step, N 8 by only 0.04; its BLEU does too, except
     at N 8);
  5  dropout helps: D1 (no dropout) worse than base, in BLEU and perplexity;
  6  label smoothing raises perplexity but helps BLEU: D3 (ε_ls 0) has lower perplexity and
     lower BLEU than base;
  7  learned positional embeddings ≈ sinusoids: E ≈ base, in BLEU and perplexity;
  8  big is best: big's BLEU above every other row's of the paper beyond the spread.
The rows are configs/table3.py's, in its order; a row there without the paper's figures (one of
your own) is tabulated as not in the paper and counted in no trend.
A trend is reported as pending until each of its rows has finished at least two seeds: one
seed has no spread to judge a difference against.

--plot draws every finished seed's dev perplexity against the step (the `dev_curve` the
sweep logs every 500 steps), one panel per part of Table 3 ((A) to (E), big) with base's seeds in each:
whether a row converged (flat over the last 20% of its steps) can be seen at a glance.
"""

import json
import os
import re
from typing import Iterator

from absl import app, flags
import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position

from transformer_jax import cli  # pylint: disable=g-import-not-at-top,wrong-import-position
from transformer_jax.config import loading  # pylint: disable=g-import-not-at-top,wrong-import-position

MIN_SEEDS = 2

table3 = loading.import_sibling(__file__, '../../configs/table3')


def _finished_seeds(directory: str) -> Iterator[tuple[str, dict]]:
  """(row, its JSON) for every finished seed, seeds in file-name order."""
  for name in sorted(os.listdir(directory)):
    match = re.fullmatch(r'(.+?)(?:_seed\d+)?\.json', name)
    if match:
      with open(os.path.join(directory, name)) as f:
        yield match.group(1), json.load(f)


def last_fifth_change(curve: list[tuple[int, float]]) -> float | None:
  """Dev perplexity at the end over dev perplexity at the last evaluation at or before 80%
  of the steps, minus 1: negative while it still falls, positive once the row overfits; None
  when no evaluation came that early (a curve of the last step alone)."""
  end_step, end = curve[-1]
  before = [perplexity for step, perplexity in curve if step <= 0.8 * end_step]
  return end / before[-1] - 1 if before else None


def load(directory: str) -> dict[str, dict[str, list[float]]]:
  """{row: {'ppl': [...], 'bleu': [...], 'change': [...]}}, one entry per finished seed
  ('change': `last_fifth_change`, for the seeds whose dev curve gives one)."""
  rows = {}
  for row, result in _finished_seeds(directory):
    figures = rows.setdefault(row, {'ppl': [], 'bleu': [], 'change': []})
    figures['ppl'].append(result['perplexity'])
    figures['bleu'].append(result['bleu_tokenized'])
    if result.get('dev_curve'):
      change = last_fifth_change([(r['step'], r['perplexity']) for r in result['dev_curve']])
      if change is not None:
        figures['change'].append(change)
  return rows


def load_curves(directory: str) -> dict[str, list[list[tuple[int, float]]]]:
  """{row: one dev perplexity curve [(step, perplexity), ...] per finished seed}."""
  curves = {}
  for row, result in _finished_seeds(directory):
    curves.setdefault(row, []).append([(r['step'], r['perplexity'])
                                       for r in result['dev_curve']])
  return curves


def panels(rows) -> dict[str, list[str]]:
  """`rows` (ids) by their part of Table 3 (configs/table3.py's `part`), base in none: one
  panel each, in the order the parts first come."""
  by_part = {}
  for row in rows:
    if row != 'base':
      by_part.setdefault(table3.part(row), []).append(row)
  return by_part


def plot_curves(curves: dict) -> matplotlib.figure.Figure:
  """One panel per part of Table 3 (`panels`; and of any other rows in `curves`): base's seeds in grey, each row of the part in a
  colour of its own (one line per seed), dev perplexity against the step. The axis spans 5 to
  12, where the rows end; the first evaluations lie above it, and so does D1's end (no
  dropout)."""
  by_part = panels(ordered({**dict.fromkeys(table3.ROWS), **curves}))
  columns = 3
  figure, axes = plt.subplots(-(-len(by_part) // columns), columns,
                              figsize=(13, 3.75 * -(-len(by_part) // columns)), sharey=True,
                              squeeze=False)
  for ax in axes.flat[len(by_part):]:
    ax.axis('off')
  for ax, (part, part_rows) in zip(axes.flat, by_part.items()):
    title = table3.PARTS.get(part, part)
    for row in ('base', *part_rows):
      color = 'grey' if row == 'base' else None
      for seed, curve in enumerate(curves.get(row, [])):
        steps, perplexities = zip(*curve)
        line, = ax.plot(steps, perplexities, '.-', color=color, linewidth=1,
                        label=row if seed == 0 else None)
        color = line.get_color()
    ax.set_title(title)
    ax.set_ylim(5, 12)
    ax.grid(alpha=0.3)
    if ax.lines:
      ax.legend(fontsize='small')
  for ax in axes[:, 0]:
    ax.set_ylabel('dev perplexity (per token)')
  for ax in axes[-1]:
    ax.set_xlabel('step')
  figure.tight_layout()
  return figure


def ordered(rows) -> list[str]:
  """The ids of `rows` in configs/table3.py's order, then any it does not name."""
  return ([row for row in table3.ROWS if row in rows]
          + sorted(row for row in rows if row not in table3.ROWS))


def better(rows: dict, a: str, b: str, metric: str) -> bool:
  """Every seed of `a` beats every seed of `b` (higher BLEU, or lower perplexity)."""
  if metric == 'bleu':
    return min(rows[a]['bleu']) > max(rows[b]['bleu'])
  return max(rows[a]['ppl']) < min(rows[b]['ppl'])


def overlap(rows: dict, a: str, b: str, metric: str) -> bool:
  return not (better(rows, a, b, metric) or better(rows, b, a, metric))


def trends(rows: dict) -> list[tuple[str, bool | None]]:
  """(statement, True / False / None while a row has fewer than MIN_SEEDS seeds) for the eight
  trends."""
  checks = [
      ('1 head worse than 8 (A1 < base, BLEU and PPL)', ('A1', 'base'),
       lambda: better(rows, 'base', 'A1', 'bleu') and better(rows, 'base', 'A1', 'ppl')),
      ('too many heads worse (A4 < base, BLEU)', ('A4', 'base'),
       lambda: better(rows, 'base', 'A4', 'bleu')),
      ('smaller d_k worse (B1, B2 < base, BLEU)', ('B1', 'B2', 'base'),
       lambda: better(rows, 'base', 'B1', 'bleu') and better(rows, 'base', 'B2', 'bleu')),
      ('bigger N, d_model, d_ff better (PPL: C1 > C2 > base, C4 > base, C6 > base; '
       'C3, C5, C7 no worse than base)', ('C1', 'C2', 'C3', 'C4', 'C5', 'C6', 'C7', 'base'),
       lambda: all(better(rows, big, small, 'ppl') for small, big in (
           ('C1', 'C2'), ('C2', 'base'), ('C4', 'base'), ('C6', 'base'))) and not any(
               better(rows, 'base', big, 'ppl') for big in ('C3', 'C5', 'C7'))),
      ('dropout helps (D1 < base, BLEU and PPL)', ('D1', 'base'),
       lambda: better(rows, 'base', 'D1', 'bleu') and better(rows, 'base', 'D1', 'ppl')),
      ('label smoothing raises PPL but helps BLEU (D3: lower PPL, lower BLEU)', ('D3', 'base'),
       lambda: better(rows, 'D3', 'base', 'ppl') and better(rows, 'base', 'D3', 'bleu')),
      ('learned positions ≈ sinusoids (E ≈ base, BLEU and PPL)', ('E', 'base'),
       lambda: overlap(rows, 'E', 'base', 'bleu') and overlap(rows, 'E', 'base', 'ppl')),
      ('big is best (BLEU above every other row)', tuple(table3.PAPER),
       lambda: all(better(rows, 'big', row, 'bleu') for row in table3.PAPER if row != 'big')),
  ]
  def finished(row):
    return row in rows and len(rows[row]['ppl']) >= MIN_SEEDS

  return [(statement, check() if all(finished(row) for row in needed) else None)
          for statement, needed, check in checks]


def _spread(values: list[float]) -> str:
  mean = sum(values) / len(values)
  return f'{mean:.2f} ({min(values):.2f}–{max(values):.2f})' if len(values) > 1 else f'{mean:.2f}'


def _change(changes: list[float]) -> str:
  return f'{100 * max(changes, key=abs):+.1f}%' if changes else '–'


def report(rows: dict) -> str:
  lines = ['| row | seeds | dev PPL mean (min–max) | dev BLEU mean (min–max) '
           '| dev PPL change, last 20% of steps |', '|---|---|---|---|---|']
  lines += [f'| {row}{"" if row in table3.PAPER else " (not in the paper)"} | '
            f'{len(rows[row]["ppl"])} | {_spread(rows[row]["ppl"])} | '
            f'{_spread(rows[row]["bleu"])} | {_change(rows[row]["change"])} |'
            for row in ordered(rows)]
  results = trends(rows)
  lines += ['', '| trend | reproduces beyond the seed spread |', '|---|---|']
  lines += [f'| {statement} | {"pending" if ok is None else "yes" if ok else "no"} |'
            for statement, ok in results]
  done = [ok for _, ok in results if ok is not None]
  lines += ['', f'{sum(done)} of the {len(done)} decided trends reproduce '
            f'({len(results) - len(done)} pending).']
  return '\n'.join(lines) + '\n'


if __name__ == '__main__':
  _RESULTS = flags.DEFINE_string('results', None, 'The sweep\'s row JSON files.', required=True)
  _OUTPUT = flags.DEFINE_string('output', None, 'The Markdown file to write (default: print).')
  _PLOT = flags.DEFINE_string('plot', None, 'Also draw the dev perplexity curves to this PNG.')
  cli.renamed('curves', 'plot', 'the PNG the curves are drawn to')

  def main(argv):
    del argv
    text = report(load(_RESULTS.value))
    if _OUTPUT.value:
      with open(_OUTPUT.value, 'w') as f:
        f.write(text)
    else:
      print(text, end='')
    if _PLOT.value:
      plot_curves(load_curves(_RESULTS.value)).savefig(_PLOT.value, dpi=100)

  app.run(main)
