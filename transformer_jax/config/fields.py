"""A config's fields by dotted name ('model.d_ff'): overridden as the command line does, and
flattened to compare configs field by field.

`overridden` and `unknown_override` read `FIELD=VALUE` overrides (`command_line_overrides`: a
command line's `--config.FIELD=VALUE`); `flatten` gives every leaf field; `shuffle_seed` is the
one field that falls back on another; `RENAMED` holds the fields' old names.
"""

import json
import re

from absl import flags
import ml_collections
from ml_collections import config_flags


# Fields renamed, with their new names: a command line, sweep override or config file that sets
# the old name is refused naming the new one (`unknown_override`, `renamed_note`), and a
# workdir's saved config is read under the new names (`saved_config`).
RENAMED = {'parallel.model': 'parallel.tensor'}


def command_line_overrides(argv: list[str]) -> list[str]:
  """The `--config.FIELD=VALUE` arguments of a command line `argv` as `FIELD=VALUE`."""
  return [arg[len('--config.'):] for arg in argv[1:] if arg.startswith('--config.')]


def unknown_override(argv: list[str], config: ml_collections.ConfigDict) -> str | None:
  """The first `--config.<field>=...` argument of `argv` whose field is not in `config`, if
  any."""
  for override in command_line_overrides(argv):
    field = override.split('=', 1)[0]
    node = config
    for part in field.split('.'):
      if not isinstance(node, ml_collections.ConfigDict) or part not in node:
        if field in RENAMED:
          return f'--config.{override}: config.{field} was renamed config.{RENAMED[field]}'
        return f'--config.{override}: config.{field} does not exist'
      node = node[part]
  return None


def renamed_note(message: str) -> str:
  """`message`, a locked config's refusal of a field that a config file sets, with the new name
  when the field is one renamed (`RENAMED`)."""
  for old, new in RENAMED.items():
    name, new_name = old.rsplit('.', 1)[1], new.rsplit('.', 1)[1]
    if (f'Key "{name}" does not exist' in message
        and re.search(rf"\\?'{new_name}\\?':", message)):  # a field present, its quotes escaped
      return f'config.{old} was renamed config.{new}: {message}'
  return message


def overridden(config: ml_collections.ConfigDict, overrides: list[str]
               ) -> ml_collections.ConfigDict:
  """`config` with `FIELD=VALUE` overrides applied by the parser that reads a command's
  `--config.FIELD=VALUE` (so each value is typed as the field is); raises ValueError naming a
  field that does not exist or a value that does not parse. The values are not checked
  (`checks`)."""
  argv = ['overrides', *(f'--config.{override}' for override in overrides)]
  unknown = unknown_override(argv, config)
  if unknown:
    raise ValueError(f'--override: {unknown}')
  flag_values = flags.FlagValues()
  try:
    config_flags.DEFINE_config_dict('config', config, flag_values=flag_values, sys_argv=argv)
    flag_values(argv)
  except flags.Error as e:
    raise ValueError(f'--override: {str(e).strip().splitlines()[-1]}') from e
  return flag_values.config


def flatten(config: ml_collections.ConfigDict) -> dict:
  """Every leaf field of `config` by its dotted name ('model.d_ff'), valued as written to JSON
  (tuples as lists): how runs and saved configs are compared field by field."""
  flat = {}

  def walk(node: dict, prefix: str) -> None:
    for name, value in node.items():
      if isinstance(value, dict):
        walk(value, f'{prefix}{name}.')
      else:
        flat[prefix + name] = value

  walk(json.loads(config.to_json_best_effort()), '')
  return flat


def shuffle_seed(config: ml_collections.ConfigDict) -> int:
  """The seed of the training batches' order: `data.shuffle_seed`, or `seed` if it is None."""
  return config.seed if config.data.shuffle_seed is None else config.data.shuffle_seed
