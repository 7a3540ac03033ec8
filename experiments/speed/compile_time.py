r"""Wall time of a training run from scratch, with a cold and a warm compilation cache, and
optionally against another checkout of the code, interleaved.

  python experiments/speed/compile_time.py [--before=DIR] [--config=configs/tiny.py] [--until=200] \
      [--rounds=2] [--override=train.num_train_steps=200 ...] [--output=FILE]

Each round trains `--config` from scratch, each run in a fresh temporary workdir, one after the
other: given `--before`, with the code in DIR twice (run from that directory, so that its
`transformer_jax` comes first on the Python path); then with this checkout's code twice, sharing
one new compilation cache directory, so that the first of these compiles into it and the second
loads from it. A run's
figures: seconds from starting the command until metrics.jsonl holds the 'train' record of step
`--until`, seconds until the command ends (its last step saved and evaluated), and for this
checkout's runs the compile records' seconds and counts (`transformer_jax.training.compilation`).
The dataset's preparation is done before the first round, so no run includes it; each run
learns its vocabulary.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

from absl import app, flags
import numpy as np

from transformer_jax import cli
from transformer_jax.config import loading

checkout = loading.import_sibling(__file__, '../tools/checkout')
measure = loading.import_sibling(__file__, '../tools/measure')

_CONFIG = flags.DEFINE_string('config', 'configs/tiny.py', 'The config file to train.')
_BEFORE = flags.DEFINE_string('before', None, 'A checkout of the code to compare with.')
_UNTIL = flags.DEFINE_integer('until', 200, 'The step to time the run to.')
_ROUNDS = flags.DEFINE_integer('rounds', 2, 'Rounds of the four runs.')
_OVERRIDE = flags.DEFINE_multi_string('override', [], 'FIELD=VALUE for every run.')
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the figures to this file.')
cli.renamed('json', 'output', 'the file the figures are written to; --json is a switch')

_RUNS = ('before, first', 'before, second', 'cache, cold', 'cache, warm')


def _command(workdir: str, extra: list[str]) -> list[str]:
  """The training command, run from a checkout's root: `--config` is relative to it."""
  return [sys.executable, '-m', 'transformer_jax.train', f'--config={_CONFIG.value}',
          f'--workdir={workdir}', *[f'--config.{o}' for o in _OVERRIDE.value], *extra]


def _step_record_time(path: str, step: int, process: subprocess.Popen, start: float) -> float:
  """Seconds from `start` until `path` holds the 'train' record of `step` (polled)."""
  while process.poll() is None:
    if os.path.exists(path):
      with open(path) as f:
        if any(r['split'] == 'train' and r['step'] >= step for r in map(json.loads, f)):
          return time.perf_counter() - start
    time.sleep(0.05)
  raise RuntimeError(f'the run ended before step {step} was logged (exit {process.returncode})')


def _run(workdir: str, code: str, extra: list[str]) -> dict:
  """Trains with the `transformer_jax` and configs of the checkout `code` (run from there,
  which puts its package first on the Python path)."""
  start = time.perf_counter()
  process = subprocess.Popen(_command(workdir, extra), cwd=code, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
  path = os.path.join(workdir, 'metrics.jsonl')
  until = _step_record_time(path, _UNTIL.value, process, start)
  if process.wait():
    raise RuntimeError(f'{" ".join(_command(workdir, extra))} failed')
  figures = {'seconds_to_step': until, 'seconds_to_end': time.perf_counter() - start}
  with open(path) as f:
    compiles = {r['what']: r for r in map(json.loads, f) if r['split'] == 'compile'}
  if compiles:
    whole = compiles['the whole run']
    figures.update(compile_seconds=whole['seconds'], compiled=whole['compiled'],
                   loaded=whole['loaded'],
                   train_step_shapes=sum(what.startswith('train step') for what in compiles))
  return figures


def main(argv):
  del argv
  names = [name for name in _RUNS if _BEFORE.value or not name.startswith('before')]
  runs = {name: [] for name in names}
  with tempfile.TemporaryDirectory() as root:
    # Prepares the dataset (TFDS) once, outside every timed run.
    subprocess.run([sys.executable, '-m', 'transformer_jax.data', '--inspect',
                    f'--config={_CONFIG.value}', *[f'--config.{o}' for o in _OVERRIDE.value]],
                   cwd=checkout.ROOT, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    for round_ in range(_ROUNDS.value):
      cache = os.path.join(root, f'cache{round_}')
      for name in names:
        workdir = os.path.join(root, f'{name.replace(", ", "_")}{round_}')
        if name.startswith('before'):
          figures = _run(workdir, _BEFORE.value, [])
        else:
          figures = _run(workdir, checkout.ROOT, [f'--config.train.compilation_cache_dir={cache}'])
        runs[name].append(figures)
        print(f'round {round_}, {name}: {json.dumps(figures)}', flush=True)
  summary = {name: {key: float(np.mean([r[key] for r in results]))
                    for key in results[0]} for name, results in runs.items()}
  for name, means in summary.items():
    print(f'{name}: to step {_UNTIL.value} {means["seconds_to_step"]:.1f} s, to the end '
          f'{means["seconds_to_end"]:.1f} s' + (f', compiling {means["compile_seconds"]:.1f} s'
                                                if 'compile_seconds' in means else ''))
  measure.write({'config': _CONFIG.value, 'overrides': _OVERRIDE.value, 'until': _UNTIL.value,
                 'runs': runs, 'means': summary}, _OUTPUT.value)


if __name__ == '__main__':
  app.run(main)
