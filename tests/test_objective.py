"""The learning-rate schedule (eq. 3), Adam, the label-smoothed loss and its gradient, against
numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from reference import adam_updates
from transformer_jax.config import loading
from transformer_jax.model import loss
from transformer_jax.training import optimizer

base = loading.import_sibling(__file__, '../configs/base')


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
  # Four steps of gradients of changing size, some as small as ε, so that β1, β2 and ε all
  # change the updates (on the first step alone Adam's update is -lr · g / (|g| + ε) whatever
  # β1 and β2 are).
  gradients = [np.array([1.0, -2.0, 3e-9, 0.5]), np.array([-0.5, 0.1, -1e-9, 0.5]),
               np.array([2.0, 0.3, 2e-9, -4.0]), np.array([0.1, -3.0, 5e-10, 1e-3])]
  rates = [512**-0.5 * step * 4000**-1.5 for step in (1, 2, 3, 4)]  # eq. 3 in the warmup
  want = adam_updates(gradients, rates, b1=0.9, b2=0.98, eps=1e-9)
  tx = optimizer.adam(base.get_config())
  state = tx.init({'w': jnp.zeros(4)})
  for step, (g, expected) in enumerate(zip(gradients, want), start=1):
    updates, state = tx.update({'w': jnp.asarray(g, jnp.float32)}, state)
    np.testing.assert_allclose(updates['w'], expected, rtol=1e-5, err_msg=f'step {step}')
  # The check can fail: each other hyper-parameter moves some update by over 100 times the
  # tolerance.
  for wrong in ({'b1': 0.8}, {'b2': 0.999}, {'eps': 1e-8}):
    other = adam_updates(gradients, rates, **{'b1': 0.9, 'b2': 0.98, 'eps': 1e-9,
                                                         **wrong})
    assert max(np.max(np.abs(a - b) / np.abs(b)) for a, b in zip(other, want)) > 1e-3, wrong


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


@pytest.mark.parametrize('eps,chunk', [(0.1, 1), (0.1, 3), (0.0, 5), (0.2, 16)])
def test_fused_loss_sums_and_gradients_equal_numpy(eps, chunk):
  """Projection and loss fused in chunks of target positions (chunk 3 and 16 do not divide
  the 5 positions): the sums and the loss's gradients wrt y and the table are those of
  logits = y tableᵀ in float64, d loss / d logits = (softmax - q) at non-padding targets."""
  rng = np.random.default_rng(3)
  y = rng.normal(size=(3, 5, 4)).astype(np.float32)
  table = rng.normal(size=(11, 4)).astype(np.float32)
  targets = rng.integers(1, 11, size=(3, 5))
  targets[0, 3:] = 0
  targets[2, 1:] = 0

  def fused(y, table, name='loss'):
    return loss.fused_loss_sums(y, table, targets, eps, chunk)[name]

  sums = {name: float(fused(y, table, name)) for name in loss.SUM_NAMES}
  logits = y.astype(np.float64) @ table.astype(np.float64).T
  want_loss, want_nll, want_tokens = _numpy_loss(logits, targets, eps)
  assert sums['tokens'] == want_tokens == 15 - 2 - 4
  assert sums['loss'] == pytest.approx(want_loss, rel=1e-5)
  assert sums['nll'] == pytest.approx(want_nll, rel=1e-5)
  assert sums['correct'] == sum(int(np.argmax(logits[b, t]) == targets[b, t])
                                for b in range(3) for t in range(5) if targets[b, t])

  softmax = np.exp(logits - logits.max(-1, keepdims=True))
  softmax /= softmax.sum(-1, keepdims=True)
  one_hot = np.eye(11)[targets]
  q = one_hot * (1 - eps) + (1 - one_hot) * eps / 10
  g = (softmax - q) * (targets != 0)[..., None]  # d loss / d logits, (b, t, vocab)
  dy, dtable = jax.grad(lambda y, w: 2.5 * fused(y, w), argnums=(0, 1))(y, table)
  np.testing.assert_allclose(dy, 2.5 * g @ table.astype(np.float64), atol=1e-5)
  np.testing.assert_allclose(dtable, 2.5 * np.einsum('btv,btd->vd', g, y), atol=1e-5)
