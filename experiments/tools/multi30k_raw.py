"""Multi30k's raw task-1 files in one directory, for the scripts that prepare the corpus afresh
in every run they time (a `config.data.manual_dir`, so that no run's time holds a download).

`directory(None)` downloads the nine files once into ~/.cache/transformer_jax/multi30k_raw from
the address the Multi30k builder downloads from (offline: an error within seconds, naming
--manual_dir); `directory(DIR)` checks and returns DIR, a directory of the same files for
working offline.
"""

import os
import urllib.request

from transformer_jax.data import datasets
from transformer_jax.storage import atomic

CACHE = os.path.join(os.path.expanduser('~'), '.cache', 'transformer_jax', 'multi30k_raw')
NAMES = [f'{prefix}.{language}.gz' for prefix in datasets.MULTI30K_FILES.values()
         for language in ('en', 'de', 'fr')]


def directory(manual_dir: str | None) -> str:
  """An absolute directory holding every file of NAMES."""
  if manual_dir is not None:
    missing = [name for name in NAMES if not os.path.isfile(os.path.join(manual_dir, name))]
    if missing:
      raise FileNotFoundError(f'--manual_dir={manual_dir} lacks {", ".join(missing)}')
    return os.path.abspath(manual_dir)
  os.makedirs(CACHE, exist_ok=True)
  missing = [name for name in NAMES if not os.path.isfile(os.path.join(CACHE, name))]
  why = missing and datasets.unreachable(datasets.MULTI30K_URL)
  if why:
    raise RuntimeError(f"Multi30k's raw files cannot be downloaded into {CACHE} ({why}). Give "
                       f'a directory of them instead: --manual_dir=DIR ({", ".join(NAMES)}, '
                       f'from {datasets.MULTI30K_URL})')
  for name in missing:
    with atomic.replacing(os.path.join(CACHE, name)) as temporary:
      urllib.request.urlretrieve(datasets.MULTI30K_URL + name, temporary)
  return CACHE
