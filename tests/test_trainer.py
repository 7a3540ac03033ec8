"""The sharded model and its train step: Adam on the loss per target token, the same update on
any mesh, gradient accumulation, clear errors."""

import functools
import json

import jax
import numpy as np
import pytest

from conftest import assert_close_to_scale, random_tokens, train_config
from reference import adam_updates
from transformer_jax.config import checks, fields, platforms
from transformer_jax.model import loss, sharding
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.training import saved_config
from transformer_jax.training.trainer import Trainer


def _batch(sequences: int, length: int, vocab: int, seed: int = 0) -> dict:
  """Sequences of different lengths, and two empty ones, so per-token normalisation matters."""
  rng = np.random.default_rng(seed)
  lengths = rng.integers(1, length + 1, size=sequences)
  lengths[-2:] = 0
  inputs = random_tokens(rng, (sequences, length), vocab, lengths)
  targets = random_tokens(rng, (sequences, length), vocab, lengths[::-1])
  decoder_inputs = np.pad(targets[:, :-1], ((0, 0), (1, 0)))
  return {'inputs': inputs, 'targets': targets, 'decoder_inputs': decoder_inputs}


def _train(config, devices, batches):
  model = ShardedModel(config, sharding.make_mesh(config, devices))
  trainer = Trainer(model)
  state = trainer.init_state()
  losses = []
  for batch in batches:
    state, metrics = trainer.train_step(state, model.put_batch(batch))
    losses.append(float(loss.per_token(metrics)['loss']))
  return losses, jax.tree.map(np.asarray, state.params), state


@functools.cache
def _one_device(*overrides: tuple[str, float]) -> tuple:
  """The losses and parameters of `_train` on the first device alone over the two batches of
  seeds 0 and 1, computed once for every test that compares a mesh with it."""
  batches = [_batch(16, 12, 64, seed) for seed in range(2)]
  losses, params, _ = _train(train_config(**dict(overrides), **{'parallel.data': 1}),
                             jax.devices()[:1], batches)
  return losses, params


@pytest.mark.slow
def test_a_step_is_adam_on_the_loss_per_target_token():
  # Two steps on one device without dropout, against float64 Adam (§5.3) on the gradient of the
  # batch's summed loss over its number of target tokens. The batches' token counts differ, so
  # a gradient normalised otherwise (or not at all) changes the second update and the norm.
  config = train_config(**{'model.dropout_rate': 0.0, 'parallel.data': 1})
  model = ShardedModel(config, sharding.make_mesh(config, jax.devices()[:1]))
  trainer = Trainer(model)
  state = trainer.init_state()
  batches = [_batch(16, 12, 64, seed) for seed in range(2)]
  assert len({np.count_nonzero(b['targets']) for b in batches}) == 2

  def loss_per_token(params, batch):
    logits = model.module.apply({'params': params}, batch['inputs'], batch['decoder_inputs'])
    sums = loss.loss_sums(logits, batch['targets'], config.train.label_smoothing)
    return sums['loss'] / sums['tokens']

  want = jax.tree.map(lambda p: np.asarray(p, np.float64), state.params)
  gradients, value_and_grad = [], jax.jit(jax.value_and_grad(loss_per_token))
  for step, batch in enumerate(batches, start=1):
    value, grads = value_and_grad(jax.tree.map(lambda p: p.astype(np.float32), want), batch)
    gradients.append(jax.tree.map(lambda g: np.asarray(g, np.float64), grads))
    rates = [32**-0.5 * min(t**-0.5, t * 10**-1.5) for t in range(1, step + 1)]  # eq. 3
    want = jax.tree.map(lambda p, *g: p + adam_updates(g, rates)[-1], want, *gradients)
    state, metrics = trainer.train_step(state, model.put_batch(batch))
    np.testing.assert_allclose(float(loss.per_token(metrics)['loss']), float(value), rtol=1e-5)
    norm = np.sqrt(sum(np.sum(g**2) for g in jax.tree.leaves(gradients[-1])))
    np.testing.assert_allclose(float(metrics['grad_norm']), norm, rtol=1e-4)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6,
                                                         err_msg=f'step {step}'),
                 jax.tree.map(np.asarray, state.params), want)


