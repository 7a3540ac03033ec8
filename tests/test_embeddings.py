"""Positional encodings (§3.5) and the shared embedding matrix (§3.4)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import init_params, random_tokens, tiny_config
from transformer_jax.model.embeddings import Embeddings, project, sinusoid
from transformer_jax.model.transformer import Transformer


@pytest.mark.parametrize('d_model', [512, 7])
@pytest.mark.parametrize('pos', [0, 1, 17, 300])
def test_sinusoid_equals_the_paper_formula(d_model, pos):
  table = sinusoid(301, d_model)
  for i in range(0, (d_model + 1) // 2, max(1, d_model // 16)):
    angle = pos / 10000 ** (2 * i / d_model)
    assert table[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-6)
    if 2 * i + 1 < d_model:
      assert table[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-6)


def test_learned_positions_have_their_shape_in_each_stack():
  cfg = tiny_config(position_encoding='learned', max_len=16)
  params = init_params(cfg)
  for stack in ('encoder', 'decoder'):
    assert params[stack]['position']['embedding'].shape == (16, cfg.d_model)
  assert 'position' not in init_params(tiny_config())['encoder']  # the sinusoid has no params


def test_learned_positions_are_glorot_uniform_over_the_table():
  """tensor2tensor's default initialiser for its [max_length, depth] table: U(-a, a) with
  a = sqrt(6 / (max_len + d_model)), so variance a^2 / 3 = 2 / (max_len + d_model)."""
  cfg = tiny_config(position_encoding='learned', max_len=400)
  bound = math.sqrt(6 / (400 + cfg.d_model))
  params = init_params(cfg)
  tables = [np.asarray(params[stack]['position']['embedding'], np.float64)
            for stack in ('encoder', 'decoder')]
  for table in tables:
    assert np.abs(table).max() <= bound
    assert np.abs(table).max() > 0.99 * bound  # 4800 draws reach the bound's last 1%
    assert table.var() == pytest.approx(bound**2 / 3, rel=0.06)
    assert abs(table.mean()) < 0.05 * bound
  assert not np.allclose(tables[0], tables[1])  # each stack draws its own


@pytest.mark.parametrize('decoder_start', ['zero', 'learned'])
def test_embedding_init_and_sqrt_d_model_scale(decoder_start):
  """Rows times sqrt(d_model); the padding id 0 (the decoder's start symbol) embeds to zeros
  as in tensor2tensor, or to its own row with decoder_start='learned'."""
  cfg = tiny_config(vocab_size=4000, d_model=64, decoder_start=decoder_start)
  module = Embeddings(cfg)
  tokens = jnp.array([[0, 1, 2, 3, 0, 9, 3999]])
  variables = module.init(jax.random.key(0), tokens, 'source', method='embed')
  table = np.asarray(jax.tree.leaves(variables)[0], np.float64)
  assert table.shape == (4000, 64)
  assert table.std() == pytest.approx(64**-0.5, rel=0.02)  # normal(0, d_model^-0.5)
  expected = table[np.asarray(tokens[0])] * 8.0
  if decoder_start == 'zero':
    expected[[0, 4]] = 0.0
  assert np.abs(table[0]).max() > 0  # so the zero rows above are the option's doing
  for role in ('source', 'target'):
    embedded = module.apply(variables, tokens, role, method='embed')
    np.testing.assert_allclose(embedded[0], expected, rtol=1e-6)


@pytest.mark.parametrize('decoder_start', ['zero', 'learned'])
def test_the_start_row_reaches_the_outputs_only_when_learned(rng, decoder_start):
  """With a zero start vector, the padding id's row of the shared matrix is used only as the
  pre-softmax row of the padding id: changing it changes logit column 0 alone. A learned start
  vector feeds it into every position's decoder input."""
  cfg = tiny_config(decoder_start=decoder_start)
  params = init_params(cfg)
  inputs = random_tokens(rng, (2, 5), cfg.vocab_size)  # no padding
  decoder_inputs = random_tokens(rng, (2, 4), cfg.vocab_size)
  decoder_inputs[:, 0] = 0

  def logits(shared):
    tree = {**params, 'embeddings': {'shared': shared}}
    return np.asarray(Transformer(cfg).apply({'params': tree}, inputs, decoder_inputs))

  shared = params['embeddings']['shared']
  before, after = logits(shared), logits(shared.at[0].add(rng.normal(size=cfg.d_model)))
  assert not np.allclose(before[..., 0], after[..., 0])
  changed = not np.allclose(before[..., 1:], after[..., 1:], rtol=0, atol=1e-6)
  assert changed == (decoder_start == 'learned')


@pytest.mark.slow
def test_tied_embeddings_are_one_parameter(rng):
  """Tied: one (vocab, d_model) matrix, and its gradient is the sum of the gradients that the
  source embedding, target embedding and output projection get when untied."""
  tied_cfg = tiny_config()
  tied = init_params(tied_cfg)
  assert list(tied['embeddings']) == ['shared']
  tables = [leaf for leaf in jax.tree.leaves(tied) if leaf.shape == (23, 12)]
  assert len(tables) == 1

  untied_cfg = tiny_config(share_embeddings=False)
  shared = tied['embeddings']['shared']
  untied = {**tied, 'embeddings': {r: shared for r in ('source', 'target', 'output')}}
  inputs = random_tokens(rng, (2, 5), 23)
  decoder_inputs = random_tokens(rng, (2, 4), 23)

  def loss(cfg, params):
    logits = Transformer(cfg).apply({'params': params}, inputs, decoder_inputs)
    return jnp.sum(jax.nn.log_softmax(logits)[..., 1])

  grad_tied = jax.jit(jax.grad(lambda p: loss(tied_cfg, p)))(tied)['embeddings']['shared']
  grad_untied = jax.jit(jax.grad(lambda p: loss(untied_cfg, p)))(untied)['embeddings']
  for role in ('source', 'target', 'output'):
    assert np.abs(grad_untied[role]).max() > 0  # each role really uses the matrix
  np.testing.assert_allclose(grad_tied, sum(grad_untied.values()), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16])
