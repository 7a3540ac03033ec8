"""What a sweep trains, in what order: each row's config, its groups (`groups`), and the groups
expected to finish by a deadline (`plan`).

A deadline is a lent accelerator's window; the groups' times are predicted from those of the
groups finished on this device (`predicted_seconds`).
"""

import dataclasses
from typing import Any

from transformer_jax.config import checks, fields
from transformer_jax.training.rows import check_together


def row_config(sweep: Any, row: str, overrides: list[str]) -> Any:
  """The config of `sweep`'s `row` with `FIELD=VALUE` overrides applied as `train` applies
  `--config.FIELD=VALUE`, checked: where a row's config enters a process, once (raises
  ValueError naming a bad override or field)."""
  config = fields.overridden(sweep.get_config(row), list(overrides))
  checks.validate(config)
  return config


def groups(configs: dict[str, Any], together: int) -> list[list[str]]:
  """The rows of `configs` (row -> config, in order) in groups of at most `together` that can
  train as one program (`rows.check_together`), in order: each row joins the first group with
  room whose first row it may train with, or starts a group."""
  formed = []  # (first row's config, rows)
  for row, config in configs.items():
    for first, group in formed:
      if len(group) < together:
        try:
          check_together([first, config], [group[0], row])
        except ValueError:
          continue
        group.append(row)
        break
    else:
      formed.append((config, [row]))
  return [group for _, group in formed]


def predicted_seconds(results: dict, group_size: int, steps: int,
                      device_kind: str) -> float | None:
  """Seconds that a group of `group_size` rows of `steps` steps will take to train and evaluate,
  predicted from the finished rows `results` (row -> JSON) trained on `device_kind` in groups of
  that size: the slowest such group's training seconds per step times `steps`, plus its rows'
  evaluation seconds (a group evaluated as one program records its evaluation's time in each
  row: counted once). None when no such group has finished."""
  measured = {}  # group -> (its training seconds per step, its evaluation seconds)
  for result in results.values():
    group = tuple(result.get('together', {}).get('rows', [result['row']]))
    device = result.get('provenance', {}).get('machine', {}).get('device')  # older rows: none
    if len(group) == group_size and device == device_kind:
      _, evals = measured.get(group, (0.0, 0.0))
      measured[group] = (result['train_seconds'] / result['steps'],
                         result['eval_seconds'] if result.get('evaluated_together')
                         else evals + result['eval_seconds'])
  if not measured:
    return None
  return max(per_step * steps + evals for per_step, evals in measured.values())


@dataclasses.dataclass(frozen=True)
class Plan:
  """The groups to start, in order, and those passed over; `seconds`: each group's predicted
  seconds (None: no group of its size has finished on this device)."""

  start: list[list[str]]
  passed_over: list[list[str]]
  seconds: dict[tuple[str, ...], float | None]

  def describe(self, seconds_left: float | None) -> str:
    """The plan as lines, for the log before anything starts."""
    def line(group):
      predicted = self.seconds[tuple(group)]
      return (f'  {", ".join(group)}: '
              + ('not predicted (no group of its size finished on this device)'
                 if predicted is None else f'{predicted:.0f} s predicted'))
    predicted = [g for g in self.start if self.seconds[tuple(g)] is not None]
    head = ('plan: every group, in order' if seconds_left is None else
            f'plan for {seconds_left:.0f} s: the groups expected to finish, the most rows that '
            f'fit ({sum(map(len, predicted))}), then those not predicted, if time is left')
    lines = [head, *map(line, self.start)]
    if self.passed_over:
      lines += ['not expected to finish, not started:', *map(line, self.passed_over)]
    return '\n'.join(lines)


def plan(groups_: list[list[str]], seconds: dict[tuple[str, ...], float | None],
         seconds_left: float | None) -> Plan:
  """The groups to start within `seconds_left` (None: all, in order): those whose predicted
  `seconds` fit with the most rows in all (fewest seconds among equals; a knapsack, solved
  exactly by whole seconds), in row order, then the groups not predicted (a size not yet
  measured), which start if there is time left when they come. Groups passed over are named."""
  if seconds_left is None:
    return Plan(list(groups_), [], seconds)
  known = [g for g in groups_ if seconds[tuple(g)] is not None]
  unknown = [g for g in groups_ if seconds[tuple(g)] is None]
  budget = max(int(seconds_left), 0)
  # best[t] = (rows, -seconds, chosen indices) using at most t whole seconds.
  best = [(0, 0, ())] * (budget + 1)
  for index, group in enumerate(known):
    cost = int(-(-seconds[tuple(group)] // 1))
    if cost > budget:
      continue
    for t in range(budget, cost - 1, -1):
      rows, negative, chosen = best[t - cost]
      candidate = (rows + len(group), negative - cost, chosen + (index,))
      if candidate[:2] > best[t][:2]:
        best[t] = candidate
  chosen = set(best[budget][2])
  start = [g for i, g in enumerate(known) if i in chosen]
  order = {tuple(g): i for i, g in enumerate(groups_)}
  start.sort(key=lambda g: order[tuple(g)])
  passed_over = [g for i, g in enumerate(known) if i not in chosen]
  return Plan(start + unknown, passed_over, seconds)
