r"""A lent accelerator window in one command: the figures that need a GPU, most wanted first,
each written as soon as it is measured, stopped at a deadline.

  python experiments/gpu/device_window.py --output=OUT [--manual_dir=.devdata/multi30k] \
      [--stop_after_minutes=9.3] [--parts=NAME,...] [--workdir=/tmp/device_window] [--together=4]

Each part is one command of the experiments here; it gets the time left before the deadline (at
most its cap, _CAPS, where later parts need the window too) and is stopped when that runs out
(SIGTERM, then SIGKILL 20 s later: a training run saves and stops), so a part cut off loses only
itself. Each finished part appends one line to OUT/window.jsonl (its name, exit status, wall
seconds and the JSON it wrote), the sweep's rows go to OUT/table3_regularised.jsonl (their
logs' excerpt to OUT/table3_regularised.log), and all output goes to OUT/window.log: four
files, as a device call brings back few. The first line holds the machine and the versions.

Parts, in order (the issue's wants first; what an earlier window measured comes later: the
sweep, unfinished, before the parts one H200 window measured on 2026-11-28):

- table3_regularised: the rows of `experiments/table3_regularised/sweep.py` not yet in
  experiments/table3_regularised/rows/, base's seeds and the D rows first
  (`transformer_jax.sweep --together=T`, in one process, its rows in --workdir, so that a
  second call on the same machine resumes them, the group cut off from its last checkpoint;
  `--stop_after_minutes`: the sweep prints its plan first, the groups that the groups finished
  on this device say will end before the deadline, chosen so that the most rows finish, and
  starts no other); the plan and what the sweep prints go to OUT/window.log; each finished
  row's JSON is appended to
  OUT/table3_regularised.jsonl as soon as it is written, and when the part stops, the dev
  curve of each row not finished, and an excerpt of each group's log (compiling, step speed,
  where it stopped) to OUT/table3_regularised.log (needs --manual_dir);
- multi30k_e2e: `configs/multi30k.py` trained and evaluated on test2016 end to end, its wall
  time split into preparation, compiling, steps and evaluation (`accelerator_multi30k.py`;
  needs --manual_dir);
- profile_multi30k: where `configs/multi30k.py`'s step goes (`profile_step.py`; 4.3 ms of
  kernels on an H200, docs/performance.md);
- loop_speed: `configs/multi30k.py`'s training loop against the benchmark, 1, 8 and 32 steps a
  call on the packed single shape (`experiments/speed/loop.py`; needs --manual_dir);
- torch_{base,big}_bfloat16: the paper's step (§5.1, about 25000 + 25000 tokens) in bfloat16,
  transformer_jax beside PyTorch eager and `torch.compile` (`experiments/speed/torch_baseline.py`);
- torch_{base,big}_float32: the same in float32 (TF32 matrix products);
- base_defaults, base_{float32,one_step_a_call,threefry,cudnn}: the base step as the platform's
  defaults resolve it on a GPU (bfloat16, 'rbg', loss chunk 16, 20 steps a call:
  transformer_jax/config/platforms.py), and with each default changed alone: float32 (TF32),
  one step a call, JAX's threefry dropout masks, cuDNN's attention (`transformer_jax.benchmark`);
- base_loss_chunk{0,8,16,64}_256: `train.loss_chunk` at base's packed sequences of 256 tokens;
- multi30k_e2e_float32: multi30k_e2e in float32, against the default bfloat16 on dev
  perplexity (a default that changes figures stays only within the seeds' spread);
- profile_base_bfloat16: where that step's kernel time goes (`profile_step.py`);
- together_speed: four miniature Table 3 rows (base, D1-D3) one after another against the
  four as one program (`experiments/speed/together.py`; needs --manual_dir).

Rehearse on a CPU first (`--parts` picks parts; the figures there mean nothing).
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

from absl import app, flags

from transformer_jax import cli
from transformer_jax.config import loading
from transformer_jax.storage import provenance

checkout = loading.import_sibling(__file__, '../tools/checkout')

_OUTPUT = flags.DEFINE_string('output', None, 'Where window.jsonl and window.log go.',
                              required=True)
cli.renamed('out', 'output', 'the directory written')
_MANUAL_DIR = flags.DEFINE_string('manual_dir', None, "Multi30k's raw files (loop_speed).")
_STOP_AFTER_MINUTES = flags.DEFINE_float('stop_after_minutes', 9.3, 'The deadline, from the '
                                          'start.')
cli.renamed('minutes', 'stop_after_minutes', 'the deadline')
_PARTS = flags.DEFINE_list('parts', None, 'Only these parts (default: all, in order).')
_WORKDIR = flags.DEFINE_string('workdir', '/tmp/device_window', "The sweep's rows' workdirs.")
_TOGETHER = flags.DEFINE_integer(
    'together', 4, "The sweep's rows trained as one program, at most: a group must finish "
    'within the window (experiments/table3_regularised/README.md: the groups leases finished).')
_REHEARSE = flags.DEFINE_bool('rehearse', False, 'configs/tiny.py for base and big, and few '
                              'steps: every part run through on a CPU in minutes.')

_REGULARISED = 'experiments/table3_regularised/rows'


def _regularised_rows() -> str:
  """Where the regularised sweep's finished rows go: its results folder, or for a rehearsal (tiny
  rows, not results) a folder of the workdir, so that no rehearsal row is taken for a real one."""
  if _REHEARSE.value:
    return os.path.join(_WORKDIR.value, 'table3_regularised_rows')
  return os.path.join(checkout.ROOT, _REGULARISED)
# The sweep's rows that decide the most trends first: base's seeds, which every trend is judged
# against, with the D rows that share their program; the rest in the sweep's order.
_FIRST_ROWS = ('base', 'D1', 'D2', 'D3', 'D4', 'base_seed1', 'base_seed2', 'D1_seed1', 'D2_seed1',
               'D3_seed1', 'D4_seed1')
# Rehearsal: two rows of base's group, small batches, few steps.
_REHEARSAL_SWEEP = ['--rows=base,base_seed1', '--override=data.tokens_per_batch=512',
                    '--override=train.num_train_steps=100']
# A progress bar's line in a log (tqdm's: "  35%|███▌   | 3500/10000 [00:14<00:26, 243.66step/s").
_PROGRESS = re.compile(r'\d+%\|.*\|\s*\d+/\d+ \[')
# The most seconds a part may take, where the parts after it need the window too: the end to end
# run's target is 5 minutes, the profile is a few steps.
_CAPS = {'multi30k_e2e': 330, 'multi30k_e2e_float32': 330, 'profile_multi30k': 150}


def _sweep_rows() -> str:
  """--rows: _FIRST_ROWS, then every other row of the sweep in its order."""
  sweep = loading.load_sweep(os.path.join(checkout.ROOT, 'experiments', 'table3_regularised',
                                         'sweep.py'))
  return '--rows=' + ','.join([*_FIRST_ROWS, *(r for r in sweep.ROWS if r not in _FIRST_ROWS)])


def _parts(result: str) -> dict[str, list[str]]:
  """Each part's command; `result` is the JSON file it writes."""
  py = sys.executable
  small = _REHEARSE.value
  manual_dir = _MANUAL_DIR.value and os.path.abspath(_MANUAL_DIR.value)
  base, big = ('configs/tiny.py',) * 2 if small else ('configs/base.py', 'configs/big.py')
  torch = lambda config, dtype: [py, 'experiments/speed/torch_baseline.py', f'--shapes={config}',
                                 f'--dtype={dtype}', '--compile', f'--output={result}',
                                 *(['--steps=2'] if small else [])]
  benchmark = lambda *overrides: [py, '-m', 'transformer_jax.benchmark', f'--config={base}',
                                  *overrides, '--json', *(['--steps=2'] if small else [])]
  chunk = lambda n: benchmark('--length=256', '--packed', f'--config.train.loss_chunk={n}')
  multi30k_e2e = lambda *overrides: [
      py, 'experiments/gpu/accelerator_multi30k.py', f'--output={os.path.dirname(result)}',
      f'--manual_dir={manual_dir}', *overrides,
      *(['--config=configs/tiny.py', '--override=train.num_train_steps=200'] if small else [])]
  return {
      'table3_regularised': [py, '-m', 'transformer_jax.sweep',
                             '--sweep=experiments/table3_regularised/sweep.py',
                             f'--workdir={os.path.join(_WORKDIR.value, "table3_regularised")}',
                             f'--results={_regularised_rows()}', f'--together={_TOGETHER.value}',
                             f'--override=data.manual_dir={manual_dir}',
                             *(_REHEARSAL_SWEEP if small else [_sweep_rows()])],
      'multi30k_e2e': multi30k_e2e(),
      'profile_multi30k': [py, 'experiments/gpu/profile_step.py',
                           f'--config={base if small else "configs/multi30k.py"}',
                           f'--output={result}', *(['--steps=1'] if small else [])],
      'loop_speed': [py, 'experiments/speed/loop.py', f'--manual_dir={manual_dir}',
                     '--ks=1,8,32', f'--steps={64 if small else 1024}',
                     f'--benchmark_steps={32 if small else 512}', '--rounds=1',
                     f'--output={result}'],
      'torch_base_bfloat16': torch(base, 'bfloat16'),
      'torch_big_bfloat16': torch(big, 'bfloat16'),
      'torch_base_float32': torch(base, 'float32'),
      'torch_big_float32': torch(big, 'float32'),
      'base_defaults': benchmark(),
      'base_float32': benchmark('--config.dtype=float32'),
      'base_one_step_a_call': benchmark('--config.train.steps_per_call=1'),
      'base_threefry': benchmark('--config.train.dropout_prng_impl=threefry2x32'),
      'base_cudnn': benchmark('--config.model.attention_impl=cudnn'),
      **{f'base_loss_chunk{n}_256': chunk(n) for n in (0, 8, 16, 64)},
      'multi30k_e2e_float32': multi30k_e2e('--override=dtype=float32'),
      'profile_base_bfloat16': [py, 'experiments/gpu/profile_step.py', f'--config={base}',
                                '--config.dtype=bfloat16', f'--output={result}',
                                *(['--steps=1'] if small else [])],
      'together_speed': [py, 'experiments/speed/together.py',
                         f'--manual_dir={manual_dir}',
                         f'--steps={20 if small else 1000}', f'--output={result}'],
  }


