r"""Runs the rows of a sweep, one or several at a time, and tabulates them beside the paper's
figures.

  python -m transformer_jax.sweep --sweep=experiments/table3_multi30k/sweep.py --workdir=DIR \
      [--rows=A1,C3] [--results=experiments/table3_multi30k/rows] [--concurrent=K] \
      [--together=N] [--stop_after_minutes=M] \
      [--override=dtype=bfloat16 --override=train.grad_accum_steps=2 ...]

A sweep file is a config file whose `get_config(row)` gives each row's config, with
    ROWS   the row ids, in table order (a dict or a sequence);
    PAPER  optional: {row: (perplexity, BLEU)}, the published figures to print beside ours.
Each row trains in `DIR/<row>`, in a child process that trains its group (below; a row alone is a
group of one: the sweep has one route), and is then evaluated on the dev split as Table 3 was: beam 4, α 0.6, no checkpoint averaging,
per-token perplexity (`python -m transformer_jax.evaluate --split=validation`). Its figures,
with the dev perplexities logged during training, go to `<results>/<row>.json` (default
`DIR/rows/`); a row whose JSON exists is skipped, so a
crashed or interrupted sweep resumes where it stopped (an unfinished row resumes from its last
checkpoint), and committed JSON files let a fresh machine resume too. A SIGTERM to the sweep
reaches the training run, which saves and stops; the sweep then stops with an error saying to
run it again. After every row the
table is rewritten: `DIR/table3.md`, `table3.csv` and `table3.png`.

`--override=FIELD=VALUE` sets a config field in every row, as `--config.FIELD=VALUE` does for
`train` (precision, memory, devices: what should not change a row's result, though nothing
stops it); each is checked against every row before anything trains, and a row's JSON lists
the overrides it ran with.

`--together=N` trains up to N rows as one compiled program (`train_loop.train_together`: the train
step vmapped over the rows' states, `transformer_jax.training.rows`), rows that may share one: they
differ only in the seed, the dropout rates, label smoothing, `train.lr_scale` or
`train.warmup_steps` (`rows.VARYING`; the seeds of one row, or Table 3's base and D rows). Groups
are formed in row order (`groups`); a row that fits no group trains alone. A group's rows see the
same batches, those of its first row's seed (written into each row's config as `data.shuffle_seed`,
so each workdir resumes alone as it trained): seeds then vary the initialisation and dropout, not
the data order. Each row keeps its workdir, evaluation and JSON (which names the group); the group's
training time is every row's `train_seconds`.

`--concurrent=K` runs K rows (or groups) at once, each row's training and evaluation in one of K
slots: on a CPU each slot is pinned to its own K-th of the cores (K at most the number of
cores); on a GPU or TPU the K processes share the device, each allowed 0.9 / K of its memory
(XLA_PYTHON_CLIENT_MEM_FRACTION) instead of JAX's default 0.75 (which a second process would not
find). The sweep itself never starts a backend: a child process reports the platform. A row's
JSON records the concurrency it ran under (`train_seconds` compare only at equal K) and its
provenance (`provenance.record`: the commit, package versions and machine). If a row fails,
the rows running finish and no new one starts.

`--stop_after_minutes=M` (a lent accelerator's window) starts no group that the sweep predicts
would end more than M minutes after the sweep started, since a group cut off loses all its rows:
a group's predicted seconds (`predicted_seconds`) are those of the slowest group of as many rows
already finished on this device, its JSONs in the results directory (its training per step,
times the steps the group has left to train, plus its rows' evaluations). A group of a size not
yet measured there starts.
The groups passed over are named at the end; a smaller group after them may still start.
"""

from concurrent import futures
import contextlib
import csv
import dataclasses
import io
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Iterator

from absl import flags

from transformer_jax import cli
from transformer_jax.config import checks, fields, loading
from transformer_jax.loop import train_loop
from transformer_jax.storage import atomic, provenance
from transformer_jax.training import checkpointing, metrics_log
from transformer_jax.training.rows import check_together

# How Table 3 was evaluated (§6.2: beam search as in §6.1, no checkpoint averaging).
EVAL_FLAGS = ('--split=validation', '--beam_size=4', '--alpha=0.6', '--average_last=1')
# How often a training run's time so far is saved (see `_run`).
SAVE_SECONDS_EVERY = 30.0


@dataclasses.dataclass(frozen=True)
class Slot:
  """Where a row runs when several run at once: the CPU cores its processes are pinned to
  (None: all), and environment variables for them."""

  cores: tuple[int, ...] | None = None
  env: tuple[tuple[str, str], ...] = ()


