r"""The train step and the training loop of this checkout against another checkout's (the code
before a change), interleaved: what a refactoring must show it did not slow down.

  git worktree add /tmp/before COMMIT
  python experiments/before_after_speed.py --before=/tmp/before [--manual_dir=DIR] \
      [--config=configs/multi30k.py] [--k=8] [--steps=48] [--rounds=2] [--kinds=step,loop] \
      [--json=FILE]

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
import statistics
import subprocess
import sys
import tempfile

from absl import app, flags

import multi30k_raw  # experiments/, the script's own directory
from transformer_jax.config import loading
from transformer_jax.storage import provenance

_BEFORE = flags.DEFINE_string('before', None, 'A checkout of the code before.', required=True)
_MANUAL_DIR = flags.DEFINE_string('manual_dir', None, "Multi30k's raw files (default: downloaded "
                                  'once, multi30k_raw.py).')
_CONFIG = flags.DEFINE_string('config', 'configs/multi30k.py', 'The config file.')
_K = flags.DEFINE_integer('k', 8, "The loop's train.steps_per_call.")
_STEPS = flags.DEFINE_integer('steps', 48, 'Training steps of a loop run.')
_BENCHMARK_STEPS = flags.DEFINE_integer('benchmark_steps', 8, 'Calls in each timed round of the '
                                        'benchmark.')
_ROUNDS = flags.DEFINE_integer('rounds', 2, 'Rounds of every variant.')
_KINDS = flags.DEFINE_list('kinds', ['step', 'loop'], 'What to time: the step, the loop or both.')
_JSON = flags.DEFINE_string('json', None, 'Also write the figures to this file.')

_THIS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _shape() -> tuple[int, int]:
  """Rows and length of `--config`'s training batches packed at data.max_length."""
  data = loading.from_file(os.path.join(_THIS, _CONFIG.value)).data
  return data.tokens_per_batch // data.max_length, data.max_length


def _data_overrides(scratch: str) -> list[str]:
  return [f'--config.data.manual_dir={multi30k_raw.directory(_MANUAL_DIR.value)}',
          f'--config.data.tfds_data_dir={os.path.join(scratch, "tfds")}',
          f'--config.data.pack_length={_shape()[1]}']


def _loop(code: str, scratch: str) -> float:
  """Steps/s of `train.py` in checkout `code`."""
  steps, k = _STEPS.value, _K.value
  log_every = max(8, k)
  with tempfile.TemporaryDirectory(dir=scratch) as workdir:
    subprocess.run(
        [sys.executable, '-m', 'transformer_jax.train', f'--config={_CONFIG.value}',
         f'--workdir={workdir}', *_data_overrides(scratch),
         f'--config.train.num_train_steps={steps}', f'--config.train.steps_per_call={k}',
         f'--config.train.log_every_steps={log_every}',
         f'--config.train.eval_every_steps={steps}',
         f'--config.train.checkpoint_every_steps={steps}',
         '--config.train.num_eval_steps=1', '--config.train.eval_bleu=false'],
        cwd=code, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(workdir, 'metrics.jsonl')) as f:
      records = [r for r in map(json.loads, f) if r['split'] == 'train']
  assert [r['step'] for r in records] == list(range(log_every, steps + 1, log_every))
  return 1 / statistics.mean(r['step_time'] for r in records[1:])


def _step(code: str, devices: list[str]) -> float:
  """Steps/s of `transformer_jax.benchmark` in checkout `code`, one step a call."""
  rows, length = _shape()
  result = subprocess.run(
      [sys.executable, '-m', 'transformer_jax.benchmark', f'--config={_CONFIG.value}',
       f'--batch_size={rows}', f'--length={length}', '--packed',
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
                    '--inspect', '--batches=1', *_data_overrides(scratch)], cwd=_THIS,
                   check=True, stdout=subprocess.DEVNULL)
    rounds = []
    for r in range(_ROUNDS.value):
      rounds.append({})
      for variant in variants if r % 2 == 0 else variants[::-1]:
        kind, when = variant.split()
        code = before if when == 'before' else _THIS
        rounds[-1][variant] = (_step(code, devices) if kind == 'step'
                               else _loop(code, scratch))
        print(json.dumps({'round': r, variant: rounds[-1][variant]}), flush=True)
  median = {v: statistics.median(r[v] for r in rounds) for v in variants}
  rows, length = _shape()
  result = {
      'provenance': provenance.record(devices[0] if devices else None),
      'before': subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=before, check=True,
                               capture_output=True, text=True).stdout.strip(),
      'config': _CONFIG.value, 'batch': f'{rows} x {length} (packed)',
      'loop_steps': _STEPS.value, 'loop_steps_per_call': _K.value,
      'steps_per_second_rounds': rounds,
      'steps_per_second_median': median,
      'now_over_before': {kind: median[f'{kind} now'] / median[f'{kind} before']
                          for kind in _KINDS.value},
  }
  text = json.dumps(result, indent=1)
  print(text)
  if _JSON.value:
    with open(_JSON.value, 'w') as f:
      f.write(text + '\n')


if __name__ == '__main__':
  app.run(main)
