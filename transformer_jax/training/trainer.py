"""The training state and the jitted train step (§5.3: Adam with the learning rate of eq. 3)
on a `ShardedModel`.

  trainer = trainer.Trainer(sharded_model.ShardedModel(config))
  state = trainer.init_state()          # created already sharded, never whole on one device
  state, metrics = trainer.train_step(state, batch)
  state, metrics = trainer.train_steps(state, batches)  # K steps, batches stacked (K, ...)

`step` is the optimizer step itself, a pure function of the state and a batch; the jitted
`train_step` and `train_steps` run it on the mesh (`jit_steps`), and `together.TogetherTrainer`
vmaps it over several runs; both trainers are a `TrainerProtocol`, what the training loop needs.
Its metrics are sums over the batch's target tokens (`loss.SUM_NAMES`), as evaluation's are,
with the gradient norm and the learning rate; per-token figures are derived on the host
(`loss.per_token`), over however many steps are logged together.

One optimizer step sees `config.data.tokens_per_batch` tokens per side, split into
`config.train.grad_accum_steps` micro-batches whose gradients are summed before the update;
the loss is normalised by the number of non-padding target tokens of the whole batch, so the
update is the same however the batch is split.
"""

from typing import Callable, Protocol

import flax.linen as nn
from flax.training import train_state
import jax
import jax.numpy as jnp
import optax

from transformer_jax.model import loss, sharding
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.model.transformer import Transformer
from transformer_jax.training import optimizer

# The config fields a step may take as traced values (`Trainer.step`'s `hyper`) rather than from
# the config: none changes a shape or the program's structure.
TRACEABLE = ('model.dropout_rate', 'model.attention_dropout_rate', 'model.relu_dropout_rate',
             'model.drophead_rate', 'train.label_smoothing', 'train.lr_scale',
             'train.warmup_steps')


class TrainState(train_state.TrainState):
  """step, params and opt_state (flax), plus the raw key data that dropout keys derive from
  (of `config.train.dropout_prng_impl`'s generator)."""

  dropout_key: jax.Array


class TrainerProtocol(Protocol):
  """What the training loop (`loop.train_loop`) needs of a trainer: `Trainer` trains one run,
  `together.TogetherTrainer` several as one program. It keeps one state, whatever that holds;
  but each run has its own checkpoints, so a group (`loop.runs_together`) saves the runs' states
  `split` from it and resumes from their checkpoints `join`ed into it, each restored into
  `run_abstract_state` (for one run both are the identity).

    model                the `ShardedModel` the runs share
    sequences_multiple   a training batch's sequences are a multiple of this
    run_abstract_state   one run's state: shapes, dtypes and shardings, what a checkpoint holds
  """

  model: ShardedModel
  sequences_multiple: int
  run_abstract_state: TrainState

  def init_state(self) -> TrainState:
    """The state at step 0, created in its shards."""

  def train_step(self, state: TrainState, batch: dict) -> tuple[TrainState, dict]:
    """One optimizer step on `batch`; the metrics of `Trainer.step`."""

  def train_steps(self, state: TrainState, batches: dict) -> tuple[TrainState, dict]:
    """One step on each of the stacked `batches` (leading axis), one call; metrics stacked."""

  def split(self, state: TrainState) -> list[TrainState]:
    """The state of each run, as one run's `Trainer` holds it."""

  def join(self, states: list[TrainState]) -> TrainState:
    """`split`'s inverse: the runs' states (restored checkpoints) as the trainer's state."""

  def compile(self, batches: list[dict]) -> None:
    """Compiles, before their first call, the programs that training on batches shaped as
    `batches` runs (each one batch, or `train_steps`' stacked ones, placed as the feed places
    them): the initial state, the steps and `split`. Calling them then compiles nothing; a
    sweep compiles its next group so while one trains (`sweep.ahead`)."""