def slots(concurrent: int, backend: str) -> list[Slot]:
  """`concurrent` slots on `backend`: on a CPU each its own contiguous block of this
  process's cores; on an accelerator each 0.9 / concurrent of the device's memory."""
  if concurrent == 1:
    return [Slot()]
  if backend == 'cpu':
    cores = sorted(os.sched_getaffinity(0))
    if concurrent > len(cores):
      raise ValueError(f'--concurrent={concurrent}: more rows at once than the {len(cores)} CPU '
                       'cores this process may use')
    bounds = [len(cores) * i // concurrent for i in range(concurrent + 1)]
    return [Slot(cores=tuple(cores[bounds[i]:bounds[i + 1]])) for i in range(concurrent)]
  return [Slot(env=(('XLA_PYTHON_CLIENT_MEM_FRACTION', f'{0.9 / concurrent:.3f}'),))
          ] * concurrent


# The commands running now: a SIGTERM to the sweep is passed on to each (see `_run`).
_RUNNING: set[subprocess.Popen] = set()
_RUNNING_LOCK = threading.RLock()  # reentrant: the handler may interrupt its own thread


def _run(command: list[str], log_path: str, timing_path: str | None = None,
         slot: Slot = Slot()) -> tuple[float, str]:
  """Runs a command in `slot`, its stderr and stdout appended to `log_path`; returns its wall
  time and stdout. With `timing_path`, the seconds spent so far, added to those the file holds
  from earlier attempts, are written there every `SAVE_SECONDS_EVERY` seconds and at the end,
  so an attempt that is killed still counts when the row resumes. A SIGTERM sent to the sweep
  is passed on to the command (training then saves and stops, as when preempted) and the sweep
  waits for it. Raises RuntimeError naming the log if the command fails."""
  previous = 0.0
  if timing_path and os.path.exists(timing_path):
    with open(timing_path) as f:
      previous = json.load(f)
  start = time.perf_counter()
  with open(log_path, 'a') as log, tempfile.TemporaryFile('w+') as stdout:
    with _passing_sigterm(), _running(command, slot, stdout, log) as process:
      returncode = None
      while returncode is None:
        try:
          returncode = process.wait(timeout=SAVE_SECONDS_EVERY)
        except subprocess.TimeoutExpired:
          pass
        seconds = previous + time.perf_counter() - start
        if timing_path:
          atomic.write(timing_path, json.dumps(seconds))
    stdout.seek(0)
    output = stdout.read()
    log.write(output)
  if returncode:
    raise RuntimeError(f'{" ".join(command[2:4])} failed (exit {returncode}); see {log_path}')
  return seconds, output


@contextlib.contextmanager
def _running(command: list[str], slot: Slot, stdout, stderr) -> Iterator[subprocess.Popen]:
  """`command` started in `slot` and listed in `_RUNNING` while the block runs. The cores are
  set as soon as the child exists, long before it imports JAX, whose threads inherit them (and
  which sizes its thread pools by them)."""
  with _RUNNING_LOCK:  # so that a SIGTERM arriving now finds the process listed
    process = subprocess.Popen(command, stdout=stdout, stderr=stderr, text=True,
                               env={**os.environ, **dict(slot.env)})
    if slot.cores is not None:
      os.sched_setaffinity(process.pid, slot.cores)
    _RUNNING.add(process)
  try:
    yield process
  finally:
    with _RUNNING_LOCK:
      _RUNNING.discard(process)


def _terminate_running(*_) -> None:
  with _RUNNING_LOCK:
    for process in _RUNNING:
      process.send_signal(signal.SIGTERM)


@contextlib.contextmanager
def _passing_sigterm() -> Iterator[None]:
  """Within the block a SIGTERM to this process is sent on to the commands running instead.
  Handlers can be set only from the main thread: rows run in other threads rely on the main
  thread's block around them."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  previous = signal.signal(signal.SIGTERM, _terminate_running)
  try:
    yield
  finally:
    signal.signal(signal.SIGTERM, previous)


def row_config(sweep: Any, row: str, overrides: list[str]) -> Any:
  """The config of `sweep`'s `row` with `FIELD=VALUE` overrides applied as `train` applies
  `--config.FIELD=VALUE`, checked: where a row's config enters a process, once (raises
  ValueError naming a bad override or field)."""
  config = fields.overridden(sweep.get_config(row), list(overrides))
  checks.validate(config)
  return config


def run_group(sweep_path: str, rows: list[str], root: str, overrides: list[str] = (),
              slot: Slot = Slot(), concurrent: int = 1, device_kind: str = '') -> list[dict]:
  """Trains (or resumes) `rows` as one program (`train_loop.train_together`; a row alone is a
  group of one) in a child process (`--train_together`), each in `root/<row>`, in `slot` (one of
  `concurrent`), then evaluates each; returns their figures. Their `train_seconds` are the
  group's: the wall time of every training attempt, dev evaluations during training included.
  The log is the first row's."""
  dirs = [os.path.join(root, row) for row in rows]
  for workdir in dirs:
    os.makedirs(workdir, exist_ok=True)
  log_path = os.path.join(dirs[0], 'sweep.log')
  try:
    train_seconds, _ = _run([sys.executable, '-m', 'transformer_jax.sweep',
                             f'--sweep={sweep_path}', f'--workdir={root}',
                             f'--train_together={",".join(rows)}',
                             *[f'--override={override}' for override in overrides]], log_path,
                            os.path.join(dirs[0], 'sweep_train_seconds.json'), slot)
  except RuntimeError as e:  # the rows named, whichever of them failed
    raise RuntimeError(f'training {", ".join(rows)}: {e}') from e
  return [_evaluated(row, workdir, train_seconds, log_path, overrides, slot, concurrent,
                     device_kind, rows) for row, workdir in zip(rows, dirs)]


