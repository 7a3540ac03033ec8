r"""The step budget of a sweep from measured dev curves: how far each row's dev perplexity
would still move over the last 20% of a longer run, by a fitted power law.

  python experiments/table3_regularised/step_budget.py \
      --curves=experiments/table3_regularised/probe_10000steps \
      --curves=experiments/gpu/h200/window_2026-11-28d_table3_regularised.jsonl \
      --budgets=10000,20000,30000,40000 --leave_out=D2,D2_seed1 \
      --output=experiments/table3_regularised/budget.md

Each --curves is a directory of a sweep's row files (`<row>.json`, as experiments/table3_multi30k/trends.py reads
them) or a JSON lines file of rows the device window cut off (`{"row", "dev_curve"}`); a
curve counts only if it ran to the budget it was trained for (the longest curve's last step).

The criterion (experiments/table3_regularised/sweep.py): every row's dev perplexity within
1% over its last 20% of steps. For each curve this prints the change measured over its own
last 20% (`table3_trends.last_fifth_change`) and, from the fit
    perplexity(s) = a + b (s / 1000)^-k
to its points from 20% of its steps on (warmup and the steep start left out), the change over
the last 20% of each candidate budget. --leave_out lists curves that are shown but do not
count (a row whose values have changed since). A curve that rises over its last 20% (the row
overfits: past its best, so no budget makes it flat, and its trend is already decided) is
listed but not fitted. The budget proposed is the smallest candidate at which every fitted curve moves less
than 1%.
"""

import json
import os
import sys

from absl import app, flags
import numpy as np
from scipy import optimize

from transformer_jax.config import loading

table3_trends = loading.import_sibling(__file__, '../table3_multi30k/trends')

_CRITERION = 0.01


def curves(sources: list[str]) -> dict[str, list[tuple[int, float]]]:
  """{row name (seed included): [(step, dev perplexity), ...]}, from every source in turn (a
  later source's curve of the same row replaces an earlier one's)."""
  found = {}
  for source in sources:
    if os.path.isdir(source):
      for name in sorted(os.listdir(source)):
        if name.endswith('.json'):
          with open(os.path.join(source, name)) as f:
            found[name[:-len('.json')]] = json.load(f)['dev_curve']
    else:
      with open(source) as f:
        for line in f:
          record = json.loads(line)
          found[record['row']] = record['dev_curve']
  return {row: [(r['step'], r['perplexity']) for r in curve] for row, curve in found.items()}


def _power_law(steps, a, b, k):
  return a + b * (steps / 1000) ** -k


def fit(curve: list[tuple[int, float]]) -> tuple[float, float, float]:
  """(a, b, k) of `_power_law` fitted to the curve's points from 20% of its steps on."""
  steps, perplexity = np.array(curve, dtype=np.float64).T
  late = steps >= 0.2 * steps[-1]
  params, _ = optimize.curve_fit(_power_law, steps[late], perplexity[late],
                                 p0=(perplexity[-1] * 0.9, perplexity[-1], 1.0), maxfev=20000)
  return tuple(params)


def predicted_change(params: tuple[float, float, float], budget: int) -> float:
  """The fitted perplexity at `budget` over that at 80% of it, minus 1."""
  return _power_law(budget, *params) / _power_law(0.8 * budget, *params) - 1


def table(found: dict[str, list[tuple[int, float]]], budgets: list[int],
          leave_out: tuple[str, ...] = ()) -> str:
  """The markdown table and the proposed budget, from every curve but `leave_out`'s."""
  trained = max(curve[-1][0] for curve in found.values())
  lines = ['| row | measured, last 20% | fit a, b, k | '
           + ' | '.join(f'{b} steps' for b in budgets) + ' |',
           '|---|---|---|' + '---|' * len(budgets)]
  worst = {budget: 0.0 for budget in budgets}
  for row, curve in sorted(found.items()):
    if curve[-1][0] != trained:
      continue  # cut off before its budget
    measured = table3_trends.last_fifth_change(curve)
    if measured > 0:
      lines.append(f'| {row} | {measured:+.1%} | rises (overfits): not fitted |'
                   + ' |' * len(budgets))
      continue
    params = fit(curve)
    changes = [predicted_change(params, budget) for budget in budgets]
    if row not in leave_out:
      for budget, change in zip(budgets, changes):
        worst[budget] = max(worst[budget], abs(change))
    lines.append(f'| {row}{" (left out)" if row in leave_out else ""} | {measured:+.1%} | {params[0]:.2f}, {params[1]:.2f}, {params[2]:.2f}'
                 ' | ' + ' | '.join(f'{c:+.2%}' for c in changes) + ' |')
  meets = [budget for budget in budgets if worst[budget] < _CRITERION]
  lines += ['', f'Curves trained for {trained} steps. Largest fitted change (rows left out aside) over the last 20%: '
            + ', '.join(f'{worst[b]:.2%} at {b}' for b in budgets) + '.',
            f'Smallest candidate budget within {_CRITERION:.0%}: '
            + (f'{meets[0]} steps.' if meets else 'none of them.')]
  return '\n'.join(lines) + '\n'


if __name__ == '__main__':
  _CURVES = flags.DEFINE_multi_string('curves', None, 'Row files: a directory or a JSON lines '
                                      'file.', required=True)
  _BUDGETS = flags.DEFINE_list('budgets', ['10000', '20000', '30000', '40000'],
                               'Candidate step budgets.')
  _LEAVE_OUT = flags.DEFINE_list('leave_out', [], 'Curves listed but left out of the budget '
                                 '(rows whose values changed since they were measured).')
  _OUTPUT = flags.DEFINE_string('output', None, 'Write the table here (markdown) as well.')

  def main(argv):
    del argv
    command = ' '.join(['python experiments/table3_regularised/step_budget.py', *sys.argv[1:]])
    text = ('# The step budget from measured dev curves\n\n'
            f'Written by `{command}`: each curve\'s dev perplexity change over its last 20% of '
            'steps, measured and as fitted for each budget (criterion: within 1%).\n\n'
            + table(curves(_CURVES.value), [int(b) for b in _BUDGETS.value],
                    tuple(_LEAVE_OUT.value)))
    print(text, end='')
    if _OUTPUT.value:
      with open(_OUTPUT.value, 'w') as f:
        f.write(text)

  app.run(main)
