"""Checkpoints of a training run, and the run's config beside them.

`workdir/checkpoints/<step>/` (orbax) holds the train state in two items, `params` (the
parameters) and `optimizer` (the rest: Adam's moments, step, dropout key), and `data`, the data
iterator's position, written atomically: orbax writes to a temporary directory and renames it
when complete, so a crash mid-save leaves the previous checkpoints intact. Only the checkpoints
a resume may need keep their `optimizer` item (`KeepScheduled.full`: the newest, and the
newest scheduled one before it, to fall back on); the others are kept for §6.1's average,
which reads only `params`, and lose theirs once a newer save is complete (`Checkpoints.thin`):
a workdir holds the parameters of `keep` checkpoints and two optimizer states, not `keep`
optimizer states (about twice the parameters each). Checkpoints written before the split hold
one `state` item, read as before.

A checkpoint damaged later (truncated files from a full disk or a bad copy) is skipped with a
one-line warning: training moves it aside to `<step>.corrupt` (nothing is deleted) and resumes
from the newest readable one; readers (`translate`, `evaluate`, `average`) only skip it, since
they may share the workdir with a running training. With several processes, each reading its
own shards, a checkpoint that any of them cannot read is skipped by all.
Beside them, `workdir/config.json` is the resolved config of the latest run (`saved_config`)
and `workdir/spm.model` its vocabulary.
"""

import contextlib
import dataclasses
import os
import threading
from typing import Any, Callable, Iterator, Sequence

from absl import logging
from etils import epath
import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils
import numpy as np
import orbax.checkpoint as ocp

from transformer_jax.storage import buckets, workdirs


# Held while a save starts. Orbax names each save's signals between its background threads after
# one process-wide operation counter, which a save reads several times as it starts: two saves
# started at once by two threads (a sweep's groups side by side) can take each other's number
# and wait for a signal that never comes.
_SAVING = threading.Lock()


@dataclasses.dataclass(frozen=True)
class KeepScheduled:
  """Which checkpoints orbax keeps (an orbax preservation policy): those a resume may need
  (`full`), and for §6.1's average the newest `keep` of those whose step is a multiple of
  `every`, the checkpoint interval, and the newest (the last step of a run, saved whatever its
  step). One written off that schedule (on preemption, or at the last step of a run later
  extended) is deleted once a newer one is complete, so it never takes a scheduled
  checkpoint's place in the average of the last few."""

  keep: int
  every: int
  previous: bool = False

  def should_preserve(self, checkpoints: Sequence[Any], *, context: Any) -> list[bool]:
    del context  # the policy needs only the steps
    return self.kept([checkpoint.step for checkpoint in checkpoints])

  def kept(self, steps: Sequence[int]) -> list[bool]:
    """Whether each of `steps` is kept."""
    full = self.full(steps)
    newest = {max(steps)} if steps else set()
    averaged = sorted({step for step in steps if step % self.every == 0} | newest)
    averaged = averaged[-self.keep:]
    return [step in full or step in averaged for step in steps]

  def full(self, steps: Sequence[int]) -> set[int]:
    """The steps whose whole train state is kept, to resume from: the newest; the newest
    scheduled one before it, where a damaged newest falls back to; with `previous`, the one
    before the newest (a run trained with others: the step their group resumes from if it is
    killed between its runs' saves of the newest; `Checkpoints.tidy` drops it once the group has
    ended)."""
    steps = sorted(steps)
    before = [step for step in steps[:-1] if step % self.every == 0][-1:]
    return set(steps[-2 if self.previous else -1:]) | set(before)