def _evaluated(row: str, workdir: str, train_seconds: float, log_path: str,
               overrides: list[str], slot: Slot, concurrent: int, device_kind: str,
               together: list[str]) -> dict:
  """The figures of a trained row: the evaluation of Table 3, with the dev curve logged."""
  config = checkpointing.read_config(workdir)
  # A training run stopped by SIGTERM (preemption) saves and exits normally, unfinished.
  trained = max(checkpointing.saved_steps(workdir), default=0)
  if trained < config.train.num_train_steps:
    raise RuntimeError(f'{row} stopped at step {trained} of {config.train.num_train_steps} '
                       '(preempted); run the sweep again to resume it')
  eval_seconds, output = _run([sys.executable, '-m', 'transformer_jax.evaluate',
                               f'--workdir={workdir}', *EVAL_FLAGS, '--json'], log_path,
                              slot=slot)
  figures = json.loads(output.strip().splitlines()[-1])
  dev_curve = [{'step': r['step'], 'perplexity': r['perplexity']}
               for r in metrics_log.read(os.path.join(workdir, 'metrics.jsonl'))
               if r['split'] == 'validation']
  return {'row': row, 'train_seconds': train_seconds, 'eval_seconds': eval_seconds,
          'steps': config.train.num_train_steps, 'model': config.model.to_dict(),
          'label_smoothing': config.train.label_smoothing, **figures,
          'dev_curve': dev_curve, 'overrides': list(overrides),
          'concurrent': {'rows': concurrent, 'cores': slot.cores},
          # Rows trained as one program see the first one's batches (data.shuffle_seed).
          'together': {'rows': together, 'shuffle_seed': config.data.shuffle_seed},
          'provenance': provenance.record(device_kind)}


