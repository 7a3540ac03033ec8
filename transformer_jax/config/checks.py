"""A config's values checked (`validate`) before any long work starts, each error naming the
offending field.

A config is validated once, in the process it enters, where it enters: a command's `--config`
with its `--config.<field>=...` overrides (`cli.run`); a sweep row with the sweep's overrides
(`sweep.plan.row_config`, which `summary --all_rows` uses too); a workdir's saved config
(`saved_config.load_config`, `saved_config.check_compatible` when a run resumes, `Translator`
after its own decoding settings). Every function that takes a config
(`train_loop.train_and_evaluate`, `model_config.from_config`, `ShardedModel`, `Trainer`,
`pipeline.load`, `benchmark.run`, ...) takes a valid one: a script that builds a config calls
`validate` on it once.
"""

import ml_collections

from transformer_jax.config import choices

_POSITIVE_INTS = (
    'model.num_layers', 'model.d_model', 'model.d_ff', 'model.num_heads', 'model.d_k',
    'model.d_v', 'model.max_len', 'data.vocab_size', 'data.tokens_per_batch', 'data.max_length',
    'data.max_corpus_chars',
    'train.num_train_steps', 'train.warmup_steps', 'train.grad_accum_steps',
    'train.log_every_steps', 'train.eval_every_steps', 'train.checkpoint_every_steps',
    'train.keep_checkpoints', 'train.steps_per_call', 'train.bleu_every_steps',
    'decode.beam_size', 'decode.average_last',
)

_MESH_AXES = ('parallel.data', 'parallel.fsdp', 'parallel.tensor')  # positive, or -1
_UNIT_INTERVAL = (  # values in [0, 1)
    'model.dropout_rate', 'model.attention_dropout_rate', 'model.relu_dropout_rate',
    'model.layerdrop_rate', 'model.drophead_rate', 'train.label_smoothing', 'train.adam_b1',
    'train.adam_b2',
)
_NON_NEGATIVE = ('train.lr_scale', 'train.adam_eps', 'decode.alpha', 'decode.max_extra_length')
_CHOICES = {
    'dtype': choices.DTYPES,
    **{f'model.{field}': values for field, values in choices.MODEL.items()},
    'data.dataset': choices.DATASETS,
    'data.spm_model_type': choices.SPM_MODEL_TYPES,
    'data.preprocessing': choices.PREPROCESSING,
    'data.buckets': (choices.AUTO, *choices.BUCKETS),
    'train.dropout_prng_impl': choices.DROPOUT_PRNG_IMPLS,
}


