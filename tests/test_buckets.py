"""Runs kept in a Cloud Storage bucket (transformer_jax/storage/buckets.py, leases.py), against
fake-gcs-server on 127.0.0.1: a bucket that does not exist or an unreachable address is refused
in seconds naming the bucket and the fix; files are written whole and logs appended; a lease is
held by one process at a time and taken over once its holder has ended or stopped renewing it.
(The commands' refusals: tests/test_reliability.py; a run trained, killed and resumed in a
bucket: tests/test_train.py; a sweep shared through one: tests/test_side_by_side.py.)"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

from etils import epath
import pytest

from transformer_jax.storage import atomic, buckets, leases, workdirs
from transformer_jax.training import metrics_log


def _closed_port() -> str:
  """An address of 127.0.0.1 where nothing listens."""
  with socket.socket() as probe:
    probe.bind(('127.0.0.1', 0))
    return f'127.0.0.1:{probe.getsockname()[1]}'


def test_the_check_answers_within_seconds(in_emulator, monkeypatch):
  start = time.monotonic()
  with pytest.raises(ValueError, match=r'--workdir=gs://missing/run: the bucket gs://missing '
                                       r'does not exist.*buckets create gs://missing'):
    buckets.check('gs://missing/run', '--workdir')
  buckets.check(f'gs://{in_emulator.bucket()}/run', '--workdir')  # one that exists
  monkeypatch.setenv('STORAGE_EMULATOR_HOST', f'http://{_closed_port()}')
  buckets.client.cache_clear()
  with pytest.raises(ValueError, match=r'--results=gs://any/rows: cannot reach gs://any at '
                                       r'http://127.0.0.1:\d+ \(ConnectionError'):
    buckets.check('gs://any/rows', '--results')
  assert time.monotonic() - start < 10
  with pytest.raises(ValueError, match=r'--workdir=s3://b/run: a s3:// URL.*Mount it'):
    buckets.check('s3://b/run', '--workdir')
  buckets.check('relative/run', '--workdir')  # a local path: nothing to check


def test_files_written_whole_and_appended_in_a_bucket(in_emulator, tmp_path):
  root = f'gs://{in_emulator.bucket()}/run'
  workdirs.check_writable(root)
  atomic.write(f'{root}/a.json', '{"a": 1}')
  with atomic.replacing(f'{root}/b.bin') as temporary:
    with open(temporary, 'wb') as f:
      f.write(b'\x00\x01')
  with pytest.raises(RuntimeError):
    with atomic.replacing(f'{root}/c.bin') as temporary:
      with open(temporary, 'wb') as f:
        f.write(b'half')
      raise RuntimeError('a crash while writing')
  atomic.copy(f'{root}/b.bin', str(tmp_path / 'b.bin'))
  assert (tmp_path / 'b.bin').read_bytes() == b'\x00\x01'
  assert sorted(path.name for path in epath.Path(root).iterdir()) == ['a.json', 'b.bin']
  # A metrics log resumed after a crash that left half a line: the line is cut, records append.
  epath.Path(root, 'metrics.jsonl').write_text('{"step": 1, "split": "train", "loss": 2.0}\n'
                                               '{"step": 2, "spl')
  log = metrics_log.MetricsLog(root)
  log.write(2, 'train', {'loss': 1.5})
  assert metrics_log.read(f'{root}/metrics.jsonl') == [
      {'step': 1, 'split': 'train', 'loss': 2.0}, {'step': 2, 'split': 'train', 'loss': 1.5}]
  log.close()
  [events] = list(epath.Path(root, 'tensorboard').iterdir())
  assert events.name.startswith('events.out.tfevents.') and events.stat().length > 0
  assert not os.path.exists('gs:')


@pytest.fixture
def short_leases(monkeypatch):
  monkeypatch.setattr(leases, 'SECONDS', 1.0)
  monkeypatch.setattr(leases, 'RENEW_SECONDS', 0.2)


def test_a_lease_has_one_holder_and_is_renewed_while_held(in_emulator, short_leases):
  url = f'gs://{in_emulator.bucket()}/run/lock'
  lease = leases.Lease.take(url, wait=False, run='first')
  assert lease is not None and lease.previous == ''
  assert leases.Lease.holder(url)['run'] == 'first'
  assert leases.Lease.take(url, wait=False) is None
  # Waiting past its lapse: renewed meanwhile, so still held.
  start = time.monotonic()
  assert leases.Lease.take(url, wait=True) is None
  assert time.monotonic() - start < 3
  lease.release()
  assert leases.Lease.holder(url) == {}
  again = leases.Lease.take(url, wait=False)
  assert again is not None and again.previous == ''
  again.release()


def test_a_lease_released_while_another_process_waits_is_taken_at_once(in_emulator):
  """A sweep's record and table locks are held for a moment: a process waiting for one takes it
  as soon as it is released (within POLL_SECONDS), not at the holder's next renewal (15 s)."""
  url = f'gs://{in_emulator.bucket()}/sweep/table.lock'
  held = subprocess.Popen(
      [sys.executable, '-c', 'import time; from transformer_jax.storage import leases; '
       f'lease = leases.Lease.take({url!r}, wait=False); print("held", flush=True); '
       'time.sleep(1.0); lease.release(); time.sleep(60)'],
      env=in_emulator.environment(), stdout=subprocess.PIPE, text=True)
  assert held.stdout.readline().strip() == 'held'
  start = time.monotonic()
  lease = leases.Lease.take(url, wait=True)
  waited = time.monotonic() - start
  held.kill()
  held.wait()
  # Taken once released (a new lease, not one taken over), seconds before the holder's first
  # renewal would have come.
  assert lease is not None and lease.previous == ''
  assert waited < 5.0 < leases.RENEW_SECONDS, waited
  lease.release()


