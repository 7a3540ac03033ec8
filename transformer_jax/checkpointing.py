"""Checkpoints of a training run, and the run's config beside them.

`workdir/checkpoints/<step>/` (orbax) holds the train state (parameters, optimizer state,
step, dropout key) and the data iterator's position, written atomically: orbax writes to a
temporary directory and renames it when complete, so a crash mid-save leaves the previous
checkpoints intact. `workdir/config.json` is the resolved config of the latest run and
`workdir/spm.model` its vocabulary.
"""

import json
import os
import shutil
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import orbax.checkpoint as ocp

from transformer_jax import atomic, config_lib, costs
from transformer_jax.data import tokenizer
from transformer_jax.sharded_model import ShardedModel

CONFIG_FILENAME = 'config.json'
# Config fields newer than some saved runs, with the behaviour those runs had.
_ADDED_FIELDS = {'model.qkv_init': 'separate', 'model.attention_bias': False,
                 'data.preprocessing': 'none'}


class Checkpoints:
  """Saves and restores (train state, iterator state) pairs, keeping the last `keep`; with
  keep=None, reads the checkpoints that exist (and creates nothing)."""

  def __init__(self, workdir: str, keep: int | None = None):
    self._manager = ocp.CheckpointManager(
        os.path.join(os.path.abspath(workdir), 'checkpoints'),
        options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=keep is not None),
        item_names=('state', 'data'))

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def save(self, step: int, state: Any, data_state: dict) -> None:
    """Starts writing in the background; the arrays are copied off the devices first, so the
    state may be updated (or donated) as soon as this returns."""
    self._manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state)))

  def restore(self, step: int, abstract_state: Any | None = None) -> tuple[Any, dict]:
    """The state of `step`, placed with `abstract_state`'s shardings (None: as a tree of
    arrays laid out as they were saved), and the iterator state."""
    restored = self._manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state), data=ocp.args.JsonRestore()))
    return restored['state'], restored['data']

  def all_steps(self) -> list[int]:
    return sorted(self._manager.all_steps())

  def restore_params(self, step: int, abstract_params: Any) -> Any:
    """Only the parameters of `step`'s state (not the optimizer state), placed with
    `abstract_params`' shardings."""
    restore_args = ocp.checkpoint_utils.construct_restore_args(abstract_params)
    with ocp.PyTreeCheckpointer() as checkpointer:
      restored = checkpointer.restore(
          self._manager.directory / str(step) / 'state',
          args=ocp.args.PyTreeRestore({'params': abstract_params},
                                      restore_args={'params': restore_args},
                                      partial_restore=True))
    return restored['params']

  def average_params(self, steps: Sequence[int], abstract_params: Any) -> Any:
    """The element-wise mean of the parameters of `steps` (§6.1 averages the last 5 or 20
    checkpoints), computed in memory one checkpoint at a time; nothing on disk changes."""
    total = None
    for step in steps:
      params = self.restore_params(step, abstract_params)
      total = params if total is None else jax.tree.map(jnp.add, total, params)
    return jax.tree.map(lambda x: x / len(steps), total)

  def wait(self) -> None:
    """Blocks until every started save is complete."""
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.close()


def _parameter_shapes(config: ml_collections.ConfigDict) -> dict:
  flat = jax.tree_util.tree_leaves_with_path(costs.abstract_params(config_lib.model_config(config)))
  return {jax.tree_util.keystr(path): leaf.shape for path, leaf in flat}


def check_compatible(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Raises ValueError if the workdir's saved config has parameters of other shapes than
  `config`'s (a different model cannot resume its checkpoints), naming the differing fields."""
  path = os.path.join(workdir, CONFIG_FILENAME)
  if not os.path.exists(path):
    return
  saved = _read_config(path)
  if _parameter_shapes(saved) == _parameter_shapes(config):
    return
  fields = [f'data.vocab_size {saved.data.vocab_size} -> {config.data.vocab_size}'
            ] if saved.data.vocab_size != config.data.vocab_size else []
  fields += [f'model.{name} {saved.model[name]!r} -> {value!r}'
             for name, value in config.model.items() if saved.model.get(name) != value]
  raise ValueError(f'{path} describes a model with other parameter shapes ({", ".join(fields)}); '
                   'use a new --workdir, or the same model config to resume')


def load_config(workdir: str) -> ml_collections.ConfigDict:
  """The resolved config a training run saved in `workdir`, validated."""
  path = os.path.join(workdir, CONFIG_FILENAME)
  if not os.path.isfile(path):
    raise FileNotFoundError(f'{path} not found: --workdir must be a directory written by '
                            'transformer_jax.train')
  config = _read_config(path)
  config_lib.validate(config)
  return config


def _read_config(path: str) -> ml_collections.ConfigDict:
  """A saved config.json. A field added after the run was written is absent there and gets
  the default the run was trained with."""
  with open(path) as f:
    config = json.load(f)
  for field, default in _ADDED_FIELDS.items():
    section, name = field.split('.')
    config[section].setdefault(name, default)
  return ml_collections.ConfigDict(config)


def write_config(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Writes `workdir/config.json` atomically; copies a given `data.spm_model` into the workdir
  so the run's directory holds everything needed to use its checkpoints."""
  atomic.write(os.path.join(workdir, CONFIG_FILENAME), config.to_json_best_effort(indent=2))
  vocabulary = os.path.join(workdir, tokenizer.MODEL_FILENAME)
  if config.data.spm_model and os.path.abspath(config.data.spm_model) != vocabulary:
    shutil.copyfile(config.data.spm_model, vocabulary)


def save_average(workdir: str, last: int | None, output: str) -> list[int]:
  """Writes the average of `workdir`'s last `last` checkpoints to the workdir `output` and
  returns the averaged steps."""
  config = load_config(workdir)
  last = config.decode.average_last if last is None else last
  if last <= 0:
    raise ValueError(f'--last must be a positive integer, got {last}')
  source = Checkpoints(workdir)
  averaged = source.all_steps()[-last:]
  if not averaged:
    raise FileNotFoundError(f'no checkpoint in {os.path.join(workdir, "checkpoints")}')
  if os.path.isdir(os.path.join(output, 'checkpoints')) and os.listdir(
      os.path.join(output, 'checkpoints')):
    raise FileExistsError(f'{output} already holds checkpoints; choose a new --output')
  # The optimizer state is kept as it was saved; only the parameters are averaged.
  state, data_state = source.restore(averaged[-1])
  state['params'] = source.average_params(averaged, ShardedModel(config).abstract_params)
  source.close()
  os.makedirs(output, exist_ok=True)
  write_config(config, output)
  shutil.copyfile(os.path.join(workdir, tokenizer.MODEL_FILENAME),
                  os.path.join(output, tokenizer.MODEL_FILENAME))
  target = Checkpoints(output, keep=1)
  target.save(averaged[-1], state, data_state)
  target.wait()
  target.close()
  return averaged
