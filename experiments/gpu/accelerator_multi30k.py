r"""A config trained and evaluated end to end on whatever device JAX finds, its wall time split
into preparation, compilation, steps and evaluation; then, optionally, sweep rows until a
deadline.

  python experiments/gpu/accelerator_multi30k.py --output=OUT [--config=configs/multi30k.py] \
      [--manual_dir=DIR] [--override=FIELD=VALUE ...] \
      [--sweep=FILE --rows=A,B --together=N --results=DIR --stop_after_minutes=M]

1. `python -m transformer_jax.train --config=CONFIG` in a fresh workdir, then
   `python -m transformer_jax.evaluate --split=test --json` (the config's beam and averaging).
   OUT/train_evaluate.json: the wall times (preparation: from the command's start until the
   run's first metrics record, which follows data preparation, vocabulary learning and the
   state's initialisation; compilation: the run's compile records; steps: the train records'
   step time times their steps; evaluation: the dev evaluations during training; the rest:
   checkpoints, logging, exit; then the test evaluation's command), the last dev figures and
   the test figures. OUT/metrics.jsonl: the run's log.
2. With --sweep: `python -m transformer_jax.sweep --together=N` over --rows, its row JSONs
   in --results; at --stop_after_minutes after the start of step 1 the sweep gets a SIGTERM
   (its training rows save and stop; unfinished rows are lost with the machine unless their
   workdirs are kept). OUT/sweep.json: rows finished and the sweep's wall time.

For one device call (experiments/README.md says how to carry the data and the wheels), e.g.
`PYTHONUNBUFFERED=1 python experiments/gpu/accelerator_multi30k.py --output=$OUT
--manual_dir=.devdata/multi30k`. Rehearsed on a CPU with `--config=configs/tiny.py
--override=train.num_train_steps=200`.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from transformer_jax import cli
from transformer_jax.storage import provenance

_OUTPUT = flags.DEFINE_string('output', None, 'Where the figures go.', required=True)
cli.renamed('out', 'output', 'the directory written')
_CONFIG = flags.DEFINE_string('config', 'configs/multi30k.py', 'The config file to train.')
_MANUAL_DIR = flags.DEFINE_string('manual_dir', None, 'config.data.manual_dir.')
_OVERRIDE = flags.DEFINE_multi_string('override', [], 'FIELD=VALUE for the training run.')
_SWEEP = flags.DEFINE_string('sweep', None, 'A sweep file to run rows of after step 1.')
_ROWS = flags.DEFINE_list('rows', None, 'The sweep rows.')
_TOGETHER = flags.DEFINE_integer('together', 1, 'Sweep rows trained as one program, at most.')
_RESULTS = flags.DEFINE_string('results', None, 'Where the sweep writes its row JSONs.')
_STOP_AFTER_MINUTES = flags.DEFINE_float('stop_after_minutes', 9.0, 'When the sweep is '
                                          'stopped, counted from the start of step 1.')
cli.renamed('deadline_minutes', 'stop_after_minutes', 'the deadline')


def _first_record_time(path: str, process: subprocess.Popen, start: float) -> float:
  """Seconds from `start` until `path` exists (polled), or until the process ends."""
  while not os.path.exists(path) and process.poll() is None:
    time.sleep(0.05)
  return time.perf_counter() - start


def _split(records: list[dict], preparation: float, total: float) -> dict:
  """The run's wall time by part, from its metrics records."""
  train = [r for r in records if r['split'] == 'train']
  steps = sum(r['step_time'] * (r['step'] - previous['step'])
              for previous, r in zip([{'step': 0}] + train, train))
  compiles = {r['what']: r for r in records if r['split'] == 'compile'}
  compiled = compiles['the whole run']
  evaluation = sum(r['seconds'] for r in records if r['split'] == 'validation')
  # The startup's and the dev evaluations' compiling are inside `compiled` and also inside the
  # preparation and `evaluation` windows: counted once, as compilation.
  evaluation -= sum(r['compile_seconds'] for r in records if r['split'] == 'validation')
  parts = {'preparation': preparation - compiles['startup']['seconds'],
           'compilation': compiled['seconds'], 'steps': steps, 'evaluation': evaluation}
  return {**parts, 'other': total - sum(parts.values()), 'total': total,
          'programs_compiled': compiled['compiled'], 'programs_loaded': compiled['loaded']}


