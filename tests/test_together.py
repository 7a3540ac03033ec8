"""Runs trained together as one program (transformer_jax/training/together.py): each is the run
trained alone on the same batches; runs that cannot share a program are refused by name."""

import functools
import threading

import jax
import numpy as np
import pytest

from conftest import assert_trained_alike, random_tokens, train_config
from transformer_jax.loop import runs, runs_together
from transformer_jax.model import sharding
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.training import compilation, together
from transformer_jax.training.trainer import TrainerProtocol, Trainer

MESH = {'parallel.data': 2, 'parallel.fsdp': 2, 'parallel.tensor': 2}
# Three runs differing in every traced field: the seed, the residual and attention dropout,
# label smoothing, the learning rate's scale and warmup.
RUNS = [
    {'seed': 1, 'model.dropout_rate': 0.1, 'train.label_smoothing': 0.1},
    {'seed': 2, 'model.dropout_rate': 0.3, 'train.label_smoothing': 0.0, 'train.lr_scale': 0.5},
    {'seed': 1, 'model.dropout_rate': 0.0, 'model.attention_dropout_rate': 0.2,
     'train.label_smoothing': 0.2, 'train.warmup_steps': 4},
]


def _batch(seed: int) -> dict:
  rng = np.random.default_rng(seed)
  lengths = rng.integers(1, 13, size=16)
  targets = random_tokens(rng, (16, 12), 64, lengths[::-1])
  return {'inputs': random_tokens(rng, (16, 12), 64, lengths), 'targets': targets,
          'decoder_inputs': np.pad(targets[:, :-1], ((0, 0), (1, 0)))}


BATCHES = [_batch(seed) for seed in range(20)]


@functools.cache
def _alone(run: int):
  """Each step's metrics and the final state of RUNS[run] trained by itself on BATCHES, with
  the logits whole (train.loss_chunk 0): the reference of every group below."""
  config = train_config(**MESH, **RUNS[run], **{'train.loss_chunk': 0})
  model = ShardedModel(config, sharding.make_mesh(config, jax.devices()))
  trainer = Trainer(model)
  state, history = trainer.init_state(), []
  for batch in BATCHES:
    state, metrics = trainer.train_step(state, model.put_batch(batch))
    history.append(jax.device_get(metrics))
  return history, jax.device_get(state)


def _group(loss_chunk: int) -> tuple[list, ShardedModel]:
  """RUNS' configs on MESH with `train.loss_chunk`, and the model on that mesh."""
  configs = [train_config(**MESH, **run, **{'train.loss_chunk': loss_chunk}) for run in RUNS]
  return configs, ShardedModel(configs[0], sharding.make_mesh(configs[0], jax.devices()))


@pytest.mark.slow
@pytest.mark.parametrize('loss_chunk', [0, 4])
def test_each_run_trained_together_is_the_run_trained_alone_on_the_same_batches(loss_chunk):
  # 20 steps on a mesh that splits batch rows, the embedding width and the vocabulary: 12 steps one
  # a call, then 8 as two calls of 4 (`train_steps`). Every run's metrics at every step, and
  # its parameters, optimizer state, step and dropout key after them, are its run's alone
  # with the logits whole, whether the group's loss takes them whole or in chunks of 4 target
  # positions (the fused loss).
  configs, model = _group(loss_chunk)
  trainer = together.TogetherTrainer(model, configs)
  assert set(trainer.hyper) == {'model.dropout_rate', 'model.attention_dropout_rate',
                                'train.label_smoothing', 'train.lr_scale', 'train.warmup_steps'}
  state, grouped = trainer.init_state(), []
  for batch in BATCHES[:12]:
    state, metrics = trainer.train_step(state, model.put_batch(batch))
    grouped.append(jax.device_get(metrics))
  for call in (BATCHES[12:16], BATCHES[16:]):
    state, metrics = trainer.train_steps(state, model.put_batches(call))
    metrics = jax.device_get(metrics)
    grouped += [{name: values[i] for name, values in metrics.items()} for i in range(4)]
  state = jax.device_get(state)
  losses = set()
  for run in range(len(RUNS)):
    history, alone = _alone(run)
    for step, (want, got) in enumerate(zip(history, grouped)):
      for name, value in want.items():
        np.testing.assert_allclose(got[name][run], value, rtol=1e-4,
                                   err_msg=f'run {run}, step {step + 1}, {name}')
    losses.add(float(history[-1]['loss']))
    mine = trainer.split(state)[run]
    assert int(mine.step) == int(alone.step) == 20
    np.testing.assert_array_equal(mine.dropout_key, alone.dropout_key)
    jax.tree.map(assert_trained_alike, (mine.params, mine.opt_state),
                 (alone.params, alone.opt_state))
  assert len(losses) == 3  # three different runs


