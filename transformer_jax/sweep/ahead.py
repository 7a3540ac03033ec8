"""The next group's programs compiled while a group trains, in a background thread, so that
a group starts training and is evaluated without compiling (`jit(...).lower(...).compile()`).

  ahead = Ahead(loaded)                          # `loaded`: the sweep's data, by data key
  ahead.start(group, configs, dirs)              # the next group's, while this one trains
  compiled = ahead.take(group)                   # waits for them; None if none were made

It compiles the group's training (`train_loop.compile_ahead`: the step for each batch shape,
the initial state, the dev evaluation) and its evaluation (`scoring.compile_ahead`: Table 3's
decoder for each bucket of the dev sources, the loss), for the data of the same data config
and seed as a group before it loaded (`train_loop.data_key`; it waits for that load): a
sweep's first group, and a group of data no group before it used, compile as they train.

The group then trains and is evaluated with the objects compiled here (`train_loop.Programs`,
the `ShardedModel` its translator reuses), so none of their programs compiles again. An
accelerator's host is idle while the device trains, so the thread costs the training nothing
there; on a CPU it takes cores from the training steps.
"""

import copy
import dataclasses
import threading
import time

from transformer_jax.decoding import scoring
from transformer_jax.loop import train_loop
from transformer_jax.training import compilation


@dataclasses.dataclass(frozen=True)
class Compiled:
  """A group's programs (`programs`: None when none could be made), what compiling them took
  (on the thread), and its wall time."""

  programs: train_loop.Programs | None
  compiles: compilation.Compiles
  seconds: float
  error: str | None = None

  def record(self) -> dict:
    """What a row's JSON says of it."""
    return {'compiled': self.compiles.compiled, 'loaded': self.compiles.loaded,
            'compile_seconds': self.compiles.seconds, 'seconds': self.seconds,
            'used': self.programs is not None, 'error': self.error}


class Ahead:
  """One group's programs compiled at a time, in a background thread."""

  def __init__(self, loaded: dict, evaluation: dict, split: str):
    self._loaded, self._evaluation, self._split = loaded, evaluation, split
    self._thread: threading.Thread | None = None
    self._group: tuple[str, ...] = ()
    self._result: list[Compiled] = []
    self._taken = threading.Event()

  def start(self, group: list[str], configs: list, dirs: list[str]) -> None:
    """Starts compiling `group`'s programs (its rows' `configs`, trained in `dirs`); a group
    started before and not taken (not started for the deadline) is given up."""
    self.close()
    self._group, self._result = tuple(group), []
    self._taken = threading.Event()
    self._thread = threading.Thread(target=self._compile, args=(configs, dirs, self._taken),
                                    name='compile ahead', daemon=True)
    self._thread.start()

  def take(self, group: list[str]) -> Compiled | None:
    """`group`'s programs, once compiled (waiting for the thread); None when `start` was not
    called for it."""
    if self._thread is None or self._group != tuple(group):
      return None
    self._taken.set()
    self._thread.join()
    self._thread = None
    return self._result[0]

  def close(self) -> None:
    """Gives up the group started and not taken (its thread stops waiting for data)."""
    self._taken.set()

  def _data_for(self, key: str, taken: threading.Event):
    """The data of `key` once a group has loaded it; None if the group before ends first."""
    while key not in self._loaded:
      if taken.wait(0.5):
        return self._loaded.get(key)
    return self._loaded[key]

  def _compile(self, configs: list, dirs: list[str], taken: threading.Event) -> None:
    start, before = time.perf_counter(), compilation.so_far()
    programs, error = None, None
    try:
      programs = train_loop.compile_ahead(configs, dirs, lambda key: self._data_for(key, taken))
      if programs is not None:
        config = copy.deepcopy(programs.model.config)
        config.decode.update(self._evaluation)
        data = self._loaded[train_loop.data_key(config, programs.trainer.rows_multiple)]
        scoring.compile_ahead(programs.model, config, data.tokenizer, len(configs), self._split)
    except Exception as e:  # pylint: disable=broad-except
      # The group then compiles as it trains, and raises there whatever is wrong with it.
      programs, error = None, f'{type(e).__name__}: {e}'
    self._result.append(Compiled(programs, compilation.so_far() - before,
                                 time.perf_counter() - start, error))
