"""Leases on objects of a bucket: a workdir's lock and a sweep group's claim where flock cannot
reach (`gs://`), held by one process at a time, across hosts.

  lease = Lease.take('gs://bucket/run/lock', wait=True, run='...')   # None: a live holder has it
  ...
  lease.release()

A lease is an object holding its holder (host, process id and start, start time) and when it
lapses. It is created only where none exists (a generation precondition: of two processes
taking it at once, Cloud Storage lets exactly one succeed), renewed by a background thread every
`RENEW_SECONDS` (each rewrite conditional on the generation this process wrote last), and
deleted on release (a process waiting for it takes it within `POLL_SECONDS`). A holder that
dies stops renewing, so its lease lapses `SECONDS` after its last renewal and the next process
takes it over (conditionally on the generation it read: of two successors, one wins). One
whose holder ran on this host and has ended (its process is gone, or the id was reused by
another) is taken over at once, as a restarted run does after SIGKILL.
A holder whose lease was taken over (it could not renew for `SECONDS`: its host was cut off) is
stopped: the renewal thread interrupts its main thread. Hosts' clocks are assumed to agree
within seconds (NTP, as on Cloud VMs).
"""

import _thread
import datetime
import json
import os
import socket
import threading
import time

from absl import logging

from transformer_jax.storage import buckets

# How long a lease lasts past its last renewal, and how often its holder renews it.
SECONDS = 60.0
RENEW_SECONDS = 15.0
# How often a process waiting for a lease looks whether it was released or renewed.
POLL_SECONDS = 0.5


def _started(pid: int) -> str | None:
  """When process `pid` of this host started (clock ticks since boot, from /proc), None if it
  does not exist or /proc cannot tell."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().rsplit(')', 1)[1].split()[19]
  except (OSError, IndexError):
    return None


def this_process(**holder) -> dict:
  """A lock's or lease's record of its holder: this process's host, id, the id's start (to
  tell it from a later process given the same id) and the time, with `holder`."""
  return {'host': socket.gethostname(), 'pid': os.getpid(), 'pid_started': _started(os.getpid()),
          'started': datetime.datetime.now().astimezone().isoformat(timespec='seconds'),
          **holder}


def _ended_here(holder: dict) -> bool:
  """Whether `holder` ran on this host and its process has ended."""
  return (holder.get('host') == socket.gethostname() and 'pid' in holder
          and _started(holder['pid']) != holder.get('pid_started'))


def _rewritten_within(blob, generation: int, seconds: float) -> bool:
  """Whether the object of `blob`, at `generation` when read, is rewritten within `seconds`
  (looked at every POLL_SECONDS): False as soon as it is deleted, or once `seconds` pass."""
  deadline = time.monotonic() + seconds
  while time.monotonic() < deadline:
    time.sleep(POLL_SECONDS)
    found = blob.bucket.get_blob(blob.name)
    if found is None or found.generation != generation:
      return found is not None
  return False


class Lease:
  """A lease this process holds on a `gs://` object (see the module docstring)."""

  def __init__(self, url: str, blob, holder: dict, previous: str):
    self.url, self._blob, self._holder, self.previous = url, blob, holder, previous
    self._stop = threading.Event()
    self._renewer = threading.Thread(target=self._renew, daemon=True,
                                     name=f'lease {url}')
    self._renewer.start()

  @classmethod
  def take(cls, url: str, wait: bool, **holder) -> 'Lease | None':
    """The lease on `url` for this process, recorded with `holder`; None if a live process
    holds it. A lease neither renewed nor released is taken over once it lapses: with `wait`,
    this waits for that (at most `SECONDS`), taking it as soon as it is released and returning
    None if the holder renews it meanwhile; without, it returns None at once."""
    from google.api_core import exceptions  # pylint: disable=import-outside-toplevel
    bucket, name = buckets.split(url)
    blob = buckets.client().bucket(bucket).blob(name)
    mine = this_process(**holder)
    while True:
      try:
        blob.upload_from_string(_text(mine), if_generation_match=0)
        return cls(url, blob, mine, previous='')
      except exceptions.PreconditionFailed:
        pass
      found = blob.bucket.get_blob(name)
      if found is None:
        continue  # released meanwhile
      try:
        text = found.download_as_text(if_generation_match=found.generation)
      except (exceptions.NotFound, exceptions.PreconditionFailed):
        continue  # released or renewed since
      held = json.loads(text or '{}')
      lapses = held.get('expires', 0) - time.time()
      if lapses > 0 and not _ended_here(held):
        if not wait:
          return None
        if _rewritten_within(blob, found.generation, min(lapses, RENEW_SECONDS) + 0.5):
          return None  # renewed: its holder is alive
        continue  # released, or not renewed in time: try again
      try:
        blob.upload_from_string(_text(mine), if_generation_match=found.generation)
        return cls(url, blob, mine, previous=text.strip())
      except exceptions.PreconditionFailed:
        continue  # another process took it over first

  @staticmethod
  def holder(url: str) -> dict:
    """What the lease on `url` says of its holder ({} if there is none)."""
    bucket, name = buckets.split(url)
    found = buckets.client().bucket(bucket).get_blob(name)
    return {} if found is None else json.loads(found.download_as_text() or '{}')

  def _renew(self) -> None:
    from google.api_core import exceptions  # pylint: disable=import-outside-toplevel
    while not self._stop.wait(RENEW_SECONDS):
      try:
        self._blob.upload_from_string(_text(self._holder),
                                      if_generation_match=self._blob.generation)
      except (exceptions.PreconditionFailed, exceptions.NotFound):
        logging.error('%s was taken over by another process (this one could not renew it for '
                      '%d s): stopping', self.url, SECONDS)
        _thread.interrupt_main()
        return
      except Exception as e:  # pylint: disable=broad-except  (retried at the next renewal)
        logging.warning('could not renew %s (retrying): %s', self.url, e)

  def release(self) -> None:
    """Stops renewing and deletes the lease (again: nothing)."""
    if self._stop.is_set():
      return
    self._stop.set()
    self._renewer.join()
    from google.api_core import exceptions  # pylint: disable=import-outside-toplevel
    try:
      self._blob.delete(if_generation_match=self._blob.generation)
    except (exceptions.PreconditionFailed, exceptions.NotFound):
      pass  # taken over meanwhile: the new holder's


def _text(holder: dict) -> str:
  return json.dumps({**holder, 'expires': time.time() + SECONDS})
