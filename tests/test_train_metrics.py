"""train._TrainMetrics, the summary of the steps between two logs: loss per target token over
the steps, tokens/s and step time without the time spent evaluating."""

import numpy as np
import pytest

from transformer_jax import train


def test_time_spent_evaluating_is_not_counted_in_the_step_time(monkeypatch):
  now = [100.0]
  monkeypatch.setattr(train.time, 'perf_counter', lambda: now[0])
  pending = train._TrainMetrics()  # pylint: disable=protected-access
  metrics = {'loss': 2.0, 'nll': 2.0, 'accuracy': 0.5, 'grad_norm': 1.0, 'learning_rate': 1e-3,
             'tokens': 300.0}
  for step in (1, 2):
    now[0] += 1.5  # a training step
    pending.add(step, metrics)
  with pending.paused():  # an evaluation between logged steps
    now[0] += 60.0
  now[0] += 1.5
  pending.add(3, metrics)
  summary = pending.summary()
  assert summary['step_time'] == pytest.approx(1.5)
  assert summary['target_tokens_per_second'] == pytest.approx(200.0)


def test_the_logged_loss_is_per_target_token_over_the_steps():
  pending = train._TrainMetrics()  # pylint: disable=protected-access
  for step, (value, tokens, norm) in enumerate([(1.0, 100.0, 2.0), (4.0, 300.0, 4.0)], 1):
    pending.add(step, {'loss': value, 'nll': value / 2, 'accuracy': value / 8, 'grad_norm': norm,
                       'learning_rate': 1e-3 * step, 'tokens': tokens})
  summary = pending.summary()
  assert summary['loss'] == pytest.approx((1.0 * 100 + 4.0 * 300) / 400)
  assert summary['accuracy'] == pytest.approx((1.0 * 100 + 4.0 * 300) / 400 / 8)
  assert summary['perplexity'] == pytest.approx(np.exp((0.5 * 100 + 2.0 * 300) / 400))
  assert summary['grad_norm'] == pytest.approx(3.0)
  assert summary['learning_rate'] == pytest.approx(2e-3)
