"""Where a result came from: the commit of the code, the package versions and the machine.

Every result JSON that the sweep (`sweep/`) or an experiment script (experiments/) writes
holds `record()` under the key 'provenance', so that a figure can be traced to the code that
produced it, and compared only with figures from the same machine (timings do not carry from
one CPU model to another).
"""

from importlib import metadata
import json
import os
import platform as platform_lib
import re
import subprocess
import sys

# None where one is not installed (torch and transformers: the hf extra's).
PACKAGES = ('jax', 'jaxlib', 'flax', 'optax', 'orbax-checkpoint', 'numpy', 'sacrebleu', 'torch',
            'transformers')
# The checkout this module was imported from, if it was one (not an installed copy).
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def processor() -> str:
  """The CPU's model name (Linux's /proc/cpuinfo), else what `platform` knows."""
  try:
    with open('/proc/cpuinfo') as f:
      return next(line.split(':', 1)[1].strip() for line in f if line.startswith('model name'))
  except (OSError, StopIteration):
    return platform_lib.processor() or platform_lib.machine()


# The vector instructions that decide how XLA vectorises a CPU's work (x86's SSE/AVX/AMX, FMA;
# Arm's NEON 'asimd' and SVE), as /proc/cpuinfo's 'flags' (x86) or 'Features' (Arm) name them.
_VECTOR = re.compile(r'(sse\d\w*|ssse3|avx\w*|amx\w*|fma\w*|asimd\w*|sve\w*)')


def vector_extensions() -> list[str]:
  """The CPU's vector instruction sets (`_VECTOR`), sorted; [] where Linux's /proc/cpuinfo is
  not there to ask."""
  try:
    with open('/proc/cpuinfo') as f:
      line = next(line for line in f if line.startswith(('flags', 'Features')))
  except (OSError, StopIteration):
    return []
  return sorted(flag for flag in line.split(':', 1)[1].split() if _VECTOR.fullmatch(flag))


def cpu_type(machine: dict) -> str:
  """A result's CPU as the pages name it: vendor and family and the widest x86 vector
  extension, e.g. 'AMD EPYC (AVX2)' or 'Intel Xeon (AVX-512)', from a record's 'machine'."""
  words = re.sub(r'\((R|TM)\)|\bProcessor\b|\d+-Core|CPU\b|@.*', '',
                 machine['processor']).split()
  name = ' '.join(words[:2]) if words else machine['processor']
  extensions = set(machine.get('vector_extensions', ()))
  widest = next((label for flag, label in (('avx512f', 'AVX-512'), ('avx2', 'AVX2'),
                                             ('avx', 'AVX'), ('sve', 'SVE'), ('asimd', 'NEON'))
                 if flag in extensions), None)
  return f'{name} ({widest})' if widest else name


def _git(directory: str, *args: str) -> str:
  return subprocess.run(['git', *args], cwd=directory, capture_output=True, text=True,
                        check=True).stdout.strip()


def commit(directory: str | None = None) -> str | None:
  """The git commit of the checkout of this project that holds `directory`, '-dirty' appended
  when tracked files differ from it. By default the checkout this package was imported from,
  or, for an installed copy, the one the command runs in (the working directory). None where
  there is none: a git repository counts only if it holds this file
  (transformer_jax/storage/provenance.py: an installed copy may sit inside some other project's
  repository)."""
  for candidate in [directory] if directory else [_ROOT, os.getcwd()]:
    try:
      top = _git(candidate, 'rev-parse', '--show-toplevel')
      if not os.path.isfile(os.path.join(top, 'transformer_jax', 'storage', 'provenance.py')):
        continue
      changed = _git(top, 'status', '--porcelain', '--untracked-files=no')
      return _git(top, 'rev-parse', 'HEAD') + ('-dirty' if changed else '')
    except (OSError, subprocess.CalledProcessError):
      continue
  return None


def _version(package: str) -> str | None:
  try:
    return metadata.version(package)
  except metadata.PackageNotFoundError:
    return None


_PROBE = ('import json, jax; '
          'print(json.dumps([jax.default_backend(), jax.devices()[0].device_kind]))')


def platform() -> tuple[str, str]:
  """JAX's platform ('cpu', 'gpu', 'tpu') and its first device's kind, asked of a child
  process, so that the caller (a sweep or an experiment driving other processes) holds no
  accelerator memory."""
  output = subprocess.run([sys.executable, '-c', _PROBE], check=True, capture_output=True,
                          text=True, env=dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE='false'))
  backend, kind = json.loads(output.stdout.strip().splitlines()[-1])
  return backend, kind


def machine(device_kind: str | None = None) -> dict:
  """{'processor', 'vector_extensions', 'cpus', 'device'}: the CPU's model name and vector
  instruction sets, its logical CPUs and JAX's device kind. `device_kind` defaults to that of
  JAX's first device, asked of a child process (`platform`)."""
  if device_kind is None:
    device_kind = platform()[1]
  return {'processor': processor(), 'vector_extensions': vector_extensions(),
          'cpus': os.cpu_count(), 'device': device_kind}


def record(device_kind: str | None = None) -> dict:
  """{'commit', 'python', 'packages' (name -> version), 'machine' (`machine(device_kind)`)}."""
  return {'commit': commit(), 'python': platform_lib.python_version(),
          'packages': {name: _version(name) for name in PACKAGES},
          'machine': machine(device_kind)}
