"""Runs the rows of a sweep in this process, each group trained and then evaluated as one
program, groups side by side on the process's devices; every row's figures to
`<results>/<row>.json`.

A group (`plan.groups`; a row alone is a group of one) trains as one program
(`train_loop.train_together`) and is evaluated as one program on the dev split as Table 3 was
(`TABLE3_DECODING`: `scoring.evaluate_rows` of a `RowsTranslator`); after each group the table is
rewritten (`results`).

The process's devices are split into slots of `devices_per_group` devices (default: one slot of
every device); each slot trains its groups one after another in a thread of its own, on its own
devices, while the other slots train theirs (`plan.plan` says which slot trains which group).
A small model leaves an accelerator's step launch-bound, so a group spread over several devices
takes about as long a step as on one: side by side, D/d groups train in that time.

The data and vocabulary are loaded once for every group of one data config and seed
(`train_loop.data_key`). A row whose JSON exists is skipped, so a sweep that crashed, was
killed (at any moment) or was stopped resumes where it was: each group in flight from its last
checkpoint, a group killed while its rows' files were written from its results file.
Each group's programs compile in a background thread (`ahead`): each slot's first group's
training before it starts, then its evaluation and the slot's next group's while it trains.
A SIGTERM stops every group in flight at its next step, saved (`preemption`); so does a group
that fails, and no slot starts another group; the sweep then stops with the first error
(a preempted group's says to run the sweep again). A group's `train_seconds` are the wall time
of every attempt to train it (saved every `SAVE_SECONDS_EVERY` seconds, so an attempt that is
killed still counts), its dev evaluations during training included.
"""

import concurrent.futures
import contextlib
import dataclasses
import fcntl
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
from transformer_jax.model import partitioning
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.storage import atomic, provenance
from transformer_jax.sweep import plan, results as tables
from transformer_jax.sweep.ahead import Ahead, GroupPrograms
from transformer_jax.training import checkpointing, metrics_log, preemption, saved_config

# How Table 3 was evaluated (§6.2: beam search as in §6.1, no checkpoint averaging).
TABLE3_DECODING = {'beam_size': 4, 'alpha': 0.6, 'average_last': 1}
SPLIT = 'validation'
# The file in a group's first workdir that holds the figures of all its rows.
GROUP_RESULTS = 'sweep_group_results.json'
# How often a group's training time so far is saved (`_timed`).
SAVE_SECONDS_EVERY = 30.0


@dataclasses.dataclass(frozen=True)
class Share:
  """Which share of a sweep this process runs: the sweep started in `count` processes (on one
  host or several, sharing the workdir and results directory), this one the `index`th."""

  index: int = 0
  count: int = 1


def run(sweep_path: str, workdir: str, rows: list[str] | None = None,
        results_dir: str | None = None, overrides: list[str] = (), together: int = 1,
        stop_after_minutes: float | None = None, devices_per_group: int | None = None,
        share: Share = Share()) -> dict:
  """Runs the rows not finished yet (all of the sweep's, or `rows`) in groups of up to
  `together` rows, with `overrides` (`FIELD=VALUE`) in every row, each group on
  `devices_per_group` of this process's devices (default: all), groups side by side on the
  others; with `stop_after_minutes`, only the groups the plan expects to finish by then
  (`plan.plan`, printed before anything starts), each started only if its prediction still
  fits when it comes; with `share`, only this process's groups of the plan over every
  process's slots. Returns every finished row's figures."""
  started = time.monotonic()
  if not 0 <= share.index < share.count:
    raise ValueError(f'--process_index={share.index} must be in [0, --process_count='
                     f'{share.count})')
  sweep = loading.load_sweep(sweep_path)
  rows = list(sweep.ROWS) if rows is None else list(rows)
  unknown = [row for row in rows if row not in sweep.ROWS]
  if unknown:
    raise ValueError(f'--rows: {", ".join(unknown)} not in {sweep_path} '
                     f'(rows: {", ".join(sweep.ROWS)})')
  if together < 1:
    raise ValueError(f'--together must be at least 1, got {together}')
  if jax.process_count() > 1:
    raise RuntimeError(f'this process is one of {jax.process_count()} of a JAX job; a sweep '
                       'trains each group in one process, which orbax cannot checkpoint from '
                       'any process but the first of a job: start each as a JAX process of its '
                       'own and share the sweep with --process_index and --process_count')
  slots = device_slots(jax.local_devices(), devices_per_group)
  # Every row's config is checked before anything trains, its mesh on a slot's devices too.
  configs = {row: plan.row_config(sweep, row, overrides) for row in rows}
  for row, config in configs.items():
    if config.parallel.distributed:
      raise ValueError(f'row {row}: parallel.distributed=True, but a sweep trains each group on '
                       'one process\'s devices and joins no jax.distributed job (orbax writes '
                       'the checkpoints of one process\'s devices from process 0 of a job '
                       'only); to share the groups among processes, start the sweep in each '
                       'with --process_index=i --process_count=N')
    try:
      partitioning.mesh_shape(config, len(slots[0]))
    except ValueError as e:
      raise ValueError(f'row {row}, on {len(slots[0])} devices a group: {e}') from None
  results_dir = results_dir or os.path.join(workdir, 'rows')
  os.makedirs(results_dir, exist_ok=True)
  _recover(sweep.ROWS, workdir, results_dir)
  results = _read_results(sweep.ROWS, results_dir)
  for row in results:
    if row in configs:
      print(f'{row}: done already ({os.path.join(results_dir, row + ".json")})', flush=True)
  to_run = [row for row in rows if row not in results]
  if to_run:
    side_by_side = _SideBySide(sweep_path, sweep, configs, workdir, results_dir, overrides,
                               results, slots, started, stop_after_minutes, share)
    side_by_side.train(plan.groups({row: configs[row] for row in to_run}, together))
    if side_by_side.passed_over:
      print(f'not started before --stop_after_minutes={stop_after_minutes:g}: '
            + '; '.join(', '.join(group) for group in side_by_side.passed_over), flush=True)
  if share.count == 1:
    tables.write_table(sweep_path, sweep, results, workdir)
    return results
  return _table_once(sweep_path, sweep, rows, workdir, results_dir, share)


