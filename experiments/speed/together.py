r"""Sweep rows trained one after another against the same rows trained as one program
(`runs_together.train_together`, the sweep's `--together`), each variant in fresh processes, fresh
workdirs and a fresh compilation cache.

  python experiments/speed/together.py [--manual_dir=DIR] \
      [--sweep=experiments/table3_multi30k/sweep.py] [--rows=base,D1,D2,D3] [--steps=100] \
      [--output=FILE]

'apart' runs `python -m transformer_jax.train` for each row in turn; 'together' trains the rows
as one program in one child process, as a sweep's group trains (`runs_together.train_together`).
Both train --steps steps with one short dev evaluation at the end (one batch, no BLEU), so the
figures are training's: the wall time of the commands (data, vocabulary, compiling and steps
included) and the steps' time (the 'train' records' step time times their steps; a group's
records give the group's time).
"""

import json
import os
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from transformer_jax import cli
from transformer_jax.config import loading
from transformer_jax.training import metrics_log

checkout = loading.import_sibling(__file__, '../tools/checkout')
measure = loading.import_sibling(__file__, '../tools/measure')
multi30k_raw = loading.import_sibling(__file__, '../tools/multi30k_raw')


_MANUAL_DIR = flags.DEFINE_string('manual_dir', None, "Multi30k's raw files (default: downloaded "
                                  'once, experiments/tools/multi30k_raw.py).')
_SWEEP = flags.DEFINE_string('sweep', 'experiments/table3_multi30k/sweep.py', 'The sweep file.')
_ROWS = flags.DEFINE_list('rows', ['base', 'D1', 'D2', 'D3'], 'Rows that may share a program.')
_STEPS = flags.DEFINE_integer('steps', 100, 'Training steps of every row.')
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the figures to this file.')
cli.renamed('json', 'output', 'the file the figures are written to; --json is a switch')


def _overrides(scratch: str) -> list[str]:
  steps = _STEPS.value
  return [f'data.manual_dir={multi30k_raw.directory(_MANUAL_DIR.value)}',
          f'data.tfds_data_dir={os.path.join(scratch, "tfds")}',
          f'train.num_train_steps={steps}', f'train.checkpoint_every_steps={steps}',
          f'train.eval_every_steps={steps}', f'train.log_every_steps={steps // 4}',
          'train.num_eval_steps=1', 'train.eval_bleu=false',
          f'train.compilation_cache_dir={os.path.join(scratch, "cache")}']


def _step_seconds(workdir: str) -> float:
  train = [r for r in metrics_log.read(os.path.join(workdir, 'metrics.jsonl'))
           if r['split'] == 'train']
  return sum(r['step_time'] * (r['step'] - previous['step'])
             for previous, r in zip([{'step': 0}] + train, train))


def _run(command: list[str]) -> float:
  start = time.perf_counter()
  subprocess.run(command, cwd=checkout.ROOT, check=True, stdout=subprocess.DEVNULL)
  return time.perf_counter() - start


def _apart(scratch: str) -> dict:
  wall, steps = 0.0, 0.0
  for row in _ROWS.value:
    workdir = os.path.join(scratch, 'apart', row)
    wall += _run([sys.executable, '-m', 'transformer_jax.train',
                  f'--config={_SWEEP.value}:{row}', f'--workdir={workdir}',
                  *[f'--config.{o}' for o in _overrides(scratch)]])
    steps += _step_seconds(workdir)
  return {'wall_seconds': wall, 'step_seconds': steps}


# The child process of 'together': the rows' configs with the overrides, trained as one program.
_TRAIN_TOGETHER = """import os, sys
from transformer_jax.config import fields, loading
from transformer_jax.loop import runs_together
sweep, rows, root, *overrides = sys.argv[1:]
rows = rows.split(',')
runs_together.train_together(
    [fields.overridden(loading.from_file(f'{sweep}:{row}'), overrides) for row in rows],
    [os.path.join(root, row) for row in rows])
"""


def _together(scratch: str) -> dict:
  root = os.path.join(scratch, 'together')
  wall = _run([sys.executable, '-c', _TRAIN_TOGETHER, _SWEEP.value, ','.join(_ROWS.value), root,
               *_overrides(scratch)])
  return {'wall_seconds': wall, 'step_seconds': _step_seconds(os.path.join(root, _ROWS.value[0]))}


def main(argv):
  del argv
  figures = {}
  for name, variant in (('apart', _apart), ('together', _together)):
    with tempfile.TemporaryDirectory() as scratch:
      figures[name] = variant(scratch)
    print(name, json.dumps(figures[name]), flush=True)
  rows = len(_ROWS.value)
  measure.write({
      'sweep': _SWEEP.value, 'rows': _ROWS.value, 'steps': _STEPS.value, **figures,
      'rows_per_hour': {name: rows * 3600 / f['wall_seconds'] for name, f in figures.items()},
      'together_over_apart': {
          'wall': figures['apart']['wall_seconds'] / figures['together']['wall_seconds'],
          'steps': figures['apart']['step_seconds'] / figures['together']['step_seconds']},
  }, _OUTPUT.value)


if __name__ == '__main__':
  app.run(main)
