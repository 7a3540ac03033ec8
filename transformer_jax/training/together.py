"""Runs of one model shape trained together as one program: the train step vmapped over a
leading run axis of the training states (parameters, optimizer states, dropout keys).

  trainer = together.TogetherTrainer(sharded_model.ShardedModel(configs[0]), configs)
  state = trainer.init_state()            # every leaf (runs, ...), created in its shards
  state, metrics = trainer.train_step(state, batch)     # metrics (runs,)
  state, metrics = trainer.train_steps(state, batches)  # metrics (steps, runs)
  trainer.split(state)[i]                 # run i's state, as `Trainer` has it

The runs (a sweep's rows, or the seeds of one) may differ only in `VARYING`: the seed (the initial
parameters and the dropout key), the dropout rates, label smoothing and the learning rate's scale
and warmup, none of which changes a shape or the program's structure. Their values enter the
program as traced scalars, one a run (`Trainer.step`'s `hyper`); fields equal in every run stay
constants, so that runs that differ only in the seed compile the single run's program under
`vmap`. `TogetherTrainer` only vmaps `Trainer`'s `initial_state` and `step`; both are a
`TrainerProtocol`. Every run sees the same batches; each run's step is the step it would take
alone on those batches (`tests/test_together.py`). A small model leaves most of an accelerator
idle and its host dispatching; R runs a step give the device R times the work per dispatch.
"""

import copy

import jax
import jax.numpy as jnp
import ml_collections

from transformer_jax.config import fields
from transformer_jax.model import sharding
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.training.trainer import TRACEABLE, TrainerProtocol, TrainState, Trainer
from transformer_jax.training.trainer import compile_steps, jit_steps

# The config fields that may differ among runs trained together.
VARYING = ('seed', *TRACEABLE)


def check_together(configs: list[ml_collections.ConfigDict], names: list[str]) -> None:
  """Raises ValueError naming the first field outside `VARYING` in which two of the runs
  (named by `names`) differ."""
  first = fields.flatten(configs[0])
  for config, name in zip(configs[1:], names[1:]):
    other = fields.flatten(config)
    for field in sorted(set(first) | set(other)):
      if field not in VARYING and first.get(field) != other.get(field):
        raise ValueError(
            f'{names[0]} and {name} cannot train together: they differ in {field} '
            f'({first.get(field)!r} against {other.get(field)!r}); runs trained as one program '
            f'may differ only in {", ".join(VARYING)}')


def hyperparameters(configs: list[ml_collections.ConfigDict]) -> dict[str, jax.Array]:
  """The `VARYING` fields (the seed apart) whose values differ among `configs`: field ->
  (runs,) float32 values."""
  flats = [fields.flatten(config) for config in configs]
  return {field: jnp.asarray([flat[field] for flat in flats], jnp.float32)
          for field in VARYING[1:] if len({flat[field] for flat in flats}) > 1}


def sharing_batches(configs: list[ml_collections.ConfigDict], names: list[str]
                    ) -> list[ml_collections.ConfigDict]:
  """`configs` (one run: unchanged) checked by `check_together`, each with the first run's
  order of training batches as its `data.shuffle_seed`: what the runs see trained together,
  and so what each of them resumed alone must see."""
  if len(configs) == 1:
    return configs
  check_together(configs, names)
  seed = fields.shuffle_seed(configs[0])
  configs = [copy.deepcopy(config) for config in configs]
  for config in configs:
    config.data.shuffle_seed = seed
  return configs


class TogetherTrainer(TrainerProtocol):
  """The train step of `configs` (runs of `model.config`'s shapes, `check_together`) as one
  program on `model`'s mesh, the run axis of every state leaf unsplit (each device holds
  every run's share of a parameter, as it would hold the one run's): several runs'
  `TrainerProtocol`."""

  def __init__(self, model: ShardedModel, configs: list[ml_collections.ConfigDict],
               names: list[str] | None = None):
    check_together(configs, names or [f'run {i}' for i in range(len(configs))])
    for config, name in zip(configs, names or range(len(configs))):
      if not 0 <= config.seed < 2**32:
        raise ValueError(f'{name}: config.seed={config.seed}; runs trained together need seeds '
                         'in [0, 2^32) (one uint32 each)')
    trainer = Trainer(model)
    self.model = model
    self.seeds = jnp.asarray([config.seed for config in configs], jnp.uint32)
    self.hyper = hyperparameters(configs)
    self.state_sharding = jax.tree.map(sharding.stacked, trainer.state_sharding)
    self.run_abstract_state = trainer.run_abstract_state
    self._stack = jax.jit(lambda states: jax.tree.map(lambda *leaves: jnp.stack(leaves), *states),
                          out_shardings=self.state_sharding)
    self.sequences_multiple = trainer.sequences_multiple
    replicated = jax.sharding.NamedSharding(model.mesh, jax.sharding.PartitionSpec())
    self._init = jax.jit(jax.vmap(trainer.initial_state), out_shardings=self.state_sharding)
    # Every run's slice in one program: slicing leaf by leaf would dispatch runs x leaves
    # operations from Python at every checkpoint and dev evaluation.
    runs = len(configs)
    self._split = jax.jit(
        lambda state: tuple(jax.tree.map(lambda leaf, run=run: leaf[run], state)
                            for run in range(runs)),
        out_shardings=(trainer.state_sharding,) * runs)
    # Every run's step on the same batch, its `hyper` values its own.
    self._step, self._steps = jit_steps(model, jax.vmap(trainer.step, in_axes=(0, None, 0)),
                                        self.state_sharding, replicated)

  def init_state(self) -> TrainState:
    """Every run's state at step 0, from its own seed."""
    return self._init(self.seeds)

  def split(self, state: TrainState) -> list[TrainState]:
    """Each run's state, as `Trainer` has it."""
    return list(self._split(state))

  def join(self, states: list[TrainState]) -> TrainState:
    """The states of single runs (restored checkpoints) as one state with a run axis."""
    return self._stack(states)

  def compile(self, batches: list[dict]) -> None:
    """`TrainerProtocol.compile`."""
    state = compile_steps(self._init, (self.seeds,), self._step, self._steps, batches,
                          self.hyper)
    self._split.lower(state).compile()

  def train_step(self, state: TrainState, batch: dict) -> tuple[TrainState, dict]:
    """One step of every run on `batch`; the metrics (runs,)."""
    return self._step(state, batch, self.hyper)

  def train_steps(self, state: TrainState, batches: dict) -> tuple[TrainState, dict]:
    """One step of every run on each of the stacked `batches`; the metrics (steps, runs)."""
    return self._steps(state, batches, self.hyper)
