"""A sweep's groups side by side: each process's devices in slots (`device_slots`), each training
groups in a thread of its own (`SideBySide`); a sweep shared by processes (`SweepProcess`).

The process's devices are split into slots of `devices_per_group` devices (default: one slot of
every device). A small model leaves an accelerator's step launch-bound, so a group spread over
several devices takes about as long a step as on one: side by side, D/d groups train in that
time. Each slot takes, in the plan's order (`plan.plan`), the next group that no process (or
slot) holds and none has finished, holding its claim (`claims`) while it trains, evaluates and
writes it; then waits for the groups held elsewhere, taking over those whose holder ends. Each
slot compiles in a background thread of its own (`ahead`): its group's training before it
starts, then its evaluation and the next free group's while it trains (claimed then; never a
group the plan starts another slot with, which a process started later takes). SIGTERM or
Ctrl-C stops every group in flight at its next step, saved (`preemption`); a group that fails
stops them too, telling them why, and no slot starts another; the sweep then ends with the
first error (a stopped group's says to run the sweep again).
"""

import concurrent.futures
import dataclasses
import os
import threading
import time
from typing import Any

from etils import epath
import jax

from transformer_jax.sweep import claims, group as group_lib, plan, results as tables
from transformer_jax.sweep.ahead import Ahead
from transformer_jax.training import preemption

# How often a slot with no free group left tries again to take one another process holds.
CLAIM_POLL_SECONDS = 1.0


@dataclasses.dataclass(frozen=True)
class SweepProcess:
  """This process of a sweep shared by several: the sweep started in `count` processes (on one
  host or several, sharing the workdir and results directory), this one the `index`th."""

  index: int = 0
  count: int = 1


def device_slots(devices: list[jax.Device], devices_per_group: int | None
                 ) -> list[list[jax.Device]]:
  """`devices` in consecutive slots of `devices_per_group` (None: one slot of them all); a
  ValueError if that does not divide them."""
  per_group = len(devices) if devices_per_group is None else devices_per_group
  if per_group < 1 or len(devices) % per_group:
    raise ValueError(f'--devices_per_group={per_group} must divide the {len(devices)} devices '
                     'of this process (jax.local_devices())')
  return [devices[i:i + per_group] for i in range(0, len(devices), per_group)]