class _Collector:
  """Appends each JSON file that appears in `directory` (a sweep's finished rows) to the JSON
  lines file `out`, as {"row": NAME, **ROW}, every few seconds until stopped."""

  def __init__(self, directory: str, out: str):
    self.directory, self.out = directory, out
    self.seen = set(self._names())
    self.collected = []
    self._stopped = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True)
    self._thread.start()

  def _names(self) -> list[str]:
    if not os.path.isdir(self.directory):
      return []
    return sorted(n for n in os.listdir(self.directory) if n.endswith('.json'))

  def _collect(self):
    for name in self._names():
      if name not in self.seen:
        with open(os.path.join(self.directory, name)) as f:
          row = json.load(f)  # the sweep writes each row's file atomically
        with open(self.out, 'a') as f:
          f.write(json.dumps({'row': name[:-len('.json')], **row}) + '\n')
        self.seen.add(name)
        self.collected.append(name[:-len('.json')])

  def _run(self):
    while not self._stopped.wait(5):
      self._collect()

  def stop(self):
    self._stopped.set()
    self._thread.join()
    self._collect()

  def unfinished(self, workdir: str, out: str) -> None:
    """Appends the dev perplexities logged so far by each row in `workdir` not finished, as
    {"row": NAME, "unfinished": true, "dev_curve": [...]}, to `out`: a window cut short
    still brings back the curves."""
    if not os.path.isdir(workdir):
      return
    for row in sorted(os.listdir(workdir)):
      path = os.path.join(workdir, row, 'metrics.jsonl')
      if f'{row}.json' in self.seen or not os.path.exists(path):
        continue
      with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
      curve = [{'step': r['step'], 'perplexity': r['perplexity']} for r in records
               if r.get('split') == 'validation']
      steps = [r['step'] for r in records if r.get('split') == 'train']
      with open(out, 'a') as f:
        f.write(json.dumps({'row': row, 'unfinished': True, 'last_step': max(steps, default=0),
                            'dev_curve': curve}) + '\n')


