"""Who trains which group of a sweep: a claim on each group, held while a process trains,
evaluates and writes it, and the sweep's record that every process of a shared sweep checks.

  with claims.Claim.take(workdir, group) as claim:   # None: another process holds it
    ...train, evaluate, write the rows' files...

A claim is an advisory `flock` on `<workdir>/claims/<first row>.lock`: the kernel releases it
when its process ends, however it ends, so a group held by a process that was killed is free at
once, and a process started again (or another one still running) takes it and resumes it from
its checkpoints. A group is never trained by two processes at once, and no process waits on a
dead one. Slots of one process take their own claims too (a flock belongs to its open file).
In a bucket (`gs://`) a claim is a lease on the object `<workdir>/claims/<first row>.lock`
(`leases`): renewed while its group trains, taken over once it lapses (at once when its holder
ran on this host and has ended), so a shared sweep needs no shared disk.

`record` writes, at a shared sweep's first start, what its processes must agree on (the sweep
file and its text's digest, the rows and their groups, the process count, the device kind and
count); every later start, of any process, compares its own with it and stops naming what
differs. Processes therefore train the same groups, however many rows were finished when each
started.
"""

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
from typing import Iterator

from etils import epath

from transformer_jax.storage import atomic, buckets, leases, workdirs

RECORD_FILENAME = 'shared_sweep.json'


@dataclasses.dataclass
class Claim:
  """A group's claim, held by this process (one of its slots) until `release`."""

  group: tuple[str, ...]
  descriptor: int
  lease: leases.Lease | None = None

  @classmethod
  def take(cls, workdir: str, group: list[str]) -> 'Claim | None':
    """`group`'s claim if no other process (or slot) holds it, else None."""
    path = os.path.join(workdir, 'claims', f'{group[0]}.lock')
    if buckets.is_url(path):
      lease = leases.Lease.take(path, wait=False, group=list(group))
      return None if lease is None else cls(tuple(group), -1, lease)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    locked = workdirs.try_lock(path, group=list(group))
    return None if locked is None else cls(tuple(group), locked[0])

  def release(self) -> None:
    """Lets go of the claim (again: nothing)."""
    if self.lease is not None:
      self.lease.release()
    if self.descriptor >= 0:
      os.close(self.descriptor)  # releases the flock
      self.descriptor = -1

  def __enter__(self) -> 'Claim':
    return self

  def __exit__(self, *exc_info) -> None:
    self.release()


def holder(workdir: str, group: list[str]) -> str:
  """Who holds (or last held) `group`'s claim: 'host:pid', or 'unknown'."""
  held = workdirs.held_by(os.path.join(workdir, 'claims', f'{group[0]}.lock'))
  return f'{held["host"]}:{held["pid"]}' if 'pid' in held else 'unknown'


def sweep_record(sweep_path: str, rows: list[str], together: int, overrides: list[str],
                 devices_per_group: int, groups: list[list[str]], process_count: int,
                 device_kind: str, devices: int) -> dict:
  """What the processes of a shared sweep must agree on, and the groups they train (those of
  the rows not finished at its first start)."""
  digest = hashlib.sha256(epath.Path(sweep_path).read_bytes()).hexdigest()
  return {'sweep': os.path.abspath(sweep_path), 'sweep_sha256': digest, 'rows': list(rows),
          'together': together, 'overrides': list(overrides),
          'devices_per_group': devices_per_group, 'process_count': process_count,
          'device_kind': device_kind, 'devices': devices,
          'groups': [list(group) for group in groups]}


# Said for each field that differs: which flag or setting it comes from.
_FIELDS = {'process_count': '--process_count', 'sweep_sha256': 'the sweep file\'s text (--sweep)',
           'rows': 'the rows (--rows)', 'together': '--together', 'overrides': '--override',
           'devices_per_group': '--devices_per_group', 'device_kind': 'the device kind',
           'devices': 'the devices a process has'}


def record(workdir: str, mine: dict, finished: set[str]) -> dict:
  """The shared sweep's record in `workdir`: `mine`, written if there is none yet or every row
  of the one there is `finished` (that sweep has ended), else the one there, checked against
  `mine` (ValueError naming each difference). Its `groups` are the groups every process
  trains."""
  path = os.path.join(workdir, RECORD_FILENAME)
  with locked(os.path.join(workdir, 'shared_sweep.lock')):
    recorded = None
    if epath.Path(path).exists():
      recorded = json.loads(epath.Path(path).read_text())
    if recorded is None or all(row in finished for group in recorded['groups']
                               for row in group):
      atomic.write(path, json.dumps(mine, indent=1))
      return mine
  differences = [f'{_FIELDS[field]}: {mine[field]!r} here, {recorded.get(field)!r} in the '
                 'sweep' for field in _FIELDS
                 if field != 'rows' and mine[field] != recorded.get(field)]
  if set(mine['rows']) != set(recorded['rows']):
    differences.append(f'the rows (--rows): {", ".join(mine["rows"])} here, '
                       f'{", ".join(recorded["rows"])} in the sweep')
  if differences:
    raise ValueError(f'this process differs from the sweep shared in {workdir} ({path}): '
                     + '; '.join(differences) + '. Start it as the others were, or give a new '
                     '--workdir (or delete the record once every process of that sweep has '
                     'ended)')
  return recorded


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
  """Holds the flock of `path` (created if needed) for the duration, waiting for it; in a
  bucket, its lease."""
  if buckets.is_url(path):
    lease = None
    while lease is None:
      lease = leases.Lease.take(path, wait=True)
    try:
      yield
    finally:
      lease.release()
    return
  with open(path, 'a') as f:
    try:
      fcntl.flock(f, fcntl.LOCK_EX)  # released when the file is closed
    except OSError as e:
      if e.errno in workdirs.NO_FLOCK:
        raise workdirs.no_flock_error(path, e) from None
      raise
    yield
