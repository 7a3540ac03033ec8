r"""The train step and the training loop of this checkout against another checkout's (the code
before a change), interleaved: what a refactoring must show it did not slow down.

  git worktree add /tmp/before COMMIT
  python experiments/speed/before_after.py --before=/tmp/before [--manual_dir=DIR] \
      [--config=configs/multi30k.py] [--k=8] [--steps=48] [--rounds=2] [--kinds=step,loop] \
      [--output=FILE]

Variants, each a fresh process run from its checkout (so that its `transformer_jax` comes first
on the Python path): the step (`python -m transformer_jax.benchmark`, one step a call, calls back
to back, its `step_time_s`) and the loop (`python -m transformer_jax.train`, --steps steps of
`train.steps_per_call` --k, logging every 8 steps or every K: 1 / the mean `step_time` of the
'train' records after the first, which holds the warm-up), before and now. Both time the
config's packed training batch (`data.pack_length` = `data.max_length`: one shape). Round r runs
the variants in order, every other round in reverse (ABBA). The dataset is prepared once, first.
"""

import json
import os
import subprocess
import sys
import tempfile

from absl import app, flags

from transformer_jax import cli
from transformer_jax.config import loading

checkout = loading.import_sibling(__file__, '../tools/checkout')
measure = loading.import_sibling(__file__, '../tools/measure')


_BEFORE = flags.DEFINE_string('before', None, 'A checkout of the code before.', required=True)
_MANUAL_DIR = flags.DEFINE_string('manual_dir', None, "Multi30k's raw files (default: downloaded "
                                  'once, experiments/tools/multi30k_raw.py).')
_CONFIG = flags.DEFINE_string('config', 'configs/multi30k.py', 'The config file.')
_K = flags.DEFINE_integer('k', 8, "The loop's train.steps_per_call.")
_STEPS = flags.DEFINE_integer('steps', 48, 'Training steps of a loop run.')
_BENCHMARK_STEPS = flags.DEFINE_integer('benchmark_steps', 8, 'Calls in each timed round of the '
                                        'benchmark.')
_ROUNDS = flags.DEFINE_integer('rounds', 2, 'Rounds of every variant.')
_KINDS = flags.DEFINE_list('kinds', ['step', 'loop'], 'What to time: the step, the loop or both.')
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the figures to this file.')
cli.renamed('json', 'output', 'the file the figures are written to; --json is a switch')



def _loop(code: str, scratch: str) -> float:
  """Steps/s of the training loop in checkout `code`, K steps a call."""
  k = _K.value
  return measure.loop_steps_per_second(
      code, _CONFIG.value, [*measure.packed_overrides(_CONFIG.value, _MANUAL_DIR.value, scratch),
                            f'--config.train.steps_per_call={k}'],
      _STEPS.value, max(8, k), scratch)


def _step(code: str, devices: list[str]) -> float:
  """Steps/s of `transformer_jax.benchmark` in checkout `code`, one step a call."""
  sequences, length = measure.packed_shape(_CONFIG.value)
  result = subprocess.run(
      [sys.executable, '-m', 'transformer_jax.benchmark', f'--config={_CONFIG.value}',
       f'--batch_size={sequences}', f'--length={length}', '--packed',
       f'--steps={_BENCHMARK_STEPS.value}', '--json', '--config.train.steps_per_call=1'],
      cwd=code, check=True, stdout=subprocess.PIPE, text=True)
  result = json.loads(result.stdout.strip().splitlines()[-1])
  devices.append(result['device'])
  return 1 / result['step_time_s']


def main(argv):
  del argv
  if _STEPS.value % max(8, _K.value) or _STEPS.value < 2 * max(8, _K.value):
    raise app.UsageError(f'--steps must be a multiple of {max(8, _K.value)}, at least twice it')
  if not set(_KINDS.value) <= {'step', 'loop'}:
    raise app.UsageError(f'--kinds: step, loop or both, not {_KINDS.value}')
  variants = [f'{kind} {when}' for kind in _KINDS.value for when in ('before', 'now')]
  before, devices = os.path.abspath(_BEFORE.value), []
  with tempfile.TemporaryDirectory() as scratch:
    subprocess.run([sys.executable, '-m', 'transformer_jax.data', f'--config={_CONFIG.value}',
                    '--inspect', '--batches=1',
                    *measure.packed_overrides(_CONFIG.value, _MANUAL_DIR.value, scratch)],
                   cwd=checkout.ROOT,
                   check=True, stdout=subprocess.DEVNULL)

    def timed(variant: str) -> float:
      kind, when = variant.split()
      code = before if when == 'before' else checkout.ROOT
      return _step(code, devices) if kind == 'step' else _loop(code, scratch)

    rounds = measure.interleaved(variants, _ROUNDS.value, timed)
  median = measure.medians(rounds)
  sequences, length = measure.packed_shape(_CONFIG.value)
  measure.write({
      'before': subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=before, check=True,
                               capture_output=True, text=True).stdout.strip(),
      'config': _CONFIG.value, 'batch': f'{sequences} x {length} (packed)',
      'loop_steps': _STEPS.value, 'loop_steps_per_call': _K.value,
      'steps_per_second_rounds': rounds,
      'steps_per_second_median': median,
      'now_over_before': {kind: median[f'{kind} now'] / median[f'{kind} before']
                          for kind in _KINDS.value},
  }, _OUTPUT.value, devices[0] if devices else None)


if __name__ == '__main__':
  app.run(main)
