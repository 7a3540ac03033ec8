"""A sweep's groups compiled ahead, one after another, in a background thread of each slot, so
that a group trains and is evaluated without compiling (`jit(...).lower(...).compile()`).

  ahead = Ahead(data_cache, decoding, split)     # `data_cache`: the sweep's data, by data key
  ahead.start(group, configs, dirs, devices)     # queued behind the groups started before
  programs = ahead.take(group)                   # waits for its training's programs
  ...                                            # the group trains
  programs.wait_for_evaluation()                 # waits for its evaluation's programs

Each group's compiling has two parts, for the devices it will train on: its training
(`loop.runs_together.compile_ahead`: the data loaded if no group before loaded it, the initial
state, the step for each batch shape, the dev evaluation), queued when the group is started, then
its evaluation (`scoring.compile_ahead`: Table 3's decoder for each bucket of the dev sources, the
loss), queued when it is taken. A sweep starts the first group of each of its slots (the devices a
group trains on, `sweep.slots`) and each slot waits for its group's training programs only; the
group's evaluation, and then the slot's next group, compile while it trains. Nothing compiles twice:
the group trains and is evaluated with the objects compiled here
(`loop.runs_together.CompiledAhead`, the `ShardedModel` its translator reuses), and waits for a part
still compiling rather than compile it again.

An accelerator's host is idle while the device trains, so the thread costs the training nothing
there; on a CPU it takes cores from the training steps.
"""

import concurrent.futures
import copy
import dataclasses
import threading
import time

import jax

from transformer_jax.decoding import scoring
from transformer_jax.loop.runs_together import CompiledAhead, compile_ahead
from transformer_jax.training import compilation


@dataclasses.dataclass(frozen=True)
class CompileReport:
  """What compiling one part of a group (its training's programs, or its evaluation's) took on
  the thread (`stats`), its wall time, and the error that stopped it."""

  stats: compilation.CompileStats
  seconds: float
  error: str | None = None


@dataclasses.dataclass(frozen=True)
class GroupPrograms:
  """A group's training programs compiled ahead (`training_programs`: None when none could be
  made), the report of their compiling, and that of its evaluation's programs, still compiling
  (`wait_for_evaluation`)."""

  training_programs: CompiledAhead | None
  training: CompileReport
  evaluation_compiling: concurrent.futures.Future

  def wait_for_evaluation(self) -> CompileReport:
    """Waits until the evaluation's programs are compiled; their report."""
    return self.evaluation_compiling.result()

  def record(self) -> dict:
    """What a row's JSON says of the compiling (after `wait_for_evaluation`)."""
    parts = [self.training, self.wait_for_evaluation()]
    return {'compiled': sum(p.stats.compiled for p in parts),
            'loaded': sum(p.stats.loaded for p in parts),
            'compile_seconds': sum(p.stats.seconds for p in parts),
            'seconds': sum(p.seconds for p in parts),
            'used': self.training_programs is not None,
            'error': next((p.error for p in parts if p.error), None)}


class Ahead:
  """The groups' programs compiled in the order started, in a background thread for each set of
  devices (a slot's): slots side by side compile side by side."""

  def __init__(self, data_cache: dict, decoding: dict, split: str):
    """`data_cache`: the sweep's data, by data key (`loop.runs_together.data_key`); `decoding`: the
    settings its evaluation decodes `split` with (`config.decode` fields)."""
    self._data_cache, self._decoding, self._split = data_cache, decoding, split
    self._threads: dict[tuple[int, ...], concurrent.futures.ThreadPoolExecutor] = {}
    # Groups started and not taken: their training's compiling, its thread, and their rows.
    self._started: dict[tuple[str, ...], tuple[concurrent.futures.Future,
                                               concurrent.futures.ThreadPoolExecutor, int]] = {}
    self._lock = threading.Lock()  # the slots of a sweep start and take from their threads

  def _thread(self, devices: list[jax.Device] | None) -> concurrent.futures.ThreadPoolExecutor:
    """The compiling thread of `devices` (None: every device)."""
    key = tuple(device.id for device in devices) if devices is not None else ()
    if key not in self._threads:
      self._threads[key] = concurrent.futures.ThreadPoolExecutor(
          1, thread_name_prefix=f'compile ahead {key}')
    return self._threads[key]

  def start(self, group: list[str], configs: list, dirs: list[str],
            devices: list[jax.Device] | None = None) -> None:
    """Queues the compiling of `group`'s training (its rows' `configs`, trained in `dirs` on
    `devices`, default every device), unless started."""
    with self._lock:
      if tuple(group) not in self._started:
        thread = self._thread(devices)
        training = thread.submit(self._timed, compile_ahead, configs, dirs, self._data_cache,
                                 devices)
        self._started[tuple(group)] = training, thread, len(configs)

  def take(self, group: list[str]) -> GroupPrograms:
    """`group`'s programs (`start`ed), once its training's are compiled; its evaluation's
    compiling queued."""
    with self._lock:
      training, thread, rows = self._started.pop(tuple(group))
    programs, report = training.result()
    return GroupPrograms(programs, report,
                         thread.submit(self._compile_evaluation, programs, rows))

  def drop(self, group: list[str]) -> None:
    """Gives up `group`'s compiling (not to be trained), if it has not started."""
    with self._lock:
      started = self._started.pop(tuple(group), None)
    if started is not None:
      started[0].cancel()

  def close(self) -> None:
    """Gives up every group started and not taken, and ends the threads."""
    with self._lock:
      for thread in self._threads.values():
        thread.shutdown(wait=False, cancel_futures=True)

  @staticmethod
  def _timed(compile_part, *args):
    """(`compile_part(*args)`, its `CompileReport`): the result None if it failed (the group then
    compiles as it trains, and raises there whatever is wrong with it)."""
    start, before = time.perf_counter(), compilation.so_far()
    result, error = None, None
    try:
      result = compile_part(*args)
    except Exception as e:  # pylint: disable=broad-except
      error = f'{type(e).__name__}: {e}'
    return result, CompileReport(compilation.so_far() - before, time.perf_counter() - start,
                                 error)

  def _compile_evaluation(self, ahead: CompiledAhead | None,
                          rows: int) -> CompileReport:
    if ahead is None:
      return CompileReport(compilation.CompileStats(), 0.0)
    programs = ahead.programs

    def compile_evaluation():
      config = copy.deepcopy(programs.model.config)
      config.decode.update(self._decoding)
      scoring.compile_ahead(programs.model, config, programs.data.tokenizer, rows, self._split)

    return self._timed(compile_evaluation)[1]