def _train_and_evaluate(workdir: str) -> dict:
  overrides = [f'--config.{o}' for o in _OVERRIDE.value]
  if _MANUAL_DIR.value:
    overrides.append(f'--config.data.manual_dir={_MANUAL_DIR.value}')
  start = time.perf_counter()
  process = subprocess.Popen([sys.executable, '-m', 'transformer_jax.train',
                              f'--config={_CONFIG.value}', f'--workdir={workdir}', *overrides])
  metrics_path = os.path.join(workdir, 'metrics.jsonl')
  preparation = _first_record_time(metrics_path, process, start)
  if process.wait():
    raise RuntimeError(f'training failed (exit {process.returncode})')
  trained = time.perf_counter() - start
  with open(metrics_path) as f:
    records = [json.loads(line) for line in f]
  start = time.perf_counter()
  evaluated = subprocess.run([sys.executable, '-m', 'transformer_jax.evaluate',
                              f'--workdir={workdir}', '--split=test', '--json'],
                             check=True, capture_output=True, text=True)
  test = json.loads(evaluated.stdout.strip().splitlines()[-1])
  with open(os.path.join(_OUTPUT.value, 'metrics.jsonl'), 'w') as f:
    f.writelines(json.dumps(r) + '\n' for r in records)
  return {'config': _CONFIG.value, 'overrides': overrides,
          'train_seconds': _split(records, preparation, trained),
          'test_evaluation_seconds': time.perf_counter() - start,
          'dev': [r for r in records if r['split'] == 'validation'][-1], 'test': test}


def _sweep(deadline: float) -> dict:
  command = [sys.executable, '-m', 'transformer_jax.sweep', f'--sweep={_SWEEP.value}',
             f'--workdir={tempfile.mkdtemp()}', f'--together={_TOGETHER.value}',
             f'--results={_RESULTS.value}', *([f'--rows={",".join(_ROWS.value)}']
                                              if _ROWS.value else [])]
  start = time.perf_counter()
  process = subprocess.Popen(command)
  try:
    process.wait(timeout=max(deadline - time.perf_counter(), 0.0))
  except subprocess.TimeoutExpired:
    process.send_signal(signal.SIGTERM)  # the rows training save and stop
    process.wait()
  return {'command': command, 'exit': process.returncode,
          'seconds': time.perf_counter() - start, 'together': _TOGETHER.value,
          'rows_finished': sorted(name[:-len('.json')] for name in os.listdir(_RESULTS.value)
                                  if name.endswith('.json'))}


def main(argv):
  del argv
  os.makedirs(_OUTPUT.value, exist_ok=True)
  deadline = time.perf_counter() + 60 * _STOP_AFTER_MINUTES.value
  origin = provenance.record()
  figures = {**_train_and_evaluate(tempfile.mkdtemp()), 'provenance': origin}
  with open(os.path.join(_OUTPUT.value, 'train_evaluate.json'), 'w') as f:
    json.dump(figures, f, indent=2)
  print(json.dumps(figures['train_seconds']), flush=True)
  if _SWEEP.value:
    os.makedirs(_RESULTS.value, exist_ok=True)
    swept = {**_sweep(deadline), 'provenance': origin}
    with open(os.path.join(_OUTPUT.value, 'sweep.json'), 'w') as f:
      json.dump(swept, f, indent=2)
    print(json.dumps(swept), flush=True)


if __name__ == '__main__':
  app.run(main)
