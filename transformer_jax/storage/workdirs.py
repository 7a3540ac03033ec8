"""A training run's directory: writable, and trained by one run at a time.

  with workdirs.lock(path):   # raises RuntimeError naming the holder if another run has it
    ...train...

The lock is an advisory `flock` on `workdir/lock`, held for the whole run by its process 0 (the
other processes of a multi-host run are part of the same run). The kernel releases it when that
process ends, however it ends, so a run killed with SIGKILL leaves no stale lock: the next run
takes it over, with a warning naming the run that left it. The file records the holder (host,
process id, start time) for the error message; a run that ends through Python (done, stopped by
an error or preempted) empties it, so the next run starts without the warning.
`translate`, `evaluate` and `average` only read a workdir and never take the lock. flock works on
local disks, NFS and Lustre mounted with `-o flock`; a file system without it (an object-store
mount, Lustre with `noflock`) is an error naming it. A workdir in a bucket (`gs://...`,
`buckets`) holds a lease on the object `workdir/lock` instead (`leases`): a run killed on this
host is taken over at once, one killed elsewhere once its lease lapses.

What only process 0 does in a workdir (take the lock, learn the vocabulary, move checkpoints
aside) goes through `on_process_zero`, so that when it fails the other processes fail too
instead of waiting for process 0 in the next collective.
"""

import contextlib
import errno
import fcntl
import json
import os
import tempfile
from typing import Callable, Iterator, TypeVar
import uuid

from absl import logging
from etils import epath
import jax
from jax.experimental import multihost_utils
import numpy as np

from transformer_jax.storage import buckets, leases

LOCK_FILENAME = 'lock'


def check_writable(directory: str, role: str = '--workdir') -> None:
  """Creates `directory` if needed; OSError naming it and its `role` if it cannot be written.
  In a bucket (`gs://`), `buckets.check` first, then an object written and deleted."""
  buckets.check(directory, role)
  probe = epath.Path(directory) / f'.writable-{uuid.uuid4().hex}'
  try:
    if buckets.is_url(directory):
      probe.write_text('')
      probe.unlink()
      return
    os.makedirs(directory, exist_ok=True)
    # A uniquely named probe: several processes of one run check the same workdir at once.
    with tempfile.NamedTemporaryFile(dir=directory, prefix='.writable-'):
      pass
  except OSError as e:
    raise OSError(f'{directory} ({role}) is not a writable directory: {e}') from e


def try_lock(path: str, **holder) -> tuple[int, str] | None:
  """(the descriptor of `path`, created if needed, flocked by this process; what the file said
  of its previous holder), with this process's host, id and start time and `holder` written in;
  None if a live process (or another open file of this one) holds it. The kernel releases the
  flock when the descriptor closes or the process ends, however it ends."""
  descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  try:
    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    os.close(descriptor)
    return None
  except OSError as e:
    os.close(descriptor)
    if e.errno in NO_FLOCK:
      raise no_flock_error(path, e) from None
    raise
  previous = os.pread(descriptor, 4096, 0).decode(errors='replace').strip()
  holder = leases.this_process(**holder)
  os.ftruncate(descriptor, 0)
  os.pwrite(descriptor, json.dumps(holder).encode(), 0)
  return descriptor, previous


def _take(path: str) -> Callable[[], None]:
  """Takes the workdir lock `path` (its flock; in a bucket, its lease) and returns what lets go
  of it; RuntimeError naming the holder if a live run has it."""
  if buckets.is_url(path):
    lease = leases.Lease.take(path, wait=True)
    taken = None if lease is None else (lease.previous, lease.release)
  else:
    locked = try_lock(path)
    taken = None if locked is None else (locked[1], lambda: _unlock(locked[0]))
  if taken is None:
    held = held_by(path)
    raise RuntimeError(f'{os.path.dirname(path)} is in use by another training run '
                       f'({json.dumps(held) if held else "unknown"}); wait for it to end or '
                       'choose another --workdir')
  previous, release = taken
  if previous:
    logging.warning('taking over %s, left by a run that has ended (%s)', path, previous)
  return release


def held_by(path: str) -> dict:
  """What the lock or claim `path` (its file; in a bucket, its lease) says of its holder, {}
  where it says nothing."""
  if buckets.is_url(path):
    return leases.Lease.holder(path)
  try:
    with open(path) as f:
      return json.loads(f.read() or '{}')
  except (OSError, ValueError):
    return {}


def _unlock(descriptor: int) -> None:
  os.ftruncate(descriptor, 0)  # ended here: no holder to name
  os.close(descriptor)  # releases the flock


# What flock raises on a file system without it (an object-store mount, Lustre mounted noflock).
NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


def no_flock_error(path: str, error: OSError) -> OSError:
  """The error for a `path` whose file system refuses flock."""
  return OSError(f'{path}: its file system does not support flock ({error.strerror}), which '
                 'keeps two runs (or a shared sweep\'s processes) out of one workdir: use a local '
                 'disk, NFS with locking, or Lustre mounted with -o flock '
                 '(docs/training.md#what-a-workdir-holds)')


# Mounts whose flock locks within one host only: FUSE (gcsfuse, s3fs), NFS without its lock
# manager or with local locks, Lustre's localflock; BeeGFS and GPFS by default.
_LOCAL_FLOCK_TYPES = ('beegfs', 'gpfs')
_LOCAL_FLOCK_OPTIONS = ('localflock', 'local_lock=flock', 'local_lock=all', 'nolock')


def warn_if_flock_is_local(path: str) -> None:
  """Warns when `path` lies on a mount whose flock may lock within one host only (read from
  /proc/mounts): there, processes of several hosts sharing it are not kept apart."""
  try:
    with open('/proc/mounts') as f:
      mounts = [line.split()[1:4] for line in f if len(line.split()) >= 4]
  except OSError:
    return
  real = os.path.realpath(path)
  found = [m for m in mounts if real == m[0] or real.startswith(m[0].rstrip('/') + '/')]
  if not found:
    return
  point, kind, options = max(found, key=lambda m: len(m[0]))
  if (kind.startswith('fuse') or kind in _LOCAL_FLOCK_TYPES
      or any(option in options.split(',') for option in _LOCAL_FLOCK_OPTIONS)):
    logging.warning('%s is on %s (%s, mounted at %s), whose flock may lock within one host '
                    'only: processes on several hosts sharing it could train one group twice. '
                    'Share it among processes of one host, or use a file system with flock '
                    'across hosts (docs/training.md#what-a-workdir-holds)', path, kind,
                    options, point)


T = TypeVar('T')


def on_process_zero(action: Callable[[], T], what: str) -> T | None:
  """`action()` on process 0 only: its result there, None on the other processes. In a
  multi-process run every process learns whether it raised, and the others then raise a
  RuntimeError saying that process 0 could not `what`."""
  result, error = None, None
  if jax.process_index() == 0:
    try:
      result = action()
    except Exception as e:  # pylint: disable=broad-except  (raised below, on every process)
      error = e
  if jax.process_count() > 1:
    failed = multihost_utils.broadcast_one_to_all(np.array(error is not None))
    if failed and error is None:
      error = RuntimeError(f'process 0 could not {what}; see its error')
  if error is not None:
    raise error
  return result


@contextlib.contextmanager
def lock(workdir: str) -> Iterator[None]:
  """Holds `workdir`'s lock for the duration (see the module docstring). In a multi-process run
  process 0 takes it and every process stops if it cannot."""
  release = on_process_zero(lambda: _take(os.path.join(workdir, LOCK_FILENAME)),
                            f'lock {workdir}')
  try:
    yield
  finally:
    if release is not None:
      release()
