"""Files written whole or not at all, so that a crash never leaves a half-written file.

The content goes to a temporary file in the same directory, which is flushed to disk and renamed
over the destination once complete (a rename within one file system is atomic), so a crash never
leaves a half-written file; the directory is then flushed too, so that the rename itself survives a
power loss. The file gets the permissions of one made by `open` (0o666 less the umask), not the
temporary file's 0o600.

In a bucket (`gs://`, `buckets`) an object is written whole or not at all by Cloud Storage
itself: the content goes to a local temporary file, uploaded once complete; a directory's files
are uploaded one by one, after any that were there are removed.
"""

import contextlib
import os
import shutil
import tempfile
from typing import Iterator

from etils import epath

from transformer_jax.storage import buckets


@contextlib.contextmanager
def replacing(path: str) -> Iterator[str]:
  """Yields a temporary path beside `path` to write to; renames it to `path` on success and
  removes it on an exception. In a bucket: a local temporary path, uploaded to `path`."""
  if buckets.is_url(path):
    with tempfile.TemporaryDirectory() as directory:
      temporary = os.path.join(directory, os.path.basename(path))
      yield temporary
      buckets.upload(temporary, path)
    return
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
  """Copies the file `source` (local or in a bucket) to `path` atomically."""
  with replacing(path) as temporary, epath.Path(source).open('rb') as f, open(
      temporary, 'wb') as copied:
    shutil.copyfileobj(f, copied, 1 << 24)


def write(path: str, text: str) -> None:
  """Writes `text` (UTF-8) to `path` atomically."""
  if buckets.is_url(path):
    epath.Path(path).write_text(text, encoding='utf-8')
    return
  with replacing(path) as temporary, open(temporary, 'w', encoding='utf-8') as f:
    f.write(text)


@contextlib.contextmanager
def replacing_directory(path: str) -> Iterator[str]:
  """Yields a temporary directory beside `path` to fill; on success renames it to `path` (an
  existing `path` is moved aside first and removed once the new one is in place) with the
  permissions of directories and files made by `os.makedirs` and `open`; on an exception
  removes it. In a bucket: a local temporary directory, whose files replace `path`'s."""
  if buckets.is_url(path):
    with tempfile.TemporaryDirectory() as temporary:
      yield temporary
      if epath.Path(path).exists():
        epath.Path(path).rmtree()
      for name in sorted(os.listdir(temporary)):
        buckets.upload(os.path.join(temporary, name), os.path.join(path, name))
    return
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
