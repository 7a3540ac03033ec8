"""`provenance.record`: the commit, package versions and machine that a result JSON records."""

from importlib import metadata
import os
import subprocess

import jax

from transformer_jax import provenance

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git(*args: str, cwd: str = REPO) -> str:
  return subprocess.run(['git', *args], cwd=cwd, capture_output=True, text=True,
                        check=True).stdout.strip()


def test_a_record_names_this_checkouts_commit_the_versions_and_the_machine():
  record = provenance.record()
  head = _git('rev-parse', 'HEAD')
  dirty = bool(_git('status', '--porcelain', '--untracked-files=no'))
  assert record['commit'] == head + ('-dirty' if dirty else '')
  assert record['packages']['jax'] == jax.__version__ == metadata.version('jax')
  assert record['packages']['flax'] == metadata.version('flax')
  machine = record['machine']
  assert machine['device'] == jax.devices()[0].device_kind and machine['cpus'] == os.cpu_count()
  assert machine['processor'] == provenance.processor() and machine['processor']
  assert provenance.record('H200')['machine']['device'] == 'H200'  # as the sweep passes it


def test_a_change_to_a_tracked_file_marks_the_commit_dirty(tmp_path):
  root = str(tmp_path)
  _git('init', '-q', cwd=root)
  (tmp_path / 'a.txt').write_text('one')
  _git('add', 'a.txt', cwd=root)
  _git('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qm', 'one', cwd=root)
  head = _git('rev-parse', 'HEAD', cwd=root)
  (tmp_path / 'untracked.txt').write_text('not part of the commit')
  assert provenance.commit(root) == head
  (tmp_path / 'a.txt').write_text('two')
  assert provenance.commit(root) == head + '-dirty'


def test_no_commit_outside_a_checkout_or_below_another_ones_top(tmp_path):
  assert provenance.commit(str(tmp_path)) is None  # no repository at all
  _git('init', '-q', cwd=str(tmp_path))
  inside = tmp_path / 'venv' / 'site-packages'  # an installed copy inside some repository
  inside.mkdir(parents=True)
  assert provenance.commit(str(inside)) is None