def _table_once(sweep_path: str, sweep: Any, rows: list[str], workdir: str, results_dir: str,
                share: Share) -> dict:
  """Every finished row's figures, once this process's share is done; the table written if
  `rows` are all in and it has not been since the last of them came (by the process whose
  share ends last, under a lock: once)."""
  with open(os.path.join(workdir, 'table.lock'), 'a') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
    results = _read_results(sweep.ROWS, results_dir)
    missing = [row for row in rows if row not in results]
    table = os.path.join(workdir, tables.table_name(sweep_path) + '.md')
    if missing:
      print(f'process {share.index}: its share done; {", ".join(missing)} not yet', flush=True)
    elif not os.path.exists(table) or os.path.getmtime(table) < max(
        os.path.getmtime(os.path.join(results_dir, f'{row}.json')) for row in rows):
      tables.write_table(sweep_path, sweep, results, workdir)
  return results


def _read_results(rows: list[str], results_dir: str) -> dict:
  """The finished rows' figures, from their files in `results_dir`."""
  results = {}
  for row in rows:
    path = os.path.join(results_dir, f'{row}.json')
    if os.path.exists(path):
      with open(path) as f:
        results[row] = json.load(f)
  return results


def device_slots(devices: list[jax.Device], devices_per_group: int | None
                 ) -> list[list[jax.Device]]:
  """`devices` in consecutive slots of `devices_per_group` (None: one slot of them all); a
  ValueError if that does not divide them."""
  per_group = len(devices) if devices_per_group is None else devices_per_group
  if per_group < 1 or len(devices) % per_group:
    raise ValueError(f'--devices_per_group={per_group} must divide the {len(devices)} devices '
                     'of this process (jax.local_devices())')
  return [devices[i:i + per_group] for i in range(0, len(devices), per_group)]