def log_excerpt(workdir: str, out: str) -> None:
  """Appends each row's `sweep.log` in `workdir` (a group's is its first row's) to `out`,
  its progress bars cut to the last one before each other line: what the group compiled,
  how fast its steps ran and where it stopped, in a file small enough to come back."""
  if not os.path.isdir(workdir):
    return
  with open(out, 'a') as excerpt:
    for row in sorted(os.listdir(workdir)):
      path = os.path.join(workdir, row, 'sweep.log')
      if not os.path.exists(path):
        continue
      with open(path, errors='replace') as f:
        lines = [line.rstrip() for line in re.split(r'[\r\n]+', f.read()) if line.strip()]
      excerpt.write(f'== {row}\n')
      for line, after in zip(lines, lines[1:] + ['']):
        progress, next_progress = (bool(_PROGRESS.search(x)) for x in (line, after))
        if not progress or not next_progress:
          excerpt.write(line + '\n')


def main(argv):
  del argv
  deadline = time.monotonic() + 60 * _STOP_AFTER_MINUTES.value
  os.makedirs(_OUTPUT.value, exist_ok=True)
  window = open(os.path.join(_OUTPUT.value, 'window.jsonl'), 'a')
  log = open(os.path.join(_OUTPUT.value, 'window.log'), 'a')

  def record(line: dict):
    window.write(json.dumps(line) + '\n')
    window.flush()

  record({'part': 'machine', 'date': time.strftime('%Y-%m-%d %H:%M:%S'),
          'provenance': provenance.record()})
  result = os.path.join(tempfile.mkdtemp(), 'result.json')
  parts = _parts(result)
  # The file each part writes its figures to, where that is not `result`.
  results = dict.fromkeys(('multi30k_e2e', 'multi30k_e2e_float32'),
                          os.path.join(os.path.dirname(result), 'train_evaluate.json'))
  names = _PARTS.value or list(parts)
  if unknown := set(names) - set(parts):
    raise app.UsageError(f'--parts: no such part(s) {sorted(unknown)}; known: {list(parts)}')
  if not _MANUAL_DIR.value and {'loop_speed', 'multi30k_e2e', 'multi30k_e2e_float32',
                                'table3_regularised', 'together_speed'} & set(names):
    raise app.UsageError('the parts loop_speed, multi30k_e2e(_float32), table3_regularised and '
                         'together_speed need --manual_dir')
  for name in names:
    left = min(deadline - time.monotonic(), _CAPS.get(name, float('inf')))
    if left < 30:
      record({'part': name, 'skipped': 'deadline'})
      continue
    part_result = results.get(name, result)
    if os.path.exists(part_result):
      os.remove(part_result)
    log.write(f'== {name} ({left:.0f} s left)\n')
    log.flush()
    start = time.monotonic()
    # The sweep starts no group it predicts to end after the part's deadline (below).
    command = parts[name] + ([f'--stop_after_minutes={(left - 25) / 60:.2f}']
                             if name == 'table3_regularised' else [])
    # A session of its own, so that the deadline stops the part's child processes too.
    process = subprocess.Popen(command, cwd=checkout.ROOT, stdout=subprocess.PIPE, stderr=log,
                               text=True, start_new_session=True)
    rows = (_Collector(_regularised_rows(),
                       os.path.join(_OUTPUT.value, 'table3_regularised.jsonl'))
            if name == 'table3_regularised' else None)
    try:
      stdout, _ = process.communicate(timeout=max(left - 25, 1))
      status = process.returncode
    except subprocess.TimeoutExpired:
      os.killpg(process.pid, signal.SIGTERM)  # training runs save and stop
      try:
        stdout, _ = process.communicate(timeout=20)
      except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, _ = process.communicate()
      status = 'deadline'
    if rows:
      rows.stop()
      sweep_root = os.path.join(_WORKDIR.value, 'table3_regularised')
      rows.unfinished(sweep_root, os.path.join(_OUTPUT.value, 'table3_regularised.jsonl'))
      log_excerpt(sweep_root, os.path.join(_OUTPUT.value, 'table3_regularised.log'))
    log.write(stdout)
    log.flush()
    line = {'part': name, 'command': command[1:], 'exit': status,
            'seconds': time.monotonic() - start}
    if rows:
      line['rows_finished'] = rows.collected
    if os.path.exists(part_result):
      with open(part_result) as f:
        line['result'] = json.load(f)
    elif status == 0 and name.startswith('base_'):  # the benchmark prints its JSON last
      line['result'] = json.loads(stdout.strip().splitlines()[-1])
    record(line)
    print(f'{name}: exit {status}, {line["seconds"]:.0f} s', flush=True)


if __name__ == '__main__':
  app.run(main)
