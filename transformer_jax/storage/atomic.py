"""Files written whole or not at all, so that a crash never leaves a half-written file.

The content goes to a temporary file in the same directory, which is flushed to disk and renamed
over the destination once complete (a rename within one file system is atomic), so a crash never
leaves a half-written file; the directory is then flushed too, so that the rename itself survives a
power loss. The file gets the permissions of one made by `open` (0o666 less the umask), not the
temporary file's 0o600."""

import contextlib
import os
import shutil
import tempfile
from typing import Iterator


@contextlib.contextmanager
def replacing(path: str) -> Iterator[str]:
  """Yields a temporary path beside `path` to write to; renames it to `path` on success and
  removes it on an exception."""
  directory = os.path.dirname(os.path.abspath(path))
  descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=f'.{os.path.basename(path)}.')
  os.close(descriptor)
  try:
    yield temporary
    with open(temporary, 'rb') as written:
      os.fsync(written.fileno())
    os.chmod(temporary, 0o666 & ~_umask())
    os.replace(temporary, path)
    _fsync_directory(directory)
  finally:
    if os.path.exists(temporary):
      os.remove(temporary)


def _fsync_directory(directory: str) -> None:
  descriptor = os.open(directory, os.O_RDONLY)
  try:
    os.fsync(descriptor)
  finally:
    os.close(descriptor)


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def copy(source: str, path: str) -> None:
  """Copies the file `source` to `path` atomically."""
  with replacing(path) as temporary:
    shutil.copyfile(source, temporary)


def write(path: str, text: str) -> None:
  """Writes `text` (UTF-8) to `path` atomically."""
  with replacing(path) as temporary, open(temporary, 'w', encoding='utf-8') as f:
    f.write(text)


@contextlib.contextmanager
def replacing_directory(path: str) -> Iterator[str]:
  """Yields a temporary directory beside `path` to fill; on success renames it to `path` (an
  existing `path` is moved aside first and removed once the new one is in place) with the
  permissions of directories and files made by `os.makedirs` and `open`; on an exception
  removes it."""
  parent = os.path.dirname(os.path.abspath(path))
  temporary = tempfile.mkdtemp(dir=parent, prefix=f'.{os.path.basename(path)}.')
  try:
    yield temporary
    for name in os.listdir(temporary):
      os.chmod(os.path.join(temporary, name), 0o666 & ~_umask())
    os.chmod(temporary, 0o777 & ~_umask())
    if os.path.isdir(path):
      old = tempfile.mkdtemp(dir=parent, prefix=f'.{os.path.basename(path)}.old.')
      os.rename(path, os.path.join(old, 'replaced'))
      os.rename(temporary, path)
      shutil.rmtree(old)
    else:
      os.rename(temporary, path)
    _fsync_directory(parent)
  finally:
    if os.path.exists(temporary):
      shutil.rmtree(temporary)