class _SideBySide:
  """A sweep's groups trained slot by slot, the slots side by side, each in its own thread;
  the finished rows' files and the table written as each group ends."""

  def __init__(self, sweep_path: str, sweep: Any, configs: dict[str, Any], workdir: str,
               results_dir: str, overrides: list[str], results: dict,
               slots: list[list[jax.Device]], started: float,
               stop_after_minutes: float | None, share: Share):
    self._sweep_path, self._sweep, self._configs = sweep_path, sweep, configs
    self._workdir, self._results_dir, self._overrides = workdir, results_dir, overrides
    self._results, self._slots, self._share = results, slots, share
    # The time given (seconds) and when it ends (time.monotonic), or None.
    self._budget = None if stop_after_minutes is None else 60 * stop_after_minutes
    self._deadline = None if self._budget is None else started + self._budget
    self._device_kind = slots[0][0].device_kind
    self._loaded = {}  # the data of each data config and seed, loaded once (`train_loop`)
    self._lock = threading.Lock()  # the results, the table and what is passed over
    self._stop = threading.Event()  # a group failed: no slot starts another
    self.passed_over: list[list[str]] = []

  def _predicted(self, group: list[str]) -> float | None:
    with self._lock:
      results = dict(self._results)
    return plan.predicted_seconds(results, len(group),
                                  _steps_left(self._configs, self._workdir, group),
                                  self._device_kind, len(self._slots[0]))

  def _seconds_left(self) -> float | None:
    return None if self._deadline is None else self._deadline - time.monotonic()

  def _start_compiling(self, ahead: Ahead, group: list[str], devices: list[jax.Device]) -> None:
    ahead.start(group, [self._configs[row] for row in group],
                [os.path.join(self._workdir, row) for row in group], devices)

  def train(self, groups: list[list[str]]) -> None:
    """Trains this process's share of `groups` as the plan over every process's slots says
    (printed first); raises the first group's error after every slot has stopped (the groups
    in flight saved), or `_Preempted` if a SIGTERM stopped it."""
    local, share = len(self._slots), self._share
    # Every process of a shared sweep makes the same plan: from the deadline as given, not
    # from its own clock.
    seconds_left = self._seconds_left() if share.count == 1 else self._budget
    the_plan = plan.plan(groups, {tuple(g): self._predicted(g) for g in groups}, seconds_left,
                         share.count * local)
    if share.index == 0:
      print(the_plan.describe(seconds_left), flush=True)
    # Slot s is process s % count's: the plan's first groups go to as many processes.
    queues = the_plan.slots[share.index::share.count]
    if share.count > 1:
      print(f'process {share.index} of {share.count}: slots '
            + ', '.join(map(str, range(share.index, share.count * local, share.count))),
            flush=True)
    self.passed_over += the_plan.passed_over
    ahead = Ahead(self._loaded, TABLE3_DECODING, SPLIT)
    with preemption.Notice() as notice, _ThreadLogs.installed(), \
        concurrent.futures.ThreadPoolExecutor(local, 'slot') as threads:
      try:
        for queue, devices in zip(queues, self._slots):  # each slot's first group
          if queue:
            self._start_compiling(ahead, queue[0], devices)
        slots = [threads.submit(self._train_slot, queue, devices, ahead, notice)
                 for queue, devices in zip(queues, self._slots)]
        errors = [error for error in map(_error_of, slots) if error is not None]
      finally:
        ahead.close()
    if errors:
      raise next((e for e in errors if not isinstance(e, _Preempted)), errors[0])
    if notice.received:  # before a group started: nothing in flight to save
      raise _Preempted('stopped by SIGTERM before its groups were all trained; run the sweep '
                       'again to resume')

  def _train_slot(self, queue: list[list[str]], devices: list[jax.Device], ahead: Ahead,
                  notice: preemption.Notice) -> None:
    """Trains `queue`'s groups, one after another, on `devices`; on an error, asks every
    other slot to stop (saved) and raises it."""
    try:
      for index, group in enumerate(queue):
        if self._stop.is_set() or notice.received:
          break
        if not self._fits(group):
          ahead.drop(group)
          continue
        self._start_compiling(ahead, group, devices)  # unless started
        programs = ahead.take(group)
        report = programs.training
        print(f'{", ".join(group)}: its training compiled ahead in {report.seconds:.1f} s: '
              + (report.stats.describe() if programs.training_programs is not None
                 else f'not used ({report.error})'), flush=True)
        if index + 1 < len(queue):  # compiled while this group trains
          self._start_compiling(ahead, queue[index + 1], devices)
        print(f'{", ".join(group)}: training in {self._workdir}/'
              + (group[0] if len(group) == 1 else '{' + ','.join(group) + '}')
              + _on(devices, self._slots), flush=True)
        finished = run_group(group, self._configs, self._workdir, self._overrides,
                             self._device_kind, self._loaded, programs, devices, notice)
        self._write(group, finished)
    except BaseException:
      self._stop.set()
      notice.received = True  # the groups in flight save and stop
      raise

  def _fits(self, group: list[str]) -> bool:
    """Whether `group` may start: its prediction fits in the time left (a group not
    predicted: some time is left); otherwise it is passed over, said."""
    left = self._seconds_left()
    if left is None:
      return True
    seconds = self._predicted(group)
    if (left > 0) if seconds is None else (seconds <= left):
      return True
    print(f'{", ".join(group)}: not started: '
          + ('not predicted' if seconds is None else f'predicted {seconds:.0f} s')
          + f', {max(left, 0):.0f} s left', flush=True)
    with self._lock:
      self.passed_over.append(group)
    return False

  def _write(self, group: list[str], finished: list[dict]) -> None:
    """The group's rows' files (after one file of them all, from which a sweep killed between
    two rows' files writes the others when it runs again, `_recover`, removed once they are
    written), then the table."""
    group_results = os.path.join(self._workdir, group[0], GROUP_RESULTS)
    atomic.write(group_results, json.dumps(finished))
    with self._lock:
      for row, result in zip(group, finished):
        atomic.write(os.path.join(self._results_dir, f'{row}.json'),
                     json.dumps(result, indent=2))
        self._results[row] = result
        print(f'{row}: dev PPL {result["perplexity"]:.2f}, BLEU '
              f'{result["bleu_tokenized"]:.2f}, {result["train_seconds"] / 60:.1f} min',
              flush=True)
      os.remove(group_results)  # a row's file deleted later is the row to run again
      if self._share.count == 1:  # a shared sweep's table: once, when every row is in
        tables.write_table(self._sweep_path, self._sweep, self._results, self._workdir)