@pytest.mark.slow
@pytest.mark.parametrize('impl', ['rbg', 'unsafe_rbg'])
def test_another_dropout_generator_changes_only_the_masks(impl):
  """train.dropout_prng_impl: without dropout the steps are threefry's exactly (the parameters
  are drawn with threefry either way); with it, other masks, steps apart and runs alike.
  Threefry's runs are `_one_device`'s (the default generator), made once for both."""
  batches = [_batch(16, 12, 64, seed) for seed in range(2)]

  def run(rate):
    config = train_config(**{'model.dropout_rate': rate, 'parallel.data': 1,
                             'train.dropout_prng_impl': impl})
    return _train(config, jax.devices()[:1], batches)

  losses, params, state = run(0.0)
  threefry_losses, threefry_params = _one_device(('model.dropout_rate', 0.0))
  assert losses == threefry_losses
  jax.tree.map(np.testing.assert_array_equal, params, threefry_params)
  assert state.dropout_key.shape == (4,)  # the generator's own key data (threefry's: 2 words)
  dropped, _, _ = run(0.3)
  assert dropped == run(0.3)[0]  # reproducible from the seed
  assert dropped[0] != losses[0] and dropped != _one_device(('model.dropout_rate', 0.3))[0]


# (2, 2, 2) uses every mesh axis at once; the fast tier runs only it.
@pytest.mark.parametrize('data,fsdp,tensor', [
    pytest.param(*shape, marks=pytest.mark.slow)
    for shape in ((8, 1, 1), (4, 1, 2), (2, 1, 4), (1, 8, 1))] + [(2, 2, 2)])
def test_any_mesh_gives_the_single_device_update(data, fsdp, tensor):
  # Every dropout site on: the masks must not depend on how the arrays are split.
  overrides = {'model.dropout_rate': 0.1, 'model.attention_dropout_rate': 0.1,
               'model.relu_dropout_rate': 0.1, 'model.drophead_rate': 0.1}
  batches = [_batch(16, 12, 64, seed) for seed in range(2)]
  one_losses, one_params = _one_device(*overrides.items())
  config = train_config(**overrides, **{'parallel.data': data, 'parallel.fsdp': fsdp,
                                        'parallel.tensor': tensor})
  losses, params, state = _train(config, jax.devices(), batches)
  np.testing.assert_allclose(losses, one_losses, rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), params,
               one_params)
  # The parameters really are split as the rules say.
  kernel = state.params['decoder']['layer_0']['ffn']['inner']['kernel']  # (embed, mlp)
  assert kernel.sharding.shard_shape(kernel.shape) == (32 // fsdp, 64 // tensor)
  mu = state.opt_state[0].mu['decoder']['layer_0']['ffn']['inner']['kernel']
  assert mu.sharding == kernel.sharding


@pytest.mark.slow
def test_fsdp_splits_the_step_and_gathers_parameters():
  # Pure FSDP over 8 devices: each device computes the layers for its eighth of the sequences, so a
  # step's FLOPs per device (XLA's cost analysis of the compiled step) are close to an eighth of one
  # device's. When the activations' sequences were left for XLA to place, it gathered them onto
  # every device and computed parts of each layer redundantly: 1.31 times an eighth.
  def flops(config, devices):
    model = ShardedModel(config, sharding.make_mesh(config, devices))
    trainer = Trainer(model)
    compiled = trainer.train_step.lower(trainer.run_abstract_state,
                                        model.put_batch(_batch(16, 12, 64))).compile()
    return compiled.cost_analysis()['flops']

  one = flops(train_config(**{'parallel.data': 1}), jax.devices()[:1])
  fsdp = flops(train_config(**{'parallel.data': 1, 'parallel.fsdp': 8}), jax.devices())
  assert fsdp < 1.1 * one / 8


@pytest.mark.slow
def test_the_fused_loss_gives_the_unfused_update():
  # train.loss_chunk 5 over targets of 12 positions (the last chunk padded), on a mesh that
  # splits sequences, the embedding width and the vocabulary, with dropout: the same masks, losses
  # and parameters as the whole logits on one device.
  overrides = {'model.dropout_rate': 0.1, 'model.attention_dropout_rate': 0.1}
  batches = [_batch(16, 12, 64, seed) for seed in range(2)]
  want_losses, want_params = _one_device(*overrides.items())
  config = train_config(**overrides, **{'train.loss_chunk': 5, 'parallel.data': 2,
                                        'parallel.fsdp': 2, 'parallel.tensor': 2})
  losses, params, _ = _train(config, jax.devices(), batches)
  np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), params,
               want_params)


