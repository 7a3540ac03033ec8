"""The persistent compilation cache and the compile counts (transformer_jax/training/compilation.py)."""

import contextlib
import json
import subprocess
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import REPO, train_command, train_config
from transformer_jax.training import compilation, metrics_log


@pytest.fixture
def restored_cache():
  """Puts JAX's cache settings back as they were after the test."""
  names = ('jax_enable_compilation_cache', 'jax_compilation_cache_dir',
           'jax_persistent_cache_min_compile_time_secs')
  saved = {name: getattr(jax.config, name) for name in names}
  yield
  for name, value in saved.items():
    jax.config.update(name, value)
  compilation.compilation_cache.reset_cache()


def _cache_config(path):
  return train_config(**{'train.compilation_cache_dir': path})


def _counted(function, x) -> compilation.CompileStats:
  before = compilation.so_far()
  jax.block_until_ready(function(x))
  return compilation.so_far() - before


def test_a_program_is_compiled_once_then_loaded_from_the_cache(tmp_path, restored_cache):
  compilation.use_cache(_cache_config(str(tmp_path / 'cache')))
  # A shape no other test compiles, so the program is new to the process.
  x = jnp.asarray(np.arange(3 * 7 * 11, dtype=np.float32).reshape(3, 7, 11))
  function = jax.jit(lambda x: jnp.sin(x) * 3 + x.sum(axis=0))
  first = _counted(function, x)
  assert (first.compiled, first.loaded) == (1, 0) and first.seconds > 0
  again = _counted(function, x)  # the process's own cache: no event at all
  assert again == compilation.CompileStats()
  jax.clear_caches()  # as a new process: only the persistent cache has it
  loaded = _counted(function, x)
  assert (loaded.compiled, loaded.loaded) == (0, 1)
  compilation.use_cache(_cache_config(''))  # off
  jax.clear_caches()
  off = _counted(function, x)
  assert (off.compiled, off.loaded) == (1, 0)


def test_a_thread_charged_to_another_counts_its_compiles_there():
  """`so_far` is the calling thread's; a thread within `charged_to(caller)` counts for the
  caller, and once out of it for itself again."""
  caller, seen = threading.get_ident(), {}

  def work(charged: bool):
    # Shapes no other test compiles, new to the process.
    x = jnp.ones((5, 13 + charged, 17), jnp.float32)
    with compilation.charged_to(caller) if charged else contextlib.nullcontext():
      seen[charged] = _counted(jax.jit(lambda x: jnp.cos(x) - x.mean(axis=1, keepdims=True)), x)

  for charged in (True, False):
    before = compilation.so_far()
    thread = threading.Thread(target=work, args=(charged,))
    thread.start()
    thread.join()
    mine = compilation.so_far() - before
    assert (mine.compiled + mine.loaded == 1) == (mine.seconds > 0) == charged
    worker = seen[charged]
    assert (worker.compiled + worker.loaded == 1) == (not charged)


def test_the_default_directory_is_the_users_cache(tmp_path, monkeypatch):
  monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path))
  assert compilation.cache_dir(_cache_config(None)) == str(tmp_path / 'transformer_jax' / 'jax')
  monkeypatch.delenv('XDG_CACHE_HOME')
  monkeypatch.setenv('HOME', str(tmp_path / 'home'))
  assert compilation.cache_dir(_cache_config(None)) == str(
      tmp_path / 'home' / '.cache' / 'transformer_jax' / 'jax')
  assert compilation.cache_dir(_cache_config('')) is None
  assert compilation.cache_dir(_cache_config('~/elsewhere')) == str(
      tmp_path / 'home' / 'elsewhere')


def _records(workdir, split: str) -> list[dict]:
  with open(workdir / 'metrics.jsonl') as f:
    return [r for r in map(json.loads, f) if r['split'] == split]


@pytest.mark.slow
def test_a_second_run_of_the_same_model_compiles_nothing(tmp_path):
  # Two dev evaluations (of two batches each), so that the second one shows evaluation reusing
  # its programs.
  overrides = {'train.num_train_steps': 4, 'train.eval_every_steps': 2,
               'train.num_eval_steps': 2, 'train.compilation_cache_dir': str(tmp_path / 'cache')}
  runs = {}
  for name in ('first', 'second'):
    subprocess.run(train_command(overrides, tmp_path / name), cwd=REPO, check=True,
                   capture_output=True)
    runs[name] = {r['what']: r for r in _records(tmp_path / name, 'compile')}
  first, second = runs['first']['the whole run'], runs['second']['the whole run']
  assert first['compiled'] > 0
  assert second['compiled'] == 0 and second['loaded'] > 0
  # Every train step shape is reported once, with what it cost, apart from the step time.
  shapes = [what for what in runs['second'] if what.startswith('train step, batches of ')]
  assert shapes and all(runs['second'][what]['loaded'] >= 1 for what in shapes)
  logged = metrics_log.read(str(tmp_path / 'second' / 'metrics.jsonl'))
  train = [r for r in logged if r['split'] == 'train']
  assert sum(r['compile_seconds'] for r in train) == pytest.approx(
      sum(runs['second'][what]['seconds'] for what in shapes))
  validation = [r for r in logged if r['split'] == 'validation']
  assert [r['step'] for r in validation] == [2, 4]
  assert validation[0]['compile_seconds'] > 0
  # The second evaluation had each of its shapes compiled already (the dev split's batches are
  # the same at every evaluation): nothing was compiled or loaded for it.
  assert validation[1]['compile_seconds'] == 0
