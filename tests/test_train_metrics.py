"""train_metrics.TrainMetrics, the summary of the steps between two logs: loss per target token over
the steps (from the steps' sums, `Trainer.step`'s metrics), tokens/s and step time without the
time spent evaluating, the metrics of several steps a call, a NaN named by its step."""

import io

import numpy as np
import pytest
import tqdm

from transformer_jax.loop import train_metrics


_BAR = tqdm.tqdm(disable=True)  # the run's progress bar, restarted after each pause


def _sums(loss, nll, accuracy, tokens, **others) -> dict:
  """A step's metrics as `Trainer.step` gives them, from per-token figures."""
  return {'loss': loss * tokens, 'nll': nll * tokens, 'correct': accuracy * tokens,
          'tokens': tokens, **others}


def _summary(pending) -> dict:
  (summary,) = pending.summaries(['run'])
  return summary


def test_time_spent_evaluating_is_not_counted_in_the_step_time(monkeypatch):
  now = [100.0]
  monkeypatch.setattr(train_metrics.time, 'perf_counter', lambda: now[0])
  pending = train_metrics.TrainMetrics(_BAR)
  metrics = _sums(loss=2.0, nll=2.0, accuracy=0.5, grad_norm=1.0, learning_rate=1e-3,
                  tokens=300.0)
  for step in (1, 2):
    now[0] += 1.5  # a training step
    pending.add(range(step, step + 1), metrics)
  with pending.paused():  # an evaluation between logged steps
    now[0] += 60.0
  now[0] += 1.5
  pending.add(range(3, 4), metrics)
  summary = _summary(pending)
  assert summary['step_time'] == pytest.approx(1.5)
  assert summary['target_tokens_per_second'] == pytest.approx(200.0)


def test_the_logged_loss_is_per_target_token_over_the_steps():
  pending = train_metrics.TrainMetrics(_BAR)
  for step, (value, tokens, norm) in enumerate([(1.0, 100.0, 2.0), (4.0, 300.0, 4.0)], 1):
    pending.add(range(step, step + 1), _sums(loss=value, nll=value / 2, accuracy=value / 8,
                                             grad_norm=norm, learning_rate=1e-3 * step,
                                             tokens=tokens))
  summary = _summary(pending)
  assert summary['loss'] == pytest.approx((1.0 * 100 + 4.0 * 300) / 400)
  assert summary['accuracy'] == pytest.approx((1.0 * 100 + 4.0 * 300) / 400 / 8)
  assert summary['perplexity'] == pytest.approx(np.exp((0.5 * 100 + 2.0 * 300) / 400))
  assert summary['grad_norm'] == pytest.approx(3.0)
  assert summary['learning_rate'] == pytest.approx(2e-3)


def _stacked(rows: list[dict]) -> dict:
  return {name: np.array([row[name] for row in rows], np.float32) for name in rows[0]}


def test_a_call_of_several_steps_counts_each_step():
  steps = [_sums(loss=1.0, nll=0.5, accuracy=0.25, grad_norm=2.0, learning_rate=1e-3,
                 tokens=100.0),
           _sums(loss=4.0, nll=2.0, accuracy=0.5, grad_norm=4.0, learning_rate=2e-3,
                 tokens=300.0),
           _sums(loss=2.0, nll=1.0, accuracy=0.75, grad_norm=6.0, learning_rate=3e-3,
                 tokens=200.0)]
  one_by_one, called = train_metrics.TrainMetrics(_BAR), train_metrics.TrainMetrics(_BAR)
  for step, metrics in enumerate(steps, 1):
    one_by_one.add(range(step, step + 1), metrics)
  called.add(range(1, 3), _stacked(steps[:2]))
  called.add(range(3, 4), steps[2])
  want, got = _summary(one_by_one), _summary(called)
  for name in ('loss', 'nll', 'accuracy', 'grad_norm', 'perplexity', 'learning_rate'):
    assert got[name] == pytest.approx(want[name]), name
  assert got['loss'] == pytest.approx((100 + 4 * 300 + 2 * 200) / 600)
  assert got['learning_rate'] == pytest.approx(3e-3)


def test_a_nan_inside_a_call_is_named_by_its_step():
  pending = train_metrics.TrainMetrics(_BAR)
  good = _sums(loss=1.0, nll=1.0, accuracy=0.5, grad_norm=1.0, learning_rate=1e-3, tokens=10.0)
  pending.add(range(9, 13), _stacked([good, good, {**good, 'grad_norm': np.inf}, good]))
  with pytest.raises(FloatingPointError, match='gradient norm inf at step 11'):
    _summary(pending)


def test_the_progress_bar_leaves_out_compiling_and_evaluation(monkeypatch):
  # Step 1 compiles for 30 s, steps 2 and 3 take 1 s each, an evaluation 60 s between them: the
  # bar's elapsed time (its rate and estimate) is the 2 s of steps 2 and 3 (step 1's own second
  # goes with its compiling), not 93 s.
  now = [100.0]
  monkeypatch.setattr(train_metrics.time, 'perf_counter', lambda: now[0])
  bar = tqdm.tqdm(total=10, file=io.StringIO(), mininterval=0, miniters=1, smoothing=0)
  bar._time = lambda: now[0]
  bar.start_t = bar.last_print_t = now[0]
  pending = train_metrics.TrainMetrics(bar)
  now[0] += 31.0
  pending.compiled(30.0)
  bar.update(1)
  now[0] += 1.0
  bar.update(1)
  with pending.paused():
    now[0] += 60.0
  now[0] += 1.0
  bar.update(1)
  assert bar.format_dict['elapsed'] == pytest.approx(2.0)
  assert bar.format_dict['n'] == 3
