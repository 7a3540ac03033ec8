"""Runs the rows of a sweep in this process, a group at a time, each group trained and then
evaluated as one program; every row's figures to `<results>/<row>.json`.

A group (`plan.groups`; a row alone is a group of one) trains as one program
(`train_loop.train_together`) and is evaluated as one program on the dev split as Table 3 was
(`EVALUATION`: `scoring.evaluate_rows` of a `RowsTranslator`); after each group the table is
rewritten (`results`).

The data and vocabulary are loaded once for every group of one data config and seed
(`train_loop.data_key`). A row whose JSON exists is skipped, so a sweep that crashed, was
killed (at any moment) or was stopped resumes where it was: the group in flight from its last
checkpoint, a group killed while its rows' files were written from its results file.
Each group's programs compile in a background thread (`ahead`): the first group's training
before it starts, then its evaluation and the next group's while it trains.
A SIGTERM stops the group in flight at its next step, saved (`preemption`); the sweep then
stops with an error saying to run it again. A group's `train_seconds` are the wall time of
every attempt to train it (saved every `SAVE_SECONDS_EVERY` seconds, so an attempt that is
killed still counts), its dev evaluations during training included.
"""

import contextlib
import io
import json
import os
import sys
import threading
import time
from typing import Any, Callable, Iterator

import jax

from transformer_jax.config import loading
from transformer_jax.decoding import scoring
from transformer_jax.decoding.translator import RowsTranslator, Translator
from transformer_jax.loop import train_loop
from transformer_jax.storage import atomic, provenance
from transformer_jax.sweep import plan, results as tables
from transformer_jax.sweep.ahead import Ahead, Compiled
from transformer_jax.training import checkpointing, metrics_log, saved_config

# How Table 3 was evaluated (§6.2: beam search as in §6.1, no checkpoint averaging).
EVALUATION = {'beam_size': 4, 'alpha': 0.6, 'average_last': 1}
SPLIT = 'validation'
# The file in a group's first workdir that holds the figures of all its rows.
GROUP_RESULTS = 'sweep_group_results.json'
# How often a group's training time so far is saved (`_timed`).
SAVE_SECONDS_EVERY = 30.0


