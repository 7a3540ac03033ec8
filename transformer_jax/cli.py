"""What every command (`python -m transformer_jax.<command>`) shares.

  def main():
    ...
  if __name__ == '__main__':
    cli.run(main)

Every command and experiment script uses one name for one meaning (`--output`, the path it
writes; `--average_last`, the checkpoints averaged; `--json`, a switch: the figures as JSON);
a name a command used to take fails naming the new one (`renamed`).

`run` lists every flag of the command in its `--help`, those that package modules define for it
too (`translator.define_translator_flags`), parses the flags and, when the command has a
`--config`, validates it with its `--config.<field>=...` overrides, so that a misspelt field or
an invalid value stops the command with a one-line error naming the field before any work
starts. A `--workdir`, `--output` or `--results` in a bucket (`gs://...`) is checked before the
command does anything (`buckets.check`: credentials, the bucket; another scheme is refused). Positional arguments are rejected; unless
--verbosity is given only warnings are logged (orbax logs every file operation at INFO); an
OSError, ValueError or RuntimeError ends the command at once with `error: <message>` as the
last line and exit status 1.
"""

import os
import sys
import threading
from typing import Callable

from absl import app, flags, logging

from transformer_jax.config import checks, fields
from transformer_jax.storage import buckets


def renamed(old: str, new: str, meaning: str) -> None:
  """Defines `--OLD`, a flag this command or script took and no longer does, as an error that
  names `--NEW` (one name per meaning across every command: tests/test_flags.py)."""
  flags.DEFINE_string(old, None, f'Renamed: --{new}.')
  flags.register_validator(old, lambda value: value is None,
                           message=f'--{old} was renamed --{new} ({meaning})')


def _parse_flags(argv: list[str]) -> list[str]:
  try:
    remaining = flags.FLAGS(argv)
    if 'config' in flags.FLAGS and flags.FLAGS.config is not None:
      checks.validate(flags.FLAGS.config)
  except flags.Error as e:  # a config file that raised keeps only its first and last lines
    lines = str(e).strip().splitlines()
    sys.exit(f'error: {lines[0]} {lines[-1]}' if len(lines) > 1 else f'error: {e}')
  except OSError as e:  # a missing config file
    sys.exit(f'error: {e}')
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    unknown = fields.unknown_override(argv, flags.FLAGS['config'].value)
    sys.exit(f'error: {unknown or fields.renamed_note(str(e))}')
  return remaining


def _adopt_package_flags() -> None:
  """Makes every flag defined by a module of this package a key flag of the command, so that
  `--help` lists it (absl lists only the main module's own and its declared key flags)."""
  for module, module_flags in flags.FLAGS.flags_by_module_dict().items():
    if module.startswith('transformer_jax.'):
      for flag in module_flags:
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)


# The flags that name a directory or file a command writes or reads as a run's: each is a local
# path or a reachable bucket's (`buckets.check`), checked before the command does anything.
_PATH_FLAGS = ('workdir', 'output', 'results')


def _check_paths() -> None:
  for name in _PATH_FLAGS:
    if name in flags.FLAGS and isinstance(flags.FLAGS[name].value, str):
      buckets.check(flags.FLAGS[name].value, f'--{name}')


def run(main: Callable[[], None]) -> None:
  """Runs a command's `main()` after parsing and checking its flags (see the module
  docstring)."""
  _adopt_package_flags()

  def wrapped(argv: list[str]) -> None:
    if len(argv) > 1:
      raise app.UsageError(f'unexpected arguments: {argv[1:]}')
    if not flags.FLAGS['verbosity'].present:
      logging.set_verbosity(logging.WARNING)
    try:
      _check_paths()
      main()
    except (OSError, ValueError, RuntimeError, FloatingPointError) as e:
      # After a failed write (a full disk), orbax's and asyncio's background threads are still
      # reporting the same failure on stderr. So: stderr goes to /dev/null and this line to a
      # copy of it, so that nothing they write later lands after or inside it; it starts on a
      # fresh line while another thread is alive, which may have written half a line already;
      # and the process ends at once, since TensorBoard's and orbax's exit handlers would report
      # the failure again.
      sys.stdout.flush()
      stderr = os.dup(2)
      os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
      fresh_line = '\n' if threading.active_count() > 1 else ''
      os.write(stderr, f'{fresh_line}error: {e}\n'.encode())
      os._exit(1)  # pylint: disable=protected-access

  app.run(wrapped, flags_parser=_parse_flags)
