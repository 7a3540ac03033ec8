r"""What decoding's speed comes to for a user: `evaluate`'s time and a training run's dev
evaluation time, this checkout against another (the code before a change), interleaved.

  git worktree add /tmp/before COMMIT
  python experiments/decoding_vs_ct2/evaluation_time.py --before=/tmp/before \
      --workdir=DIR [--rounds=2] [--output=FILE]

Each variant runs in fresh processes from its checkout, with a compilation cache of its own
(`XDG_CACHE_HOME`), created empty for each round and each of the two commands:
- `evaluate`: `python -m transformer_jax.evaluate --workdir=DIR --split=test --json` on a copy
  of DIR, twice: with the cache cold, then warm (every program loaded); its wall time, and its
  own decoding seconds, of them compiling, and BLEU;
- a training run's dev evaluation: `configs/tiny.py` trained --steps steps, evaluated once at
  the end (dev perplexity and BLEU, as a Table 3 row's evaluation), its 'validation' record's
  seconds and compiling seconds, and its BLEU.
Round r runs the variants in order, every other round in reverse (ABBA).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from absl import flags

from transformer_jax import cli
from transformer_jax.config import loading
from transformer_jax.training import metrics_log

checkout = loading.import_sibling(__file__, '../tools/checkout')
measure = loading.import_sibling(__file__, '../tools/measure')

_BEFORE = flags.DEFINE_string('before', None, 'A checkout of the code before.', required=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'A trained workdir to evaluate.', required=True)
_STEPS = flags.DEFINE_integer('steps', 600, 'Training steps of the run whose dev evaluation '
                              'is timed.')
_ROUNDS = flags.DEFINE_integer('rounds', 2, 'Rounds of every variant.')
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the figures to this file.')


def _run(code: str, cache: str, command: list[str]) -> tuple[float, str]:
  """(wall seconds, stdout) of `python -m COMMAND...` run in checkout `code` with `cache`."""
  start = time.perf_counter()
  result = subprocess.run([sys.executable, '-m', *command], cwd=code, check=True,
                          capture_output=True, text=True,
                          env=dict(os.environ, XDG_CACHE_HOME=cache))
  return time.perf_counter() - start, result.stdout


def _evaluate(code: str, cache: str, scratch: str) -> dict:
  workdir = os.path.join(scratch, 'evaluated')
  shutil.copytree(_WORKDIR.value, workdir)
  figures = {}
  for state in ('cold', 'warm'):
    wall, stdout = _run(code, cache, ['transformer_jax.evaluate', f'--workdir={workdir}',
                                      '--split=test', '--json'])
    result = json.loads(stdout.strip().splitlines()[-1])
    figures[state] = {'wall_seconds': wall, 'decode_seconds': result['decode_seconds'],
                      'decode_compile_seconds': result['decode_compile_seconds'],
                      'bleu': result['bleu_detokenized']}
  return figures


def _dev_evaluation(code: str, cache: str, scratch: str) -> dict:
  workdir = os.path.join(scratch, 'trained')
  steps = _STEPS.value
  _run(code, cache, ['transformer_jax.train', '--config=configs/tiny.py', f'--workdir={workdir}',
                     f'--config.train.num_train_steps={steps}',
                     f'--config.train.eval_every_steps={steps}'])
  [record] = [r for r in metrics_log.read(os.path.join(workdir, 'metrics.jsonl'))
              if r['split'] == 'validation']
  return {'seconds': record['seconds'], 'compile_seconds': record['compile_seconds'],
          'bleu': record['bleu'], 'sentences': record['sentences']}


def main():
  codes = {'before': os.path.abspath(_BEFORE.value), 'now': checkout.ROOT}

  def one(variant: str) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
      return {'evaluate': _evaluate(codes[variant], os.path.join(scratch, 'cache'), scratch),
              'dev_evaluation': _dev_evaluation(codes[variant],
                                                os.path.join(scratch, 'training cache'),
                                                scratch)}

  rounds = measure.interleaved(list(codes), _ROUNDS.value, one)
  before = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=codes['before'], check=True,
                          capture_output=True, text=True).stdout.strip()
  measure.write({'workdir': _WORKDIR.value, 'steps': _STEPS.value, 'before_commit': before,
                 'rounds': rounds}, _OUTPUT.value)


if __name__ == '__main__':
  cli.run(main)