class Checkpoints:
  """Saves and restores (train state, iterator state) pairs, keeping the newest and the last
  `keep` written at multiples of `every` steps (`KeepScheduled`; with `previous`, the one
  before the newest too, until `tidy`), the optimizer state only where a resume may need it
  (`thin`); with keep=None, reads the checkpoints that exist (and creates nothing). A params-only
  checkpoint (`save` with `data_state` None) holds `params` alone (`average`'s workdir)."""

  def __init__(self, workdir: str, keep: int | None = None, every: int = 1,
               previous: bool = False):
    self._policy = None if keep is None else KeepScheduled(keep, every, previous)
    self._tidy = None if keep is None else KeepScheduled(keep, every)
    self._manager = ocp.CheckpointManager(
        os.path.join(buckets.absolute(workdir), 'checkpoints'),
        options=ocp.CheckpointManagerOptions(preservation_policy=self._policy,
                                             create=keep is not None),
        item_names=(*_ITEMS, _WHOLE))

  def save(self, step: int, state: Any, data_state: dict | None) -> None:
    """Starts writing in the background; the arrays are copied off the devices first, so the
    state may be updated (or donated) as soon as this returns. The checkpoints the newest save
    leaves without a use for their optimizer state lose it first (`thin`). A failed write (of
    this save or of the previous one, still in the background) is an OSError naming the
    directory; a step not newer than the newest saved one, which orbax skips, is a
    RuntimeError. With `data_state` None, only the parameters are written."""
    params, optimizer = _split(state)
    items = {'params': ocp.args.StandardSave(params)}
    if data_state is not None:
      items.update(optimizer=ocp.args.StandardSave(optimizer),
                   data=ocp.args.JsonSave(data_state))
    with self._write_errors():
      # orbax's save first waits for this manager's previous one: waited for here, outside
      # `_SAVING`, so that one slow write stalls no other group's save.
      self._manager.wait_until_finished()
      self.thin()
      with _SAVING:
        saved = self._manager.save(step, args=ocp.args.Composite(**items))
    if not saved:
      raise RuntimeError(f'step {step} was not saved in {self._manager.directory}: it already '
                         f'holds step {self._manager.latest_step()}')

  def restore(self, step: int, abstract_state: Any | None = None) -> tuple[Any, dict]:
    """The state of `step`, placed with `abstract_state`'s shardings (None: as a tree of
    arrays laid out as they were saved), and the iterator state. A checkpoint kept only for
    the average (`full_steps` does not list it) has no optimizer state to restore."""
    if self._has(step, _WHOLE):  # written before the state was split
      restored = self._manager.restore(step, args=ocp.args.Composite(**{
          _WHOLE: ocp.args.StandardRestore(abstract_state), 'data': ocp.args.JsonRestore()}))
      return restored[_WHOLE], restored['data']
    params, optimizer = _split(abstract_state)
    restored = self._manager.restore(step, args=ocp.args.Composite(
        params=ocp.args.StandardRestore(params), optimizer=ocp.args.StandardRestore(optimizer),
        data=ocp.args.JsonRestore()))
    return _join(restored['params'], restored['optimizer']), restored['data']

  def all_steps(self) -> list[int]:
    return sorted(self._manager.all_steps())

  def full_steps(self) -> list[int]:
    """The steps whose checkpoint holds the whole train state, which a run resumes from."""
    return [step for step in self.all_steps()
            if self._has(step, 'optimizer') or self._has(step, _WHOLE)]

  def _has(self, step: int, item: str) -> bool:
    return (self._manager.directory / str(step) / item).exists()

  def restore_params(self, step: int, abstract_params: Any) -> Any:
    """Only the parameters of `step`'s state (not the optimizer state), placed with
    `abstract_params`' shardings."""
    if not self._has(step, _WHOLE):
      restored = self._manager.restore(step, args=ocp.args.Composite(
          params=ocp.args.StandardRestore(abstract_params)))
      return restored['params']
    restore_args = ocp.checkpoint_utils.construct_restore_args(abstract_params)
    with ocp.PyTreeCheckpointer() as checkpointer:
      restored = checkpointer.restore(
          self._manager.directory / str(step) / _WHOLE,
          args=ocp.args.PyTreeRestore({'params': abstract_params},
                                      restore_args={'params': restore_args},
                                      partial_restore=True))
    return restored['params']

  def restore_readable(self, step: int, abstract_state: Any) -> tuple[Any, dict] | None:
    """`restore` of `step`, or None with a warning if this process or another cannot read it
    (running out of memory is raised)."""
    return self._read(self.restore, step, abstract_state)[0]

  def restore_latest(self, abstract_state: Any) -> tuple[int, Any, dict] | None:
    """(step, state, iterator state) of the newest readable checkpoint that holds the whole
    state (`full_steps`), None if there is no checkpoint. Newer ones that cannot be read are
    warned about and moved aside to `<step>.corrupt`; RuntimeError if none can be read (then
    nothing is moved), or if every checkpoint holds only parameters. Running out of memory
    while restoring says nothing about the checkpoint: it is raised as it is."""
    if self.all_steps() and not self.full_steps():
      raise RuntimeError(f'the checkpoints in {self._manager.directory} hold only parameters '
                         '(kept for averaging, or written by transformer_jax.average), no '
                         'optimizer state to resume training from: use a new --workdir')
    unreadable = []
    for step in reversed(self.full_steps()):
      restored, error = self._read(self.restore, step, abstract_state)
      if error:
        unreadable.append((step, error))
        continue
      self.move_aside([bad for bad, _ in unreadable], 'corrupt')
      return step, *restored
    if unreadable:
      step, error = unreadable[0]
      raise RuntimeError(f'no checkpoint in {self._manager.directory} can be read; the newest, '
                         f'{step}: {_first_line(error)}')
    return None

  def average_last(self, count: int, abstract_params: Any) -> tuple[Any, list[int]]:
    """The element-wise mean of the parameters of the newest `count` readable checkpoints
    (§6.1 averages the last 5 or 20), computed in memory one checkpoint at a time, and their
    steps. Unreadable ones are skipped with a warning (running out of memory is raised);
    nothing on disk changes."""
    total, steps = None, []
    for step in reversed(self.all_steps()):
      if len(steps) == count:
        break
      params, error = self._read(self.restore_params, step, abstract_params)
      if error:
        continue
      total = params if total is None else jax.tree.map(jnp.add, total, params)
      steps.append(step)
    if not steps:
      if self.all_steps():
        raise RuntimeError(f'no checkpoint in {self._manager.directory} can be read')
      raise FileNotFoundError(f'no checkpoint in {self._manager.directory}: train with '
                              'transformer_jax.train first')
    return jax.tree.map(lambda x: x / len(steps), total), sorted(steps)

  def _read(self, read: Callable[[int, Any], Any], step: int, abstract_tree: Any
            ) -> tuple[Any, Exception | None]:
    """(`read(step, abstract_tree)`, None), or (None, the error) with a warning if this process
    or another cannot read `step`: one that any process cannot read (each reads its own
    shards) is skipped by all, so that they all go on from the same step. Running out of
    memory says nothing about the checkpoint: it is raised as it is."""
    error = None
    try:
      result = read(step, abstract_tree)
    except (MemoryError, jax.errors.JaxRuntimeError):
      raise
    except Exception as e:  # pylint: disable=broad-except  (TensorStore raises many types)
      result, error = None, e
    if not _on_every_process(error is None):
      error = error or RuntimeError('another process cannot read it')
      logging.warning('checkpoint %s cannot be read, skipping it: %s',
                      self._manager.directory / str(step), _first_line(error))
      return None, error
    return result, None

  def tidy(self) -> None:
    """Deletes what the keep policy without `previous` would not keep, and thins as it would
    (once every save is complete: a group that has ended needs no step to resume from but its
    newest)."""
    self.wait()
    steps = self.all_steps()
    for step, kept in zip(steps, self._tidy.kept(steps)):
      if not kept:
        self._manager.delete(step)
    self.thin(self._tidy)

  def thin(self, policy: 'KeepScheduled | None' = None) -> None:
    """Deletes the optimizer state of every complete checkpoint that `policy` (default: the
    keep policy) does not keep whole (`KeepScheduled.full`), on process 0; what averaging
    reads stays. The item is renamed before it is deleted, so a crash leaves either the
    checkpoint whole or a directory no reader opens; in a bucket, where a rename copies every
    object, it is deleted where it is (a crash midway leaves an item that fails to restore, and
    a resume that reaches it skips the checkpoint). Only complete checkpoints are listed, and
    the newest complete one is always kept whole, so no save under way is touched."""
    policy = policy or self._policy
    if policy is None or jax.process_index() != 0:
      return
    steps = self.all_steps()
    full = policy.full(steps)
    for step in steps:
      if step not in full and self._has(step, 'optimizer'):
        item = self._manager.directory / str(step) / 'optimizer'
        if not buckets.is_url(str(item)):
          item = item.rename(item.with_name('optimizer.deleted'))
        item.rmtree()

  def move_aside(self, steps: Sequence[int], reason: str, why: str = '') -> None:
    """Renames checkpoints `steps` to `<step>.<reason>` (a number added if that is taken), so
    that no reader or resume sees them while they stay on disk, warning with `why`; every
    process calls it."""
    if not steps:
      return
    multihost_utils.sync_global_devices('checkpoints read')  # nobody still reads them

    def move():
      for step in steps:
        path = self._manager.directory / str(step)
        aside = path.with_name(f'{step}.{reason}')
        suffix = 1
        while aside.exists():
          aside, suffix = path.with_name(f'{step}.{reason}{suffix}'), suffix + 1
        path.rename(aside)
        logging.warning('moved the %s checkpoint %s to %s%s', reason, path, aside, why)

    workdirs.on_process_zero(move, f'move the {reason} checkpoints aside')
    self._manager.reload()

  def wait(self) -> None:
    """Blocks until every started save is complete, then thins (`thin`)."""
    with self._write_errors():
      self._manager.wait_until_finished()
      self.thin()

  @contextlib.contextmanager
  def _write_errors(self) -> Iterator[None]:
    try:
      yield
    except Exception as e:  # pylint: disable=broad-except  (orbax wraps the OSError variously)
      raise OSError(f'cannot write a checkpoint in {self._manager.directory} '
                    f'({_first_line(e)}); the checkpoints written before are intact') from e

  def close(self) -> None:
    """Closes the manager, after waiting for the saves under way and thinning (`wait`)."""
    self.wait()
    with self._write_errors():
      self._manager.close()