def run(sweep_path: str, workdir: str, rows: list[str] | None = None,
        results_dir: str | None = None, overrides: list[str] = (), together: int = 1,
        stop_after_minutes: float | None = None) -> dict:
  """Runs the rows not finished yet (all of the sweep's, or `rows`) in groups of up to
  `together` rows, with `overrides` (`FIELD=VALUE`) in every row; with `stop_after_minutes`,
  only the groups the plan expects to finish by then (`plan.plan`, printed before anything
  starts), each started only if its prediction still fits when it comes. Returns every
  finished row's figures."""
  started = time.monotonic()
  sweep = loading.load_sweep(sweep_path)
  rows = list(sweep.ROWS) if rows is None else list(rows)
  unknown = [row for row in rows if row not in sweep.ROWS]
  if unknown:
    raise ValueError(f'--rows: {", ".join(unknown)} not in {sweep_path} '
                     f'(rows: {", ".join(sweep.ROWS)})')
  if together < 1:
    raise ValueError(f'--together must be at least 1, got {together}')
  # Every row's config is checked before anything trains.
  configs = {row: plan.row_config(sweep, row, overrides) for row in rows}
  results_dir = results_dir or os.path.join(workdir, 'rows')
  os.makedirs(results_dir, exist_ok=True)
  _recover(sweep.ROWS, workdir, results_dir)
  results = {}
  for row in sweep.ROWS:
    path = os.path.join(results_dir, f'{row}.json')
    if os.path.exists(path):
      with open(path) as f:
        results[row] = json.load(f)
      if row in configs:
        print(f'{row}: done already ({path})', flush=True)
  to_run = [row for row in rows if row not in results]
  if to_run:
    device_kind = jax.devices()[0].device_kind
    formed = plan.groups({row: configs[row] for row in to_run}, together)

    def predicted(group: list[str]) -> float | None:
      return plan.predicted_seconds(results, len(group), _steps_left(configs, workdir, group),
                                    device_kind)

    def seconds_left() -> float | None:
      if stop_after_minutes is None:
        return None
      return 60 * stop_after_minutes - (time.monotonic() - started)

    the_plan = plan.plan(formed, {tuple(g): predicted(g) for g in formed}, seconds_left())
    print(the_plan.describe(seconds_left()), flush=True)
    passed_over = list(the_plan.passed_over)
    loaded = {}  # the data of each data config and seed, loaded once (`train_loop.data_key`)
    ahead = Ahead(loaded, EVALUATION, SPLIT)
    try:
      for index, group in enumerate(the_plan.start):
        left, seconds = seconds_left(), predicted(group)
        if left is not None and seconds is not None and seconds > left:
          print(f'{", ".join(group)}: not started: predicted {seconds:.0f} s, {left:.0f} s left',
                flush=True)
          passed_over.append(group)
          ahead.drop(group)
          continue
        ahead.start(group, [configs[row] for row in group],  # unless started
                    [os.path.join(workdir, row) for row in group])
        compiled = ahead.take(group)
        part = compiled.training
        print(f'{", ".join(group)}: its training compiled ahead in {part.seconds:.1f} s: '
              + (part.compiles.describe() if compiled.programs is not None
                 else f'not used ({part.error})'), flush=True)
        if index + 1 < len(the_plan.start):  # compiled while this group trains
          following = the_plan.start[index + 1]
          ahead.start(following, [configs[row] for row in following],
                      [os.path.join(workdir, row) for row in following])
        print(f'{", ".join(group)}: training in {workdir}/'
              + (group[0] if len(group) == 1 else '{' + ','.join(group) + '}'), flush=True)
        finished = run_group(group, configs, workdir, overrides, device_kind, loaded, compiled)
        # The group's rows in one file first: a sweep killed between two rows' files writes the
        # others from there when it runs again (`_recover`).
        atomic.write(os.path.join(workdir, group[0], GROUP_RESULTS), json.dumps(finished))
        for row, result in zip(group, finished):
          atomic.write(os.path.join(results_dir, f'{row}.json'), json.dumps(result, indent=2))
          results[row] = result
          print(f'{row}: dev PPL {result["perplexity"]:.2f}, BLEU '
                f'{result["bleu_tokenized"]:.2f}, {result["train_seconds"] / 60:.1f} min',
                flush=True)
        tables.write_table(sweep_path, sweep, results, workdir)
    finally:
      ahead.close()
    if passed_over:
      print(f'not started before --stop_after_minutes={stop_after_minutes:g}: '
            + '; '.join(', '.join(group) for group in passed_over), flush=True)
  tables.write_table(sweep_path, sweep, results, workdir)
  return results


def _recover(rows: list[str], workdir: str, results_dir: str) -> None:
  """Writes the JSON of each row that a group finished but whose file was not written (the
  sweep killed between two rows' files) from the group's results in its first row's workdir."""
  for first in rows:
    path = os.path.join(workdir, first, GROUP_RESULTS)
    if os.path.exists(path):
      with open(path) as f:
        for result in json.load(f):
          row_path = os.path.join(results_dir, f'{result["row"]}.json')
          if not os.path.exists(row_path):
            atomic.write(row_path, json.dumps(result, indent=2))


def _steps_left(configs: dict, workdir: str, group: list[str]) -> int:
  """The steps a group has left to train (a group cut off earlier resumes from the newest step
  all its rows saved: at most the newest of any differs, `train_loop.train_together`)."""
  saved = [max(checkpointing.saved_steps(os.path.join(workdir, row)), default=0) for row in group]
  return configs[group[0]].train.num_train_steps - min(saved)


