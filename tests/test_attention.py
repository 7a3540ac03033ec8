"""Multi-head attention against an independent float64 reference (§3.2)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from conftest import tiny_config
from reference import as_numpy, multi_head_attention
from transformer_jax.attention import MultiHeadAttention, causal_mask, padding_mask


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
