"""Runs kept in a Cloud Storage bucket: a `--workdir`, `--results` or `--output` given as
`gs://bucket/path`, as t5x, MaxText and big_vision keep theirs on Cloud TPUs.

A workdir in a bucket has the local layout (`checkpoints/<step>/`, `config.json`, `spm.model`,
`tokens/`, `metrics.jsonl`, `tensorboard/`, `lock`). Its files go through etils.epath (gcsfs
underneath), its checkpoints through orbax (tensorstore); each object is written whole or not at
all. What a local disk does with an append is done here by rewriting the object (`Appended`):
`metrics.jsonl` and the event file are uploaded whole at each write. One run per workdir and one
process per sweep group hold on a bucket through leases (`leases`), not flock.

  check(path, '--workdir')   # before anything is written: credentials, the bucket, its access

`check` refuses, within seconds, a bucket that does not exist or cannot be read and a machine
without Google Cloud credentials, naming the bucket and the fix; another scheme (`s3://`, ...)
is refused naming a mount as the way to it.

An emulator (fake-gcs-server, the tests') is reached with its address in the standard
`STORAGE_EMULATOR_HOST` alone, without credentials: `hand_on_emulator` gives it to the
libraries that read another name (tensorstore: `TENSORSTORE_GCS_HTTP_URL`) and turns off what
an emulator cannot answer (gcsfs's question for the bucket's kind on every call; TensorFlow's
gfile, which does not read the variable). It and `use_fresh_listings` run when the package is
imported.
"""

import functools
import json
import os
import re
import shutil
import sys

from etils import epath

# A URL's scheme (gs://, s3://, hdfs://, ...): a path the local file system cannot open.
_URL = re.compile(r'^([A-Za-z][A-Za-z0-9+.-]*)://')
_GS = re.compile(r'^gs://([^/]+)(?:/(.*))?$')

# Seconds `check` waits for the bucket's answer (connect, read), without retrying.
_TIMEOUT = (3, 5)

EMULATOR = 'STORAGE_EMULATOR_HOST'


def is_url(path: str) -> bool:
  """Whether `path` is a URL (`gs://bucket/run`) rather than a local path."""
  return bool(_URL.match(os.fspath(path)))


def absolute(path: str) -> str:
  """`path` made absolute if it is local; a URL as it is."""
  return path if is_url(path) else os.path.abspath(path)


def split(url: str) -> tuple[str, str]:
  """(bucket, object name) of `gs://bucket/name`."""
  match = _GS.match(url)
  if not match:
    raise ValueError(f'{url}: not a gs://bucket/path URL')
  return match.group(1), match.group(2) or ''


def upload(local: str, url: str) -> None:
  """Copies the local file `local` to the object `url` (written whole or not at all)."""
  with open(local, 'rb') as source, epath.Path(url).open('wb') as destination:
    shutil.copyfileobj(source, destination, 1 << 24)


class Appended:
  """An object in a bucket written as a text file opened to append (`open(url, 'a')`): what it
  held (cut after its last newline: a line a crash left unfinished) and what was written since,
  uploaded whole at each flush."""

  def __init__(self, url: str):
    self.name, self._path = url, epath.Path(url)
    text = self._path.read_text() if self._path.exists() else ''
    self._text = [text[:text.rfind('\n') + 1]]

  def write(self, text: str) -> None:
    self._text.append(text)

  def flush(self) -> None:
    self._text = [''.join(self._text)]
    self._path.write_text(self._text[0])

  def close(self) -> None:
    self.flush()


def hand_on_emulator() -> None:
  """With `STORAGE_EMULATOR_HOST` set, the settings that make every library reach that
  emulator without credentials (see the module docstring); a value the user set wins."""
  host = os.environ.get(EMULATOR)
  if not host:
    return
  url = host if '://' in host else f'http://{host}'
  os.environ.setdefault('TENSORSTORE_GCS_HTTP_URL', url)
  os.environ.setdefault('GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT', 'false')
  os.environ.setdefault('EPATH_USE_TF', 'false')


def use_fresh_listings() -> None:
  """gcsfs answers `exists` and listings from a cache of earlier listings, which would hide what
  another process wrote since (a sweep's claims and results): turned off, through fsspec's
  configuration (its environment variable where fsspec is not imported yet, so that importing
  this package does not import it)."""
  fresh = {'use_listings_cache': False}
  if 'fsspec' in sys.modules:
    sys.modules['fsspec'].config.conf.setdefault('gcs', {}).update(fresh)
  else:
    os.environ.setdefault('FSSPEC_GCS', json.dumps(fresh))


@functools.cache
def client():
  """A google-cloud-storage client: the emulator's, anonymous, with `STORAGE_EMULATOR_HOST`
  set; else one with the machine's default credentials (`check` first names what is
  missing)."""
  from google.cloud import storage  # pylint: disable=import-outside-toplevel
  if os.environ.get(EMULATOR):
    return storage.Client()
  import google.auth  # pylint: disable=import-outside-toplevel
  credentials, project = google.auth.default()
  return storage.Client(project=project or os.environ.get('GOOGLE_CLOUD_PROJECT') or '_',
                        credentials=credentials)


_CREDENTIALS_FIX = ('run `gcloud auth application-default login` (a workstation), give the VM a '
                    'service account with access to the bucket (a Cloud TPU or GPU VM), or set '
                    'GOOGLE_APPLICATION_CREDENTIALS to a key file; for an emulator, set '
                    'STORAGE_EMULATOR_HOST to its address')


def check(path: str, role: str = '--workdir') -> None:
  """Nothing for a local `path`; for `gs://bucket/...`, ValueError naming the bucket, `role`
  and the fix, within seconds, if there are no credentials, the bucket does not exist or cannot
  be read, or it cannot be reached; ValueError for another scheme."""
  url = _URL.match(os.fspath(path))
  if not url:
    return
  if url.group(1) != 'gs':
    raise ValueError(
        f'{role}={path}: a {url.group(1)}:// URL, which this package does not write to (it '
        'reads and writes gs:// buckets and local paths). Mount it and give the mount point, '
        'or use a gs:// bucket (docs/training.md#where-a-run-keeps-its-files)')
  bucket, _ = split(path)
  if not os.environ.get(EMULATOR):
    import google.auth  # pylint: disable=import-outside-toplevel
    try:
      google.auth.default()
    except google.auth.exceptions.DefaultCredentialsError:
      raise ValueError(f'{role}={path}: no Google Cloud credentials on this machine to reach '
                       f'gs://{bucket}: {_CREDENTIALS_FIX}') from None
  from google.api_core import exceptions  # pylint: disable=import-outside-toplevel
  import requests  # pylint: disable=import-outside-toplevel
  where = os.environ.get(EMULATOR) or 'Cloud Storage'
  try:
    found = client().lookup_bucket(bucket, timeout=_TIMEOUT, retry=None)
  except (exceptions.Forbidden, exceptions.Unauthorized) as e:
    raise ValueError(f'{role}={path}: the credentials on this machine may not read '
                     f'gs://{bucket} ({e.code}): grant them roles/storage.objectUser on it, or '
                     f'{_CREDENTIALS_FIX}') from None
  except (requests.exceptions.RequestException, exceptions.GoogleAPIError) as e:
    raise ValueError(f'{role}={path}: cannot reach gs://{bucket} at {where} '
                     f'({type(e).__name__}: {e})') from None
  if found is None:
    raise ValueError(f'{role}={path}: the bucket gs://{bucket} does not exist at {where}: '
                     f'create it (gcloud storage buckets create gs://{bucket} --location=REGION, '
                     'in the region of the accelerators) or correct the name')
