"""Multi-head attention against an independent float64 reference (§3.2)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import tiny_config
from reference import as_numpy, multi_head_attention, softmax
from transformer_jax.model.attention import (MultiHeadAttention, attention_over_blocks, causal_mask,
                                       padding_mask)


def _init(cfg, xq, xkv, mask):
  module = MultiHeadAttention(cfg)
  params = nn.unbox(module.init(jax.random.key(0), xq, xkv, mask)['params'])
  return module, params


def test_matches_numpy_with_padding_and_causal_masks(rng):
  cfg = tiny_config()  # h=3, d_k=5, d_v=7, d_model=12
  b, q, k = 2, 4, 6
  xq = rng.normal(size=(b, q, cfg.d_model)).astype(np.float32)
  xkv = rng.normal(size=(b, k, cfg.d_model)).astype(np.float32)
  valid = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], bool)
  future = np.triu(np.ones((q, k), bool), k=1)  # keys 'after' each query, as a causal mask
  mask = padding_mask(jnp.asarray(valid)) & ~jnp.asarray(future)[None, None]
  module, params = _init(cfg, xq, xkv, mask)
  got = module.apply({'params': params}, xq, xkv, mask)

  p = as_numpy(params)
  for i in range(b):
    numpy_mask = valid[i][None, :] & ~future
    want = multi_head_attention(p, xq[i].astype(np.float64), xkv[i].astype(np.float64),
                                numpy_mask)
    np.testing.assert_allclose(got[i], want, rtol=1e-5, atol=1e-5)


def test_projection_shapes_follow_the_paper():
  cfg = tiny_config()
  x = jnp.zeros((1, 3, cfg.d_model))
  _, params = _init(cfg, x, x, padding_mask(jnp.ones((1, 3), bool)))
  # W^Q, W^K: d_model x h·d_k; W^V: d_model x h·d_v; W^O: h·d_v x d_model; no biases.
  assert params['query']['kernel'].reshape(cfg.d_model, -1).shape == (12, 3 * 5)
  assert params['key']['kernel'].reshape(cfg.d_model, -1).shape == (12, 3 * 5)
  assert params['value']['kernel'].reshape(cfg.d_model, -1).shape == (12, 3 * 7)
  assert params['out']['kernel'].reshape(-1, cfg.d_model).shape == (3 * 7, 12)
  assert {name for layer in params.values() for name in layer} == {'kernel'}


def test_attention_bias_matches_numpy(rng):
  """With attention_bias, Q, K, V and the output gain biases (h, d) and (d_model,); set to
  random values here (they start at zero) so that each one's place in the formula is checked."""
  cfg = tiny_config(attention_bias=True)
  b, q, k = 2, 4, 6
  xq = rng.normal(size=(b, q, cfg.d_model)).astype(np.float32)
  xkv = rng.normal(size=(b, k, cfg.d_model)).astype(np.float32)
  mask = padding_mask(jnp.ones((b, k), bool))
  module, params = _init(cfg, xq, xkv, mask)
  assert {name: params[name]['bias'].shape for name in params} == {
      'query': (3, 5), 'key': (3, 5), 'value': (3, 7), 'out': (12,)}
  assert all(not np.any(params[name]['bias']) for name in params)
  for name in params:
    params[name]['bias'] = rng.normal(size=params[name]['bias'].shape).astype(np.float32)
  got = module.apply({'params': params}, xq, xkv, mask)
  p = as_numpy(params)
  for i in range(b):
    want = multi_head_attention(p, xq[i].astype(np.float64), xkv[i].astype(np.float64),
                                np.ones((q, k), bool))
    np.testing.assert_allclose(got[i], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('qkv_init, encoder_decoder, widths', [
    # The width of the matrix each of W^Q, W^K, W^V is drawn from: its own h·d_k or h·d_v, or
    # tensor2tensor v1's fused projection (self-attention: one 2·h·d_k + h·d_v matrix;
    # encoder-decoder attention: W^Q alone, then one h·d_k + h·d_v matrix for K and V).
    ('separate', False, {'query': 32, 'key': 32, 'value': 48}),
    ('fused', False, {'query': 112, 'key': 112, 'value': 112}),
    ('fused', True, {'query': 32, 'key': 80, 'value': 80}),
])
def test_qkv_init_is_glorot_uniform_over_the_fused_width(qkv_init, encoder_decoder, widths):
  """Each kernel is U(-a, a) with a = sqrt(6 / (d_model + width)): every value within the
  bound, the largest close to it, the variance a^2 / 3. W^O stays Glorot on its own shape."""
  cfg = tiny_config(d_model=48, num_heads=4, d_k=8, d_v=12, qkv_init=qkv_init)
  x = jnp.zeros((1, 3, cfg.d_model))
  module = MultiHeadAttention(cfg, encoder_decoder=encoder_decoder)
  params = nn.unbox(module.init(jax.random.key(1), x, x, padding_mask(jnp.ones((1, 3), bool)))
                    ['params'])
  widths = {**widths, 'out': None}
  for name, width in widths.items():
    kernel = np.asarray(params[name]['kernel'], np.float64)
    fan_in, fan_out = 48, kernel.size // 48  # W^O: h·d_v = 48 = d_model
    bound = np.sqrt(6.0 / (fan_in + (fan_out if width is None else width)))
    assert np.abs(kernel).max() <= bound, name
    assert np.abs(kernel).max() > 0.97 * bound, name
    np.testing.assert_allclose(kernel.var(), bound**2 / 3, rtol=0.1, err_msg=name)


def test_fully_masked_row_is_finite_and_has_finite_gradients(rng):
  cfg = tiny_config()
  x = rng.normal(size=(2, 3, cfg.d_model)).astype(np.float32)
  mask = padding_mask(jnp.array([[False] * 3, [True] * 3]))  # example 0 is all padding
  module, params = _init(cfg, x, x, mask)

  def loss(params):
    return jnp.sum(module.apply({'params': params}, x, x, mask) ** 2)

  out = module.apply({'params': params}, x, x, mask)
  grads = jax.grad(loss)(params)
  assert np.isfinite(np.asarray(out)).all()
  assert all(np.isfinite(g).all() for g in jax.tree.leaves(grads))


@pytest.mark.slow
def test_jax_attention_equals_eq_1_written_out_and_leaves_the_pictures_to_it(rng):
  """attention_impl='xla' (jax.nn.dot_product_attention, as 'cudnn' calls it): the outputs and
  gradients of eq. (1) written out, an all-padding sequence included; applied to collect the
  attention weights, it computes them as written out."""
  cfg = tiny_config(d_k=6, d_v=6)
  x = rng.normal(size=(3, 5, cfg.d_model)).astype(np.float32)
  valid = jnp.array([[True] * 5, [True] * 3 + [False] * 2, [False] * 5])
  mask = padding_mask(valid) & causal_mask(5)
  explicit, params = _init(cfg, x, x, mask)
  fused = MultiHeadAttention(cfg.replace(attention_impl='xla'))

  def loss(module, params):
    return jnp.sum(jnp.sin(module.apply({'params': params}, x, x, mask)))

  np.testing.assert_allclose(fused.apply({'params': params}, x, x, mask),
                             explicit.apply({'params': params}, x, x, mask), rtol=1e-5, atol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
               jax.grad(loss, argnums=1)(fused, params),
               jax.grad(loss, argnums=1)(explicit, params))
  _, sown = fused.apply({'params': params}, x, x, mask, mutable=['intermediates'])
  _, want = explicit.apply({'params': params}, x, x, mask, mutable=['intermediates'])
  np.testing.assert_array_equal(sown['intermediates']['attention_weights'][0],
                                want['intermediates']['attention_weights'][0])


def test_causal_mask_allows_only_the_past():
  mask = np.asarray(causal_mask(4))[0, 0]
  for i in range(4):
    for j in range(4):
      assert mask[i, j] == (j <= i)


def test_drophead_drops_whole_heads(rng):
  """With DropHead each example's output is the sum of a subset of the heads' contributions
  (h_i W_i^O), scaled by 1/(1-p), and different subsets occur."""
  cfg = tiny_config(drophead_rate=0.5, deterministic=False)
  b, n = 64, 3
  x = rng.normal(size=(b, n, cfg.d_model)).astype(np.float32)
  mask = padding_mask(jnp.ones((b, n), bool))
  module, params = _init(cfg, x, x, mask)
  got = np.asarray(module.apply({'params': params}, x, x, mask,
                                rngs={'dropout': jax.random.key(3)}))

  p = as_numpy(params)
  seen = set()
  for i in range(b):
    per_head = []
    for h in range(cfg.num_heads):  # contribution of head h alone: zero the other W^O rows
      single = {**p, 'out': {'kernel': np.where(np.arange(cfg.num_heads)[:, None, None] == h,
                                                p['out']['kernel'], 0.0)}}
      per_head.append(multi_head_attention(single, x[i].astype(np.float64),
                                           x[i].astype(np.float64), np.ones((n, n), bool)))
    matches = [s for s in range(2**cfg.num_heads)
               if np.allclose(got[i], 2.0 * sum(per_head[h] for h in range(cfg.num_heads)
                                                if s >> h & 1), atol=1e-4)]
    assert matches, f'example {i} is not a scaled subset of heads'
    seen.add(matches[0])
  assert len(seen) > 2


def test_attention_over_blocks_matches_numpy(rng):
  """Keys and values in blocks of positions (the decoding cache's layout, blocks of unequal
  size) give eq. (1) over all their positions: one softmax, float64 reference."""
  n, q, h, d_k, d_v, sizes = 2, 3, 4, 5, 6, (4, 4, 2)
  query = rng.normal(size=(n, q, h, d_k))
  keys = [rng.normal(size=(n, h, d_k, k)) for k in sizes]
  values = [rng.normal(size=(n, h, k, d_v)) for k in sizes]
  mask = rng.random((n, 1, q, sum(sizes))) < 0.7
  mask[..., 0] = True  # every query has a legal key
  heads, weights = attention_over_blocks(
      jnp.asarray(query, jnp.float32), [jnp.asarray(k, jnp.float32) for k in keys],
      [jnp.asarray(v, jnp.float32) for v in values], jnp.asarray(mask))

  key, value = np.concatenate(keys, -1), np.concatenate(values, 2)  # (n, h, d_k | k, ...)
  scores = np.einsum('nqhd,nhdk->nhqk', query, key) / np.sqrt(d_k)
  expected_weights = softmax(np.where(mask, scores, -np.inf))
  expected = np.einsum('nhqk,nhkd->nqhd', expected_weights, value)
  np.testing.assert_allclose(weights, expected_weights, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(heads, expected, rtol=1e-4, atol=1e-5)


def test_blocks_in_bfloat16_round_once_like_one_block(rng):
  """In bfloat16 the blocks' weighted values are summed in float32 and rounded once, so the
  cache's split into blocks does not change the result: it equals attention over the same
  positions as one block, element for element (rounding each block's share to bfloat16 before
  summing changed about half of them)."""
  n, q, h, d, sizes = 8, 1, 4, 32, (40, 24, 8)
  query = jnp.asarray(rng.normal(size=(n, q, h, d)), jnp.bfloat16)
  keys = [jnp.asarray(rng.normal(size=(n, h, d, k)), jnp.bfloat16) for k in sizes]
  values = [jnp.asarray(rng.normal(size=(n, h, k, d)), jnp.bfloat16) for k in sizes]
  mask = jnp.ones((1, 1, q, sum(sizes)), bool)
  blocks, _ = attention_over_blocks(query, keys, values, mask)
  one, _ = attention_over_blocks(query, [jnp.concatenate(keys, -1)],
                                 [jnp.concatenate(values, 2)], mask)
  assert blocks.dtype == jnp.bfloat16
  np.testing.assert_array_equal(np.asarray(blocks, np.float32), np.asarray(one, np.float32))