class _Preempted(RuntimeError):
  """A group stopped short of its last step by a SIGTERM (or by another group's error)."""


def _error_of(future: concurrent.futures.Future) -> BaseException | None:
  """The error `future` raised (waiting for it), or None."""
  while True:
    try:  # a timeout, so that the main thread takes signals (SIGTERM) while it waits
      return future.exception(timeout=1.0)
    except concurrent.futures.TimeoutError:
      continue


def _on(devices: list[jax.Device], slots: list[list[jax.Device]]) -> str:
  """' on devices 2, 3' when the devices are split into slots, else ''."""
  if len(slots) == 1:
    return ''
  return ' on device' + ('s ' if len(devices) > 1 else ' ') + ', '.join(
      str(device.id) for device in devices)


def _recover(rows: list[str], workdir: str, results_dir: str) -> None:
  """Writes the JSON of each row that a group finished but whose file was not written (the
  sweep killed between two rows' files) from the group's results in its first row's workdir,
  then removes those."""
  for first in rows:
    path = os.path.join(workdir, first, GROUP_RESULTS)
    # The processes of a shared sweep recover at once: a file another removed is skipped.
    with contextlib.suppress(FileNotFoundError):
      with open(path) as f:
        finished = json.load(f)
      for result in finished:
        row_path = os.path.join(results_dir, f'{result["row"]}.json')
        if not os.path.exists(row_path):
          atomic.write(row_path, json.dumps(result, indent=2))
      os.remove(path)


def _steps_left(configs: dict, workdir: str, group: list[str]) -> int:
  """The steps a group has left to train (a group cut off earlier resumes from the newest step
  all its rows saved: at most the newest of any differs, `train_loop.train_together`)."""
  saved = [max(checkpointing.saved_steps(os.path.join(workdir, row)), default=0) for row in group]
  return configs[group[0]].train.num_train_steps - min(saved)


def run_group(group: list[str], configs: dict[str, Any], workdir: str, overrides: list[str],
              device_kind: str, loaded: dict, programs: GroupPrograms | None = None,
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
    os.makedirs(directory, exist_ok=True)
  with _ThreadLogs.to(os.path.join(dirs[0], 'sweep.log')):
    try:
      with _timed(os.path.join(dirs[0], 'sweep_train_seconds.json')) as train_seconds:
        train_loop.train_together([configs[row] for row in group], dirs, loaded,
                                  training_programs, devices, notice)
    except Exception as e:  # the rows named, whichever of them failed
      raise RuntimeError(f'training {", ".join(group)}: {e}') from e
    for row, directory in zip(group, dirs):
      trained = max(checkpointing.saved_steps(directory), default=0)
      # A run stopped by SIGTERM (preemption) saves and returns, unfinished.
      if trained < configs[row].train.num_train_steps:
        raise _Preempted(f'{row} stopped at step {trained} of '
                         f'{configs[row].train.num_train_steps} (preempted); run the sweep '
                         'again to resume it')
    start = time.perf_counter()
    if programs is not None:
      programs.wait_for_evaluation()
    model = (training_programs.model if training_programs is not None else
             ShardedModel(saved_config.read_config(dirs[0]),
                          partitioning.make_mesh(configs[group[0]], devices)))
    translator = (Translator(dirs[0], **TABLE3_DECODING, model=model) if len(group) == 1
                  else RowsTranslator(dirs, **TABLE3_DECODING, model=model))
    figures = scoring.evaluate_rows(translator, SPLIT)
    eval_seconds = time.perf_counter() - start
  record = provenance.record(device_kind)
  record['machine']['devices'] = len(devices)  # the group's (`plan.predicted_seconds`)
  ahead = programs.record() if programs is not None else None
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


class _ThreadLogs(io.TextIOBase):
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
    """stdout and stderr as `_ThreadLogs` within the block (unless they are already)."""
    if isinstance(sys.stdout, cls):
      yield
      return
    with contextlib.redirect_stdout(cls(sys.stdout)), contextlib.redirect_stderr(cls(sys.stderr)):
      yield

  @classmethod
  @contextlib.contextmanager
  def to(cls, path: str) -> Iterator[None]:
    """What this thread prints within the block, appended to `path` too."""
    with cls.installed(), open(path, 'a', encoding='utf-8') as log:
      cls._files[threading.get_ident()] = log
      try:
        yield
      finally:
        del cls._files[threading.get_ident()]
