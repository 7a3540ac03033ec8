"""The training state and the jitted train and eval steps, sharded over a device mesh.

  trainer = steps.Trainer(config, mesh)
  state = trainer.init_state()          # created already sharded, never whole on one device
  state, metrics = trainer.train_step(state, batch)
  sums = trainer.eval_step(state.params, batch)

One optimizer step sees `config.data.tokens_per_batch` tokens per side, split into
`config.train.grad_accum_steps` micro-batches whose gradients are summed before the update;
the loss is normalised by the number of non-padding target tokens of the whole batch, so the
update is the same however the batch is split.
"""

import dataclasses
from typing import Any

import flax.linen as nn
from flax.training import train_state
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import optax

from transformer_jax import config_lib, loss, optimizer, partitioning
from transformer_jax.model import Transformer


class TrainState(train_state.TrainState):
  """step, params and opt_state (flax), plus the raw key data that dropout keys derive from."""

  dropout_key: jax.Array


def _micro_batches(batch: dict, k: int) -> dict:
  """(rows, length) -> (k, rows / k, length), micro-batch i holding rows i, i + k, i + 2k, ...
  Every device's block of rows then holds its share of each micro-batch, so the split moves
  no data between devices."""
  return {name: jnp.swapaxes(value.reshape(-1, k, *value.shape[1:]), 0, 1)
          for name, value in batch.items()}


@dataclasses.dataclass
class Trainer:
  """Builds the model, the optimizer and the jitted steps for `config` on `mesh`."""

  config: ml_collections.ConfigDict
  mesh: Mesh

  def __post_init__(self):
    self.model_config = config_lib.model_config(self.config)
    self.model = Transformer(self.model_config)
    self.eval_model = Transformer(self.model_config.replace(deterministic=True))
    self.tx = optimizer.adam(self.config)
    self.schedule = optimizer.schedule(self.config)
    self.rules = partitioning.axis_rules(self.config)
    self.batch_sharding = partitioning.batch_sharding(self.mesh, self.rules)
    self.batch_shards = partitioning.batch_shards(self.mesh, self.rules)
    self.abstract_state = jax.eval_shape(self._boxed_state)
    self.state_sharding = partitioning.state_shardings(self.abstract_state, self.mesh, self.rules)
    self._init = jax.jit(lambda: nn.meta.unbox(self._boxed_state()),
                         out_shardings=self.state_sharding)
    self.train_step = jax.jit(
        self._train_step, in_shardings=(self.state_sharding, self.batch_sharding),
        out_shardings=(self.state_sharding, None), donate_argnums=0)
    self.eval_step = jax.jit(self._eval_step,
                             in_shardings=(self.state_sharding.params, self.batch_sharding))

  @property
  def rows_multiple(self) -> int:
    """Batch rows must be a multiple of this: every micro-batch splits over the batch axes."""
    return self.batch_shards * self.config.train.grad_accum_steps

  def _boxed_state(self) -> TrainState:
    params_key, dropout_key = jax.random.split(jax.random.key(self.config.seed))
    tokens = jnp.ones((1, 1), jnp.int32)
    params = self.model.init({'params': params_key}, tokens, tokens)['params']
    return TrainState.create(apply_fn=self.model.apply, params=params, tx=self.tx,
                             dropout_key=jax.random.key_data(dropout_key))

  def init_state(self) -> TrainState:
    """Parameters initialised as §3 and tensor2tensor do, created directly in their shards."""
    return self._init()

  @property
  def abstract_unboxed_state(self) -> Any:
    """Shapes, dtypes and shardings of the state, for restoring a checkpoint into."""
    return jax.tree.map(
        lambda shape, sharding: jax.ShapeDtypeStruct(shape.shape, shape.dtype, sharding=sharding),
        nn.meta.unbox(self.abstract_state), self.state_sharding)

  def _loss_sums(self, params, batch: dict, dropout_key) -> tuple[jax.Array, dict]:
    logits = self.model.apply({'params': params}, batch['inputs'], batch['decoder_inputs'],
                              rngs={'dropout': dropout_key})
    sums = loss.loss_sums(logits, batch['targets'], self.config.train.label_smoothing)
    return sums['loss'], sums

  def _train_step(self, state: TrainState, batch: dict) -> tuple[TrainState, dict]:
    # Dropout is different at every step and micro-batch, and reproducible from the step alone.
    step_key = jax.random.fold_in(jax.random.wrap_key_data(state.dropout_key), state.step)
    grad_fn = jax.grad(self._loss_sums, has_aux=True)
    k = self.config.train.grad_accum_steps
    micro = jax.lax.with_sharding_constraint(
        _micro_batches(batch, k),
        jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec(
            None, *self.batch_sharding.spec)))

    def accumulate(carry, xs):
      index, micro_batch = xs
      grads, sums = grad_fn(state.params, micro_batch, jax.random.fold_in(step_key, index))
      return jax.tree.map(jnp.add, carry, (grads, sums)), None

    zeros = jax.tree.map(jnp.zeros_like, state.params)
    zero_sums = {name: jnp.zeros((), jnp.float32) for name in ('loss', 'nll', 'correct', 'tokens')}
    (grads, sums), _ = jax.lax.scan(accumulate, (zeros, zero_sums), (jnp.arange(k), micro))
    tokens = jnp.maximum(sums['tokens'], 1.0)
    grads = jax.tree.map(lambda g: g / tokens, grads)
    metrics = {
        'loss': sums['loss'] / tokens,
        'nll': sums['nll'] / tokens,
        'accuracy': sums['correct'] / tokens,
        'tokens': sums['tokens'],
        'grad_norm': optax.tree.norm(grads),
        'learning_rate': self.schedule(state.step),
    }
    return state.apply_gradients(grads=grads), metrics

  def _eval_step(self, params, batch: dict) -> dict:
    """Loss sums over a batch with dropout off."""
    logits = self.eval_model.apply({'params': params}, batch['inputs'], batch['decoder_inputs'])
    return loss.loss_sums(logits, batch['targets'], self.config.train.label_smoothing)

  def put_batch(self, local_batch: dict) -> dict:
    """This process's rows of a batch -> global arrays on the mesh."""
    return partitioning.global_batch(local_batch, self.batch_sharding)
