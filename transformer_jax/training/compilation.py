"""Compiling: JAX's persistent compilation cache, and how long compiling took.

  compilation.use_cache(config)          # before the command's first compilation
  before = compilation.so_far()
  state, metrics = train_step(state, batch)
  spent = compilation.so_far() - before  # CompileStats(seconds, compiled, loaded)

The cache keeps every program XLA compiles in `config.train.compilation_cache_dir`, keyed by
the program, the devices and the compiler's version and options, so a resumed run, another
seed of the same model, or an evaluation of a trained run loads its programs instead of
compiling them again (docs/training.md#compiling). `so_far` counts what the calling thread
has compiled and loaded since this module was imported, from JAX's monitoring events: a jitted
function compiles on the thread that calls it, before it runs, so the difference around a call
is that call's compiling, also while another thread compiles programs ahead (a sweep's next
group, `sweep.ahead`); `everywhere` counts every thread's.
"""

import contextlib
import dataclasses
import os
import threading
from typing import Iterator

import jax
from jax.experimental.compilation_cache import compilation_cache
import ml_collections

from transformer_jax.storage import buckets

# Tracing to a jaxpr, lowering it to StableHLO, and XLA's compilation (or the cache's load).
_DURATION_EVENTS = ('/jax/core/compile/jaxpr_trace_duration',
                    '/jax/core/compile/jaxpr_to_mlir_module_duration',
                    '/jax/core/compile/backend_compile_duration')
# Recorded once per program XLA was asked for, whether it compiled it or the cache had it.
_BACKEND_EVENT = '/jax/core/compile/backend_compile_duration'
_CACHE_HIT_EVENT = '/jax/compilation_cache/cache_hits'


@dataclasses.dataclass(frozen=True)
class CompileStats:
  """Seconds spent making programs (tracing, lowering, compiling or loading them), and how
  many XLA compiled and how many came from the persistent cache."""

  seconds: float = 0.0
  compiled: int = 0
  loaded: int = 0

  def __sub__(self, other: 'CompileStats') -> 'CompileStats':
    return CompileStats(self.seconds - other.seconds, self.compiled - other.compiled,
                    self.loaded - other.loaded)

  def __bool__(self) -> bool:
    return bool(self.compiled or self.loaded)

  def describe(self) -> str:
    """E.g. 'compiled in 12.3 s' or 'loaded from the compilation cache in 0.4 s'."""
    if self.compiled:
      return f'compiled in {self.seconds:.1f} s'
    return f'loaded from the compilation cache in {self.seconds:.1f} s'


class _Totals:
  """Each thread's running totals, fed by JAX's monitoring listeners (which run on the thread
  that compiles)."""

  def __init__(self):
    self._lock = threading.Lock()
    self._threads: dict[int, list] = {}  # thread id -> [seconds, backend compiles, cache hits]
    self.charged: dict[int, int] = {}  # thread id -> the thread its compiles count for
    jax.monitoring.register_event_duration_secs_listener(self._on_duration)
    jax.monitoring.register_event_listener(self._on_event)

  def _mine(self) -> list:
    thread = threading.get_ident()
    return self._threads.setdefault(self.charged.get(thread, thread), [0.0, 0, 0])

  def _on_duration(self, event: str, seconds: float, **_) -> None:
    if event in _DURATION_EVENTS:
      with self._lock:
        totals = self._mine()
        totals[0] += seconds
        totals[1] += event == _BACKEND_EVENT

  def _on_event(self, event: str, **_) -> None:
    if event == _CACHE_HIT_EVENT:
      with self._lock:
        self._mine()[2] += 1

  def get(self, thread: int | None) -> CompileStats:
    with self._lock:
      threads = self._threads.values() if thread is None else [self._threads.get(thread)]
      seconds, backend, hits = (sum(column) for column in zip(
          [0.0, 0, 0], *(totals for totals in threads if totals)))
      return CompileStats(seconds, backend - hits, hits)


_TOTALS = _Totals()


def so_far() -> CompileStats:
  """What the calling thread has compiled and loaded since this module was imported."""
  return _TOTALS.get(threading.get_ident())


@contextlib.contextmanager
def charged_to(thread: int) -> Iterator[None]:
  """Within: what the calling thread compiles and loads counts as `thread`'s (`so_far`), as a
  thread working for another (a translator's batches decoded at once)."""
  _TOTALS.charged[threading.get_ident()] = thread
  try:
    yield
  finally:
    del _TOTALS.charged[threading.get_ident()]


def everywhere() -> CompileStats:
  """What every thread of the process has compiled and loaded since this module was imported."""
  return _TOTALS.get(None)


def cache_dir(config: ml_collections.ConfigDict) -> str | None:
  """The cache directory `config` asks for: `train.compilation_cache_dir`, or when that is None
  `$XDG_CACHE_HOME/transformer_jax/jax` (`~/.cache/...` without XDG_CACHE_HOME); None when it
  is '' (no cache)."""
  path = config.train.compilation_cache_dir
  if path is None:
    root = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    path = os.path.join(root, 'transformer_jax', 'jax')
  return buckets.absolute(os.path.expanduser(path)) if path else None


def use_cache(config: ml_collections.ConfigDict) -> None:
  """Points JAX's persistent compilation cache at `cache_dir(config)`, or turns it off.
  Every program is kept, however quickly it compiled (JAX's default keeps those over 1 s):
  a run's many small programs add up. No maximum size is set: with one, JAX locks the
  directory around every read and write and scans every entry at each write to evict the
  least recently used, which slowed compile-heavy tests (experiments/test_durations/README.md).
  Takes effect for the programs compiled after it, also when the process used another
  directory before (a notebook, tests); the same directory again changes nothing (a thread
  compiling meanwhile keeps its cache)."""
  path = cache_dir(config)
  if (jax.config.jax_enable_compilation_cache == (path is not None)
      and jax.config.jax_compilation_cache_dir == path
      and jax.config.jax_persistent_cache_min_compile_time_secs == 0.0):
    return
  jax.config.update('jax_enable_compilation_cache', path is not None)
  jax.config.update('jax_compilation_cache_dir', path)
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
  compilation_cache.reset_cache()
