r"""Translates text with a trained workdir: one source sentence per line in, one translation
per line out, in the same order and number.

  python -m transformer_jax.translate --workdir=DIR [--input=FILE] [--output=FILE] \
      [--beam_size=4] [--alpha=0.6] [--average_last=5] [--batch_size=64]

Reads stdin and writes stdout unless --input/--output are given (a progress bar is shown for
files). Decoding settings default to the workdir's `config.decode` (§6.1: beam 4, α 0.6, the
last 5 checkpoints averaged). An empty line gives an empty line; a line longer than the model's
maximum length is truncated with a warning naming it; bytes that are not UTF-8 stop the command
with an error naming the line.
"""

import sys
from typing import BinaryIO

from absl import app, flags

from transformer_jax import checkpointing, config_lib, inference

WORKDIR = flags.DEFINE_string('workdir', None, 'A training run\'s directory.', required=True)
_INPUT = flags.DEFINE_string('input', None, 'Source sentences, one per line (default: stdin).')
_OUTPUT = flags.DEFINE_string('output', None, 'Where to write translations (default: stdout).')
_BEAM_SIZE = flags.DEFINE_integer('beam_size', None, 'Beam size; 1 = greedy '
                                  '(default: config.decode.beam_size).')
_ALPHA = flags.DEFINE_float('alpha', None, 'Length penalty α (default: config.decode.alpha).')
_AVERAGE_LAST = flags.DEFINE_integer('average_last', None, 'Average the parameters of the last '
                                     'K checkpoints (default: config.decode.average_last).')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 64, 'Sentences decoded at once.')


def read_lines(stream: BinaryIO, name: str) -> list[str]:
  """The lines of a byte stream as text, without line ends; a line that is not valid UTF-8 is
  a ValueError naming `name` and the line number."""
  lines = []
  for number, raw in enumerate(stream.read().splitlines(), start=1):
    try:
      lines.append(raw.decode('utf-8'))
    except UnicodeDecodeError as e:
      raise ValueError(f'{name}:{number}: not valid UTF-8 ({e.reason} at byte {e.start})') from e
  return lines


def write_lines(lines: list[str], path: str | None) -> None:
  """To stdout, or atomically to `path`."""
  text = ''.join(line + '\n' for line in lines)
  if path is None:
    sys.stdout.write(text)
    sys.stdout.flush()
  else:
    checkpointing.atomic_write(path, text)


def translator_from_flags() -> inference.Translator:
  return inference.Translator(WORKDIR.value, beam_size=_BEAM_SIZE.value, alpha=_ALPHA.value,
                              average_last=_AVERAGE_LAST.value, batch_size=_BATCH_SIZE.value)


def main(argv):
  config_lib.start_command(argv)
  try:
    if _INPUT.value is None:
      name, lines = '<stdin>', read_lines(sys.stdin.buffer, '<stdin>')
    else:
      with open(_INPUT.value, 'rb') as f:
        name, lines = _INPUT.value, read_lines(f, _INPUT.value)
    translator = translator_from_flags()
    translations = translator.translate(lines, name, progress=_INPUT.value is not None)
    write_lines(translations, _OUTPUT.value)
  except (OSError, ValueError) as e:
    sys.exit(f'error: {e}')


if __name__ == '__main__':
  app.run(main)