class SideBySide:
  """A sweep's groups trained slot by slot, the slots side by side, each in its own thread;
  the finished rows' files and the table written as each group ends."""

  def __init__(self, sweep_path: str, sweep: Any, configs: dict[str, Any], workdir: str,
               results_dir: str, overrides: list[str], results: dict,
               slots: list[list[jax.Device]], started: float,
               stop_after_minutes: float | None, process: SweepProcess):
    self._sweep_path, self._sweep, self._configs = sweep_path, sweep, configs
    self._workdir, self._results_dir, self._overrides = workdir, results_dir, overrides
    self._results, self._slots, self._process = results, slots, process
    # The time given (seconds) and when it ends (time.monotonic), or None.
    self._budget = None if stop_after_minutes is None else 60 * stop_after_minutes
    self._deadline = None if self._budget is None else started + self._budget
    self._device_kind = slots[0][0].device_kind
    self._data_cache = {}  # the data of each data config and seed, loaded once (`data_key`)
    self._lock = threading.Lock()  # the results, the table and what is passed over
    self._stop = threading.Event()  # a group failed: no slot starts another
    self.passed_over: list[list[str]] = []

  def _predicted(self, group: list[str]) -> float | None:
    with self._lock:
      results = dict(self._results)
    return plan.predicted_seconds(results, len(group),
                                  plan.steps_left(self._configs, self._workdir, group),
                                  self._device_kind, len(self._slots[0]))

  def _seconds_left(self) -> float | None:
    return None if self._deadline is None else self._deadline - time.monotonic()

  def _start_compiling(self, ahead: Ahead, group: list[str], devices: list[jax.Device]) -> None:
    ahead.start(group, [self._configs[row] for row in group],
                [os.path.join(self._workdir, row) for row in group], devices)

  def plan_groups(self, groups: list[list[str]]) -> plan.Plan:
    """The plan of `groups` over every process's slots (`plan.plan`), printed."""
    process = self._process
    # Every process of a shared sweep plans from the deadline as given, not from its clock.
    seconds_left = self._seconds_left() if process.count == 1 else self._budget
    the_plan = plan.plan(groups, {tuple(g): self._predicted(g) for g in groups}, seconds_left,
                         process.count * len(self._slots))
    prefix = f'process {process.index} of {process.count}: ' if process.count > 1 else ''
    print(prefix + the_plan.describe(seconds_left), flush=True)
    return the_plan

  def train(self, groups: list[list[str]]) -> None:
    """Trains `groups` in the plan's order (printed first), each slot taking the next group
    that no process holds (`claims`) and none has finished, then waiting for those held by
    other processes (taking them over if their process ends before it finishes them); raises
    the first group's error after every slot has stopped (the groups in flight saved), or
    `group_lib.Preempted` if a SIGTERM or Ctrl-C stopped it."""
    local = len(self._slots)
    the_plan = self.plan_groups(groups)
    self.passed_over += the_plan.passed_over
    self._queue = _Queue(the_plan.order, firsts=sum(1 for queue in the_plan.queues if queue))
    ahead = Ahead(self._data_cache, group_lib.TABLE3_DECODING, group_lib.SPLIT)
    with preemption.Notice() as notice, group_lib.ThreadLogs.installed(), \
        concurrent.futures.ThreadPoolExecutor(local, 'slot') as threads:
      try:
        running = [threads.submit(self._train_slot, devices, ahead, notice)
                   for devices in self._slots]
        errors = [error for error in map(_error_of, running) if error is not None]
      finally:
        ahead.close()
    if errors:
      raise next((e for e in errors if not isinstance(e, group_lib.Preempted)), errors[0])
    if notice.received:  # before a group started: nothing in flight to save
      raise group_lib.Preempted(f'{notice.reason} before its groups were all trained; run the '
                                'sweep again to resume')

  def _claim_next(self, notice: preemption.Notice) -> claims.Claim | None:
    """The claim of the next group to train: the first in the plan's order that no process
    holds and none has finished; once there is none, one held by another process that has
    ended (waited for, trying every CLAIM_POLL_SECONDS, until every group is finished, the
    sweep stops or its time is up)."""
    said = set()
    while not (self._stop.is_set() or notice.received):
      claim, held = self._queue.claim(self._workdir, self._finished)
      if claim is not None or not held:
        return claim
      left = self._seconds_left()
      if left is not None and left <= 0:
        print(f'not waiting past --stop_after_minutes for {"; ".join(map(", ".join, held))}, '
              'held by other processes', flush=True)
        return None
      for group in held:
        if tuple(group) not in said:
          said.add(tuple(group))
          print(f'{", ".join(group)}: held by {claims.holder(self._workdir, group)}; waiting '
                'for it to finish or end', flush=True)
      time.sleep(CLAIM_POLL_SECONDS)
    return None

  def _finished(self, group: list[str]) -> bool:
    """Whether every row of `group` has its file (after writing those of a group killed
    between its rows' files: `group.recover`, under the group's claim)."""
    group_lib.recover(group, self._workdir, self._results_dir)
    return all(epath.Path(self._results_dir, f'{row}.json').exists() for row in group)

  def _train_slot(self, devices: list[jax.Device], ahead: Ahead,
                  notice: preemption.Notice) -> None:
    """Trains the groups it claims, one after another, on `devices`, claiming the next free
    group and compiling it while one trains; on an error, asks every other slot to stop
    (saved) and raises it."""
    claim = upcoming = None
    try:
      claim = self._claim_next(notice)
      while claim is not None:
        group = list(claim.group)
        if self._fits(group):
          upcoming = self._train_group(group, devices, ahead, notice)
        else:
          ahead.drop(group)  # compiling since it was claimed ahead
        claim.release()
        claim, upcoming = upcoming if upcoming is not None else self._claim_next(notice), None
    except BaseException as e:
      self._stop.set()
      failed = ', '.join(claim.group) if claim is not None else 'a slot'
      if not isinstance(e, group_lib.Preempted):  # the groups in flight save and stop
        notice.stop(f'Stopped: {failed} failed ({type(e).__name__}: {e})')
      for held in (claim, upcoming):
        if held is not None:
          held.release()
      raise

  def _train_group(self, group: list[str], devices: list[jax.Device], ahead: Ahead,
                   notice: preemption.Notice) -> claims.Claim | None:
    """Trains and evaluates `group` (claimed) with its programs compiled ahead, and writes its
    rows' files; meanwhile claims the next free group, if any, and compiles it on `devices`
    (returned: the slot trains it next)."""
    self._start_compiling(ahead, group, devices)  # unless started
    programs = ahead.take(group)
    report = programs.training
    print(f'{", ".join(group)}: its training compiled ahead in {report.seconds:.1f} s: '
          + (report.stats.describe() if programs.training_programs is not None
             else f'not used ({report.error})'), flush=True)
    upcoming = None
    if not (self._stop.is_set() or notice.received):
      upcoming, _ = self._queue.claim(self._workdir, self._finished, ahead=True)
    if upcoming is not None:
      self._start_compiling(ahead, list(upcoming.group), devices)
    print(f'{", ".join(group)}: training in {self._workdir}/'
          + (group[0] if len(group) == 1 else '{' + ','.join(group) + '}')
          + _on(devices, self._slots), flush=True)
    try:
      finished = group_lib.run_group(group, self._configs, self._workdir, self._overrides,
                                     self._device_kind, self._data_cache, programs, devices,
                                     notice)
      self._write(group, finished)
    except BaseException:
      if upcoming is not None:
        upcoming.release()
      raise
    return upcoming

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
    """The group's rows' files (`group.write_results`), then the table."""
    with self._lock:
      group_lib.write_results(group, finished, self._workdir, self._results_dir)
      self._results.update(zip(group, finished))
      if self._process.count == 1:  # a shared sweep's table: once, when every row is in
        tables.write_table(self._sweep_path, self._sweep, self._results, self._workdir)


class _Queue:
  """The groups in the order slots take them (`plan.Plan.order`: the first `firsts`, one for
  each slot of every process, are those the slots start with); which this process's slots
  hold."""

  def __init__(self, order: list[list[str]], firsts: int):
    self._order = [list(group) for group in order]
    self._firsts = firsts
    self._done: set[tuple[str, ...]] = set()  # finished, or claimed by one of this process's
    self._lock = threading.Lock()

  def claim(self, workdir: str, finished, ahead: bool = False
            ) -> tuple[claims.Claim | None, list[list[str]]]:
    """(the claim of the first group that is free and not `finished`, or None; the groups left
    that another process, or another slot of this one, holds). `ahead`: a claim for the group
    a slot trains next, taken while its group trains; it passes over the groups slots start
    with, so that a process started later than the others finds its first group free."""
    with self._lock:
      held = []
      for index, group in enumerate(self._order):
        if tuple(group) in self._done or (ahead and index < self._firsts):
          continue
        claim = claims.Claim.take(workdir, group)
        if claim is None:
          held.append(group)
          continue
        self._done.add(tuple(group))
        try:
          done = finished(group)
        except BaseException:
          claim.release()
          raise
        if done:
          claim.release()
          continue
        return claim, held
      return None, held


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
