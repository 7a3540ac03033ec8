"""What a sweep trains, in what order: each row's config, its groups (`groups`), and the groups
expected to finish by a deadline (`plan`).

A deadline is a lent accelerator's window; the groups' times are predicted from those of the
groups finished on this kind of device and as many devices a group (`predicted_seconds`). A
sweep's slots, the devices of a process split into groups' worth, train their groups side by
side; the plan says which groups each slot trains.
"""

import dataclasses
import os
from typing import Any

from transformer_jax.config import checks, fields
from transformer_jax.training import checkpointing
from transformer_jax.training.together import check_together


def row_config(sweep: Any, row: str, overrides: list[str]) -> Any:
  """The config of `sweep`'s `row` with `FIELD=VALUE` overrides applied as `train` applies
  `--config.FIELD=VALUE`, checked: where a row's config enters a process, once (raises
  ValueError naming a bad override or field)."""
  config = fields.overridden(sweep.get_config(row), list(overrides))
  checks.validate(config)
  return config


def groups(configs: dict[str, Any], together: int) -> list[list[str]]:
  """The rows of `configs` (row -> config, in order) in groups of at most `together` that can
  train as one program (`together.check_together`), in order: each row joins the first group with
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


def steps_left(configs: dict, workdir: str, group: list[str]) -> int:
  """The steps a group has left to train (a group cut off earlier resumes from the newest step
  all its rows saved: at most the newest of any differs, `loop.runs_together.train_together`)."""
  saved = [max(checkpointing.saved_steps(os.path.join(workdir, row)), default=0) for row in group]
  return configs[group[0]].train.num_train_steps - min(saved)


def predicted_seconds(results: dict, group_size: int, steps: int, device_kind: str,
                      devices: int = 1) -> float | None:
  """Seconds that a group of `group_size` rows of `steps` steps will take to train and evaluate
  on `devices` devices, predicted from the finished rows `results` (row -> JSON) trained on as
  many devices of `device_kind` in groups of that size (a row that does not record its devices
  trained on one): the slowest such group's training seconds per step times `steps`, plus its rows'
  evaluation seconds (a group evaluated as one program records its evaluation's time in each
  row: counted once). None when no such group has finished."""
  measured = {}  # group -> (its training seconds per step, its evaluation seconds)
  for result in results.values():
    group = tuple(result.get('together', {}).get('rows', [result['row']]))
    machine = result.get('provenance', {}).get('machine', {})  # older rows: none
    if (len(group) == group_size and machine.get('device') == device_kind
        and machine.get('devices', 1) == devices):
      _, evals = measured.get(group, (0.0, 0.0))
      measured[group] = (result['train_seconds'] / result['steps'],
                         result['eval_seconds'] if result.get('evaluated_together')
                         else evals + result['eval_seconds'])
  if not measured:
    return None
  return max(per_step * steps + evals for per_step, evals in measured.values())


@dataclasses.dataclass(frozen=True)
class Plan:
  """The groups each slot starts, in order (`queues`: one queue a slot, a slot being the
  devices a group trains on, `sweep.slots`), and those passed over; `seconds`: each group's
  predicted seconds (None: no group of its size has finished on this device and as many
  devices)."""

  queues: list[list[list[str]]]
  passed_over: list[list[str]]
  seconds: dict[tuple[str, ...], float | None]

  @property
  def start(self) -> list[list[str]]:
    """Every group to start, slot after slot."""
    return [group for queue in self.queues for group in queue]

  @property
  def order(self) -> list[list[str]]:
    """Every group to start, in the order slots take them: each slot's first, then each
    slot's second, ..."""
    return [queue[i] for i in range(max(map(len, self.queues), default=0))
            for queue in self.queues if i < len(queue)]

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
    lines = [head]
    for index, queue in enumerate(self.queues):
      if len(self.queues) > 1:
        known = sum(self.seconds[tuple(g)] or 0.0 for g in queue)
        lines.append(f' slot {index} ({len(queue)} groups, {known:.0f} s predicted):')
      lines += map(line, queue)
    if self.passed_over:
      lines += ['not expected to finish, not started:', *map(line, self.passed_over)]
    return '\n'.join(lines)


def plan(groups_: list[list[str]], seconds: dict[tuple[str, ...], float | None],
         seconds_left: float | None, slots: int = 1) -> Plan:
  """Which groups each of `slots` slots (side by side, each on its own devices) starts within
  `seconds_left`, in row order. Without a deadline (None), every group, each given to the slot
  with the fewest predicted seconds so far (the fewest groups among equals). With one, the
  slots are filled one after another, each with the groups not yet given whose predicted
  `seconds` fit in its time with the most rows (fewest seconds among equals; a knapsack,
  solved exactly by whole seconds); the groups not predicted (a size not yet measured) then
  go to the slots as without a deadline, and start if there is time left when they come.
  Groups passed over are named."""
  known = [g for g in groups_ if seconds[tuple(g)] is not None]
  unknown = [g for g in groups_ if seconds[tuple(g)] is None]
  if seconds_left is None:
    known, unknown = [], list(groups_)
  queues = [[] for _ in range(slots)]
  for queue in queues if known else ():
    picked = _most_rows(known, seconds, seconds_left)
    queue += picked
    known = [g for g in known if g not in picked]
  for group in unknown:
    load = [(sum(seconds[tuple(g)] or 0.0 for g in queue), len(queue)) for queue in queues]
    queues[load.index(min(load))].append(group)
  order = {tuple(g): i for i, g in enumerate(groups_)}
  for queue in queues:
    queue.sort(key=lambda g: (seconds_left is not None and seconds[tuple(g)] is None,
                              order[tuple(g)]))
  return Plan(queues, known, seconds)


def _most_rows(groups_: list[list[str]], seconds: dict[tuple[str, ...], float],
               seconds_left: float) -> list[list[str]]:
  """Those of `groups_` whose `seconds` fit in `seconds_left` with the most rows in all, the
  fewest seconds among equals (a knapsack, solved exactly by whole seconds)."""
  budget = max(int(seconds_left), 0)
  # best[t] = (rows, -seconds, chosen indices) using at most t whole seconds.
  best = [(0, 0, ())] * (budget + 1)
  for index, group in enumerate(groups_):
    cost = int(-(-seconds[tuple(group)] // 1))
    if cost > budget:
      continue
    for t in range(budget, cost - 1, -1):
      rows, negative, picked = best[t - cost]
      candidate = (rows + len(group), negative - cost, picked + (index,))
      if candidate[:2] > best[t][:2]:
        best[t] = candidate
  return [groups_[i] for i in best[budget][2]]