@pytest.mark.slow
def test_evaluation_with_the_fused_loss_gives_the_whole_logits_sums():
  # train.loss_chunk 5 over 12 target positions (the last chunk padded), sequences split over two
  # devices: the sums of the whole logits, at no more FLOPs (the fused loss's gradient half,
  # unused in evaluation, is not computed).
  batch = _batch(16, 12, 64)
  sums, flops = {}, {}
  for chunk in (0, 5):
    config = train_config(**{'train.loss_chunk': chunk, 'parallel.data': 2})
    model = ShardedModel(config, sharding.make_mesh(config, jax.devices()[:2]))
    params = Trainer(model).init_state().params
    sums[chunk] = {name: float(value)
                   for name, value in model.eval_step(params, model.put_batch(batch)).items()}
    flops[chunk] = model.eval_step.lower(model.abstract_params,
                                         model.put_batch(batch)).compile().cost_analysis()['flops']
  assert sums[5].keys() == sums[0].keys() and sums[0]['tokens'] > 0
  for name in sums[0]:
    np.testing.assert_allclose(sums[5][name], sums[0][name], rtol=1e-5)
  assert flops[5] <= flops[0]


@pytest.mark.slow
@pytest.mark.parametrize('accumulate', [1, 2])
def test_k_steps_in_one_call_equal_k_single_steps(accumulate):
  # train.steps_per_call: three steps as one compiled call (batches stacked) on a mesh that
  # splits sequences, the embedding width and the vocabulary, with every dropout site on: each
  # step's metrics, and the parameters, optimizer state, step and dropout key after them, are
  # those of three calls of one step.
  overrides = {'model.dropout_rate': 0.1, 'model.attention_dropout_rate': 0.1,
               'model.relu_dropout_rate': 0.1, 'train.grad_accum_steps': accumulate,
               'parallel.data': 2, 'parallel.fsdp': 2, 'parallel.tensor': 2}
  config = train_config(**overrides)
  model = ShardedModel(config, sharding.make_mesh(config, jax.devices()))
  trainer = Trainer(model)
  batches = [_batch(16, 12, 64, seed) for seed in range(3)]
  single, single_metrics = trainer.init_state(), []
  for batch in batches:
    single, metrics = trainer.train_step(single, model.put_batch(batch))
    single_metrics.append(jax.device_get(metrics))
  called, metrics = trainer.train_steps(trainer.init_state(), model.put_batches(batches))
  metrics = jax.device_get(metrics)
  assert set(metrics) == set(single_metrics[0])
  for name, values in metrics.items():
    assert values.shape == (3,)
    np.testing.assert_allclose(values, [m[name] for m in single_metrics], rtol=1e-5,
                               err_msg=name)
  assert len({float(m['loss']) for m in single_metrics}) == 3  # three different steps
  assert int(called.step) == int(single.step) == 3
  np.testing.assert_array_equal(called.dropout_key, single.dropout_key)
  jax.tree.map(assert_close_to_scale, jax.device_get((called.params, called.opt_state)),
               jax.device_get((single.params, single.opt_state)))
  kernel = called.params['decoder']['layer_0']['ffn']['inner']['kernel']
  assert kernel.sharding == single.params['decoder']['layer_0']['ffn']['inner']['kernel'].sharding


@pytest.mark.slow
def test_gradient_accumulation_equals_one_step_on_the_whole_batch():
  # Without dropout: micro-batches draw their own dropout masks.
  batches = [_batch(16, 12, 64, seed) for seed in range(2)]
  no_dropout = {'model.dropout_rate': 0.0, 'parallel.data': 2}
  _, whole, _ = _train(train_config(**no_dropout), jax.devices()[:2], batches)
  _, accumulated, state = _train(train_config(**no_dropout, **{'train.grad_accum_steps': 4}),
                                 jax.devices()[:2], batches)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
               accumulated, whole)
  assert int(state.step) == 2


