r"""The disk a fresh install of the `hf` extra takes: with the default PyTorch wheel of the
package index (its CUDA build, also where there is no GPU) and with PyTorch's CPU build
installed first, each in a new virtual environment.

  python experiments/install_size/install_size.py [--cpu_torch="torch --index-url URL"] \
      [--output=experiments/install_size/cpu.json]

--cpu_torch is what `pip install` gets for the CPU build (default: PyTorch's CPU index, as
docs/evaluation.md tells a user; a wheel file where that index cannot be reached). The size is
the virtual environment's site-packages (every file's bytes), the time the two installs'
wall time (downloads included, so it depends on the network and the package cache).
"""

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from transformer_jax import cli
from transformer_jax.config import loading
from transformer_jax.data import datasets
from transformer_jax.storage import provenance

checkout = loading.import_sibling(__file__, '../tools/checkout')

_CPU_TORCH = flags.DEFINE_string('cpu_torch',
                                 'torch --index-url https://download.pytorch.org/whl/cpu',
                                 "pip install's arguments for PyTorch's CPU build.")
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the figures to this file.')
cli.renamed('json', 'output', 'the file the figures are written to; --json is a switch')


def _bytes(directory: str) -> int:
  return sum(os.path.getsize(os.path.join(root, name))
             for root, _, names in os.walk(directory) for name in names
             if not os.path.islink(os.path.join(root, name)))


def indexes() -> list[str]:
  """The package indexes the installs download from: pip's (PIP_INDEX_URL, else its config's
  global.index-url, else PyPI) and those --cpu_torch names."""
  configured = subprocess.run([sys.executable, '-m', 'pip', 'config', 'get', 'global.index-url'],
                              capture_output=True, text=True).stdout.strip()
  urls = [os.environ.get('PIP_INDEX_URL') or configured or 'https://pypi.org/simple/']
  args = shlex.split(_CPU_TORCH.value)
  return urls + [url for flag, url in zip(args, args[1:])
                 if flag in ('--index-url', '--extra-index-url')]


def check_indexes() -> None:
  """Offline, an error within seconds naming the indexes (pip would retry each for minutes)."""
  why = datasets.unreachable(*indexes())
  if why:
    raise RuntimeError(f'the package indexes cannot be reached ({why}): run where they can be, '
                       'or set PIP_INDEX_URL (and --cpu_torch) to a mirror that can')


def install(first: list[str]) -> dict:
  """A new virtual environment with `pip install *first` (when given), then
  `pip install ".[hf]"`; its site-packages' size, the install time and the torch it got."""
  with tempfile.TemporaryDirectory() as venv:
    subprocess.run([sys.executable, '-m', 'venv', venv], check=True)
    python = os.path.join(venv, 'bin', 'python')
    start = time.perf_counter()
    for args in ([first] if first else []) + [[f'{checkout.ROOT}[hf]']]:
      subprocess.run([python, '-m', 'pip', 'install', '-q', *args], check=True)
    seconds = time.perf_counter() - start
    torch = subprocess.run([python, '-c', 'import torch; print(torch.__version__)'],
                           check=True, capture_output=True, text=True).stdout.strip()
    site = subprocess.run([python, '-c', 'import sysconfig; print(sysconfig.get_path("purelib"))'],
                          check=True, capture_output=True, text=True).stdout.strip()
    return {'torch': torch, 'site_packages_bytes': _bytes(site), 'install_seconds': seconds}


def main(argv):
  del argv
  check_indexes()
  runs = {'default': install([]), 'cpu_torch_first': install(shlex.split(_CPU_TORCH.value))}
  for name, run in runs.items():
    print(f'{name}: torch {run["torch"]}, {run["site_packages_bytes"] / 1e9:.1f} GB, '
          f'{run["install_seconds"]:.0f} s')
  if _OUTPUT.value:
    with open(_OUTPUT.value, 'w') as f:
      json.dump({'cpu_torch': _CPU_TORCH.value, 'provenance': provenance.record(), **runs}, f,
                indent=2)


if __name__ == '__main__':
  app.run(main)
