"""`provenance.record`: the commit, package versions and machine that a result JSON records."""

import glob
from importlib import metadata
import json
import os
import subprocess
import sys

import jax

from transformer_jax.storage import provenance

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git(*args: str, cwd: str = REPO) -> str:
  return subprocess.run(['git', *args], cwd=cwd, capture_output=True, text=True,
                        check=True).stdout.strip()


def checkout_commit() -> str:
  """This checkout's commit as git itself gives it (never None: the suite runs in a clone),
  '-dirty' appended when tracked files differ from it: what a result JSON must record."""
  head = _git('rev-parse', 'HEAD')
  assert len(head) == 40, head
  return head + ('-dirty' if _git('status', '--porcelain', '--untracked-files=no') else '')


def test_a_record_names_this_checkouts_commit_the_versions_and_the_machine():
  record = provenance.record()
  assert record['commit'] == checkout_commit()
  assert record['packages']['jax'] == jax.__version__ == metadata.version('jax')
  assert record['packages']['flax'] == metadata.version('flax')
  machine = record['machine']
  assert machine['device'] == jax.devices()[0].device_kind and machine['cpus'] == os.cpu_count()
  assert machine['processor']
  with open('/proc/cpuinfo') as f:  # Linux, where CI runs
    cpu_flags = set(next(line for line in f if line.startswith('flags')).split(':')[1].split())
  assert set(machine['vector_extensions']) <= cpu_flags and 'sse2' in machine['vector_extensions']
  assert ('avx2' in cpu_flags) == ('avx2' in machine['vector_extensions'])
  assert provenance.record('H200')['machine']['device'] == 'H200'  # as the sweep passes it


def test_the_platform_is_asked_of_a_child_process(monkeypatch):
  """Answered by a child python that allocates no accelerator memory up front: the child's
  answer, made up here, is what comes back (a `platform` that asked this process would not
  give it); the real child answers as this process would."""
  children = []
  run = subprocess.run

  def spy(command, **kwargs):
    children.append((command, kwargs.get('env')))
    real = run(command, **kwargs)
    assert json.loads(real.stdout.strip().splitlines()[-1]) == [
        jax.default_backend(), jax.devices()[0].device_kind]
    return subprocess.CompletedProcess(command, 0, stdout='["tpu", "TPU v9 made up"]\n',
                                       stderr='')

  monkeypatch.setattr(provenance.subprocess, 'run', spy)
  assert provenance.platform() == ('tpu', 'TPU v9 made up')
  [(command, env)] = children
  assert command[0] == sys.executable and 'jax.devices()' in command[-1]
  assert env['XLA_PYTHON_CLIENT_PREALLOCATE'] == 'false'


def test_a_cpu_is_named_by_its_family_and_widest_vector_extension():
  assert provenance.cpu_type({'processor': 'AMD EPYC 7B13', 'vector_extensions': [
      'avx', 'avx2', 'fma', 'sse4_2']}) == 'AMD EPYC (AVX2)'
  assert provenance.cpu_type({'processor': 'Intel(R) Xeon(R) CPU @ 2.20GHz', 'vector_extensions': [
      'avx2', 'avx512f', 'amx_tile']}) == 'Intel Xeon (AVX-512)'
  assert provenance.cpu_type({'processor': 'Intel(R) Xeon(R) Processor',
                              'vector_extensions': []}) == 'Intel Xeon'


def _checkout(root) -> str:
  """A git repository at `root` that holds transformer_jax/storage/provenance.py, committed; its
  HEAD."""
  (root / 'transformer_jax' / 'storage').mkdir(parents=True)
  (root / 'transformer_jax' / 'storage' / 'provenance.py').write_text('one')
  _git('init', '-q', cwd=str(root))
  _git('add', '.', cwd=str(root))
  _git('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qm', 'one', cwd=str(root))
  return _git('rev-parse', 'HEAD', cwd=str(root))


def test_a_change_to_a_tracked_file_marks_the_commit_dirty(tmp_path):
  head = _checkout(tmp_path)
  (tmp_path / 'untracked.txt').write_text('not part of the commit')
  assert provenance.commit(str(tmp_path / 'transformer_jax')) == head
  (tmp_path / 'transformer_jax' / 'storage' / 'provenance.py').write_text('two')
  assert provenance.commit(str(tmp_path)) == head + '-dirty'


def test_no_commit_outside_a_checkout_of_this_project(tmp_path, monkeypatch):
  assert provenance.commit(str(tmp_path)) is None  # no repository at all
  other = tmp_path / 'other'
  other.mkdir()
  _git('init', '-q', cwd=str(other))
  assert provenance.commit(str(other)) is None  # some other project's repository
  # An installed copy (in a site-packages directory inside that repository) run from a
  # checkout of this project: the checkout's commit.
  site = other / 'venv' / 'site-packages'
  site.mkdir(parents=True)
  monkeypatch.setattr(provenance, '_ROOT', str(site))
  head = _checkout(tmp_path / 'clone')
  monkeypatch.chdir(tmp_path / 'clone')
  assert provenance.commit() == head
  monkeypatch.chdir(other)
  assert provenance.commit() is None


def test_every_experiment_that_writes_json_records_its_provenance():
  """A source check: each script of experiments/ that writes JSON calls `provenance.record`,
  itself or through `tools/measure.py`'s `write` (the sweep's rows: test_sweep.py)."""
  scripts = sorted(glob.glob(os.path.join(REPO, 'experiments', '**', '*.py'), recursive=True))
  writers = [path for path in scripts
             if any(call in open(path).read() for call in ('json.dump', 'measure.write('))]
  assert len(writers) >= 10
  assert [os.path.relpath(path, REPO) for path in writers
          if not any(call in open(path).read()
                     for call in ('provenance.record(', 'measure.write('))] == []


def test_a_durations_file_records_the_commit_that_measured_it(tmp_path):
  log = tmp_path / 'log'
  log.write_text('1.50s call     tests/test_a.py::test_one\n1 passed in 1.60s\n')
  script = os.path.join(REPO, 'experiments', 'test_durations', 'durations.py')
  subprocess.run([sys.executable, script, f'--log={log}', f'--output={tmp_path / "d.json"}'],
                 check=True, capture_output=True)
  written = json.loads((tmp_path / 'd.json').read_text())
  assert written['tests'] == {'tests/test_a.py::test_one': 1.5}
  assert written['provenance']['commit'] == checkout_commit()
