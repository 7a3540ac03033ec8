"""The training loop's per-step metrics (`TrainMetrics`): kept on the devices between logs,
fetched in one go, checked for NaN, and summarised per target token over the steps logged."""

import contextlib
import time

import jax
import numpy as np
import tqdm

from transformer_jax.model import loss


class TrainMetrics:
  """Collects per-step metrics on the devices and fetches them in one go when logging, so
  the host never waits for a step in between. Fetching checks the loss and the gradient norm:
  a NaN or an infinity in either raises FloatingPointError naming the first bad step. (A
  finite loss comes from the parameters before the step, so only the gradient norm shows that
  a step's update is not finite.) The progress bar's rate and estimate leave out what this
  clock leaves out: each pause restarts the bar's timer (`tqdm.unpause`).

  Kept by hand rather than taken from clu: `periodic_actions.ReportProgress` counts the time
  of its timed sections (evaluation, saving) in its steps/s, where this leaves evaluation,
  saving and compiling out; and each step must be checked for NaN before a save."""

  def __init__(self, progress: tqdm.tqdm):
    self._progress = progress
    self._pending = []
    self._start = time.perf_counter()
    self._paused = 0.0  # seconds since `_start` spent outside training steps
    self._compiling = 0.0  # of which compiling train steps

  def add(self, steps: range, metrics: dict) -> None:
    """The metrics of the call that ran `steps` (`Trainer.step`'s: sums over a step's target
    tokens): scalars for one step, stacked for several; a trailing run axis for runs trained
    together (`training.together`)."""
    self._pending.append((steps, metrics))

  @contextlib.contextmanager
  def paused(self):
    """Time spent inside (evaluation, starting a save) is not counted in tokens/s and step
    time."""
    start = time.perf_counter()
    try:
      yield
    finally:
      self._paused += time.perf_counter() - start
      self._progress.unpause()

  def compiled(self, seconds: float) -> None:
    """`seconds` of the last step went to compiling it: counted apart from the steps."""
    self._paused += seconds
    self._compiling += seconds
    self._progress.unpause()

  def summaries(self, names: list[str]) -> list[dict] | None:
    """Over the steps since the last call, for each run (`names`, one for each entry of the
    metrics' run axis): loss, nll and accuracy per target token (`loss.per_token` of the steps' sums),
    the mean gradient norm, tokens/s, step time and the seconds spent compiling train steps
    (left out of the other two); None if empty. The NaN check names the step and, of several
    runs, the run."""
    if not self._pending:
      return None
    pending = jax.device_get(self._pending)
    elapsed = time.perf_counter() - self._start - self._paused
    summaries = []
    for run, name in enumerate(names):
      fetched = [(step, {metric: np.reshape(value, (len(steps), -1))[i, run]
                         for metric, value in metrics.items()})
                 for steps, metrics in pending for i, step in enumerate(steps)]
      summaries.append(self._summarize(fetched, elapsed, name if len(names) > 1 else None))
    self._pending = []
    self._start, self._paused, self._compiling = time.perf_counter(), 0.0, 0.0
    return summaries

  def _summarize(self, fetched: list, elapsed: float, name: str | None) -> dict:
    for step, metrics in fetched:
      if not (np.isfinite(metrics['loss']) and np.isfinite(metrics['grad_norm'])):
        raise FloatingPointError(
            f'the training loss is {metrics["loss"]} and the gradient norm '
            f'{metrics["grad_norm"]} at step {step}' + (f' of {name}' if name else '') +
            '; stopping, the last checkpoint before it is kept. Resumed as it is, the run '
            'repeats the same batches and dropout: resume with a changed train.lr_scale or '
            'train.warmup_steps, or start a new --workdir')
    sums = {name: sum(float(m[name]) for _, m in fetched) for name in loss.SUM_NAMES}
    summary = {name: float(value) for name, value in loss.per_token(sums).items()}
    summary['grad_norm'] = float(np.mean([m['grad_norm'] for _, m in fetched]))
    summary['learning_rate'] = float(fetched[-1][1]['learning_rate'])
    summary['target_tokens_per_second'] = sums['tokens'] / elapsed
    summary['step_time'] = elapsed / len(fetched)
    summary['compile_seconds'] = self._compiling
    return summary
