"""Where a result came from: the commit of the code, the package versions and the machine.

Every result JSON that the sweep (`sweep.py`) or an experiment script (experiments/) writes
holds `record()` under the key 'provenance', so that a figure can be traced to the code that
produced it, and compared only with figures from the same machine (timings do not carry from
one CPU model to another).
"""

from importlib import metadata
import os
import platform
import subprocess

import jax

PACKAGES = ('jax', 'jaxlib', 'flax', 'optax', 'orbax-checkpoint', 'numpy', 'sacrebleu')
# The checkout this module was imported from, if it was (not an installed copy).
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def processor() -> str:
  """The CPU's model name (Linux's /proc/cpuinfo), else what `platform` knows."""
  try:
    with open('/proc/cpuinfo') as f:
      return next(line.split(':', 1)[1].strip() for line in f if line.startswith('model name'))
  except (OSError, StopIteration):
    return platform.processor() or platform.machine()


def commit(root: str = _ROOT) -> str | None:
  """The git commit checked out at `root`, '-dirty' appended when tracked files differ from
  it; None where `root` is not the top of a git checkout (an installed copy, or a directory
  inside some other repository)."""

  def git(*args: str) -> str:
    return subprocess.run(['git', *args], cwd=root, capture_output=True, text=True,
                          check=True).stdout.strip()

  try:
    if os.path.realpath(git('rev-parse', '--show-toplevel')) != os.path.realpath(root):
      return None
    head = git('rev-parse', 'HEAD')
    changed = git('status', '--porcelain', '--untracked-files=no')
  except (OSError, subprocess.CalledProcessError):
    return None
  return head + ('-dirty' if changed else '')


def _version(package: str) -> str | None:
  try:
    return metadata.version(package)
  except metadata.PackageNotFoundError:
    return None


def record(device_kind: str | None = None) -> dict:
  """{'commit', 'python', 'packages' (name -> version), 'machine': {'processor', 'cpus',
  'device'}}. `device_kind` defaults to that of JAX's first device; a caller that must not
  start a backend (the sweep) passes it."""
  if device_kind is None:
    device_kind = jax.devices()[0].device_kind
  return {'commit': commit(), 'python': platform.python_version(),
          'packages': {name: _version(name) for name in PACKAGES},
          'machine': {'processor': processor(), 'cpus': os.cpu_count(), 'device': device_kind}}
