"""The Transformer placed on a device mesh: what training, evaluation, decoding and
checkpoint averaging share.

  model = sharded_model.ShardedModel(config)          # on every device, or on `mesh`
  params = checkpoints.average_last(5, model.abstract_params)[0]   # restored in their shards
  sums = model.eval_step(params, model.put_batch(batch))   # the loss's sums, dropout off

A "model" in this package is a `ShardedModel`; the Flax `Transformer` it applies is its
`module`, and `config.model` the module's hyperparameters. The mesh, the logical axes and the
rules that place parameters and batches are `sharding.py`'s, which this class applies.
"""

import threading
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np

from transformer_jax.config import platforms
from transformer_jax.model import loss, model_config, sharding
from transformer_jax.model.transformer import Transformer


class ShardedModel:
  """A valid `config`'s Transformer on `mesh` (default: every device, shaped by
  `config.parallel`).

  Attributes:
    module: the Flax Transformer as trained (dropout on).
    eval_module: the same with dropout off, for evaluation and decoding.
    param_sharding, abstract_params: where each parameter lives, and its shape, dtype and
      sharding (to restore checkpoints into).
    batch_sharding, batch_shards: sequences over the batch axes, and into how many parts.
    stacked_batch_sharding: batches stacked along a leading axis (one per step of a call),
      their sequences over the batch axes.
    eval_step: jitted (params, batch) -> `loss_sums` of `eval_module` (dropout off), for
      evaluation.
    config, mesh, rules, model_config: the run's config (every 'auto' resolved for this
      platform: `platforms`), the device mesh, the logical axis rules, and the model's config.

  The jitted programs that decoders build on the model (`program`) are kept with it, so that
  its users (a run's evaluators, the translator of its trained parameters) share what one of
  them compiled, ahead of time too (`sweep.ahead`).
  """

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh | None = None):
    self.config = config = platforms.resolved(config)  # 'auto' as this platform's default
    self.mesh = sharding.make_mesh(config) if mesh is None else mesh
    self.rules = sharding.axis_rules(config)
    self.model_config = model_config.from_config(config).replace(axis_rules=self.rules)
    self.module = Transformer(self.model_config)
    self.eval_module = Transformer(self.model_config.replace(deterministic=True))
    self.batch_sharding = sharding.batch_sharding(self.mesh, self.rules)
    self.batch_shards = sharding.batch_shards(self.mesh, self.rules)
    self.stacked_batch_sharding = sharding.stacked(self.batch_sharding)
    boxed = jax.eval_shape(self.boxed_params, jax.random.key(0))
    self.param_sharding = sharding.state_shardings(boxed, self.mesh, self.rules)
    self.abstract_params = sharding.placed_shapes(boxed, self.param_sharding)
    self.eval_step = jax.jit(self._eval_step,
                             in_shardings=(self.param_sharding, self.batch_sharding))
    self._programs, self._lock = {}, threading.Lock()

  def program(self, key: tuple, make: Callable[[], Callable]) -> Callable:
    """The model's jitted program `key`: `make()` the first time it is asked for, the same
    function after."""
    with self._lock:
      if key not in self._programs:
        self._programs[key] = make()
      return self._programs[key]

  def boxed_params(self, key: jax.Array) -> Any:
    """Parameters initialised as §3 and tensor2tensor do, boxed with their logical axis
    names (`Trainer` creates them in their shards)."""
    tokens = jnp.ones((1, 1), jnp.int32)
    return self.module.init({'params': key}, tokens, tokens)['params']

  def on_mesh(self):
    """The context to trace the model in: with the mesh known, each layer's input and output
    keep their sequences split over the batch's mesh axes (`transformer.split_sequences`).
    Without it XLA may place them otherwise: on an FSDP mesh it gathered every sequence of the
    activations onto every device and computed parts of each layer redundantly, instead of
    gathering the parameters (ZeRO-3)."""
    return jax.sharding.use_abstract_mesh(self.mesh.abstract_mesh)

  def loss_sums(self, module: Transformer, params, batch: dict, label_smoothing=None,
                **apply_kwargs) -> dict:
    """`loss.loss_sums` of `module` (`self.module` or `eval_module`) on `batch`, from the whole
    logits or, with `train.loss_chunk` set, with the projection and the loss fused that many
    target positions at a time (`loss.fused_loss_sums`); a packed batch's segment ids are
    passed on. ε_ls is the config's unless given (a run's, traced, in `together`); `apply_kwargs`
    go to `module.apply` (the dropout key in training)."""
    segments = batch.get('source_segments'), batch.get('target_segments')  # packed batches only
    if label_smoothing is None:
      label_smoothing = self.config.train.label_smoothing
    chunk = self.config.train.loss_chunk
    if chunk:
      return module.apply({'params': params}, batch['inputs'], batch['decoder_inputs'],
                          batch['targets'], label_smoothing, chunk, *segments,
                          method='fused_loss_sums', **apply_kwargs)
    logits = module.apply({'params': params}, batch['inputs'], batch['decoder_inputs'],
                          *segments, **apply_kwargs)
    return loss.loss_sums(logits, batch['targets'], label_smoothing)

  def _eval_step(self, params, batch: dict) -> dict:
    with self.on_mesh():
      return self.loss_sums(self.eval_module, params, batch)

  def put_batch(self, local_batch: dict) -> dict:
    """This process's sequences of a batch -> global arrays on the mesh."""
    return sharding.global_batch(local_batch, self.batch_sharding)

  def put_batches(self, local_batches: list[dict]) -> dict:
    """This process's sequences of several batches of one shape -> global arrays on the mesh,
    stacked along a leading axis, one entry per batch (`Trainer.train_steps`' input)."""
    stacked = {name: np.stack([batch[name] for batch in local_batches])
               for name in local_batches[0]}
    return sharding.global_batch(stacked, self.stacked_batch_sharding, sequence_axis=1)

  def put_whole_batch(self, batch: dict) -> dict:
    """A batch every process holds whole -> global arrays on the mesh, sequences in order."""
    return sharding.whole_batch(batch, self.batch_sharding)
