"""The training command end to end on the built-in corpus: learning, exact resume after a
kill, NaN handling, input errors, and two processes training as one."""

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

from etils import epath
import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from conftest import (REPO, metrics_lines, short_run, train_command, train_config,
                      two_process_commands, xla_flags)
from transformer_jax import average, export
from transformer_jax.data import batching
from transformer_jax.decoding import scoring
from transformer_jax.decoding.dev_evaluation import DevEvaluator
from transformer_jax.decoding.translator import Translator
from transformer_jax.loop import train_loop
from transformer_jax.training import checkpointing, metrics_log
from transformer_jax.training.trainer import Trainer

# End-to-end: trains models and runs commands. The fast tier (`pytest -m "not slow"`) keeps
# one of them, the short run, as its smoke test of the whole training command.

STEPS = 12


@pytest.fixture(scope='module')
def overrides() -> dict:
  return short_run(STEPS)


def _losses(workdir: str, split: str = 'train') -> dict[int, float]:  # local or in a bucket
  return {r['step']: r['loss'] for r in metrics_log.read(os.path.join(workdir, 'metrics.jsonl'))
          if r['split'] == split}


@pytest.fixture(scope='module')
def uninterrupted(overrides, tmp_path_factory) -> str:
  workdir = str(tmp_path_factory.mktemp('uninterrupted'))
  train_loop.train_and_evaluate(train_config(**overrides), workdir)
  return workdir


def test_a_short_run_learns_and_saves_everything(uninterrupted):
  losses = _losses(uninterrupted)
  assert sorted(losses) == list(range(1, STEPS + 1))
  assert np.mean([losses[s] for s in (10, 11, 12)]) < np.mean([losses[s] for s in (1, 2, 3)]) - 0.3
  validation = metrics_log.read(os.path.join(uninterrupted, 'metrics.jsonl'))[-1]
  assert validation['split'] == 'validation' and validation['step'] == STEPS
  assert validation['perplexity'] == pytest.approx(np.exp(validation['nll']))
  assert 0 <= validation['bleu'] <= 100
  # keep_checkpoints=2 of the saves at 4, 8, 12; the config and vocabulary beside them.
  assert sorted(os.listdir(os.path.join(uninterrupted, 'checkpoints'))) == ['12', '8']
  saved = json.load(open(os.path.join(uninterrupted, 'config.json')))
  assert saved['model']['d_model'] == 32 and saved['data']['vocab_size'] == 256
  assert os.path.isfile(os.path.join(uninterrupted, 'spm.model'))
  assert os.listdir(os.path.join(uninterrupted, 'tensorboard'))


def test_a_finished_run_run_again_says_it_is_complete_and_does_nothing(overrides, uninterrupted,
                                                                     tmp_path, capsys, caplog):
  workdir = tmp_path / 'run'
  shutil.copytree(uninterrupted, workdir)
  files = {path: path.read_bytes() for path in workdir.rglob('*') if path.is_file()}
  with caplog.at_level(logging.WARNING):
    assert train_loop.train_and_evaluate(train_config(**overrides), str(workdir)) == {}
  assert (f'{workdir}: complete, trained to step {STEPS} of train.num_train_steps={STEPS}: '
          'nothing to do') in capsys.readouterr().out
  assert 'taking over' not in caplog.text  # the finished run left no holder in its lock
  assert {path: path.read_bytes() for path in workdir.rglob('*') if path.is_file()} == files


@pytest.mark.slow
def test_the_training_command_checks_its_config_once(overrides, uninterrupted, tmp_path):
  """The command's --config, with its overrides, is checked where it enters (the command line),
  and not again by the loop; the saved config it resumes from is checked where it is read."""
  workdir = tmp_path / 'run'
  shutil.copytree(uninterrupted, workdir)
  counting = ('import runpy, sys\n'
              'from transformer_jax.config import checks\n'
              'check = checks.validate\n'
              'def counted(config):\n'
              '  caller = sys._getframe(1).f_code\n'
              '  where = caller.co_filename.split("transformer_jax" + "/")[-1]\n'
              '  print("checked by", where, caller.co_name, flush=True)\n'
              '  check(config)\n'
              'checks.validate = counted\n'
              'sys.argv = sys.argv[1:]\n'
              'runpy.run_module("transformer_jax.train", run_name="__main__")\n')
  command = train_command(overrides, workdir)
  result = subprocess.run([sys.executable, '-c', counting, 'train', *command[3:]],
                          capture_output=True, text=True)
  assert result.returncode == 0, result.stderr
  assert [line for line in result.stdout.splitlines() if line.startswith('checked by')] == [
      'checked by cli.py _parse_flags', 'checked by training/saved_config.py check_compatible']
  assert 'complete, trained to step' in result.stdout


