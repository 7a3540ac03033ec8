"""Preemption: SIGTERM (a Colab disconnect, a TPU or cloud VM preemption, SLURM's notice)
asks training to save a checkpoint at the next step boundary and end normally.

  with preemption.Notice() as notice:
    for step in ...:
      ...
      if notice.reached(step): save and stop

With one process a SIGTERM handler records the notice. With several processes
(`jax.distributed`) JAX's preemption service receives it on any process and all processes agree
on the step at which to stop (`multihost_utils.reached_preemption_sync_point`), so they save the
same checkpoint.
"""

import signal
import threading

import jax
from jax.experimental import multihost_utils


class Notice:
  """Whether a preemption notice has arrived; `reached(step)` must be called at every step."""

  def __init__(self):
    self._distributed = jax.process_count() > 1
    self.received = False
    self._previous = None

  def __enter__(self) -> 'Notice':
    # Signal handlers can only be set from the main thread; elsewhere SIGTERM keeps its action.
    if not self._distributed and threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGTERM, self._handle)
    return self

  def __exit__(self, *exc_info) -> None:
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)

  def _handle(self, signum, frame) -> None:
    del signum, frame
    self.received = True

  def reached(self, step: int) -> bool:
    """True at the step where every process should save and stop."""
    if self._distributed:
      self.received = multihost_utils.reached_preemption_sync_point(step)
    return self.received
