"""Checkpoints of a training run, and the run's config beside them.

`workdir/checkpoints/<step>/` (orbax) holds the train state (parameters, optimizer state,
step, dropout key) and the data iterator's position, written atomically: orbax writes to a
temporary directory and renames it when complete, so a crash mid-save leaves the previous
checkpoints intact. A checkpoint damaged later (truncated files from a full disk or a bad copy)
is skipped with a one-line warning: training moves it aside to `<step>.corrupt` (nothing is
deleted) and resumes from the newest readable one; readers (`translate`, `evaluate`,
`average`) only skip it, since they may share the workdir with a running training. With several
processes, each reading its own shards, a checkpoint that any of them cannot read is skipped by
all.
`workdir/config.json` is the resolved config of the latest run and `workdir/spm.model` its
vocabulary.
"""

import contextlib
import dataclasses
import filecmp
import json
import os
from typing import Any, Callable, Iterator, Sequence

from absl import logging
import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils
import ml_collections
import numpy as np
import orbax.checkpoint as ocp

from transformer_jax.config import checks, fields
from transformer_jax.data import tokenizer
from transformer_jax.model import costs, model_config
from transformer_jax.model.model_config import TransformerConfig
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.storage import atomic, workdirs

CONFIG_FILENAME = 'config.json'
# Config fields newer than some saved runs, with the behaviour those runs had. A field added to
# configs/base.py needs an entry here, or runs saved before it cannot resume
# (tests/test_configs.py counts them).
_ADDED_FIELDS = {'model.qkv_init': 'separate', 'model.attention_bias': False,
                 'model.decoder_start': 'learned',
                 'data.preprocessing': 'none', 'data.pack_length': 0, 'data.buckets': 'fine',
                 'data.train_files': None, 'data.validation_files': None,
                 'data.test_files': None,
                 'train.loss_chunk': 0, 'train.compilation_cache_dir': None,
                 'train.dropout_prng_impl': 'threefry2x32', 'model.attention_impl': 'explicit',
                 'data.prefetch': 0, 'train.steps_per_call': 1, 'data.shuffle_seed': None}


@dataclasses.dataclass(frozen=True)
class _KeepScheduled:
  """Which checkpoints orbax keeps (an orbax preservation policy): the newest, to resume from,
  and the newest `keep` whose step is a multiple of `every`, the checkpoint interval. One
  written off that schedule (on preemption, or at the last step of a run later extended) is
  deleted once a newer one is complete, so it never takes a scheduled checkpoint's place in
  §6.1's average of the last few."""

  keep: int
  every: int

  def should_preserve(self, checkpoints: Sequence[Any], *, context: Any) -> list[bool]:
    del context  # the policy needs only the steps
    steps = [checkpoint.step for checkpoint in checkpoints]
    newest = max(steps)
    scheduled = sorted(step for step in steps if step % self.every == 0)[-self.keep:]
    return [step == newest or step in scheduled for step in steps]