def test_seeds_of_one_run_trace_nothing_but_the_seed():
  configs = [train_config(seed=seed) for seed in (1, 2, 3)]
  assert together.hyperparameters(configs) == {}


@pytest.mark.parametrize('field, value', [('model.d_ff', 48), ('train.num_train_steps', 7),
                                          ('model.norm_position', 'pre'),
                                          ('data.tokens_per_batch', 100)])
def test_runs_that_differ_elsewhere_are_refused_naming_the_field(field, value):
  configs = [train_config(), train_config(**{'seed': 2, field: value})]
  with pytest.raises(ValueError, match=f'base and other cannot train together: they differ in '
                     f'{field}'):
    together.check_together(configs, ['base', 'other'])


def test_both_trainers_offer_every_member_of_the_loops_contract():
  # The loop (`loop.train_loop`) trains through `TrainerProtocol` alone: one run's `Trainer` and a
  # group's `TogetherTrainer` both have each member it names, and a group restores each run's
  # checkpoint into one run's state.
  members = sorted({*TrainerProtocol.__annotations__,
                    *(name for name in vars(TrainerProtocol) if not name.startswith('_'))})
  assert members == ['compile', 'init_state', 'join', 'model', 'run_abstract_state',
                     'sequences_multiple', 'split', 'train_step', 'train_steps']
  configs = [train_config(**run) for run in RUNS]
  model = ShardedModel(configs[0])
  single, group = Trainer(model), together.TogetherTrainer(model, configs)
  for trainer in (single, group):
    assert TrainerProtocol in type(trainer).__mro__  # declared, not only alike
    missing = [name for name in members if not hasattr(trainer, name)]
    assert not missing, (type(trainer).__name__, missing)
  assert [(leaf.shape, leaf.dtype, leaf.sharding)
          for leaf in jax.tree.leaves(group.run_abstract_state)] == [
              (leaf.shape, leaf.dtype, leaf.sharding)
              for leaf in jax.tree.leaves(single.run_abstract_state)]
  assert group.sequences_multiple == single.sequences_multiple


def test_one_run_and_a_group_offer_every_member_of_the_loops_runs_interface(tmp_path):
  # The loop (`loop.train_loop`) reaches workdirs through `runs.Runs` alone: one run
  # (`runs.OneRun`) and a group (`runs_together.Group`) both define each member it names, their own
  # (not the protocol's empty bodies).
  members = sorted({*runs.Runs.__annotations__,
                    *(name for name in vars(runs.Runs) if not name.startswith('_'))})
  assert members == ['config', 'evaluate', 'finish', 'locked', 'log', 'log_train', 'name',
                     'not_evaluated', 'open', 'programs', 'restore', 'resume_step', 'save',
                     'stop_notice', 'wait']
  configs = [train_config(**run) for run in RUNS]
  one = runs.OneRun(configs[0], str(tmp_path / 'one'))
  grouped = runs_together.Group(configs, [str(tmp_path / f'run{i}') for i in range(len(configs))],
                               {}, None, None, None)
  for kind in (one, grouped):
    assert runs.Runs in type(kind).__mro__
    inherited = [name for name in members
                 if name not in ('config', 'name') and name not in vars(type(kind))]
    assert not inherited, (type(kind).__name__, inherited)
    assert kind.config.model.to_dict() == configs[0].model.to_dict()
  assert (one.not_evaluated, grouped.not_evaluated) == ({}, [{}] * len(configs))


@pytest.mark.slow
def test_what_a_trainer_compiled_ahead_its_calls_compile_again_nowhere():
  # `TrainerProtocol.compile` on another thread (as a sweep compiles its next group), then the
  # trainer's calls on this one: the initial state, one step, four stacked, the split. The
  # runs and mesh of the tests above, whose programs the compilation cache holds: what the
  # calls would compile or load again counts alike.
  configs, model = _group(loss_chunk=0)
  batch, stacked = model.put_batch(BATCHES[0]), model.put_batches(BATCHES[:4])
  for trainer in (Trainer(model), together.TogetherTrainer(model, configs)):
    ahead = threading.Thread(target=trainer.compile, args=([batch, stacked],))
    ahead.start()
    ahead.join()
    before = compilation.so_far()
    state = trainer.init_state()
    state, _ = trainer.train_step(state, batch)
    state, _ = trainer.train_steps(state, stacked)
    jax.block_until_ready(trainer.split(state))
    assert not compilation.so_far() - before, type(trainer).__name__
