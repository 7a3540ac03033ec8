"""The whole Transformer against the float64 reference, masking properties, options, dtypes."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import init_params, perturbed, random_tokens, tiny_config
from reference import Reference, sinusoid
from transformer_jax.config import choices
from transformer_jax.model.transformer import Transformer


def _logits(cfg, params, inputs, decoder_inputs, seed=0):
  return np.asarray(Transformer(cfg).apply(
      {'params': params}, inputs, decoder_inputs, rngs={'dropout': jax.random.key(seed)}))


@pytest.mark.parametrize('options', [
    dict(),
    dict(norm_position='pre'),
    dict(norm_position='pre', norm_type='scale_norm', fixnorm=True),
    dict(position_encoding='learned', share_embeddings=False),
    dict(decoder_start='learned'),
    # jax.nn.dot_product_attention, the path 'cudnn' shares; it needs d_k = d_v.
    pytest.param(dict(attention_impl='xla', d_k=6, d_v=6), marks=pytest.mark.slow),
], ids=['post-norm', 'pre-norm', 'pre-norm-scalenorm-fixnorm', 'learned-untied',
        'learned-start', 'jax-attention'])
def test_logits_match_numpy_reference(rng, options):
  cfg = tiny_config(**options)
  params = perturbed(init_params(cfg), rng)
  inputs = random_tokens(rng, (2, 6), cfg.vocab_size, lengths=[6, 3])
  decoder_inputs = random_tokens(rng, (2, 5), cfg.vocab_size)
  decoder_inputs[:, 0] = 0  # targets shifted right behind PAD_ID
  got = _logits(cfg, params, inputs, decoder_inputs)
  reference = Reference(params, cfg.num_layers, pre_norm=options.get('norm_position') == 'pre',
                        norm=cfg.norm_type, fixnorm=cfg.fixnorm,
                        decoder_start=cfg.decoder_start)
  for b in range(2):
    np.testing.assert_allclose(got[b], reference(inputs[b], decoder_inputs[b]),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('norm_position', ['post', 'pre'])
def test_dropout_sites_are_those_of_section_5_4(rng, norm_position):
  """§5.4: dropout on the output of each sub-layer before it is added to the sub-layer input
  (and normalised), and on the sums of embeddings and positional encodings; the options'
  dropouts on the attention weights, the FFN's inner activations and whole heads. Every
  dropout call is recorded, and residual dropout is replaced by a product with c: each
  sub-layer ends in a linear map (W^O, or W2 and b2), so the model must then equal the
  dropout-free one with those maps times c, which holds only if exactly the sub-layers'
  outputs are scaled."""
  rates = dict(dropout_rate=0.1, attention_dropout_rate=0.2, relu_dropout_rate=0.3,
               drophead_rate=0.4)
  cfg = tiny_config(**rates, norm_position=norm_position, deterministic=False)
  params = perturbed(init_params(cfg), rng)
  inputs = random_tokens(rng, (2, 6), cfg.vocab_size, lengths=[6, 3])
  decoder_inputs = random_tokens(rng, (2, 5), cfg.vocab_size)
  decoder_inputs[:, 0] = 0  # the start symbol
  c, calls = 0.5, []

  def interceptor(next_fun, args, kwargs, context):
    module = context.module
    if not isinstance(module, nn.Dropout) or context.method_name != '__call__':
      return next_fun(*args, **kwargs)
    x = args[0]
    embedding_sum = len(module.path) == 2  # ('encoder' | 'decoder', 'Dropout_k')
    calls.append((module.rate, module.path[0], embedding_sum, np.asarray(x, np.float64)))
    return c * x if module.rate == cfg.dropout_rate and not embedding_sum else x

  with nn.intercept_methods(interceptor):
    got = _logits(cfg, params, inputs, decoder_inputs)
  scaled = jax.tree_util.tree_map_with_path(
      lambda path, p: c * p if {'out', 'outer'} & {k.key for k in path} else p, params)
  np.testing.assert_allclose(got, _logits(cfg.replace(deterministic=True), scaled, inputs,
                                          decoder_inputs), rtol=1e-5, atol=1e-5)

  n, d = cfg.num_layers, cfg.d_model
  by_rate = {rate: [call for call in calls if call[0] == rate] for rate in rates.values()}
  assert len(calls) == sum(map(len, by_rate.values()))  # no dropout at another rate
  # Residual dropout: the two embedding sums, then 2 sub-layers per encoder layer, 3 per
  # decoder layer, each on a (b, length, d_model) output.
  residual = by_rate[cfg.dropout_rate]
  assert [(stack, first) for _, stack, first, _ in residual if first] == [
      ('encoder', True), ('decoder', True)]
  assert sum(stack == 'encoder' for _, stack, _, _ in residual) == 1 + 2 * n
  assert sum(stack == 'decoder' for _, stack, _, _ in residual) == 1 + 3 * n
  assert all(x.shape[-1] == d for *_, x in residual)
  table = np.asarray(params['embeddings']['shared'], np.float64)
  for tokens, (_, _, _, x) in zip((inputs, decoder_inputs), [r for r in residual if r[2]]):
    embedded = np.where((tokens != 0)[..., None], d**0.5 * table[tokens], 0.0)
    np.testing.assert_allclose(x, embedded + sinusoid(tokens.shape[1], d), rtol=1e-5,
                               atol=1e-5)
  # Options: attention weights (rows sum to 1) in all 3N attentions, the FFN's inner
  # activations (after the ReLU) in its 2N layers, whole heads (b, q, h, d_v) in every attention.
  weights = by_rate[cfg.attention_dropout_rate]
  assert len(weights) == 3 * n and all(x.shape[1] == cfg.num_heads for *_, x in weights)
  for *_, x in weights:
    np.testing.assert_allclose(x.sum(-1), 1.0, rtol=1e-5)
  inner = by_rate[cfg.relu_dropout_rate]
  assert len(inner) == 2 * n and all(x.shape[-1] == cfg.d_ff and x.min() >= 0 for *_, x in inner)
  heads = by_rate[cfg.drophead_rate]
  assert len(heads) == 3 * n
  assert all(x.shape[-2:] == (cfg.num_heads, cfg.d_v) for *_, x in heads)


@pytest.mark.slow
def test_future_target_tokens_do_not_influence_the_past(rng):
  cfg = tiny_config()
  params = init_params(cfg)
  inputs = random_tokens(rng, (1, 5), cfg.vocab_size)
  decoder_inputs = random_tokens(rng, (1, 6), cfg.vocab_size)
  changed = decoder_inputs.copy()
  changed[0, 4] = (changed[0, 4] % (cfg.vocab_size - 1)) + 1  # a different real token
  before, after = _logits(cfg, params, inputs, decoder_inputs), _logits(cfg, params, inputs,
                                                                         changed)
  np.testing.assert_array_equal(before[:, :4], after[:, :4])
  assert not np.allclose(before[:, 4:], after[:, 4:])


def test_padded_source_tokens_do_not_influence_anything_real(rng):
  """Whatever token sits under a padding mask, the encoder's real positions and every decoder
  output stay the same."""
  cfg = tiny_config()
  params = init_params(cfg)
  module = Transformer(cfg)
  inputs = random_tokens(rng, (1, 6), cfg.vocab_size)
  source_mask = np.array([[True, True, True, True, False, False]])
  changed = inputs.copy()
  changed[0, 4:] = (changed[0, 4:] % (cfg.vocab_size - 1)) + 1
  decoder_inputs = random_tokens(rng, (1, 4), cfg.vocab_size)

  def run(tokens):
    encoded = module.apply({'params': params}, tokens, source_mask, method='encode')
    logits = module.apply({'params': params}, encoded, source_mask, decoder_inputs,
                         method='decode')
    return np.asarray(encoded), np.asarray(logits)

  (enc_a, logits_a), (enc_b, logits_b) = run(inputs), run(changed)
  np.testing.assert_allclose(enc_a[:, :4], enc_b[:, :4], rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(logits_a, logits_b, rtol=1e-6, atol=1e-6)
  assert not np.allclose(enc_a[:, 4:], enc_b[:, 4:])  # the masked positions did change


def test_extra_padding_changes_nothing(rng):
  cfg = tiny_config()
  params = init_params(cfg)
  inputs = random_tokens(rng, (1, 4), cfg.vocab_size)
  decoder_inputs = random_tokens(rng, (1, 5), cfg.vocab_size)
  padded_inputs = np.pad(inputs, ((0, 0), (0, 3)))
  padded_targets = np.pad(decoder_inputs, ((0, 0), (0, 2)))
  short = _logits(cfg, params, inputs, decoder_inputs)
  long = _logits(cfg, params, padded_inputs, padded_targets)
  np.testing.assert_allclose(short, long[:, :5], rtol=1e-5, atol=1e-5)


def test_call_equals_encode_then_decode(rng):
  cfg = tiny_config()
  params = init_params(cfg)
  module = Transformer(cfg)
  inputs = random_tokens(rng, (2, 5), cfg.vocab_size, lengths=[5, 2])
  decoder_inputs = random_tokens(rng, (2, 3), cfg.vocab_size)
  source_mask = inputs != 0
  encoded = module.apply({'params': params}, inputs, source_mask, method='encode')
  separate = module.apply({'params': params}, encoded, source_mask, decoder_inputs,
                         method='decode')
  np.testing.assert_array_equal(separate, _logits(cfg, params, inputs, decoder_inputs))


@pytest.mark.slow
def test_dropout_only_in_training(rng):
  cfg = tiny_config(dropout_rate=0.3, attention_dropout_rate=0.2, relu_dropout_rate=0.2)
  params = init_params(cfg)
  inputs = random_tokens(rng, (2, 5), cfg.vocab_size)
  decoder_inputs = random_tokens(rng, (2, 4), cfg.vocab_size)
  eval_a = _logits(cfg, params, inputs, decoder_inputs, seed=1)
  eval_b = _logits(cfg, params, inputs, decoder_inputs, seed=2)
  np.testing.assert_array_equal(eval_a, eval_b)
  np.testing.assert_allclose(eval_a, _logits(cfg.replace(dropout_rate=0.0), params, inputs,
                                             decoder_inputs), rtol=1e-6)
  train = cfg.replace(deterministic=False)
  train_a = _logits(train, params, inputs, decoder_inputs, seed=1)
  np.testing.assert_array_equal(train_a, _logits(train, params, inputs, decoder_inputs, seed=1))
  assert not np.allclose(train_a, _logits(train, params, inputs, decoder_inputs, seed=2))


@pytest.mark.slow
def test_layerdrop_skips_whole_layers(rng):
  """Each training forward pass equals the reference with some subset of layers removed, and
  several subsets occur across dropout keys."""
  cfg = tiny_config(layerdrop_rate=0.5, deterministic=False)
  params = init_params(cfg)
  inputs = random_tokens(rng, (1, 5), cfg.vocab_size)
  decoder_inputs = random_tokens(rng, (1, 4), cfg.vocab_size)
  reference = Reference(params, cfg.num_layers)
  layer_sets = [(), (0,), (1,), (0, 1)]
  variants = {(enc, dec): reference(inputs[0], decoder_inputs[0], enc, dec)
              for enc in layer_sets for dec in layer_sets}
  seen = set()
  for seed in range(24):
    got = _logits(cfg, params, inputs, decoder_inputs, seed)[0]
    match = [k for k, want in variants.items() if np.allclose(got, want, atol=1e-4)]
    assert match, f'seed {seed}: output is not the model with a subset of layers skipped'
    seen.add(match[0])
  assert len(seen) >= 4


@pytest.mark.slow
def test_bfloat16_compute_keeps_float32_params(rng):
  cfg = tiny_config(dtype=jnp.bfloat16)
  params = init_params(cfg)
  assert {leaf.dtype for leaf in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}
  inputs = random_tokens(rng, (2, 5), cfg.vocab_size)
  decoder_inputs = random_tokens(rng, (2, 4), cfg.vocab_size)
  low = _logits(cfg, params, inputs, decoder_inputs)
  full = _logits(cfg.replace(dtype=jnp.float32), params, inputs, decoder_inputs)
  assert low.dtype == np.float32
  # bfloat16 keeps 8 significant bits (a relative step of 2^-8); at logits of up to about 2.4
  # here, 0.05 is about five such steps at the largest logit (0.027 measured).
  np.testing.assert_allclose(low, full, atol=0.05)
  assert not np.array_equal(low, full)  # the computation really ran in bfloat16


def test_every_parameter_has_logical_axis_names():
  cfg = tiny_config(position_encoding='learned', share_embeddings=False)
  tokens = jnp.ones((1, 4), jnp.int32)
  boxed = jax.eval_shape(Transformer(cfg).init, jax.random.key(0), tokens, tokens)['params']
  leaves = jax.tree.leaves(boxed, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))
  named = set()
  for leaf in leaves:
    assert isinstance(leaf, nn.LogicallyPartitioned), leaf
    assert len(leaf.names) == len(leaf.value.shape)
    named |= set(leaf.names)
  # The axes the config's rules may name (checked by checks.validate): the parameters' and
  # the batch's, no other.
  assert named | {'batch'} == set(choices.LOGICAL_AXES)


def test_learned_positions_reject_sequences_longer_than_the_table():
  cfg = tiny_config(position_encoding='learned', max_len=4)
  tokens = jnp.ones((1, 5), jnp.int32)
  with pytest.raises(ValueError, match='max_len'):
    Transformer(cfg).init(jax.random.key(0), tokens, tokens)
