"""One group of a sweep's rows, trained as one program and evaluated as Table 3 was
(`run_group`); its rows' figures written (`write_results`), or recovered after a kill.

The group trains as one program (`loop.runs_together.train_together`) and is evaluated as one
program on the dev split as Table 3 was (`TABLE3_DECODING`: `scoring.evaluate_runs` of a
`GroupTranslator`). A SIGTERM stops its training at the next step, saved (`preemption`): the group
is then not evaluated (`Preempted`). Its `train_seconds` are the wall time of every attempt to train
it (saved every `SAVE_SECONDS_EVERY` seconds, so an attempt that is killed still counts), its dev
evaluations during training included. What it prints also goes to its first row's `sweep.log`, also
when groups print side by side (`ThreadLogs`).
"""

import contextlib
import io
import json
import os
import sys
import threading
import time
from typing import Any, Callable, Iterator

from etils import epath
import jax

from transformer_jax.decoding import scoring
from transformer_jax.decoding.translator import GroupTranslator, Translator
from transformer_jax.loop.runs_together import train_together
from transformer_jax.model import sharding
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.storage import atomic, buckets, provenance
from transformer_jax.sweep import claims
from transformer_jax.sweep.ahead import GroupPrograms
from transformer_jax.training import checkpointing, metrics_log, preemption, saved_config

# How Table 3 was evaluated (§6.2: beam search as in §6.1, no checkpoint averaging).
TABLE3_DECODING = {'beam_size': 4, 'alpha': 0.6, 'average_last': 1}
SPLIT = 'validation'
# The file in a group's first workdir that holds the figures of all its rows.
GROUP_RESULTS = 'sweep_group_results.json'
# How often a group's training time so far is saved (`_timed`).
SAVE_SECONDS_EVERY = 30.0


class Preempted(RuntimeError):
  """A group stopped short of its last step by a SIGTERM (or by another group's error)."""


def run_group(group: list[str], configs: dict[str, Any], workdir: str, overrides: list[str],
              device_kind: str, data_cache: dict, programs: GroupPrograms | None = None,
              devices: list[jax.Device] | None = None,
              notice: preemption.Notice | None = None) -> list[dict]:
  """Trains (or resumes) the rows of `group` as one program, each in `workdir/<row>`, on
  `devices` (default: every device), then evaluates them as one program there; returns their
  figures. With `programs` (compiled ahead, `ahead`), with those (waiting for its
  evaluation's before evaluating); `notice`, the sweep's preemption notice. What the group
  prints also goes to the first row's `sweep.log`."""
  devices = jax.local_devices() if devices is None else devices
  training_programs = programs.training_programs if programs is not None else None
  dirs = [os.path.join(workdir, row) for row in group]
  for directory in dirs:
    epath.Path(directory).mkdir(parents=True, exist_ok=True)
  with ThreadLogs.to(os.path.join(dirs[0], 'sweep.log')):
    try:
      with _timed(os.path.join(dirs[0], 'sweep_train_seconds.json')) as train_seconds:
        train_together([configs[row] for row in group], dirs, data_cache, training_programs,
                       devices, notice)
    except Exception as e:  # the rows named, whichever of them failed
      raise RuntimeError(f'training {", ".join(group)}: {e}') from e
    for row, directory in zip(group, dirs):
      trained = max(checkpointing.saved_steps(directory), default=0)
      # A run stopped by its notice (SIGTERM, Ctrl-C, another group's failure) saves and
      # returns, unfinished.
      if trained < configs[row].train.num_train_steps:
        why = notice.reason if notice is not None else 'stopped'
        raise Preempted(f'{row} stopped at step {trained} of '
                         f'{configs[row].train.num_train_steps} ({why}); run the sweep again '
                         'to resume it')
    start = time.perf_counter()
    if programs is not None:
      programs.wait_for_evaluation()
    model = (training_programs.programs.model if training_programs is not None else
             ShardedModel(saved_config.read_config(dirs[0]),
                          sharding.make_mesh(configs[group[0]], devices)))
    translator = (Translator(dirs[0], **TABLE3_DECODING, model=model) if len(group) == 1
                  else GroupTranslator(dirs, **TABLE3_DECODING, model=model))
    figures = scoring.evaluate_runs(translator, SPLIT)
    eval_seconds = time.perf_counter() - start
  record = provenance.record(device_kind)
  record['machine']['devices'] = len(devices)  # the group's (`plan.predicted_seconds`)
  ahead = programs.record() if programs is not None else None
  return [_row_result(row, directory, train_seconds(), eval_seconds, row_figures, overrides,
                      group, record, ahead)
          for row, directory, row_figures in zip(group, dirs, figures)]


