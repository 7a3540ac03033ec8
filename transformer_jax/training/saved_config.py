"""A training run's config, saved beside its checkpoints as `workdir/config.json`: written,
read back (validated), and compared with the config of a run that resumes there.

  saved_config.write_config(config, workdir)        # the resolved config (and vocabulary)
  config = saved_config.load_config(workdir)        # validated: it enters from a file
  saved_config.check_compatible(config, workdir)    # before a run resumes in `workdir`

A field added to the configs after a run was saved reads as the behaviour that run had
(`_ADDED_FIELDS`), and a field or mesh axis renamed since reads under its new name
(`fields.RENAMED`, `choices.RENAMED_MESH_AXES`), so older workdirs still resume and translate.
"""

import json
import os
from typing import Any

from absl import logging
from etils import epath
import jax
import ml_collections

from transformer_jax.config import checks, choices, fields, platforms
from transformer_jax.data import tokenizer
from transformer_jax.model import costs, model_config
from transformer_jax.model.model_config import TransformerConfig
from transformer_jax.storage import atomic, buckets
from transformer_jax.training import checkpointing

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
                 'data.prefetch': 0, 'train.steps_per_call': 1, 'data.shuffle_seed': None,
                 'train.bleu_every_steps': 1, 'data.prepared': None}


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

  With checkpoints: raises ValueError naming the differing fields if the model's parameters have
  other shapes, if a data field that defines the vocabulary or the language pair differs, or if
  `data.spm_model` is another file than the workdir's vocabulary. Other changes (steps, learning
  rate, dropout, ...) are allowed and logged as a warning, naming them. Without checkpoints (a run
  that stopped before its first one), the saved config binds only the vocabulary it left behind: if
  training would reuse the workdir's vocabulary, a data field that defines it must not differ.
  `config` is a validated one (`loop.runs_together.train_together` validates it); the saved one is
  validated here before its parameter shapes are compared."""
  _refuse_exports(workdir)
  config = platforms.resolved(config)  # as the run writes it (`write_config`)
  path = os.path.join(workdir, CONFIG_FILENAME)
  vocabulary = os.path.join(workdir, tokenizer.MODEL_FILENAME)
  steps = checkpointing.saved_steps(workdir)
  reuses_vocabulary = not config.data.spm_model and epath.Path(vocabulary).exists()
  if not (epath.Path(path).exists() and (steps or reuses_vocabulary)):
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
  if (config.data.spm_model and epath.Path(vocabulary).exists()
      and epath.Path(config.data.spm_model).read_bytes() != epath.Path(vocabulary).read_bytes()):
    reasons.append(f'data.spm_model {config.data.spm_model} is not {vocabulary}')
  if reasons:
    raise ValueError(f'the checkpoints in {workdir} were trained on other data '
                     f'({", ".join(reasons)}); use a new --workdir, or the same data config '
                     'to resume')
  if changed:
    logging.warning('resuming %s with changed config fields: %s', workdir, listed(changed))


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
  validates the result (`Translator`). As this platform computes it (`platforms.for_reading`):
  a run trained with cuDNN's attention is read off a GPU with XLA's."""
  path = os.path.join(workdir, CONFIG_FILENAME)
  if not epath.Path(path).is_file():
    raise FileNotFoundError(f'{path} not found: --workdir must be a directory written by '
                            'transformer_jax.train')
  _refuse_exports(workdir)
  return platforms.for_reading(_read_config(path))


def _refuse_exports(directory: str) -> None:
  """ValueError saying what `directory` is when it holds a model exported from a workdir
  (`transformer_jax.export`'s MarianMT directory, or CTranslate2's conversion of one) where a
  training workdir is expected: both have a config.json too."""
  if epath.Path(directory, 'model.bin').is_file():
    kind = 'a CTranslate2 model directory (model.bin)'
  elif epath.Path(directory, 'model.safetensors').is_file():
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
    with epath.Path(path).open() as f:
      config = json.load(f)
    for field, default in _ADDED_FIELDS.items():
      section, name = field.split('.')
      config[section].setdefault(name, default)
    _rename_fields(config)
  except (ValueError, KeyError, TypeError, AttributeError) as e:
    raise ValueError(f'{path} is not a config written by transformer_jax.train '
                     f'({type(e).__name__}: {e})') from e
  return ml_collections.ConfigDict(config)


def _rename_fields(config: dict) -> None:
  """A saved config (read from JSON) under the names of today's configs: each renamed field
  (`fields.RENAMED`) and mesh axis of its axis rules (`choices.RENAMED_MESH_AXES`)."""
  for old, new in fields.RENAMED.items():
    (section, name), (new_section, new_name) = old.split('.'), new.split('.')
    if name in config[section]:
      config[new_section][new_name] = config[section].pop(name)

  def renamed(axes):
    if isinstance(axes, list):
      return [choices.RENAMED_MESH_AXES.get(name, name) for name in axes]
    return choices.RENAMED_MESH_AXES.get(axes, axes)

  config['parallel']['axis_rules'] = [[logical, renamed(axes)]
                                      for logical, axes in config['parallel']['axis_rules']]


def write_config(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Writes `workdir/config.json` atomically, every 'auto' resolved for this platform
(`platforms`); copies a given `data.spm_model` into the workdir so the run's directory holds
everything needed to use its checkpoints."""
  config = platforms.resolved(config)
  atomic.write(os.path.join(workdir, CONFIG_FILENAME), config.to_json_best_effort(indent=2))
  vocabulary = os.path.join(workdir, tokenizer.MODEL_FILENAME)
  if config.data.spm_model and buckets.absolute(config.data.spm_model) != vocabulary:
    atomic.copy(config.data.spm_model, vocabulary)