@pytest.mark.slow
def test_learning_rate_and_token_count_are_reported():
  batch = _batch(16, 12, 64)
  config = train_config()
  model = ShardedModel(config, sharding.make_mesh(config, jax.devices()[:1]))
  trainer = Trainer(model)
  state = trainer.init_state()
  _, metrics = trainer.train_step(state, model.put_batch(batch))
  assert float(metrics['tokens']) == np.count_nonzero(batch['targets'])
  np.testing.assert_allclose(float(metrics['learning_rate']), 32**-0.5 * 1 * 10**-1.5, rtol=1e-6)


def test_mesh_must_use_every_device():
  config = train_config(**{'parallel.data': 3})
  with pytest.raises(ValueError, match='needs 3 devices, but 8 are present'):
    sharding.make_mesh(config)
  config = train_config(**{'parallel.data': -1, 'parallel.tensor': 3})
  with pytest.raises(ValueError, match='cannot be split into groups of 3'):
    sharding.make_mesh(config)
  config = train_config(**{'parallel.data': -1, 'parallel.tensor': 2})
  assert dict(sharding.make_mesh(config).shape) == {'data': 4, 'fsdp': 1, 'tensor': 2}


def test_the_mesh_axis_once_named_model_is_refused_by_its_old_name_naming_tensor(tmp_path):
  config = train_config()
  with pytest.raises(ValueError, match='config.parallel.model was renamed config.parallel.tensor'):
    fields.overridden(config, ['parallel.model=2'])  # a command line's or a sweep's override
  with pytest.raises(AttributeError) as refused:
    config.parallel.model = 2  # in a config file
  assert fields.renamed_note(str(refused.value)).startswith(
      'config.parallel.model was renamed config.parallel.tensor: ')
  config = train_config()
  config.parallel.axis_rules = (('batch', 'data'), ('mlp', 'model'))
  with pytest.raises(ValueError, match="mesh axis 'model' was renamed 'tensor'"):
    checks.validate(config)
  # A workdir saved under the old names reads, and resumes, under the new ones.
  saved = json.loads(platforms.resolved(train_config()).to_json_best_effort())
  saved['parallel']['model'] = saved['parallel'].pop('tensor')
  saved['parallel']['axis_rules'] = [[logical, 'model' if axes == 'tensor' else axes]
                                     for logical, axes in saved['parallel']['axis_rules']]
  (tmp_path / saved_config.CONFIG_FILENAME).write_text(json.dumps(saved))
  config = saved_config.load_config(str(tmp_path))
  assert fields.flatten(config) == fields.flatten(platforms.resolved(train_config()))


def test_a_parameter_that_does_not_split_is_named():
  config = train_config(**{'parallel.data': 1, 'parallel.tensor': 8, 'model.d_ff': 60})
  message = r"\['ffn'\]\['inner'\]\['bias'\] has shape \(60,\).*60 cannot be split 8"
  with pytest.raises(ValueError, match=message):
    ShardedModel(config, sharding.make_mesh(config))


@pytest.mark.slow
def test_bfloat16_computes_in_bfloat16_and_keeps_float32_state():
  config = train_config(**{'dtype': 'bfloat16', 'parallel.data': 1})
  model = ShardedModel(config, sharding.make_mesh(config, jax.devices()[:1]))
  trainer = Trainer(model)
  state = trainer.init_state()
  state, metrics = trainer.train_step(state, model.put_batch(_batch(16, 12, 64)))
  assert np.isfinite(float(metrics['loss']))
  dtypes = {leaf.dtype for leaf in jax.tree.leaves((state.params, state.opt_state))
            if leaf.dtype.kind == 'f'}
  assert dtypes == {np.dtype('float32')}
  hidden = jax.eval_shape(
      lambda p, b: model.module.apply({'params': p}, b['inputs'], b['inputs'] != 0,
                                       method='encode', rngs={'dropout': jax.random.key(0)}),
      state.params, _batch(16, 12, 64))
  assert hidden.dtype == jax.numpy.bfloat16