def _killed_and_resumed(overrides: dict, workdir: str, environment: dict) -> list[dict]:
  """The records a run logs after it resumes in this process in `workdir` (local or in a
  bucket) from a command started with `environment` and killed (SIGKILL) mid-run.

  The killed run is the same run made longer (eq. 3 and the batches do not depend on the
  run's length) and keeps every checkpoint, so that the kill lands mid-run however the two
  processes are scheduled. Checkpoints after step 8 are then removed (whatever step 8's
  save had reached stays), and the run resumes from step 4 or 8 to the uninterrupted 12."""
  longer = {**overrides, 'train.num_train_steps': 400, 'train.keep_checkpoints': 100}
  # On the 8 devices of the uninterrupted run and the resumed one (this process's), so that the
  # three runs' reductions add up in the same order.
  process = subprocess.Popen(train_command(longer, workdir), cwd=REPO, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env={**environment, 'XLA_FLAGS': xla_flags(8)})
  metrics = epath.Path(workdir, 'metrics.jsonl')
  checkpoints = epath.Path(workdir, 'checkpoints')
  deadline = time.time() + 240
  while time.time() < deadline and process.poll() is None:
    done = metrics.exists() and max(_losses(workdir), default=0) >= 6
    if done and 4 in checkpointing.saved_steps(workdir):
      break
    time.sleep(0.2)
  assert process.poll() is None, process.stderr.read().decode()[-2000:]
  process.send_signal(signal.SIGKILL)
  assert process.wait() == -signal.SIGKILL  # the kill ended it, mid-run
  assert max(_losses(workdir)) < 400
  for path in checkpoints.iterdir():
    if path.name.split('.')[0].isdigit() and int(path.name.split('.')[0]) > 8:  # any save
      # after step 8, finished or still being written
      path.rmtree()
  logged_before = len(metrics.read_text().splitlines())

  train_loop.train_and_evaluate(train_config(**overrides), workdir)
  return [json.loads(line) for line in metrics.read_text().splitlines()[logged_before:]]


def _assert_resumed_as_uninterrupted(records: list[dict], uninterrupted: str) -> None:
  """The resumed run's `records` are the uninterrupted run's, bit for bit, from the step it
  resumed at; it read the encoded splits the killed one left, not the text."""
  resumed = {r['step']: r['loss'] for r in records if r['split'] == 'train'}
  expected = _losses(uninterrupted)
  assert min(resumed) in (5, 9)  # the first step after checkpoint 4 or 8
  assert {step: expected[step] for step in expected if step >= min(resumed)} == resumed
  validation = {r['step']: r['loss'] for r in records if r['split'] == 'validation'}
  assert validation == _losses(uninterrupted, 'validation')
  [loaded] = [r for r in records if r['split'] == 'data']
  assert 'open_tokens' in loaded and 'encode' not in loaded


@pytest.mark.slow
def test_killed_run_resumes_with_the_uninterrupted_losses(overrides, uninterrupted, tmp_path):
  records = _killed_and_resumed(overrides, str(tmp_path), dict(os.environ))
  _assert_resumed_as_uninterrupted(records, uninterrupted)


@pytest.fixture(scope='module')
def in_bucket(overrides, gcs_emulator) -> str:
  """`uninterrupted`'s run in a bucket of the emulator, killed and resumed
  (`_killed_and_resumed`): the command given only the emulator's address."""
  with gcs_emulator.reached():
    workdir = f'gs://{gcs_emulator.bucket()}/run'
    _killed_and_resumed(overrides, workdir, gcs_emulator.environment())
  return workdir