def jit_steps(model: ShardedModel, step: Callable, state_sharding, *arg_shardings
              ) -> tuple[Callable, Callable]:
  """`step(state, batch, *args) -> (state, metrics)` jitted on `model`'s mesh for the two calls
  of `TrainerProtocol`: `train_step`, one step a call, and `train_steps`, as many steps as the
  batches stack (leading axis) in one program, scanned, so the host dispatches once for all of
  them (`train.steps_per_call`); their metrics come stacked. The state is donated: updated in
  place, its buffers reused."""

  def one(state, batch, *args):
    with model.on_mesh():
      return step(state, batch, *args)

  def many(state, batches, *args):
    with model.on_mesh():
      return jax.lax.scan(lambda carry, batch: step(carry, batch, *args), state, batches)

  placed = {'out_shardings': (state_sharding, None), 'donate_argnums': 0}
  return (jax.jit(one, in_shardings=(state_sharding, model.batch_sharding, *arg_shardings),
                  **placed),
          jax.jit(many, in_shardings=(state_sharding, model.stacked_batch_sharding,
                                      *arg_shardings), **placed))


def compile_steps(init: Callable, init_args: tuple, train_step: Callable, train_steps: Callable,
                  batches: list[dict], *step_args) -> jax.ShapeDtypeStruct:
  """Compiles the jitted `init(*init_args)` and, for each of `batches`, `train_step` (one batch)
  or `train_steps` (stacked: a leading axis more) on the state `init` makes; returns that
  state's shapes."""
  init.lower(*init_args).compile()
  state = jax.eval_shape(init, *init_args)
  for batch in batches:
    step = train_steps if batch['inputs'].ndim == 3 else train_step
    step.lower(state, batch, *step_args).compile()
  return state


def _micro_batches(batch: dict, k: int) -> dict:
  """(sequences, length) -> (k, sequences / k, length), micro-batch i holding sequences i,
  i + k, i + 2k, ... Every device's block of sequences then holds its share of each
  micro-batch, so the split moves no data between devices."""
  return {name: jnp.swapaxes(value.reshape(-1, k, *value.shape[1:]), 0, 1)
          for name, value in batch.items()}


