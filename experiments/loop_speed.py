r"""The training loop's steps/s against `transformer_jax.benchmark`'s for the same config and
batch shape, before and after the feed (`data.prefetch`) and `train.steps_per_call`,
interleaved.

  python experiments/loop_speed.py [--manual_dir=DIR] [--before=DIR] \
      [--ks=1,8] [--config=configs/multi30k.py] [--steps=48] [--rounds=2] [--json=FILE]

DIR is another checkout of the repository, the code before (`git worktree add DIR COMMIT`).
Every training batch has one shape: packed rows of `data.max_length` (`data.pack_length`, the
default on GPUs and TPUs), 32 rows x 128 tokens for `configs/multi30k.py`. The benchmark times
the same shape with the segment ids of packed rows (`--packed`). Variants, each a fresh
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
import statistics
import subprocess
import sys
import tempfile

from absl import app, flags

from transformer_jax.storage import provenance

from transformer_jax.config import loading

import multi30k_raw  # experiments/, the script's own directory

_BEFORE = flags.DEFINE_string('before', None, 'A checkout of the code before (optional).')
_KS = flags.DEFINE_list('ks', ['1', '8'], 'The train.steps_per_call values; --steps, the '
                        'logging interval and 8 must be multiples of each or divide it.')
_MANUAL_DIR = flags.DEFINE_string('manual_dir', None, "Multi30k's raw files (default: downloaded "
                                  'once, multi30k_raw.py).')
_CONFIG = flags.DEFINE_string('config', 'configs/multi30k.py', 'The config file.')
_STEPS = flags.DEFINE_integer('steps', 48, 'Training steps a run (a multiple of 8).')
_ROUNDS = flags.DEFINE_integer('rounds', 2, 'Rounds of every variant.')
_JSON = flags.DEFINE_string('json', None, 'Also write the figures to this file.')

_BENCHMARK_STEPS = flags.DEFINE_integer('benchmark_steps', 8, 'Steps in each timed round of '
                                        'the benchmark (at least one call).')
_LOG_EVERY = 8  # the loop's logging interval, or K where K is more
_THIS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _shape() -> tuple[int, int]:
  """Rows and length of `--config`'s training batches packed at data.max_length."""
  data = loading.from_file(os.path.join(_THIS, _CONFIG.value)).data
  return data.tokens_per_batch // data.max_length, data.max_length


def _shape_overrides(scratch: str) -> list[str]:
  return [f'--config.data.manual_dir={multi30k_raw.directory(_MANUAL_DIR.value)}',
          f'--config.data.tfds_data_dir={os.path.join(scratch, "tfds")}',
          f'--config.data.pack_length={_shape()[1]}']


def _loop(code: str, k: int | None, scratch: str) -> float:
  """Steps/s of `train.py` from checkout `code`; `k` None: the code before (no such field)."""
  steps = _STEPS.value
  with tempfile.TemporaryDirectory(dir=scratch) as workdir:
    log_every = max(_LOG_EVERY, k or 1)
    command = [sys.executable, '-m', 'transformer_jax.train', f'--config={_CONFIG.value}',
               f'--workdir={workdir}', *_shape_overrides(scratch),
               f'--config.train.num_train_steps={steps}',
               f'--config.train.log_every_steps={log_every}',
               f'--config.train.eval_every_steps={steps}',
               f'--config.train.checkpoint_every_steps={steps}',
               '--config.train.num_eval_steps=1', '--config.train.eval_bleu=false']
    if k is not None:
      command.append(f'--config.train.steps_per_call={k}')
    subprocess.run(command, cwd=code, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(os.path.join(workdir, 'metrics.jsonl')) as f:
      records = [r for r in map(json.loads, f) if r['split'] == 'train']
  assert [r['step'] for r in records] == list(range(log_every, steps + 1, log_every))
  return 1 / statistics.mean(r['step_time'] for r in records[1:])


def _benchmark(k: int) -> float:
  """Steps/s of `transformer_jax.benchmark` at the loop's shape."""
  rows, length = _shape()
  result = subprocess.run(
      [sys.executable, '-m', 'transformer_jax.benchmark', f'--config={_CONFIG.value}',
       f'--batch_size={rows}', f'--length={length}', '--packed', f'--steps={max(1, _BENCHMARK_STEPS.value // k)}',
       '--json', f'--config.train.steps_per_call={k}',
       # As the loop's (the config's intervals need not be multiples of k).
       f'--config.train.eval_every_steps={_STEPS.value}',
       f'--config.train.checkpoint_every_steps={_STEPS.value}'],
      cwd=_THIS, check=True, stdout=subprocess.PIPE, text=True)
  result = json.loads(result.stdout.strip().splitlines()[-1])
  _DEVICE.append(result['device'])
  return 1 / result['step_time_s']


def _measure(variant: str, scratch: str) -> float:
  if variant == 'loop before':
    return _loop(os.path.abspath(_BEFORE.value), None, scratch)
  kind, k = variant.split(' K=')
  return _loop(_THIS, int(k), scratch) if kind == 'loop' else _benchmark(int(k))


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
                    '--inspect', '--batches=1', *_shape_overrides(scratch)], cwd=_THIS,
                   check=True, stdout=subprocess.DEVNULL)
    variants = (['loop before'] if _BEFORE.value else []) + [
        f'{kind} K={k}' for kind in ('loop', 'benchmark') for k in _KS.value]
    rounds = []
    for r in range(_ROUNDS.value):
      order = variants if r % 2 == 0 else variants[::-1]
      rounds.append({})
      for variant in order:  # printed as measured: a run stopped early keeps what it has
        rounds[-1][variant] = _measure(variant, scratch)
        print(json.dumps({'round': r, variant: rounds[-1][variant]}), flush=True)
  median = {v: statistics.median(r[v] for r in rounds) for v in variants}
  ratios = {f'K={k}': median[f'loop K={k}'] / median[f'benchmark K={k}'] for k in _KS.value}
  if _BEFORE.value:
    ratios['before'] = median['loop before'] / median['benchmark K=1']
  rows, length = _shape()
  result = {
      'provenance': provenance.record(_DEVICE[0]),
      'config': _CONFIG.value, 'batch': f'{rows} x {length} (packed)', 'steps': _STEPS.value,
      'steps_per_second_rounds': rounds,
      'steps_per_second_median': median,
      'loop_over_benchmark': ratios,
  }
  text = json.dumps(result, indent=1)
  print(text)
  if _JSON.value:
    with open(_JSON.value, 'w') as f:
      f.write(text + '\n')


if __name__ == '__main__':
  app.run(main)
