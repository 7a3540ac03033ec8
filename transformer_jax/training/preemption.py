"""Preemption: SIGTERM (a Colab disconnect, a TPU or cloud VM preemption, SLURM's notice) or
Ctrl-C (SIGINT) asks training to save a checkpoint at the next step boundary and end normally.

  with preemption.Notice() as notice:
    for step in ...:
      ...
      if notice.reached(step): save and stop, saying `notice.reason`

With one process a handler records the signal (a second Ctrl-C interrupts at once, as Python
does). With several processes (`jax.distributed`) JAX's preemption service receives SIGTERM on
any process (Ctrl-C interrupts as Python does) and all processes agree on the step at which to stop
(`multihost_utils.reached_preemption_sync_point`), so they save the same checkpoint. Code that
shares a notice (a sweep's groups side by side) stops the others with `stop(reason)`, for
instance when one group fails.
"""

import signal
import threading

import jax
from jax.experimental import multihost_utils


class Notice:
  """Whether training should stop (`reached(step)`, called at every step) and why (`reason`)."""

  _SIGNALS = {signal.SIGTERM: 'Preempted (SIGTERM)', signal.SIGINT: 'Interrupted (Ctrl-C)'}

  def __init__(self):
    self._distributed = jax.process_count() > 1
    self.received = False
    self.reason = self._SIGNALS[signal.SIGTERM]
    self._previous = {}

  def __enter__(self) -> 'Notice':
    # Signal handlers can only be set from the main thread; elsewhere the signals keep their
    # actions. Several processes take SIGTERM through JAX's preemption service, and a Ctrl-C
    # of one of them, which the others would not see, interrupts it as Python does.
    if not self._distributed and threading.current_thread() is threading.main_thread():
      for signum in self._SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:  # ignored (a background job): kept
          self._previous[signum] = signal.signal(signum, self._handle)
    return self

  def __exit__(self, *exc_info) -> None:
    for signum, previous in self._previous.items():
      signal.signal(signum, signal.SIG_DFL if previous is None else previous)

  def _handle(self, signum, frame) -> None:
    del frame
    if signum == signal.SIGINT:  # a second Ctrl-C interrupts as it would have
      previous = self._previous[signal.SIGINT]
      signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)
    self.stop(self._SIGNALS[signum])

  def stop(self, reason: str) -> None:
    """Asks training to save and stop at its next step, saying `reason` (the first given)."""
    if not self.received:
      self.reason = reason
    self.received = True

  def reached(self, step: int) -> bool:
    """True at the step where every process should save and stop."""
    if self._distributed:
      self.received = multihost_utils.reached_preemption_sync_point(step)
    return self.received