def run_group(group: list[str], configs: dict[str, Any], workdir: str, overrides: list[str],
              device_kind: str, loaded: dict, compiled: Compiled | None = None) -> list[dict]:
  """Trains (or resumes) the rows of `group` as one program, each in `workdir/<row>`, then
  evaluates them as one program; returns their figures. With `compiled` (`ahead`), with the
  programs compiled there (waiting for its evaluation's before evaluating). What the group
  prints also goes to the first row's `sweep.log`."""
  programs = compiled.programs if compiled is not None else None
  dirs = [os.path.join(workdir, row) for row in group]
  for directory in dirs:
    os.makedirs(directory, exist_ok=True)
  with _logged(os.path.join(dirs[0], 'sweep.log')):
    try:
      with _timed(os.path.join(dirs[0], 'sweep_train_seconds.json')) as train_seconds:
        train_loop.train_together([configs[row] for row in group], dirs, loaded, programs)
    except Exception as e:  # the rows named, whichever of them failed
      raise RuntimeError(f'training {", ".join(group)}: {e}') from e
    for row, directory in zip(group, dirs):
      trained = max(checkpointing.saved_steps(directory), default=0)
      # A run stopped by SIGTERM (preemption) saves and returns, unfinished.
      if trained < configs[row].train.num_train_steps:
        raise RuntimeError(f'{row} stopped at step {trained} of '
                           f'{configs[row].train.num_train_steps} (preempted); run the sweep '
                           'again to resume it')
    start = time.perf_counter()
    if compiled is not None:
      compiled.evaluation()
    model = programs.model if programs is not None else None
    translator = (Translator(dirs[0], **EVALUATION, model=model) if len(group) == 1
                  else RowsTranslator(dirs, **EVALUATION, model=model))
    figures = scoring.evaluate_rows(translator, SPLIT)
    eval_seconds = time.perf_counter() - start
  record = provenance.record(device_kind)
  ahead = compiled.record() if compiled is not None else None
  return [_row_result(row, directory, train_seconds(), eval_seconds, row_figures, overrides,
                      group, record, ahead)
          for row, directory, row_figures in zip(group, dirs, figures)]


def _row_result(row: str, directory: str, train_seconds: float, eval_seconds: float,
                figures: dict, overrides: list[str], group: list[str], record: dict,
                ahead: dict | None) -> dict:
  """A finished row's JSON: Table 3's evaluation, the dev curve logged during training, how
  and where it ran (the config its workdir saved: a group's batch order written in)."""
  config = saved_config.read_config(directory)
  dev_curve = [{'step': r['step'], 'perplexity': r['perplexity']}
               for r in metrics_log.read(os.path.join(directory, 'metrics.jsonl'))
               if r['split'] == 'validation']
  return {'row': row, 'train_seconds': train_seconds, 'eval_seconds': eval_seconds,
          'steps': config.train.num_train_steps, 'model': config.model.to_dict(),
          'label_smoothing': config.train.label_smoothing, **figures,
          'dev_curve': dev_curve, 'overrides': list(overrides),
          # Rows trained as one program see the first one's batches (data.shuffle_seed); they
          # are evaluated as one program too, in `eval_seconds` (the group's).
          'together': {'rows': list(group), 'shuffle_seed': config.data.shuffle_seed},
          'evaluated_together': True,
          # What compiling the group's programs ahead (`ahead`) took.
          'compiled_ahead': ahead,
          'provenance': record}


@contextlib.contextmanager
def _timed(path: str) -> Iterator[Callable[[], float]]:
  """Yields a function giving the seconds spent in the block (so far, or in all once it has
  ended) plus those `path` holds from earlier attempts; the sum is saved there every
  `SAVE_SECONDS_EVERY` seconds and at the end, so that an attempt that is killed still counts
  when the group resumes."""
  previous = 0.0
  if os.path.exists(path):
    with open(path) as f:
      previous = json.load(f)
  start, done, ended = time.perf_counter(), threading.Event(), []

  def total() -> float:
    return ended[0] if ended else previous + time.perf_counter() - start

  def save_every():
    while not done.wait(SAVE_SECONDS_EVERY):
      atomic.write(path, json.dumps(total()))

  saver = threading.Thread(target=save_every, daemon=True)
  saver.start()
  try:
    yield total
  finally:
    done.set()
    saver.join()
    ended.append(total())
    atomic.write(path, json.dumps(ended[0]))


class _Tee(io.TextIOBase):
  """Writes to a stream and a file."""

  def __init__(self, stream, file):
    super().__init__()
    self._stream, self._file = stream, file

  def write(self, text: str) -> int:
    self._stream.write(text)
    self._file.write(text)
    return len(text)

  def flush(self) -> None:
    self._stream.flush()
    self._file.flush()


@contextlib.contextmanager
def _logged(path: str) -> Iterator[None]:
  """What this process prints (stdout and stderr) within the block, appended to `path` too."""
  with open(path, 'a', encoding='utf-8') as log, \
      contextlib.redirect_stdout(_Tee(sys.stdout, log)), \
      contextlib.redirect_stderr(_Tee(sys.stderr, log)):
    yield