def test_projection_gradients_equal_the_float64_formula(dtype):
  """logits = y Wᵀ, so for an upstream gradient G: dL/dy = G W and dL/dW = Gᵀ y (summed over
  batch and time), in the dtype of each input."""
  rng = np.random.default_rng(0)
  y = rng.normal(size=(3, 5, 8))
  table = rng.normal(size=(11, 8))
  upstream = rng.normal(size=(3, 5, 11))
  logits, vjp = jax.vjp(project, jnp.asarray(y, dtype), jnp.asarray(table, dtype))
  grad_y, grad_table = vjp(jnp.asarray(upstream, jnp.float32))
  assert logits.dtype == jnp.float32
  assert grad_y.dtype == dtype and grad_table.dtype == dtype
  y, table = (np.asarray(jnp.asarray(a, dtype), np.float64) for a in (y, table))  # as rounded
  tolerance = {'rtol': 1e-5, 'atol': 1e-5} if dtype == jnp.float32 else {'rtol': 2e-2, 'atol': 5e-2}
  np.testing.assert_allclose(logits, y @ table.T, **tolerance)
  np.testing.assert_allclose(np.float64(grad_y), upstream @ table, **tolerance)
  np.testing.assert_allclose(np.float64(grad_table), np.einsum('btv,btd->vd', upstream, y),
                             **tolerance)


def test_bfloat16_embedding_gradient_accumulates_in_float32():
  """A token used 1000 times gets the sum of 1000 row gradients. Summed in bfloat16 (8-bit
  significand) the sum of 1000 × 8.0 stops growing at 2048; gathered from the float32 matrix,
  the scatter-add of the gradient sums in float32 and gives 8000 exactly."""
  cfg = tiny_config(vocab_size=50, d_model=64, dtype=jnp.bfloat16)
  module = Embeddings(cfg)
  tokens = jnp.full((4, 250), 7)
  variables = module.init(jax.random.key(0), tokens, 'source', method='embed')
  grad = jax.grad(lambda v: jnp.sum(
      module.apply(v, tokens, 'source', method='embed').astype(jnp.float32)))(variables)
  table_grad = np.asarray(jax.tree.leaves(grad)[0])
  assert table_grad.dtype == np.float32
  np.testing.assert_array_equal(table_grad[7], np.full(64, 1000 * 8.0))
  assert not table_grad[np.arange(50) != 7].any()


def test_bfloat16_projection_backward_runs_its_products_in_bfloat16():
  """The float32 logit gradient is cast to the compute dtype before the two products, so no
  product mixes float32 with bfloat16 (which would run in float32)."""
  y = jnp.ones((2, 3, 8), jnp.bfloat16)
  table = jnp.ones((11, 8), jnp.bfloat16)
  _, vjp = jax.vjp(project, y, table)
  jaxpr = jax.make_jaxpr(vjp)(jnp.ones((2, 3, 11), jnp.float32))
  dots = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == 'dot_general']
  assert len(dots) == 2
  for dot in dots:
    assert [v.aval.dtype for v in dot.invars] == [jnp.bfloat16, jnp.bfloat16]