def test_a_lease_left_by_a_dead_holder_is_taken_over(in_emulator, short_leases):
  url = f'gs://{in_emulator.bucket()}/run/lock'
  # A holder on another host that stopped renewing: taken once it lapses, not before (its 3 s
  # outlast the write and the first try on a loaded machine: the first gcsfs call of a process
  # can take over a second).
  elsewhere = {'host': 'another-host', 'pid': 1, 'expires': time.time() + 3.0}
  epath.Path(url).write_text(json.dumps(elsewhere))
  assert leases.Lease.take(url, wait=False) is None
  lease = leases.Lease.take(url, wait=True)
  assert lease is not None and json.loads(lease.previous)['host'] == 'another-host'
  assert elsewhere['expires'] <= time.time() < elsewhere['expires'] + 5
  lease.release()
  # A holder on this host whose process has ended (SIGKILL): taken at once, however long its
  # lease had to run.
  child = subprocess.Popen(
      [sys.executable, '-c', 'import time; from transformer_jax.storage import leases; '
       f'assert leases.Lease.take({url!r}, wait=False); print("held", flush=True); '
       'time.sleep(60)'], env=in_emulator.environment(), stdout=subprocess.PIPE, text=True)
  assert child.stdout.readline().strip() == 'held'
  assert leases.Lease.take(url, wait=False) is None
  child.kill()
  assert child.wait() == -signal.SIGKILL
  assert leases.Lease.holder(url)['expires'] > time.time() + 10  # the child's own 60 s
  taken = leases.Lease.take(url, wait=False)
  assert taken is not None and json.loads(taken.previous)['pid'] == child.pid
  taken.release()


def test_a_workdir_in_a_bucket_is_locked_by_one_run(in_emulator, short_leases):
  workdir = f'gs://{in_emulator.bucket()}/run'
  with workdirs.lock(workdir):
    assert leases.Lease.holder(f'{workdir}/lock')['pid'] == os.getpid()
    with pytest.raises(RuntimeError, match=rf'{workdir} is in use by another training run'):
      with workdirs.lock(workdir):
        pass
  assert leases.Lease.holder(f'{workdir}/lock') == {}
