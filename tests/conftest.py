"""Shared helpers: a tiny model config and its parameters, a small training config, and the
session's caches.

The suite runs with 8 CPU devices, so that the sharding tests can build real meshes; every
other test uses the default (first) device, and a process a test starts has one device unless
the test gives it more (`xla_flags`).

Every run of the suite starts from an empty session directory (SESSION_DIR), which this
process and every process a test starts use as their caches: `XDG_CACHE_HOME` (JAX's
persistent compilation cache, compilation.cache_dir's default, keeps every program) and
`TFDS_DATA_DIR` (the built-in corpus and Multi30k, each prepared once, by whichever test first
needs it, and then only read). A program compiled or a dataset prepared by one test serves every
later one, and the suite's time does not depend on what an earlier run left. Under
pytest-xdist the workers share the directory of the process that started them, which removes it
at the end. Tests that count compiles, or that prepare datasets to check the preparation, use
directories of their own.
"""

import functools
import json
import math
import os
import shutil
import socket
import sys
import tempfile

# Before jax and tensorflow_datasets are imported (TFDS reads its default directory then).
# The tests' programs each run a few steps, so compiling them is most of their time: LLVM at
# optimisation level 0, and XLA's older loop emitters for its CPU fusions rather than the MLIR
# fusion emitters, compile the same HLO faster (tests/README.md). The processes tests start
# inherit them (and `xla_flags` keeps them), so that a run resumed in this process from a
# command's checkpoint computes as that command did.
TEST_XLA_FLAGS = '--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false'
os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' ' + TEST_XLA_FLAGS).strip()
_OWNS_SESSION_DIR = 'TRANSFORMER_JAX_TEST_SESSION_DIR' not in os.environ
if _OWNS_SESSION_DIR:
  os.environ['TRANSFORMER_JAX_TEST_SESSION_DIR'] = tempfile.mkdtemp(prefix='transformer_jax_tests_')
SESSION_DIR = os.environ['TRANSFORMER_JAX_TEST_SESSION_DIR']
os.environ['XDG_CACHE_HOME'] = os.path.join(SESSION_DIR, 'cache')
os.environ['TFDS_DATA_DIR'] = os.path.join(SESSION_DIR, 'tensorflow_datasets')

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from transformer_jax.config import checks, loading
from transformer_jax.data import builtin_grammar
from transformer_jax.model.model_config import TransformerConfig
from transformer_jax.model.transformer import Transformer
from transformer_jax.storage import atomic
from transformer_jax.training import compilation

base = loading.import_sibling(__file__, '../configs/base')
gcs_emulator_lib = loading.import_sibling(__file__, '../experiments/tools/gcs_emulator')

# 8 CPU devices in this process, for the sharding tests' meshes; the processes a test starts see
# one unless the test asks for more (`xla_flags`). On 8 CPU devices and 2 cores, XLA sometimes
# aborts a train step whose gradient all-reduces wait on each other's threads past its
# rendezvous timeout (tests/README.md), so a command runs on several devices only where its
# test is about them.
jax.config.update('jax_num_cpu_devices', 8)


def xla_flags(devices: int) -> str:
  """XLA_FLAGS for a process a test starts on `devices` CPU devices."""
  return f'{TEST_XLA_FLAGS} --xla_force_host_platform_device_count={devices}'


compilation.use_cache(base.get_config())  # the session's, from XDG_CACHE_HOME


def tiny_config(**changes) -> TransformerConfig:
  """A small model with d_k != d_v and d_model not a multiple of h·d_k, so that no formula can
  silently assume d_k = d_v = d_model / h. Dropout is off unless asked for."""
  defaults = dict(vocab_size=23, num_layers=2, d_model=12, d_ff=20, num_heads=3, d_k=5, d_v=7,
                  dropout_rate=0.0, deterministic=True, max_len=16)
  return TransformerConfig(**{**defaults, **changes})


def init_params(cfg: TransformerConfig, seed: int = 0):
  """Unboxed float32 parameters of `Transformer(cfg)`."""
  tokens = jnp.ones((1, 4), jnp.int32)
  variables = Transformer(cfg).init(
      {'params': jax.random.key(seed), 'dropout': jax.random.key(seed + 1)}, tokens, tokens)
  return nn.unbox(variables['params'])


def perturbed(params, rng: np.random.Generator, scale: float = 0.1):
  """`params` with normal(0, scale) noise added to every leaf, so that parameters initialised
  to constants (layer-norm gains 1, biases 0) take part in a comparison as any others."""
  return jax.tree.map(lambda p: p + scale * rng.standard_normal(p.shape).astype(p.dtype), params)


