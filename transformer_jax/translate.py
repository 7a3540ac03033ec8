r"""Translates text with a trained workdir: one source sentence per line in, one translation
per line out, in the same order and number.

  python -m transformer_jax.translate --workdir=DIR [--input=FILE] [--output=FILE] \
      [--beam_size=4] [--alpha=0.6] [--average_last=5] [--batch_size=64]

Reads stdin and writes stdout unless --input/--output are given (a progress bar is shown for
files). Decoding settings default to the workdir's `config.decode` (§6.1: beam 4, α 0.6, the
last 5 checkpoints averaged). An empty line gives an empty line; a line longer than the model's
maximum length is truncated with a warning naming it; bytes that are not UTF-8 stop the command
with an error naming the line; an --output that cannot be written is reported before anything is
read or decoded.
"""

import os
import sys
from typing import BinaryIO

from absl import flags

from transformer_jax import cli
from transformer_jax.decoding.translator import define_translator_flags
from transformer_jax.storage import atomic, buckets, workdirs


def read_lines(stream: BinaryIO, name: str) -> list[str]:
  """The lines of a byte stream as text, without line ends; a line that is not valid UTF-8 is
  a ValueError naming `name` and the line number.

  Lines end at '\n' (or '\r\n') only: a stray '\r' inside a line, common in crawled text,
  stays in it, so there is one output line per input line.
  """
  raw_lines = stream.read().split(b'\n')
  if raw_lines[-1] == b'':  # a final newline does not start another line
    raw_lines.pop()
  lines = []
  for number, raw in enumerate(raw_lines, start=1):
    try:
      lines.append(raw.removesuffix(b'\r').decode('utf-8'))
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
    atomic.write(path, text)


def main():
  if _OUTPUT.value is not None:  # before decoding, which can take long
    workdirs.check_writable(os.path.dirname(buckets.absolute(_OUTPUT.value)), '--output')
  if _INPUT.value is None:
    name, lines = '<stdin>', read_lines(sys.stdin.buffer, '<stdin>')
  else:
    with open(_INPUT.value, 'rb') as f:
      name, lines = _INPUT.value, read_lines(f, _INPUT.value)
  translator = _TRANSLATOR()
  print(f'translating {len(lines)} sentences of {name} with {translator.settings()}',
        file=sys.stderr, flush=True)
  translations = translator.translate(lines, name, progress=_INPUT.value is not None)
  write_lines(translations, _OUTPUT.value)


if __name__ == '__main__':
  _TRANSLATOR = define_translator_flags()
  _INPUT = flags.DEFINE_string('input', None, 'Source sentences, one per line (default: stdin).')
  _OUTPUT = flags.DEFINE_string('output', None, 'Where to write translations (default: stdout).')
  cli.run(main)