class Trainer(TrainerProtocol):
  """The optimizer and the jitted train step of `model.config` on `model`'s mesh: one run's
  `TrainerProtocol`."""

  def __init__(self, model: ShardedModel):
    self.model = model
    self.config = model.config
    self.tx = optimizer.adam(self.config)
    self.schedule = optimizer.schedule(self.config)
    self.dropout_prng_impl = self.config.train.dropout_prng_impl
    abstract_state = jax.eval_shape(self._boxed_state)
    self.state_sharding = sharding.state_shardings(abstract_state, model.mesh, model.rules)
    self.run_abstract_state = sharding.placed_shapes(abstract_state, self.state_sharding)
    self._init = jax.jit(self.initial_state, out_shardings=self.state_sharding)
    self.train_step, self.train_steps = jit_steps(model, self.step, self.state_sharding)

  @property
  def sequences_multiple(self) -> int:
    """A batch's sequences are a multiple of this: every micro-batch splits over the batch
    axes."""
    return self.model.batch_shards * self.config.train.grad_accum_steps

  def _boxed_state(self, seed: int | jax.Array | None = None) -> TrainState:
    """`initial_state`, its parameters boxed with their logical axis names."""
    seed = self.config.seed if seed is None else seed
    params_key, dropout_key = jax.random.split(jax.random.key(seed))
    dropout_data = jax.random.key_data(dropout_key)
    if self.dropout_prng_impl != 'threefry2x32':  # that generator's key, seeded from the split
      shape = jax.random.key_data(jax.random.key(0, impl=self.dropout_prng_impl)).shape
      dropout_data = jax.random.bits(dropout_key, shape, jnp.uint32)
    return TrainState.create(apply_fn=self.model.module.apply,
                             params=self.model.boxed_params(params_key), tx=self.tx,
                             dropout_key=dropout_data)

  def initial_state(self, seed: int | jax.Array | None = None) -> TrainState:
    """The state at step 0 of `seed` (default: the config's; may be traced)."""
    return nn.meta.unbox(self._boxed_state(seed))

  def init_state(self) -> TrainState:
    """The state at step 0, created directly in its shards."""
    return self._init()

  def split(self, state: TrainState) -> list[TrainState]:
    """The one run's state (`TrainerProtocol.split`)."""
    return [state]

  def join(self, states: list[TrainState]) -> TrainState:
    """The one run's state (`TrainerProtocol.join`)."""
    (state,) = states
    return state

  def compile(self, batches: list[dict]) -> None:
    """`TrainerProtocol.compile`."""
    compile_steps(self._init, (), self.train_step, self.train_steps, batches)

  def _hyperparameters(self, hyper: dict | None):
    """The model, ε_ls, optimizer and schedule of a step: the config's, with the traced values
    of `hyper` (fields of `TRACEABLE`)."""
    if not hyper:
      return self.model.module, self.config.train.label_smoothing, self.tx, self.schedule
    fields = {name.split('.')[1]: value for name, value in hyper.items()
              if name.startswith('model.')}
    module = Transformer(self.model.model_config.replace(**fields)) if fields else self.model.module
    schedule = optimizer.schedule(self.config, hyper.get('train.warmup_steps'),
                                  hyper.get('train.lr_scale'))
    return (module, hyper.get('train.label_smoothing', self.config.train.label_smoothing),
            optimizer.adam(self.config, schedule), schedule)

  def step(self, state: TrainState, batch: dict, hyper: dict | None = None
           ) -> tuple[TrainState, dict]:
    """One optimizer step (§5.3), with `hyper`'s traced values of `TRACEABLE` fields in place
    of the config's. Metrics: the batch's `loss.SUM_NAMES` sums, 'grad_norm' and
    'learning_rate'. Called under `model.on_mesh()` (the jitted `train_step` is)."""
    # The config's model, ε_ls and optimizer; runs trained together (`together`) pass theirs.
    module, label_smoothing, tx, schedule = self._hyperparameters(hyper)
    # Dropout is different at every step and micro-batch, and reproducible from the step alone.
    step_key = jax.random.fold_in(
        jax.random.wrap_key_data(state.dropout_key, impl=self.dropout_prng_impl), state.step)

    def loss_fn(params, micro_batch, key):
      """The summed label-smoothed loss (§5.4) and all the sums: `loss.loss_sums`, or its
      variant fused with the output projection (`loss.fused_loss_sums`, base and big's)."""
      sums = self.model.loss_sums(module, params, micro_batch, label_smoothing,
                                  rngs={'dropout': key})
      return sums['loss'], sums

    grad_fn = jax.grad(loss_fn, has_aux=True)
    k = self.config.train.grad_accum_steps
    # Micro-batches stacked along a leading axis, each split over the devices as a batch is.
    micro = jax.lax.with_sharding_constraint(_micro_batches(batch, k),
                                             self.model.stacked_batch_sharding)

    def accumulate(carry, xs):
      index, micro_batch = xs
      grads, sums = grad_fn(state.params, micro_batch, jax.random.fold_in(step_key, index))
      return jax.tree.map(jnp.add, carry, (grads, sums)), None

    zeros = jax.tree.map(jnp.zeros_like, state.params)
    zero_sums = {name: jnp.zeros((), jnp.float32) for name in loss.SUM_NAMES}
    (grads, sums), _ = jax.lax.scan(accumulate, (zeros, zero_sums), (jnp.arange(k), micro))
    grads = jax.tree.map(lambda g: g / jnp.maximum(sums['tokens'], 1.0), grads)
    metrics = {**sums, 'grad_norm': optax.tree.norm(grads),
               'learning_rate': schedule(state.step)}
    # `tx`, not the state's own: a run's schedule (the optimizer state is the same structure).
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    return state.replace(step=state.step + 1, params=optax.apply_updates(state.params, updates),
                         opt_state=opt_state), metrics