@pytest.mark.slow
def test_a_run_in_a_bucket_killed_resumes_bit_for_bit(in_bucket, uninterrupted, gcs_emulator):
  with gcs_emulator.reached():
    records = [json.loads(line) for line in
               epath.Path(in_bucket, 'metrics.jsonl').read_text().splitlines()]
    resumed = records[max(i for i, r in enumerate(records) if r['split'] == 'data'):]
    _assert_resumed_as_uninterrupted(resumed, uninterrupted)
    # The local layout, nothing written to a local gs: directory.
    names = {path.name for path in epath.Path(in_bucket).iterdir()}
    assert names == {'checkpoints', 'config.json', 'metrics.jsonl', 'spm.model', 'tensorboard',
                     'tokens'}  # the lock released
    assert list(epath.Path(in_bucket, 'tensorboard').iterdir())
    assert not os.path.exists('gs:') and not os.path.exists(os.path.join(REPO, 'gs:'))
    for item in ('params', 'optimizer'):
      got = ocp.StandardCheckpointer().restore(epath.Path(in_bucket, 'checkpoints', '12', item))
      want = ocp.StandardCheckpointer().restore(
          epath.Path(uninterrupted, 'checkpoints', '12', item))
      jax.tree.map(np.testing.assert_array_equal, got, want)


@pytest.mark.slow
def test_a_run_in_a_bucket_is_averaged_evaluated_and_exported_as_its_local_twin(
    in_bucket, uninterrupted, gcs_emulator, tmp_path):
  """The bucket's run is `uninterrupted` bit for bit (above), so each command reading it must
  give what it gives reading a copy of that one on a local disk."""
  local = str(tmp_path / 'local')
  shutil.copytree(uninterrupted, local)
  with gcs_emulator.reached():
    assert (epath.Path(in_bucket, 'spm.model').read_bytes()
            == epath.Path(local, 'spm.model').read_bytes())
    # `average` into the bucket, and locally.
    assert (average.save_average(in_bucket, 2, f'{in_bucket}-average')
            == average.save_average(local, 2, f'{local}-average') == [8, 12])
    jax.tree.map(np.testing.assert_array_equal,
                 ocp.StandardCheckpointer().restore(
                     epath.Path(f'{in_bucket}-average', 'checkpoints', '12', 'params')),
                 ocp.StandardCheckpointer().restore(
                     epath.Path(f'{local}-average', 'checkpoints', '12', 'params')))
    # `evaluate`: the same translations and figures, written into the bucket.
    got, want = (scoring.evaluate(Translator(workdir, beam_size=2), 'test')
                 for workdir in (in_bucket, local))
    assert epath.Path(got['hypotheses']).read_text() == epath.Path(want['hypotheses']).read_text()
    for name in ('bleu_detokenized', 'bleu_tokenized', 'perplexity', 'checkpoint_steps'):
      assert got[name] == want[name], name
    assert got['hypotheses'].startswith(f'{in_bucket}/eval/')
    # `export` from the bucket: the same model and tokenizer files.
    for workdir, out in ((in_bucket, tmp_path / 'from_bucket'), (local, tmp_path / 'from_local')):
      export.export(workdir, str(out))
    for name in ('model.safetensors', 'source.spm', 'vocab.json', 'generation_config.json'):
      assert (tmp_path / 'from_bucket' / name).read_bytes() == (
          tmp_path / 'from_local' / name).read_bytes(), name


def _feed_threads() -> list[str]:
  """The training feed's and the batch planner's threads still alive."""
  return [t.name for t in threading.enumerate()
          if t.name.startswith(('grain-thread-prefetch', batching.PLANNER_THREAD))]


@pytest.fixture(scope='module')
def packed(overrides) -> dict:
  """`overrides` with every training batch of one shape (packed sequences of max_length), so that
  steps can be stacked into one call, logged every 4 steps; the dev evaluation without BLEU
  (its loss is compared)."""
  return {**overrides, 'data.pack_length': 16, 'train.log_every_steps': 4,
          'train.eval_bleu': False}


def _params(workdir, step: int):
  return ocp.StandardCheckpointer().restore(
      os.path.join(workdir, 'checkpoints', str(step), 'params'))