def _get(config: ml_collections.ConfigDict, field: str):
  value = config
  for part in field.split('.'):
    if part not in value:
      raise ValueError(f'config.{field} is missing')
    value = value[part]
  return value


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ValueError naming the first invalid field of `config`. A field of
  `choices.AUTO_FIELDS` may say 'auto'; what depends on it is checked once it is resolved
  (`platforms.resolved`)."""
  autos = {field for field in choices.AUTO_FIELDS if _get(config, field) == choices.AUTO}
  _check_kinds(config, autos)
  for field in _MESH_AXES:
    value = _get(config, field)
    if isinstance(value, bool) or not isinstance(value, int) or not (value > 0 or value == -1):
      raise ValueError(f'config.{field} must be a positive integer or -1, got {value!r}')
  if [_get(config, field) for field in _MESH_AXES].count(-1) > 1:
    raise ValueError('at most one of config.parallel.data/fsdp/tensor may be -1')
  num_eval_steps = _get(config, 'train.num_eval_steps')
  if not isinstance(num_eval_steps, int) or not (num_eval_steps > 0 or num_eval_steps == -1):
    raise ValueError(f'config.train.num_eval_steps must be a positive integer or -1 (the whole '
                     f'split), got {num_eval_steps!r}')
  longest = config.data.max_length + config.decode.max_extra_length
  if longest > config.model.max_len:
    raise ValueError(
        f'config.model.max_len={config.model.max_len} positions cannot hold the longest output, '
        f'config.data.max_length + config.decode.max_extra_length = {longest}')
  # A search step keeps 2k candidates from the tokens a hypothesis can take: all but PAD.
  if 2 * config.decode.beam_size + 1 > config.data.vocab_size:
    raise ValueError(f'config.decode.beam_size={config.decode.beam_size} needs a vocabulary of '
                     f'at least {2 * config.decode.beam_size + 1} tokens (2k candidates and PAD), '
                     f'config.data.vocab_size is {config.data.vocab_size}')
  loss_chunk = config.train.loss_chunk
  if 'train.loss_chunk' not in autos and (
      isinstance(loss_chunk, bool) or not isinstance(loss_chunk, int) or loss_chunk < 0):
    raise ValueError('config.train.loss_chunk must be 0 (logits whole) or a number of target '
                     f'positions, got {loss_chunk!r}')
  prefetch = config.data.prefetch
  if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
    raise ValueError('config.data.prefetch must be 0 (batches made on the training thread) or a '
                     f'number of calls prepared ahead, got {prefetch!r}')
  shuffle_seed = config.data.shuffle_seed
  if shuffle_seed is not None and (isinstance(shuffle_seed, bool)
                                   or not isinstance(shuffle_seed, int) or shuffle_seed < 0):
    raise ValueError('config.data.shuffle_seed must be None (config.seed) or a non-negative '
                     f'integer, got {shuffle_seed!r}')
  if 'train.steps_per_call' not in autos:
    check_intervals(config)
  pack_length = config.data.pack_length
  if pack_length is not None and (
      isinstance(pack_length, bool) or not isinstance(pack_length, int)
      or not 0 <= pack_length <= config.data.max_length):
    raise ValueError(f'config.data.pack_length must be None (by platform), 0 (no packing) or at '
                     f'most config.data.max_length={config.data.max_length}, got '
                     f'{pack_length!r}')
  cache = config.train.compilation_cache_dir
  if cache is not None and not isinstance(cache, str):
    raise ValueError('config.train.compilation_cache_dir must be None (the user\'s cache), a '
                     f'directory or \'\' (no cache), got {cache!r}')
  if config.model.attention_impl != 'explicit' and (
      config.model.d_k != config.model.d_v or config.model.attention_dropout_rate):
    raise ValueError(f'config.model.attention_impl={config.model.attention_impl!r} '
                     '(jax.nn.dot_product_attention) needs config.model.d_k = d_v and no '
                     f'config.model.attention_dropout_rate, got d_k {config.model.d_k}, d_v '
                     f'{config.model.d_v}, rate {config.model.attention_dropout_rate}')
  if config.data.source_lang == config.data.target_lang:
    raise ValueError('config.data.source_lang and config.data.target_lang must differ, both are '
                     f'{config.data.source_lang!r}')
  if config.data.dataset == 'files':
    _check_files(config.data)
  _check_axis_rules(config.parallel.axis_rules)


def check_intervals(config: ml_collections.ConfigDict) -> None:
  """The checkpoint and evaluation intervals must be multiples of `train.steps_per_call`:
  checkpoints and evaluations happen between calls (checked once they say no 'auto')."""
  steps_per_call = config.train.steps_per_call
  for field in ('checkpoint_every_steps', 'eval_every_steps'):
    if config.train[field] % steps_per_call:
      raise ValueError(f'config.train.{field}={config.train[field]} must be a multiple of '
                       f'config.train.steps_per_call={steps_per_call}: checkpoints and '
                       'evaluations happen between calls')


def _check_kinds(config: ml_collections.ConfigDict, autos: set[str]) -> None:
  """The fields of a kind (positive integers, rates, choices, non-negative numbers), but those
  in `autos` that say 'auto'."""
  for field in _POSITIVE_INTS:
    value = _get(config, field)
    if field in autos:
      continue
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
      auto = " or 'auto'" if field in choices.AUTO_FIELDS else ''
      raise ValueError(f'config.{field} must be a positive integer{auto}, got {value!r}')
  for field in _UNIT_INTERVAL:
    value = _get(config, field)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
      raise ValueError(f'config.{field} must be in [0, 1), got {value!r}')
  for field, values in _CHOICES.items():
    value = _get(config, field)
    if value not in values and field not in autos:
      auto = " or 'auto'" if field in choices.AUTO_FIELDS else ''
      raise ValueError(f'config.{field} must be one of {values}{auto}, got {value!r}')
  for field in _NON_NEGATIVE:
    value = _get(config, field)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
      raise ValueError(f'config.{field} must be a non-negative number, got {value!r}')


def _check_files(data_config: ml_collections.ConfigDict) -> None:
  """dataset='files' needs train and validation files, each a local path whose pattern holds
  '{lang}' once, and a local tfds_data_dir."""
  for split in ('train', 'validation', 'test'):
    field = f'{split}_files'
    pattern = data_config[field]
    if pattern is None and split != 'test':
      raise ValueError(f"config.data.{field} must be set for config.data.dataset='files' "
                       "(e.g. 'corpus/train.{lang}.gz')")
    if pattern is not None and (not isinstance(pattern, str) or pattern.count('{lang}') != 1):
      raise ValueError(f'config.data.{field}={pattern!r} must be a path holding {{lang}} once, '
                       'where the file names differ by language (e.g. corpus/train.{lang}.gz)')
  # The package writes and stats these itself, with local file operations.
  for field in ('train_files', 'validation_files', 'test_files', 'tfds_data_dir'):
    if '://' in (data_config[field] or ''):
      raise ValueError(f"config.data.{field}={data_config[field]!r}: config.data.dataset='files' "
                       'needs local paths (copy remote files to a local disk first)')


def _check_axis_rules(rules) -> None:
  """Each rule maps one of the model's logical axes, once, to None, a mesh axis or a tuple of
  them. flax would leave a misspelt logical or mesh axis replicated without a word."""
  seen = set()
  for rule in rules:
    valid = (isinstance(rule, (tuple, list)) and len(rule) == 2
             and rule[0] in choices.LOGICAL_AXES and rule[0] not in seen
             and isinstance(rule[1], (type(None), str, tuple, list))
             and all(name in choices.MESH_AXES
                     for name in choices.mesh_axis_names(rule[1])))
    if not valid:
      raise ValueError(f'config.parallel.axis_rules: {rule!r} is not a (logical axis, mesh axes) '
                       f'rule: the logical axis is one of {choices.LOGICAL_AXES}, named '
                       f'once, and the mesh axes None or from {choices.MESH_AXES}'
                       + _renamed_mesh_axes(rule))
    seen.add(rule[0])


def _renamed_mesh_axes(rule) -> str:
  """'; mesh axis OLD was renamed NEW' for each renamed mesh axis that `rule` names."""
  names = (choices.mesh_axis_names(rule[1]) if isinstance(rule, (tuple, list)) and len(rule) == 2
           and isinstance(rule[1], (str, tuple, list)) else ())
  return ''.join(f'; mesh axis {name!r} was renamed {choices.RENAMED_MESH_AXES[name]!r}'
                 for name in names if name in choices.RENAMED_MESH_AXES)