def random_tokens(rng: np.random.Generator, shape, vocab_size: int, lengths=None) -> np.ndarray:
  """Token ids in [1, vocab_size); positions at or after `lengths[b]` are padding (0)."""
  tokens = rng.integers(1, vocab_size, size=shape)
  if lengths is not None:
    tokens = np.where(np.arange(shape[1])[None, :] < np.asarray(lengths)[:, None], tokens, 0)
  return tokens.astype(np.int32)


# The modules whose module-scoped fixtures (or cached runs) train, prepare a dataset or install
# the wheel: on two workers (`-n 2`) each goes to one worker whole, so that they are made once.
WHOLE_MODULES = frozenset(f'tests/test_{name}.py' for name in (
    'datasets', 'export', 'packaging', 'pipeline', 'together', 'side_by_side', 'sweep', 'train',
    'train_together',
    'translate', 'visualize'))


# Every test file's seconds in a measured run of the whole suite (experiments/test_durations/),
# which orders the modules below.
DURATIONS = 'experiments/test_durations/amd_epyc_fewer_processes_full.json'


def pytest_collection_modifyitems(items):
  """Each module's tests together and in their order, the modules longest first by their
  seconds in DURATIONS (one it does not list first if it holds an end-to-end, `slow`, test,
  else last): on two workers the long runs start first and the unit tests fill in at the end,
  so that the workers finish together. (In alphabetical order, the order of collection, a
  simulation of the scheduler on the seconds of 22ea41e's run,
  `amd_epyc_after_ml_dtypes_full.json`, gives one worker 82 s more than the other.)"""
  with open(os.path.join(REPO, DURATIONS), encoding='utf-8') as f:
    seconds = json.load(f)['files']

  def module(item) -> str:
    return item.nodeid.split('::')[0]

  slow = {module(item) for item in items if item.get_closest_marker('slow')}
  items.sort(key=lambda item: -seconds.get(module(item), math.inf if module(item) in slow else 0))


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
  """pytest-xdist's scheduler by scope, in the order collected (`--no-loadscope-reorder`,
  pyproject.toml): a module of WHOLE_MODULES is one scope, every other test a scope of its own.
  (xdist's own `xdist_group` marks do not group under pytest 9.2, whose node ids they cannot
  rename.)"""
  from xdist.scheduler import LoadScopeScheduling

  class Scheduling(LoadScopeScheduling):

    def _split_scope(self, nodeid: str) -> str:
      module = nodeid.split('::')[0]
      return module if module in WHOLE_MODULES else nodeid

  return Scheduling(config, log)


def pytest_unconfigure(config):
  if _OWNS_SESSION_DIR:
    shutil.rmtree(SESSION_DIR, ignore_errors=True)


@pytest.fixture
def rng() -> np.random.Generator:
  return np.random.default_rng(0)


@functools.cache
def _builtin_splits() -> dict:
  return builtin_grammar.splits(seed=0)


def write_corpus(directory, sizes=(3000, 64, 40), relative: bool = False,
                 write: bool = True) -> dict:
  """The built-in corpus's first `sizes` training, dev and test pairs as text files
  (`<split>.en`, `<split>.de`) in `directory`, each written whole or not at all: a corpus that
  a run reads in a fraction of the built-in one's time, and whose dev and test splits, which
  evaluations decode whole, are tens of sentences rather than a thousand. Returns the overrides
  of a `data.dataset='files'` run on them (paths relative to `directory` if `relative`);
  `write=False` only names them."""
  if write:
    os.makedirs(directory, exist_ok=True)
    for name, size in zip(('train', 'validation', 'test'), sizes):
      for side, lang in enumerate(('en', 'de')):
        atomic.write(os.path.join(directory, f'{name}.{lang}'),
                     ''.join(pair[side] + '\n' for pair in _builtin_splits()[name][:size]))
  prefix = '' if relative else f'{directory}{os.sep}'
  return {'data.dataset': 'files', 'data.train_files': f'{prefix}train.{{lang}}',
          'data.validation_files': f'{prefix}validation.{{lang}}',
          'data.test_files': f'{prefix}test.{{lang}}'}


# The session's corpus (write_corpus), written by the process that made SESSION_DIR, before
# any test (pytest-xdist's workers start after it), so that every run on it shares one prepared
# dataset.
CORPUS = write_corpus(os.path.join(SESSION_DIR, 'corpus'), write=_OWNS_SESSION_DIR)

