"""atomic: a file is replaced whole or not at all, with the permissions `open` would give it."""

import os
import stat
from pathlib import Path

import pytest

from transformer_jax.storage import atomic


@pytest.fixture
def umask_027():
  previous = os.umask(0o027)
  yield
  os.umask(previous)


def test_a_written_file_has_its_text_and_opens_permissions(tmp_path, umask_027):
  path = tmp_path / 'result.json'
  atomic.write(str(path), '{"bleu": 41.0}')
  assert path.read_text() == '{"bleu": 41.0}'
  assert stat.S_IMODE(path.stat().st_mode) == 0o640  # 0o666 less the umask 0o027
  assert os.listdir(tmp_path) == ['result.json']


def test_the_file_and_then_its_renamed_entry_are_flushed_to_disk(tmp_path, monkeypatch):
  # A rename is durable only once its directory is flushed, after the rename.
  path = tmp_path / 'result.json'
  flushed = []
  fsync = os.fsync

  def recording_fsync(descriptor):
    if stat.S_ISDIR(os.fstat(descriptor).st_mode):
      flushed.append(('directory', os.fstat(descriptor).st_ino, path.exists() and path.read_text()))
    else:
      flushed.append(('file', None, None))
    fsync(descriptor)

  monkeypatch.setattr(os, 'fsync', recording_fsync)
  atomic.write(str(path), 'new')
  assert flushed == [('file', None, None), ('directory', tmp_path.stat().st_ino, 'new')]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
  path = tmp_path / 'config.json'
  path.write_text('old')
  with pytest.raises(RuntimeError, match='interrupted'):
    with atomic.replacing(str(path)) as temporary:
      with open(temporary, 'w') as f:
        f.write('half')
      raise RuntimeError('interrupted')
  assert path.read_text() == 'old'
  assert os.listdir(tmp_path) == ['config.json']


def test_a_directory_appears_whole_with_opens_permissions(tmp_path, umask_027):
  path = tmp_path / 'exported'
  with atomic.replacing_directory(str(path)) as temporary:
    (Path(temporary) / 'weights').write_text('new')
    assert not path.exists()  # nothing at `path` until the directory is complete
  assert os.listdir(path) == ['weights'] and (path / 'weights').read_text() == 'new'
  assert stat.S_IMODE(path.stat().st_mode) == 0o750  # 0o777 less the umask 0o027
  assert stat.S_IMODE((path / 'weights').stat().st_mode) == 0o640
  assert os.listdir(tmp_path) == ['exported']


def test_a_replaced_directory_goes_only_once_the_new_one_is_complete(tmp_path):
  path = tmp_path / 'exported'
  path.mkdir()
  (path / 'old').write_text('old')
  with pytest.raises(RuntimeError, match='interrupted'):
    with atomic.replacing_directory(str(path)) as temporary:
      (Path(temporary) / 'half').write_text('half')
      raise RuntimeError('interrupted')
  assert os.listdir(path) == ['old'] and os.listdir(tmp_path) == ['exported']
  with atomic.replacing_directory(str(path)) as temporary:
    (Path(temporary) / 'new').write_text('new')
  assert os.listdir(path) == ['new'] and os.listdir(tmp_path) == ['exported']
