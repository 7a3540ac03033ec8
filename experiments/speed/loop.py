r"""The training loop's steps/s against `transformer_jax.benchmark`'s for the same config and
batch shape, before and after the feed (`data.prefetch`) and `train.steps_per_call`,
interleaved.

  python experiments/speed/loop.py [--manual_dir=DIR] [--before=DIR] \
      [--ks=1,8] [--config=configs/multi30k.py] [--steps=48] [--rounds=2] [--output=FILE]

DIR is another checkout of the repository, the code before (`git worktree add DIR COMMIT`).
Every training batch has one shape: packed sequences of `data.max_length` (`data.pack_length`,
the default on GPUs and TPUs), 32 sequences x 128 tokens for `configs/multi30k.py`. The benchmark
times the same shape with the segment ids of packed sequences (`--packed`). Variants, each a fresh
process: the loop before (given DIR; run from there, so its `transformer_jax` comes first on
the Python path), the loop now with each `train.steps_per_call` of --ks (and `data.prefetch` as
the config says), and the benchmark now with each. Each round runs them in order, every other
round in reverse (ABBA). The loop's steps/s is 1 / the mean `step_time` of its 'train' records
after the first (which holds the warm-up), logged every 8 steps (every K where K is more);
compiling, evaluation and saving are left out of those records (`train.py`). The benchmark's
is 1 / its `step_time_s` (calls back to back, --benchmark_steps steps a timed round). The dataset is prepared once, before the first round; each training run learns its
vocabulary in a new workdir; the compilation cache is the user's.
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


_BEFORE = flags.DEFINE_string('before', None, 'A checkout of the code before (optional).')
_KS = flags.DEFINE_list('ks', ['1', '8'], 'The train.steps_per_call values; --steps, the '
                        'logging interval and 8 must be multiples of each or divide it.')
_MANUAL_DIR = flags.DEFINE_string('manual_dir', None, "Multi30k's raw files (default: downloaded "
                                  'once, experiments/tools/multi30k_raw.py).')
_CONFIG = flags.DEFINE_string('config', 'configs/multi30k.py', 'The config file.')
_STEPS = flags.DEFINE_integer('steps', 48, 'Training steps a run (a multiple of 8).')
_ROUNDS = flags.DEFINE_integer('rounds', 2, 'Rounds of every variant.')
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the figures to this file.')
cli.renamed('json', 'output', 'the file the figures are written to; --json is a switch')

_BENCHMARK_STEPS = flags.DEFINE_integer('benchmark_steps', 8, 'Steps in each timed round of '
                                        'the benchmark (at least one call).')
_LOG_EVERY = 8  # the loop's logging interval, or K where K is more


def _loop(code: str, k: int | None, scratch: str) -> float:
  """Steps/s of `train.py` from checkout `code`; `k` None: the code before (no such field)."""
  flags = measure.packed_overrides(_CONFIG.value, _MANUAL_DIR.value, scratch)
  if k is not None:
    flags.append(f'--config.train.steps_per_call={k}')
  return measure.loop_steps_per_second(code, _CONFIG.value, flags, _STEPS.value,
                                       max(_LOG_EVERY, k or 1), scratch)


def _benchmark(k: int) -> float:
  """Steps/s of `transformer_jax.benchmark` at the loop's shape."""
  sequences, length = measure.packed_shape(_CONFIG.value)
  result = subprocess.run(
      [sys.executable, '-m', 'transformer_jax.benchmark', f'--config={_CONFIG.value}',
       f'--batch_size={sequences}', f'--length={length}', '--packed', f'--steps={max(1, _BENCHMARK_STEPS.value // k)}',
       '--json', f'--config.train.steps_per_call={k}',
       # As the loop's (the config's intervals need not be multiples of k).
       f'--config.train.eval_every_steps={_STEPS.value}',
       f'--config.train.checkpoint_every_steps={_STEPS.value}'],
      cwd=checkout.ROOT, check=True, stdout=subprocess.PIPE, text=True)
  result = json.loads(result.stdout.strip().splitlines()[-1])
  _DEVICE.append(result['device'])
  return 1 / result['step_time_s']


def _measure(variant: str, scratch: str) -> float:
  if variant == 'loop before':
    return _loop(os.path.abspath(_BEFORE.value), None, scratch)
  kind, k = variant.split(' K=')
  return _loop(checkout.ROOT, int(k), scratch) if kind == 'loop' else _benchmark(int(k))


_DEVICE = []  # the device kind, as the benchmark reports it


def main(argv):
  del argv
  for k in [_LOG_EVERY, *map(int, _KS.value)]:
    if _STEPS.value % k or _STEPS.value < 2 * k:
      raise app.UsageError(f'--steps must be a multiple of {k}, at least {2 * k}')
  if _BEFORE.value and '1' not in _KS.value:
    raise app.UsageError('--before is compared with the benchmark of --ks=1')
  with tempfile.TemporaryDirectory() as scratch:
    # Prepares the dataset (not timed), inspecting the first training batch.
    subprocess.run([sys.executable, '-m', 'transformer_jax.data', f'--config={_CONFIG.value}',
                    '--inspect', '--batches=1',
                    *measure.packed_overrides(_CONFIG.value, _MANUAL_DIR.value, scratch)],
                   cwd=checkout.ROOT,
                   check=True, stdout=subprocess.DEVNULL)
    variants = (['loop before'] if _BEFORE.value else []) + [
        f'{kind} K={k}' for kind in ('loop', 'benchmark') for k in _KS.value]
    rounds = measure.interleaved(variants, _ROUNDS.value,
                                 lambda variant: _measure(variant, scratch))
  median = measure.medians(rounds)
  ratios = {f'K={k}': median[f'loop K={k}'] / median[f'benchmark K={k}'] for k in _KS.value}
  if _BEFORE.value:
    ratios['before'] = median['loop before'] / median['benchmark K=1']
  sequences, length = measure.packed_shape(_CONFIG.value)
  measure.write({
      'config': _CONFIG.value, 'batch': f'{sequences} x {length} (packed)', 'steps': _STEPS.value,
      'steps_per_second_rounds': rounds,
      'steps_per_second_median': median,
      'loop_over_benchmark': ratios,
  }, _OUTPUT.value, _DEVICE[0])


if __name__ == '__main__':
  app.run(main)