def _compiled_shapes(workdir) -> list[str]:
  return [r['what'] for r in metrics_log.read(os.path.join(workdir, 'metrics.jsonl'))
          if r['split'] == 'compile' and r['what'].startswith('train step')]


@pytest.mark.slow
def test_steps_per_call_trains_as_single_steps_and_resumes_across_k(packed, tmp_path):
  # The same 12 steps three ways: one step a call; four a call; one a call to step 6 (as a
  # preemption under K = 1 leaves a run), resumed with four a call (7 and 8 alone, 9-12 as one).
  single, called, mixed = (str(tmp_path / name) for name in ('single', 'called', 'mixed'))
  k4 = {'train.steps_per_call': 4}
  train_loop.train_and_evaluate(train_config(**packed), single)
  train_loop.train_and_evaluate(train_config(**packed, **k4), called)
  assert not _feed_threads()
  train_loop.train_and_evaluate(train_config(**{**packed, 'train.num_train_steps': 6}), mixed)
  logged = len(metrics_lines(mixed))
  train_loop.train_and_evaluate(train_config(**packed, **k4), mixed)
  # Resumed from step 6's checkpoint (its data loaded at step 6, logging every 4 steps: 8 and
  # 12), not from the start or an older checkpoint.
  resumed = metrics_lines(mixed)[logged:]
  assert [r['step'] for r in resumed if r['split'] == 'data'] == [6]
  assert [r['step'] for r in resumed if r['split'] == 'train'] == [8, 12]
  want = _losses(single)
  assert sorted(want) == [4, 8, 12]
  got = _losses(called)
  assert sorted(got) == [4, 8, 12]
  np.testing.assert_allclose([got[s] for s in (4, 8, 12)], [want[s] for s in (4, 8, 12)],
                             rtol=1e-5)
  np.testing.assert_allclose(_losses(mixed)[12], want[12], rtol=1e-5)  # over steps 9-12
  for workdir in (called, mixed):
    assert _losses(workdir, 'validation')[12] == pytest.approx(
        _losses(single, 'validation')[12], rel=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
                 _params(workdir, 12), _params(single, 12))
  # The four-step program ran (the calls' structure itself: tests/test_feed.py).
  assert 'train step, batches of 4 x 16 x 16 (packed)' in _compiled_shapes(called)


@pytest.mark.slow
@pytest.mark.parametrize('k', [1, 4])
def test_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(overrides, tmp_path,
                                                                    monkeypatch, k):
  # K = 4: the NaN step is inside the call of steps 5-8, whose metrics come stacked.
  original = Trainer.step

  def poisoned(self, state, batch):  # the loss becomes NaN from the 6th step on
    new_state, metrics = original(self, state, batch)
    metrics['loss'] = jax.numpy.where(state.step >= 5, jax.numpy.nan, metrics['loss'])
    return new_state, metrics

  monkeypatch.setattr(Trainer, 'step', poisoned)
  calls = {'train.steps_per_call': k, 'data.pack_length': 16} if k > 1 else {}
  with pytest.raises(FloatingPointError, match='at step 6'):
    train_loop.train_and_evaluate(train_config(**overrides, **calls), str(tmp_path))
  assert os.listdir(tmp_path / 'checkpoints') == ['4']
  assert not _feed_threads()
  # Steps 5-8 ran as one call of four (K is 1 where shapes vary: then the test would not be
  # about a NaN inside a call).
  fours = [s for s in _compiled_shapes(tmp_path) if s.startswith('train step, batches of 4 x')]
  assert bool(fours) == (k == 4)