def groups(configs: dict[str, Any], together: int) -> list[list[str]]:
  """The rows of `configs` (row -> config, in order) in groups of at most `together` that can
  train as one program (`rows.check_together`), in order: each row joins the first group with
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


def predicted_seconds(results: dict, group_size: int, steps: int,
                      device_kind: str) -> float | None:
  """Seconds that a group of `group_size` rows of `steps` steps will take to train and evaluate,
  predicted from the finished rows `results` (row -> JSON) trained on `device_kind` in groups of
  that size: the slowest such group's training seconds per step times `steps`, plus its rows'
  evaluation seconds. None when no such group has finished."""
  measured = {}  # group -> (its training seconds per step, its rows' evaluation seconds)
  for result in results.values():
    group = tuple(result.get('together', {}).get('rows', [result['row']]))
    device = result.get('provenance', {}).get('machine', {}).get('device')  # older rows: none
    if len(group) == group_size and device == device_kind:
      _, evals = measured.get(group, (0.0, 0.0))
      measured[group] = (result['train_seconds'] / result['steps'],
                         evals + result['eval_seconds'])
  if not measured:
    return None
  return max(per_step * steps + evals for per_step, evals in measured.values())


def _table_rows(sweep: Any, results: dict) -> list[dict]:
  paper = getattr(sweep, 'PAPER', {})
  table = []
  for row in sweep.ROWS:
    if row not in results:
      continue
    r, (paper_ppl, paper_bleu) = results[row], paper.get(row, (None, None))
    m = r['model']
    table.append({
        'row': row, 'N': m['num_layers'], 'd_model': m['d_model'], 'd_ff': m['d_ff'],
        'h': m['num_heads'], 'd_k': m['d_k'], 'd_v': m['d_v'], 'P_drop': m['dropout_rate'],
        'eps_ls': r['label_smoothing'], 'positions': m['position_encoding'],
        'steps': r['steps'], 'train_minutes': round(r['train_seconds'] / 60, 1),
        'dev_ppl': round(r['perplexity'], 2), 'dev_bleu': round(r['bleu_tokenized'], 2),
        'dev_sacrebleu': round(r['bleu_detokenized'], 2),
        'paper_ppl': paper_ppl, 'paper_bleu': paper_bleu})
  return table


def write_table(sweep: Any, results: dict, directory: str) -> None:
  """table3.md, table3.csv and table3.png in `directory` from the finished rows (each
  written whole or not at all)."""
  table = _table_rows(sweep, results)
  if not table:
    return
  columns = list(table[0])
  text = io.StringIO()
  writer = csv.DictWriter(text, columns, lineterminator='\n')
  writer.writeheader()
  writer.writerows(table)
  atomic.write(os.path.join(directory, 'table3.csv'), text.getvalue())
  lines = ['| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
  lines += ['| ' + ' | '.join('' if r[c] is None else str(r[c]) for c in columns) + ' |'
            for r in table]
  note = ('dev_bleu: tokenized, compound-split, cased BLEU (the paper\'s); dev_sacrebleu: '
          'sacreBLEU on detokenized text; dev_ppl: per-token perplexity; beam 4, α 0.6, no '
          'checkpoint averaging. paper_*: Table 3 (newstest2013).')
  atomic.write(os.path.join(directory, 'table3.md'), '\n'.join(lines) + '\n\n' + note + '\n')
  with atomic.replacing(os.path.join(directory, 'table3.png')) as temporary:
    _plot(table, temporary)


def _plot(table: list[dict], path: str) -> None:
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  rows = [r['row'] for r in table]
  figure, axes = plt.subplots(2, 1, figsize=(max(6, 0.6 * len(rows)), 7), sharex=True)
  for ax, ours, paper, label in ((axes[0], 'dev_bleu', 'paper_bleu', 'dev BLEU'),
                                 (axes[1], 'dev_ppl', 'paper_ppl', 'dev PPL')):
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r[ours] for r in table], 0.4, label='ours')
    if any(r[paper] is not None for r in table):  # the sweep file gives PAPER's figures
      ax.bar([i + 0.2 for i in x], [r[paper] or 0 for r in table], 0.4, label='paper (WMT14)')
    ax.set_ylabel(label)
    ax.legend()
  axes[1].set_xticks(range(len(rows)), rows)
  figure.tight_layout()
  figure.savefig(path, dpi=100, format='png')
  plt.close(figure)


def run(sweep_path: str, workdir: str, rows: list[str] | None, results_dir: str | None,
        overrides: list[str] = (), concurrent: int = 1, together: int = 1,
        stop_after_minutes: float | None = None) -> dict:
  """Runs the rows not finished yet, `concurrent` at a time (groups of up to `together` rows
  trained as one program, `groups`), with `overrides` (`FIELD=VALUE`) in every row, starting no
  group predicted to end after `stop_after_minutes` (`predicted_seconds`); returns every
  finished row's figures."""
  deadline = None if stop_after_minutes is None else time.monotonic() + 60 * stop_after_minutes
  if concurrent < 1 or together < 1:
    raise ValueError(f'--concurrent and --together must be at least 1, got {concurrent} and '
                     f'{together}')
  sweep = loading.load_sweep(sweep_path)
  rows = list(sweep.ROWS) if rows is None else rows
  unknown = [row for row in rows if row not in sweep.ROWS]
  if unknown:
    raise ValueError(f'--rows: {", ".join(unknown)} not in {sweep_path} '
                     f'(rows: {", ".join(sweep.ROWS)})')
  # Every row's config is checked before anything trains.
  configs = {row: row_config(sweep, row, overrides) for row in rows}
  results_dir = results_dir or os.path.join(workdir, 'rows')
  os.makedirs(results_dir, exist_ok=True)
  results = {}
  for row in sweep.ROWS:
    path = os.path.join(results_dir, f'{row}.json')
    if os.path.exists(path):
      with open(path) as f:
        results[row] = json.load(f)
  for row in rows:
    if row in results:
      print(f'{row}: done already ({os.path.join(results_dir, row + ".json")})', flush=True)
  to_run = [row for row in rows if row not in results]
  if to_run:
    backend, device_kind = provenance.platform()
    free = queue.Queue()
    for slot in slots(concurrent, backend):
      free.put(slot)
    lock, failed, passed_over = threading.Lock(), threading.Event(), []

    def run_one(group: list[str]) -> None:
      if failed.is_set():  # a row failed: start no new one
        return
      slot = free.get()
      if deadline is not None:
        # A group resumed (an earlier window's, cut off) has only its steps left to train.
        steps = configs[group[0]].train.num_train_steps
        steps -= max(checkpointing.saved_steps(os.path.join(workdir, group[0])), default=0)
        with lock:
          predicted = predicted_seconds(results, len(group), steps, device_kind)
        left = deadline - time.monotonic()
        if predicted is not None and predicted > left:
          free.put(slot)
          with lock:
            passed_over.append(group)
          print(f'{", ".join(group)}: not started: a group of {len(group)} rows with {steps} '
                f'steps to train takes {predicted:.0f} s on {device_kind} (the slowest '
                f'finished in {results_dir}), {left:.0f} s are left', flush=True)
          return
      try:
        print(f'{", ".join(group)}: training in {workdir}/'
              + (group[0] if len(group) == 1 else '{' + ','.join(group) + '}'), flush=True)
        finished = run_group(sweep_path, group, workdir, overrides, slot, concurrent,
                             device_kind)
      except BaseException:
        failed.set()
        raise
      finally:
        free.put(slot)
      for row, result in zip(group, finished):
        atomic.write(os.path.join(results_dir, f'{row}.json'), json.dumps(result, indent=2))
        with lock:
          results[row] = result
          print(f'{row}: dev PPL {result["perplexity"]:.2f}, BLEU '
                f'{result["bleu_tokenized"]:.2f}, {result["train_seconds"] / 60:.1f} min',
                flush=True)
          write_table(sweep, results, workdir)

    with _passing_sigterm(), futures.ThreadPoolExecutor(concurrent) as pool:
      done = [pool.submit(run_one, group)
              for group in groups({row: configs[row] for row in to_run}, together)]
    errors = [future.exception() for future in done if future.exception()]
    if errors:
      raise errors[0]
    if passed_over:
      print(f'not started before --stop_after_minutes={stop_after_minutes:g}: '
            + '; '.join(', '.join(group) for group in passed_over), flush=True)
  write_table(sweep, results, workdir)
  return results