def write_results(group: list[str], finished: list[dict], workdir: str,
                  results_dir: str) -> None:
  """The group's rows' files, after one file of them all in its first row's workdir, from which
  a sweep killed between two rows' files writes the others when it runs again (`recover`),
  removed once they are written (a row's file deleted later is the row to run again)."""
  group_results = os.path.join(workdir, group[0], GROUP_RESULTS)
  atomic.write(group_results, json.dumps(finished))
  for row, result in zip(group, finished):
    atomic.write(os.path.join(results_dir, f'{row}.json'), json.dumps(result, indent=2))
    print(f'{row}: dev PPL {result["perplexity"]:.2f}, BLEU '
          f'{result["bleu_tokenized"]:.2f}, {result["train_seconds"] / 60:.1f} min', flush=True)
  epath.Path(group_results).unlink()


def recover_all(rows: list[str], workdir: str, results_dir: str) -> None:
  """`recover` of every group left with a results file in its first row's workdir that no
  process holds (one that is held is being written by its holder)."""
  for first in rows:
    if epath.Path(workdir, first, GROUP_RESULTS).exists():
      claim = claims.Claim.take(workdir, [first])
      if claim is not None:
        with claim:
          recover([first], workdir, results_dir)


def recover(group: list[str], workdir: str, results_dir: str) -> None:
  """Writes the JSON of each row of `group` that it finished but whose file was not written (the
  sweep killed between two rows' files) from the group's results in its first row's workdir,
  then removes those. Called under the group's claim (`claims`), as `write_results` is."""
  path = os.path.join(workdir, group[0], GROUP_RESULTS)
  if not epath.Path(path).exists():
    return
  finished = json.loads(epath.Path(path).read_text())
  for result in finished:
    row_path = os.path.join(results_dir, f'{result["row"]}.json')
    if not epath.Path(row_path).exists():
      atomic.write(row_path, json.dumps(result, indent=2))
  epath.Path(path).unlink()


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
  if epath.Path(path).exists():
    previous = json.loads(epath.Path(path).read_text())
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


class ThreadLogs(io.TextIOBase):
  """A stream (stdout or stderr) that also writes what a thread prints to that thread's log
  file: the groups of a sweep print side by side, each to its own `sweep.log`."""

  _files: dict[int, Any] = {}  # thread id -> its log file

  def __init__(self, stream):
    super().__init__()
    self._stream = stream

  def write(self, text: str) -> int:
    self._stream.write(text)
    log = self._files.get(threading.get_ident())
    if log is not None:
      log.write(text)
    return len(text)

  def flush(self) -> None:
    self._stream.flush()
    log = self._files.get(threading.get_ident())
    if log is not None:
      log.flush()

  @classmethod
  @contextlib.contextmanager
  def installed(cls) -> Iterator[None]:
    """stdout and stderr as `ThreadLogs` within the block (unless they are already)."""
    if isinstance(sys.stdout, cls):
      yield
      return
    with contextlib.redirect_stdout(cls(sys.stdout)), contextlib.redirect_stderr(cls(sys.stderr)):
      yield

  @classmethod
  @contextlib.contextmanager
  def to(cls, path: str) -> Iterator[None]:
    """What this thread prints within the block, appended to `path` too."""
    log = buckets.Appended(path) if buckets.is_url(path) else open(path, 'a', encoding='utf-8')
    with cls.installed(), contextlib.closing(log):
      cls._files[threading.get_ident()] = log
      try:
        yield
      finally:
        del cls._files[threading.get_ident()]