# A model small enough to train in seconds, with every parameter dimension splitting 8 ways, on
# the session's corpus, its batches in at most three shapes (coarse buckets), so that a run
# compiles few programs and the session's cache serves them to every run of the same shapes.
SMALL = {
    **CORPUS, 'data.buckets': 'coarse', 'data.vocab_size': 64, 'data.max_length': 32,
    'data.tokens_per_batch': 512, 'model.num_layers': 1, 'model.d_model': 32, 'model.d_ff': 64,
    'model.num_heads': 8, 'model.d_k': 4, 'model.d_v': 4, 'train.warmup_steps': 10,
}


def train_config(**overrides) -> ml_collections.ConfigDict:
  """The base recipe with SMALL's and then `overrides`' flattened fields
  ({'model.d_ff': 64}) replaced."""
  config = base.get_config()
  config.update_from_flattened_dict({**SMALL, **overrides})
  checks.validate(config)  # where the test's config enters
  return config


def short_run(steps: int = 12) -> dict:
  """Overrides of a `steps`-step run on the session's corpus with a checkpoint every 4 steps
  (the last 2 kept), logging every step, and a short dev evaluation at the end."""
  return {
      'data.vocab_size': 256,
      'data.max_length': 16, 'data.tokens_per_batch': 256, 'train.num_train_steps': steps,
      'train.log_every_steps': 1, 'train.eval_every_steps': steps, 'train.num_eval_steps': 2,
      'train.checkpoint_every_steps': 4, 'train.keep_checkpoints': 2,
  }


def metrics_lines(workdir) -> list[dict]:
  """Every record of a workdir's metrics.jsonl as written, a resumed run's repeats included
  (metrics_log.read keeps the last of each step)."""
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]


def assert_trained_alike(got, want) -> None:
  """Two trainings' parameter or optimizer-state leaves, equal but for float rounding. Adam
  divides a gradient by its own size, so where a gradient is near 0 its rounding moves the
  coordinate by up to a fraction of a step's learning rate: the same run on two meshes differs
  by 2.6e-5 after one step (the first step's rate being 5.6e-3). Hence a bound on the largest
  difference relative to the leaf's own scale (its largest magnitude, however small: Adam's
  second moments are about 1e-6 or less), and a far tighter one on the mean; a leaf of zeros
  must stay zeros."""
  want = np.asarray(want, np.float64)
  scale = float(np.max(np.abs(want), initial=0.0))
  error = np.abs(np.asarray(got, np.float64) - want)
  assert error.max(initial=0.0) <= 2e-3 * scale and error.mean() <= 2e-5 * scale, (
      error.max(), scale)


def assert_close_to_scale(got, want, rtol: float = 1e-4, atol: float = 1e-6) -> None:
  """`np.testing.assert_allclose` with `atol` scaled down for a leaf whose largest magnitude is
  below 1: atol · min(1, max |want|). A plain atol of 1e-6 would pass any Adam second moment
  (about 1e-6 or less)."""
  want = np.asarray(want)
  scale = min(1.0, float(np.max(np.abs(want), initial=0.0)))
  np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * scale)


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train_command(overrides: dict, workdir) -> list[str]:
  """`python -m transformer_jax.train` of `train_config(**overrides)`, from any directory."""
  return ([sys.executable, '-m', 'transformer_jax.train', f'--config={REPO}/configs/base.py',
           f'--workdir={workdir}'] +
          [f'--config.{name}={value}' for name, value in {**SMALL, **overrides}.items()])


def two_process_commands(overrides: dict, workdir) -> list[list[str]]:
  """The commands of one run over two processes that find each other on a free local port."""
  with socket.socket() as probe:
    probe.bind(('127.0.0.1', 0))
    port = probe.getsockname()[1]
  return [train_command({**overrides, 'parallel.distributed': True, 'parallel.num_processes': 2,
                         'parallel.process_id': i,
                         'parallel.coordinator_address': f'127.0.0.1:{port}'}, workdir)
          for i in range(2)]


def text_of_max_length(translator) -> str:
  """A source text of exactly `config.data.max_length` tokens (EOS included) for `translator`:
  the shortest run of 'a's that reaches it, so not one that `encode` truncated to it."""
  return next(text for text in (' '.join(['a'] * k) for k in range(1, 200))
              if len(translator.encode([text])[0]) == translator.config.data.max_length)


@pytest.fixture(scope='session')
def gcs_emulator():
  """fake-gcs-server on 127.0.0.1 (experiments/tools/gcs_emulator.py), for the session."""
  emulator = gcs_emulator_lib.GcsEmulator()
  yield emulator
  emulator.stop()


@pytest.fixture
def in_emulator(gcs_emulator):
  """This test reaching `gcs_emulator` (its `reached`)."""
  with gcs_emulator.reached():
    yield gcs_emulator
