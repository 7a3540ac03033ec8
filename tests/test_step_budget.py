"""experiments/table3_regularised/step_budget.py: the fit recovers a power law's change over the last 20% of a
budget, the budget proposed is the smallest that meets the 1% criterion, and the curves that
rise, are left out or were cut off do not count."""

import json
import os

import numpy as np
import pytest

from transformer_jax.config import loading

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
budget = loading.load_module(
    os.path.join(REPO, 'experiments', 'table3_regularised', 'step_budget.py'))

STEPS = np.arange(500, 10001, 500)


def _law(a: float, b: float, k: float, steps=STEPS) -> np.ndarray:
  return a + b * (np.asarray(steps, np.float64) / 1000) ** -k


def _curve(perplexities) -> list[dict]:
  return [{'step': int(s), 'perplexity': float(p)} for s, p in zip(STEPS, perplexities)]


def _last_fifth(a, b, k, budget_steps):
  """The law's change from 80% of `budget_steps` to its end, in float64."""
  end, before = _law(a, b, k, [budget_steps, 0.8 * budget_steps])
  return end / before - 1


def test_the_fit_predicts_a_power_laws_change_at_every_budget():
  params = (4.5, 4.0, 1.1)
  fitted = budget.fit([(int(s), float(p)) for s, p in zip(STEPS, _law(*params))])
  np.testing.assert_allclose(fitted, params, rtol=1e-4)
  for steps in (10000, 20000, 30000, 40000):
    assert budget.predicted_change(fitted, steps) == pytest.approx(
        _last_fifth(*params, steps), rel=1e-3)


def test_the_budget_is_the_smallest_within_one_percent_of_the_curves_that_count(tmp_path):
  slow, fast = (4.8, 4.7, 0.95), (4.5, 4.0, 1.2)
  candidates = [10000, 20000, 30000, 40000]
  want = min(s for s in candidates
             if max(abs(_last_fifth(*p, s)) for p in (slow, fast)) < 0.01)
  rows = tmp_path / 'rows'
  rows.mkdir()
  (rows / 'base.json').write_text(json.dumps({'dev_curve': _curve(_law(*fast))}))
  (rows / 'A1.json').write_text(json.dumps({'dev_curve': _curve(_law(*slow))}))
  # D1 rises (overfits); D2 would need far more steps but is left out; C1 was cut off.
  rising = _law(*fast) + 0.0004 * STEPS
  cut_off = _curve(_law(4.0, 30.0, 0.3))[:10]
  (tmp_path / 'window.jsonl').write_text('\n'.join(json.dumps(r) for r in (
      {'row': 'D1', 'dev_curve': _curve(rising)},
      {'row': 'D2', 'dev_curve': _curve(_law(4.0, 30.0, 0.3))},
      {'row': 'C1', 'dev_curve': cut_off})) + '\n')
  found = budget.curves([str(rows), str(tmp_path / 'window.jsonl')])
  assert set(found) == {'base', 'A1', 'D1', 'D2', 'C1'}
  text = budget.table(found, candidates, leave_out=('D2',))
  assert f'Smallest candidate budget within 1%: {want} steps.' in text
  assert '| D1 | ' in text and 'rises (overfits): not fitted' in text
  assert '| D2 (left out) |' in text and '| C1 |' not in text
  # Counted, D2 would leave no candidate within 1%.
  assert _last_fifth(4.0, 30.0, 0.3, max(candidates)) < -0.01
  assert 'none of them' in budget.table(found, candidates)