# A checkpoint's items: the parameters, the rest of the train state, the data position; and the
# one item that held the whole state before it was split in two.
_ITEMS = ('params', 'optimizer', 'data')
_WHOLE = 'state'


def _split(state: Any) -> tuple[Any, Any]:
  """(parameters, the rest) of a train state: a `TrainState`, a dict holding 'params' (a state
  restored without a target), or None (no target: both parts as saved)."""
  if state is None:
    return None, None
  if isinstance(state, dict):
    return state['params'], {name: value for name, value in state.items() if name != 'params'}
  return state.params, state.replace(params=None)


def _join(params: Any, optimizer: Any) -> Any:
  """`_split`'s inverse."""
  if isinstance(optimizer, dict):
    return {**optimizer, 'params': params}
  return optimizer.replace(params=params)


def _on_every_process(flag: bool) -> bool:
  """Whether `flag` holds on every process."""
  if jax.process_count() == 1:
    return flag
  return bool(multihost_utils.process_allgather(np.array(flag)).all())


def _first_line(error: Exception) -> str:
  lines = str(error).strip().splitlines()
  return f'{type(error).__name__}: {lines[0] if lines else ""}'


def saved_steps(workdir: str) -> list[int]:
  """The steps of `workdir`'s finished checkpoints, read from the directory names (orbax
  gives a checkpoint being written a suffix), without opening any. In a bucket, where orbax
  writes a checkpoint in its final directory, those that hold its mark of a finished save."""
  directory = epath.Path(workdir, 'checkpoints')
  if not directory.is_dir():
    return []
  steps = sorted(int(path.name) for path in directory.iterdir() if path.name.isdigit())
  if buckets.is_url(workdir):
    steps = [step for step in steps if (directory / str(step) / _FINISHED).exists()]
  return steps


# orbax's mark of a finished save where it cannot rename a temporary directory (a bucket).
_FINISHED = 'commit_success.txt'
