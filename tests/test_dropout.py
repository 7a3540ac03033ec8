"""Dropout's masks from 16-bit draws (transformer_jax/model/dropout.py), against a numpy formula of
the same draws and against the properties any dropout must have."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.model.dropout import Dropout


def _apply(rate, x, key, **fields):
  """Dropout with `key` itself as its random key (`rng`, as nn.Dropout takes it)."""
  return Dropout(rate, **fields).apply({}, x, deterministic=False, rng=key)


def _reference(rate, x, key):
  """float64: the key's 32-bit words for ceil(n / 2) of the n positions of the second-to-last
  dimension (the only one, for 1-D x) give 16-bit draws, their low halves for positions
  0 ... ceil(n / 2) - 1 and their high halves for the rest; an element is kept when its draw is
  below t = round((1 - rate) 2^16) and scaled by 2^16 / t."""
  axis = max(x.ndim - 2, 0)
  shape = list(x.shape)
  shape[axis] = -(-shape[axis] // 2)
  words = np.asarray(jax.random.bits(key, tuple(shape), jnp.uint32), np.int64)
  draws = np.concatenate([words % 2**16, words // 2**16], axis)
  draws = np.take(draws, np.arange(x.shape[axis]), axis)
  threshold = round((1 - rate) * 2**16)
  keep = draws < threshold
  return np.where(keep, np.asarray(x, np.float64) * 2**16 / threshold, 0.0), keep


# JAX's random-number generators (config.train.dropout_prng_impl): the masks come from any
# key's bits the same way, so every property below holds for each.
IMPLS = ('threefry2x32', 'rbg', 'unsafe_rbg')


@pytest.mark.parametrize('impl', IMPLS)
@pytest.mark.parametrize('rate, shape', [(0.1, (3, 7, 16)), (0.3, (2, 5, 9)), (0.5, (4, 1)),
                                         (0.2, (11,)), (0.3, (6, 1, 4))])
def test_output_is_the_mask_of_the_draws_times_the_inverse_keep_probability(rng, rate, shape,
                                                                           impl):
  x = rng.standard_normal(shape).astype(np.float32)
  key = jax.random.key(3, impl=impl)
  expected, _ = _reference(rate, x, key)
  np.testing.assert_allclose(_apply(rate, jnp.asarray(x), key), expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize('impl', IMPLS)
@pytest.mark.parametrize('rate', [0.1, 0.3])
def test_masks_drop_at_the_rate_and_keep_the_expectation(rate, impl):
  """Over 2^20 elements: the dropped fraction is within 5 standard deviations of the rate
  (whose 16-bit rounding, under 2^-17, is far inside that), and so is the mean of the output of
  ones (its expectation is 1); rows i and i + 32, drawn from the two halves of the same words,
  are dropped together as often as independent draws would be."""
  n = 2**20
  y = np.asarray(_apply(rate, jnp.ones((64, n // 64)), jax.random.key(0, impl=impl)))
  dropped = y == 0
  sigma = (rate * (1 - rate) / n) ** 0.5
  assert abs(dropped.mean() - rate) < 5 * sigma
  assert abs(y.mean() - 1) < 5 * sigma / (1 - rate)
  both = (dropped[:32] & dropped[32:]).mean()
  assert abs(both - rate**2) < 5 * (rate**2 * (1 - rate**2) / (n // 2)) ** 0.5


@pytest.mark.parametrize('impl', IMPLS)
def test_a_key_gives_one_mask_and_another_key_another(impl):
  x = jnp.ones((8, 32))
  first = _apply(0.3, x, jax.random.key(1, impl=impl))
  np.testing.assert_array_equal(first, _apply(0.3, x, jax.random.key(1, impl=impl)))
  other = _apply(0.3, x, jax.random.fold_in(jax.random.key(1, impl=impl), 1))
  assert (np.asarray(first) != np.asarray(other)).mean() > 0.2


def test_bfloat16_inputs_are_scaled_in_float32_and_rounded_once(rng):
  x = rng.standard_normal((4, 8, 16)).astype(np.float32)
  key = jax.random.key(5)
  got = _apply(0.1, jnp.asarray(x, jnp.bfloat16), key)
  assert got.dtype == jnp.bfloat16
  expected, _ = _reference(0.1, np.asarray(jnp.asarray(x, jnp.bfloat16), np.float32), key)
  np.testing.assert_array_equal(np.asarray(got, np.float32),
                                np.asarray(jnp.asarray(expected, jnp.bfloat16), np.float32))


@pytest.mark.parametrize('broadcast_dims', [(1, 3), (-3, -1)])
def test_broadcast_dims_share_one_draw(broadcast_dims):
  """DropHead's use: (b, q, h, d_v) with dims 1 and 3 shared, so a head is dropped whole: the
  mask of the (b, 1, h, 1) draws, broadcast."""
  x = jnp.ones((16, 5, 4, 6))
  key = jax.random.key(0)
  expected, _ = _reference(0.5, np.ones((16, 1, 4, 1)), key)
  np.testing.assert_allclose(_apply(0.5, x, key, broadcast_dims=broadcast_dims),
                             np.broadcast_to(expected, x.shape), rtol=1e-6)
  assert 0 < (expected == 0).mean() < 1


def test_gradient_is_the_mask_times_the_scale(rng):
  x = jnp.asarray(rng.standard_normal((6, 10)), jnp.float32)
  key = jax.random.key(4)
  _, keep = _reference(0.3, x, key)
  grad = jax.grad(lambda x: _apply(0.3, x, key).sum())(x)
  np.testing.assert_allclose(grad, np.where(keep, 2**16 / round(0.7 * 2**16), 0.0), rtol=1e-6)


@pytest.mark.parametrize('rate, kept', [(0.0, True), (2**-18, True), (1 - 2**-18, False),
                                        (1.0, False)])
def test_rates_that_round_to_no_draw_keep_or_drop_everything(rate, kept):
  x = jnp.arange(1.0, 9.0)
  np.testing.assert_array_equal(_apply(rate, x, jax.random.key(0)), x if kept else 0 * x)


def test_deterministic_is_the_identity():
  x = jnp.arange(1.0, 9.0)
  np.testing.assert_array_equal(Dropout(0.5, deterministic=True).apply({}, x), x)


def test_a_traced_rate_gives_the_masks_and_scale_of_the_same_python_rate():
  """Runs trained together pass each run's rate traced (`transformer_jax.training.together`):
  against the numpy reference of the Python rate, for rates of up to three decimals (the float32
  rounding of the threshold then agrees with the Python one: the kept elements' value, 2^16 / t,
  tells t), 0 and 1 included."""
  x = jnp.ones((4, 64))
  key = jax.random.key(7)
  rates = np.arange(1001) / 1000
  traced = jax.jit(jax.vmap(lambda rate: _apply(rate, x, key)))(jnp.asarray(rates, jnp.float32))
  for rate, out in zip(rates, np.asarray(traced, np.float64)):
    if rate == 1.0:
      np.testing.assert_array_equal(out, 0.0)
      continue
    expected, _ = _reference(rate, x, key)
    np.testing.assert_allclose(out, expected, rtol=1e-6, err_msg=f'rate {rate}')