class Checkpoints:
  """Saves and restores (train state, iterator state) pairs, keeping the newest and the last
  `keep` written at multiples of `every` steps (`_KeepScheduled`); with keep=None, reads the
  checkpoints that exist (and creates nothing)."""

  def __init__(self, workdir: str, keep: int | None = None, every: int = 1):
    policy = None if keep is None else _KeepScheduled(keep, every)
    self._manager = ocp.CheckpointManager(
        os.path.join(os.path.abspath(workdir), 'checkpoints'),
        options=ocp.CheckpointManagerOptions(preservation_policy=policy,
                                             create=keep is not None),
        item_names=('state', 'data'))

  def save(self, step: int, state: Any, data_state: dict) -> None:
    """Starts writing in the background; the arrays are copied off the devices first, so the
    state may be updated (or donated) as soon as this returns. A failed write (of this save or
    of the previous one, still in the background) is an OSError naming the directory; a step
    not newer than the newest saved one, which orbax skips, is a RuntimeError."""
    with self._write_errors():
      saved = self._manager.save(step, args=ocp.args.Composite(
          state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state)))
    if not saved:
      raise RuntimeError(f'step {step} was not saved in {self._manager.directory}: it already '
                         f'holds step {self._manager.latest_step()}')

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

  def restore_latest(self, abstract_state: Any) -> tuple[int, Any, dict] | None:
    """(step, state, iterator state) of the newest readable checkpoint, None if there is no
    checkpoint. Newer ones that cannot be read are warned about and moved aside to
    `<step>.corrupt`; RuntimeError if none can be read (then nothing is moved). Running out of
    memory while restoring says nothing about the checkpoint: it is raised as it is."""
    unreadable = []
    for step in reversed(self.all_steps()):
      restored, error = self._read(self.restore, step, abstract_state)
      if error:
        unreadable.append((step, error))
        continue
      self._move_aside([bad for bad, _ in unreadable])
      return step, *restored
    if unreadable:
      step, error = unreadable[0]
      raise RuntimeError(f'no checkpoint in {self._manager.directory} can be read; the newest, '
                         f'{step}: {_first_line(error)}')
    return None

  def average_last(self, count: int, abstract_params: Any) -> tuple[Any, list[int]]:
    """The element-wise mean of the parameters of the newest `count` readable checkpoints
    (§6.1 averages the last 5 or 20), computed in memory one checkpoint at a time, and their
    steps. Unreadable ones are skipped with a warning (running out of memory is raised);
    nothing on disk changes."""
    total, steps = None, []
    for step in reversed(self.all_steps()):
      if len(steps) == count:
        break
      params, error = self._read(self.restore_params, step, abstract_params)
      if error:
        continue
      total = params if total is None else jax.tree.map(jnp.add, total, params)
      steps.append(step)
    if not steps:
      if self.all_steps():
        raise RuntimeError(f'no checkpoint in {self._manager.directory} can be read')
      raise FileNotFoundError(f'no checkpoint in {self._manager.directory}: train with '
                              'transformer_jax.train first')
    return jax.tree.map(lambda x: x / len(steps), total), sorted(steps)

  def _read(self, read: Callable[[int, Any], Any], step: int, abstract_tree: Any
            ) -> tuple[Any, Exception | None]:
    """(`read(step, abstract_tree)`, None), or (None, the error) with a warning if this process
    or another cannot read `step`: one that any process cannot read (each reads its own
    shards) is skipped by all, so that they all go on from the same step. Running out of
    memory says nothing about the checkpoint: it is raised as it is."""
    error = None
    try:
      result = read(step, abstract_tree)
    except (MemoryError, jax.errors.JaxRuntimeError):
      raise
    except Exception as e:  # pylint: disable=broad-except  (TensorStore raises many types)
      result, error = None, e
    if not _on_every_process(error is None):
      error = error or RuntimeError('another process cannot read it')
      logging.warning('checkpoint %s cannot be read, skipping it: %s',
                      self._manager.directory / str(step), _first_line(error))
      return None, error
    return result, None

  def _move_aside(self, steps: Sequence[int]) -> None:
    if not steps:
      return
    multihost_utils.sync_global_devices('checkpoints read')  # nobody still reads them

    def move():
      for step in steps:
        path = self._manager.directory / str(step)
        aside = path.with_name(f'{step}.corrupt')
        suffix = 1
        while aside.exists():
          aside, suffix = path.with_name(f'{step}.corrupt{suffix}'), suffix + 1
        path.rename(aside)
        logging.warning('moved the unreadable checkpoint %s to %s', path, aside)

    workdirs.on_lead(move, 'move the unreadable checkpoints aside')
    self._manager.reload()

  def wait(self) -> None:
    """Blocks until every started save is complete."""
    with self._write_errors():
      self._manager.wait_until_finished()

  @contextlib.contextmanager
  def _write_errors(self) -> Iterator[None]:
    try:
      yield
    except Exception as e:  # pylint: disable=broad-except  (orbax wraps the OSError variously)
      raise OSError(f'cannot write a checkpoint in {self._manager.directory} '
                    f'({_first_line(e)}); the checkpoints written before are intact') from e

  def close(self) -> None:
    """Closes the manager, which first waits for the saves under way (as `wait`)."""
    with self._write_errors():
      self._manager.close()


def _on_every_process(flag: bool) -> bool:
  """Whether `flag` holds on every process."""
  if jax.process_count() == 1:
    return flag
  return bool(multihost_utils.process_allgather(np.array(flag)).all())