if __name__ == '__main__':
  _SWEEP = flags.DEFINE_string('sweep', None, 'A sweep file (see the module docstring).',
                               required=True)
  _WORKDIR = flags.DEFINE_string('workdir', None, 'One workdir per row goes under it.',
                                 required=True)
  _ROWS = flags.DEFINE_list('rows', None, 'Only these rows (default: all, in order).')
  _RESULTS = flags.DEFINE_string('results', None, 'Where each finished row\'s JSON goes '
                                 '(default: WORKDIR/rows).')
  _OVERRIDE = flags.DEFINE_multi_string('override', [], 'FIELD=VALUE: a config field set in '
                                        'every row (as train\'s --config.FIELD=VALUE).')
  _CONCURRENT = flags.DEFINE_integer('concurrent', 1, 'Rows run at once (module docstring).')
  _TOGETHER = flags.DEFINE_integer('together', 1, 'Rows trained as one program, at most '
                                   '(module docstring).')
  _STOP_AFTER = flags.DEFINE_float('stop_after_minutes', None, 'Start no group predicted to end '
                                   'later than this, from the start (module docstring).')
  _TRAIN_TOGETHER = flags.DEFINE_list('train_together', None, 'Internal: trains these rows as '
                                      'one program in this process (`run_group`).')

  def main():
    if _TRAIN_TOGETHER.value:
      sweep = loading.load_sweep(_SWEEP.value)
      train_loop.train_together(
          [row_config(sweep, row, _OVERRIDE.value) for row in _TRAIN_TOGETHER.value],
          [os.path.join(_WORKDIR.value, row) for row in _TRAIN_TOGETHER.value])
      return
    run(os.path.abspath(_SWEEP.value), _WORKDIR.value, _ROWS.value, _RESULTS.value,
        _OVERRIDE.value, _CONCURRENT.value, _TOGETHER.value, _STOP_AFTER.value)

  cli.run(main)
