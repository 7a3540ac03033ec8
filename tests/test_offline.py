"""Offline, every download this project makes is named within 10 s with its fixes, where the
tools behind it (TFDS, urllib, pip) would retry for minutes: the experiments' own downloads
here (the datasets' download steps: test_datasets.py)."""

import os
import socket
import subprocess
import sys
import time

import pytest

from transformer_jax.config import loading

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_multi30k_raw_offline_names_manual_dir_within_seconds(tmp_path, monkeypatch):
  """`experiments/tools/multi30k_raw.py`, behind every timing script's Multi30k: a resolver that
  fails is told at once, naming --manual_dir and the files it needs; nothing is downloaded."""
  multi30k_raw = loading.load_module(os.path.join(REPO, 'experiments', 'tools',
                                                  'multi30k_raw.py'))

  def resolver_fails(address, timeout):
    raise socket.gaierror(socket.EAI_NONAME, 'Name or service not known')

  def download(*args, **kwargs):
    raise AssertionError('a download was tried')

  monkeypatch.setattr(socket, 'create_connection', resolver_fails)
  monkeypatch.setattr(multi30k_raw.urllib.request, 'urlretrieve', download)
  monkeypatch.setattr(multi30k_raw, 'CACHE', str(tmp_path / 'cache'))
  start = time.monotonic()
  with pytest.raises(RuntimeError) as error:
    multi30k_raw.directory(None)
  assert time.monotonic() - start < 10
  message = str(error.value)
  assert 'raw.githubusercontent.com cannot be reached: gaierror' in message
  assert '--manual_dir=DIR' in message and 'test_2016_flickr.fr.gz' in message
  assert os.listdir(tmp_path / 'cache') == []


@pytest.mark.slow
def test_install_size_offline_names_the_indexes_within_seconds(tmp_path):
  """`experiments/install_size/install_size.py` with package indexes whose names never resolve
  (.invalid, RFC 6761): an error naming both within 10 s, before any virtual environment."""
  start = time.monotonic()
  result = subprocess.run(
      [sys.executable, os.path.join(REPO, 'experiments', 'install_size', 'install_size.py'),
       '--cpu_torch=torch --index-url https://torch.invalid/whl/cpu',
       f'--output={tmp_path / "size.json"}'],
      capture_output=True, text=True, cwd=tmp_path,
      env=dict(os.environ, PIP_INDEX_URL='https://pypi.invalid/simple/'))
  assert time.monotonic() - start < 10 + 5  # the interpreter and its imports first
  assert result.returncode != 0
  assert 'pypi.invalid cannot be reached' in result.stderr, result.stderr[-2000:]
  assert 'torch.invalid cannot be reached' in result.stderr
  assert 'PIP_INDEX_URL' in result.stderr and not (tmp_path / 'size.json').exists()