def _first_line(error: Exception) -> str:
  lines = str(error).strip().splitlines()
  return f'{type(error).__name__}: {lines[0] if lines else ""}'


def _parameter_shapes(cfg: TransformerConfig) -> dict:
  flat = jax.tree_util.tree_leaves_with_path(costs.abstract_params(cfg))
  return {jax.tree_util.keystr(path): leaf.shape for path, leaf in flat}


# What the token ids mean and which text they stand for: checkpoints trained under other
# values hold embeddings of another vocabulary or language pair, so they cannot be resumed.
_DATA_FIELDS = ('data.dataset', 'data.source_lang', 'data.target_lang', 'data.preprocessing',
                'data.vocab_size', 'data.spm_model_type', 'data.max_corpus_chars',
                'data.train_files')


def check_compatible(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Checks `config` against the config saved in `workdir`, if there is one.

  With checkpoints: raises ValueError naming the differing fields if the model's parameters
  have other shapes, if a data field that defines the vocabulary or the language pair differs,
  or if `data.spm_model` is another file than the workdir's vocabulary. Other changes (steps,
  learning rate, dropout, ...) are allowed and logged as a warning, naming them.
  Without checkpoints (a run that stopped before its first one), the saved config binds only
  the vocabulary it left behind: if training would reuse the workdir's vocabulary, a data
  field that defines it must not differ. `config` is a validated one (`train_loop.train_together`
  validates it); the saved one is validated here before its parameter shapes are compared."""
  _refuse_exports(workdir)
  path = os.path.join(workdir, CONFIG_FILENAME)
  vocabulary = os.path.join(workdir, tokenizer.MODEL_FILENAME)
  steps = saved_steps(workdir)
  reuses_vocabulary = not config.data.spm_model and os.path.exists(vocabulary)
  if not (os.path.exists(path) and (steps or reuses_vocabulary)):
    return
  saved = _read_config(path)
  changed = _changed_fields(saved, config)

  def listed(names) -> str:
    return ', '.join(f'{name} {changed[name][0]!r} -> {changed[name][1]!r}' for name in names)

  other_data = [n for n in changed if n in _DATA_FIELDS]
  if not steps:
    if other_data:
      raise ValueError(f'{vocabulary} was learned for other data ({listed(other_data)}); '
                       'delete it to learn a new one, use a new --workdir, or the same data '
                       'config')
    return
  checks.validate(saved)  # it comes from a file: validated where the check first needs it
  if (_parameter_shapes(model_config.from_config(saved))
      != _parameter_shapes(model_config.from_config(config))):
    shaping = [n for n in changed if n.startswith('model.') or n == 'data.vocab_size']
    raise ValueError(f'{path} describes a model with other parameter shapes ({listed(shaping)}); '
                     'use a new --workdir, or the same model config to resume')
  if 'train.dropout_prng_impl' in changed:
    raise ValueError(f'the checkpoints in {workdir} hold a dropout key of another generator '
                     f'({listed(["train.dropout_prng_impl"])}); use a new --workdir, or the '
                     'same generator to resume')
  reasons = [listed(other_data)] if other_data else []
  if (config.data.spm_model and os.path.exists(vocabulary)
      and not filecmp.cmp(config.data.spm_model, vocabulary, shallow=False)):
    reasons.append(f'data.spm_model {config.data.spm_model} is not {vocabulary}')
  if reasons:
    raise ValueError(f'the checkpoints in {workdir} were trained on other data '
                     f'({", ".join(reasons)}); use a new --workdir, or the same data config '
                     'to resume')
  if changed:
    logging.warning('resuming %s with changed config fields: %s', workdir, listed(changed))


def saved_steps(workdir: str) -> list[int]:
  """The steps of `workdir`'s finished checkpoints, read from the directory names (orbax
  gives a checkpoint being written a suffix), without opening any."""
  directory = os.path.join(workdir, 'checkpoints')
  if not os.path.isdir(directory):
    return []
  return sorted(int(name) for name in os.listdir(directory) if name.isdigit())


def _changed_fields(saved: ml_collections.ConfigDict, config: ml_collections.ConfigDict
                    ) -> dict[str, tuple[Any, Any]]:
  """{field: (saved value, new value)} for every leaf field that differs, in name order
  (compared as written to JSON)."""
  before, after = (fields.flatten(c) for c in (saved, config))
  return {name: (before.get(name), after.get(name))
          for name in sorted(before.keys() | after.keys()) if before.get(name) != after.get(name)}


def load_config(workdir: str) -> ml_collections.ConfigDict:
  """The resolved config a training run saved in `workdir`, validated (it enters from a
  file)."""
  config = read_config(workdir)
  checks.validate(config)
  return config


def read_config(workdir: str) -> ml_collections.ConfigDict:
  """`load_config` without the validation, for a caller that changes fields first and
  validates the result (`Translator`)."""
  path = os.path.join(workdir, CONFIG_FILENAME)
  if not os.path.isfile(path):
    raise FileNotFoundError(f'{path} not found: --workdir must be a directory written by '
                            'transformer_jax.train')
  _refuse_exports(workdir)
  return _read_config(path)


def _refuse_exports(directory: str) -> None:
  """ValueError saying what `directory` is when it holds a model exported from a workdir
  (`transformer_jax.export`'s MarianMT directory, or CTranslate2's conversion of one) where a
  training workdir is expected: both have a config.json too."""
  if os.path.isfile(os.path.join(directory, 'model.bin')):
    kind = 'a CTranslate2 model directory (model.bin)'
  elif os.path.isfile(os.path.join(directory, 'model.safetensors')):
    kind = ('a Hugging Face model directory (model.safetensors), such as transformer_jax.export '
            'writes')
  else:
    return
  raise ValueError(f'{directory} is {kind}, not a training workdir: pass the workdir written by '
                   'transformer_jax.train (the one the model was exported from)')


def _read_config(path: str) -> ml_collections.ConfigDict:
  """A saved config.json. A field added after the run was written is absent there and gets
  the default the run was trained with."""
  try:
    with open(path) as f:
      config = json.load(f)
    for field, default in _ADDED_FIELDS.items():
      section, name = field.split('.')
      config[section].setdefault(name, default)
  except (ValueError, KeyError, TypeError, AttributeError) as e:
    raise ValueError(f'{path} is not a config written by transformer_jax.train '
                     f'({_first_line(e)})') from e
  return ml_collections.ConfigDict(config)


def write_config(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Writes `workdir/config.json` atomically; copies a given `data.spm_model` into the workdir
  so the run's directory holds everything needed to use its checkpoints."""
  atomic.write(os.path.join(workdir, CONFIG_FILENAME), config.to_json_best_effort(indent=2))
  vocabulary = os.path.join(workdir, tokenizer.MODEL_FILENAME)
  if config.data.spm_model and os.path.abspath(config.data.spm_model) != vocabulary:
    atomic.copy(config.data.spm_model, vocabulary)


def save_average(workdir: str, last: int | None, output: str) -> list[int]:
  """Writes the average of `workdir`'s last `last` checkpoints to the workdir `output` and
  returns the averaged steps."""
  config = load_config(workdir)
  last = config.decode.average_last if last is None else last
  if last <= 0:
    raise ValueError(f'--average_last must be a positive integer, got {last}')
  if os.path.isdir(os.path.join(output, 'checkpoints')) and os.listdir(
      os.path.join(output, 'checkpoints')):
    raise FileExistsError(f'{output} already holds checkpoints; choose a new --output')
  with contextlib.closing(Checkpoints(workdir)) as source:
    params, averaged = source.average_last(last,
                                           ShardedModel(config).abstract_params)
    # The optimizer state of the newest averaged checkpoint is kept as it was saved.
    state, data_state = source.restore(averaged[-1])
  state['params'] = params
  os.makedirs(output, exist_ok=True)
  write_config(config, output)
  atomic.copy(os.path.join(workdir, tokenizer.MODEL_FILENAME),
              os.path.join(output, tokenizer.MODEL_FILENAME))
  with contextlib.closing(Checkpoints(output, keep=1)) as target:  # `close` waits for the save
    target.save(averaged[-1], state, data_state)
  return averaged