@pytest.mark.slow
def test_a_non_finite_update_with_a_finite_loss_is_never_saved(overrides, tmp_path, monkeypatch):
  # Step 8, a checkpoint step, gets a NaN gradient: its loss (from the parameters before the
  # update) is finite, the parameters after it are not. Logging every 100 steps, only the save
  # at step 8 fetches (and so checks) its metrics.
  original = Trainer.step

  def poisoned(self, state, batch, hyper=None):
    new_state, metrics = original(self, state, batch, hyper)
    bad = state.step == 7
    metrics['grad_norm'] = jax.numpy.where(bad, jax.numpy.nan, metrics['grad_norm'])
    params = jax.tree.map(lambda p: jax.numpy.where(bad, jax.numpy.nan, p), new_state.params)
    return new_state.replace(params=params), metrics

  monkeypatch.setattr(Trainer, 'step', poisoned)
  config = train_config(**{**overrides, 'train.log_every_steps': 100})
  with pytest.raises(FloatingPointError, match='gradient norm nan at step 8'):
    train_loop.train_and_evaluate(config, str(tmp_path))
  assert os.listdir(tmp_path / 'checkpoints') == ['4']
  params = ocp.StandardCheckpointer().restore(tmp_path / 'checkpoints' / '4' / 'params')
  assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree.leaves(params))


@pytest.mark.slow
def test_a_nan_is_caught_before_an_evaluation_between_logged_steps(overrides, tmp_path,
                                                                   monkeypatch):
  # Evaluation at step 6, logging and checkpoints every 100 steps: the NaN of step 5 must stop
  # the run before the dev split is evaluated with its parameters.
  original = Trainer.step

  def poisoned(self, state, batch, hyper=None):
    new_state, metrics = original(self, state, batch, hyper)
    metrics['loss'] = jax.numpy.where(state.step >= 4, jax.numpy.nan, metrics['loss'])
    return new_state, metrics

  evaluated = []
  monkeypatch.setattr(Trainer, 'step', poisoned)
  monkeypatch.setattr(DevEvaluator, '__call__',
                      lambda self, *args: evaluated.append(args) or {})
  config = train_config(**{**overrides, 'train.log_every_steps': 100,
                           'train.checkpoint_every_steps': 100, 'train.eval_every_steps': 6})
  with pytest.raises(FloatingPointError, match='at step 5'):
    train_loop.train_and_evaluate(config, str(tmp_path))
  assert not evaluated


def test_a_model_of_other_shapes_cannot_resume(overrides, uninterrupted):
  config = train_config(**{**overrides, 'model.d_ff': 128, 'train.num_train_steps': 20})
  with pytest.raises(ValueError, match='model.d_ff 64 -> 128'):
    train_loop.train_and_evaluate(config, uninterrupted)


def test_unwritable_workdir_is_reported_first(overrides, tmp_path):
  blocker = tmp_path / 'file'
  blocker.write_text('')
  with pytest.raises(OSError, match='is not a writable directory'):
    train_loop.train_and_evaluate(train_config(**overrides), str(blocker / 'workdir'))


@pytest.mark.slow
def test_command_line_errors_name_the_field(tmp_path):
  result = subprocess.run(
      [sys.executable, '-m', 'transformer_jax.train', '--config=configs/tiny.py',
       f'--workdir={tmp_path}', '--config.train.grad_accum_steps=0'],
      cwd=REPO, capture_output=True, text=True)
  assert result.returncode != 0
  assert 'config.train.grad_accum_steps must be a positive integer' in result.stderr


@pytest.mark.slow
def test_two_processes_train_like_one_with_all_their_devices(overrides, tmp_path):
  """2 processes x 2 CPU devices (gloo collectives) give the losses of 1 process x 4 devices."""
  short = {**overrides, 'train.num_train_steps': 4, 'train.eval_every_steps': 100,
           'train.eval_bleu': False}  # losses compared; decoding on 2 processes: test_translate
  env = {**os.environ, 'XLA_FLAGS': xla_flags(4)}
  subprocess.run(train_command(short, tmp_path / 'one'), cwd=REPO, env=env, check=True,
                 capture_output=True)
  env['XLA_FLAGS'] = xla_flags(2)
  processes = [subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
               for command in two_process_commands(short, tmp_path / 'two')]
  outputs = [process.communicate(timeout=300)[0].decode() for process in processes]
  for i, (process, output) in enumerate(zip(processes, outputs)):
    assert process.returncode == 0, f'process {i}:\n{output[-3000:]}'
  one, two = _losses(tmp_path / 'one'), _losses(tmp_path / 'two')
  assert sorted(two) == [1, 2, 3, 4]
  np.testing.assert_allclose([two[s] for s in sorted(two)], [one[s] for s in sorted(one)],
                             rtol=1e-5)
