"""The learning-rate schedule (eq. 3), the label-smoothed loss and its gradient, against numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax import config_lib, loss, optimizer

base = config_lib.import_sibling(__file__, '../configs/base')


@pytest.mark.parametrize('step', [1, 2, 100, 3999, 4000, 4001, 10_000, 100_000])
def test_schedule_equals_the_paper_formula(step):
  schedule = optimizer.learning_rate_schedule(d_model=512, warmup_steps=4000)
  want = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
  assert float(schedule(step - 1)) == pytest.approx(want, rel=1e-6)
  scaled = optimizer.learning_rate_schedule(d_model=512, warmup_steps=4000, lr_scale=2.0)
  assert float(scaled(step - 1)) == pytest.approx(2 * want, rel=1e-6)


def test_schedule_peaks_at_warmup():
  schedule = optimizer.learning_rate_schedule(d_model=512, warmup_steps=4000)
  rates = [float(schedule(k)) for k in range(0, 8000, 10)]
  assert int(np.argmax(rates)) * 10 + 1 in range(3991, 4011)
  assert max(rates) == pytest.approx(512**-0.5 * 4000**-0.5, rel=1e-3)


def test_adam_uses_the_papers_hyper_parameters():
  tx = optimizer.adam(base.get_config())
  params = {'w': jnp.ones(3)}
  state = tx.init(params)
  grads = {'w': jnp.array([1.0, -2.0, 0.5])}
  updates, _ = tx.update(grads, state, params)
  # First Adam step: m̂ = g, v̂ = g², update = -lr · g / (|g| + ε) with lr at step_num 1.
  lr = 512**-0.5 * 4000**-1.5
  np.testing.assert_allclose(updates['w'], -lr * grads['w'] / (np.abs(grads['w']) + 1e-9),
                             rtol=1e-5)


def _numpy_loss(logits, targets, eps):
  logits = logits.astype(np.float64)
  vocab = logits.shape[-1]
  log_probs = logits - logits.max(-1, keepdims=True)
  log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
  total, nll, tokens = 0.0, 0.0, 0
  for b in range(targets.shape[0]):
    for t in range(targets.shape[1]):
      if targets[b, t] == 0:
        continue
      q = np.full(vocab, eps / (vocab - 1))
      q[targets[b, t]] = 1 - eps
      entropy = -sum(p * np.log(p) for p in q if p > 0)
      total += -(q * log_probs[b, t]).sum() - entropy  # KL(q || p)
      nll += -log_probs[b, t, targets[b, t]]
      tokens += 1
  return total, nll, tokens


@pytest.mark.parametrize('eps', [0.0, 0.1, 0.2])
def test_label_smoothed_loss_equals_numpy(eps):
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(3, 5, 11)).astype(np.float32) * 3
  targets = rng.integers(1, 11, size=(3, 5))
  targets[0, 3:] = 0
  targets[2, 1:] = 0
  sums = loss.loss_sums(logits, targets, eps)
  want_loss, want_nll, want_tokens = _numpy_loss(logits, targets, eps)
  assert float(sums['tokens']) == want_tokens == 15 - 2 - 4
  assert float(sums['loss']) == pytest.approx(want_loss, rel=1e-5)
  assert float(sums['nll']) == pytest.approx(want_nll, rel=1e-5)
  hits = sum(int(np.argmax(logits[b, t]) == targets[b, t]) for b in range(3) for t in range(5)
             if targets[b, t])
  assert float(sums['correct']) == hits


@pytest.mark.parametrize('eps', [0.0, 0.1])
def test_label_smoothed_loss_gradient_equals_numpy(eps):
  """d loss / d logits = softmax(logits) - q at every non-padding position (q the smoothed
  target distribution of §5.4), 0 on padding; the nll's gradient is softmax - one-hot."""
  rng = np.random.default_rng(2)
  logits = rng.normal(size=(2, 4, 9)).astype(np.float32) * 3
  targets = rng.integers(1, 9, size=(2, 4))
  targets[1, 2:] = 0
  grads = {name: jax.grad(lambda x, n=name: loss.loss_sums(x, targets, eps)[n])(logits)
           for name in ('loss', 'nll')}
  x = logits.astype(np.float64)
  softmax = np.exp(x - x.max(-1, keepdims=True))
  softmax /= softmax.sum(-1, keepdims=True)
  one_hot = np.eye(9)[targets]
  q = one_hot * (1 - eps) + (1 - one_hot) * eps / 8
  real = (targets != 0)[..., None]
  np.testing.assert_allclose(grads['loss'], (softmax - q) * real, atol=1e-6)
  np.testing.assert_allclose(grads['nll'], (softmax - one_hot) * real, atol=1e-6)


def test_padding_logits_do_not_matter():
  rng = np.random.default_rng(1)
  logits = rng.normal(size=(2, 4, 7)).astype(np.float32)
  targets = np.array([[3, 4, 0, 0], [5, 0, 0, 0]])
  changed = logits.copy()
  changed[targets == 0] = 100.0
  a, b = loss.loss_sums(logits, targets, 0.1), loss.loss_sums(changed, targets, 0.1)
  for key in a:
    assert float(a[key]) == pytest.approx(float(b[key]))
