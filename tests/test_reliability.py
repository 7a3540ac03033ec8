"""Reliability of a training run's workdir: one run at a time (a lock held by a live process
stops a second run; one left by a killed process is taken over), damaged checkpoints skipped,
SIGTERM saves and exits cleanly, a full disk is a clear error that keeps the last checkpoint."""

import logging
import os
import pathlib
import resource
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import orbax.checkpoint as ocp
import pytest

from conftest import (REPO, metrics_lines, train_command, train_config, two_process_commands,
                      xla_flags)
from transformer_jax.data import builtin_grammar
from transformer_jax.decoding.translator import Translator
from transformer_jax.loop import train_loop
from transformer_jax.storage import workdirs

pytestmark = pytest.mark.slow



def _overrides(tmp_path, steps: int) -> dict:
  return {'data.vocab_size': 256,
          'data.max_length': 16, 'data.tokens_per_batch': 256, 'train.num_train_steps': steps,
          'train.log_every_steps': 1, 'train.eval_every_steps': 1000, 'train.num_eval_steps': 1,
          'train.eval_bleu': False, 'train.checkpoint_every_steps': 4,
          'train.keep_checkpoints': 5}


def _wait_for_step(process, workdir, step: int, timeout: float = 240) -> None:
  deadline = time.time() + timeout
  while time.time() < deadline and process.poll() is None:
    path = os.path.join(workdir, 'metrics.jsonl')
    if os.path.exists(path) and any(r['step'] >= step for r in metrics_lines(workdir)):
      return
    time.sleep(0.2)
  raise AssertionError(f'no step {step} logged; exit {process.poll()}')


def _steps(workdir) -> list[str]:
  return sorted(os.listdir(os.path.join(workdir, 'checkpoints')))


def _truncate(directory: pathlib.Path) -> None:
  """Cuts every file of a checkpoint's array store to half its length, as a full disk or an
  interrupted copy leaves them."""
  for path in directory.rglob('*'):
    if path.is_file() and path.stat().st_size > 1:
      with open(path, 'r+b') as f:
        f.truncate(path.stat().st_size // 2)


def test_a_live_run_holds_the_workdir_and_a_killed_ones_lock_is_taken_over(tmp_path, caplog):
  workdir = tmp_path / 'run'
  workdir.mkdir()
  holder = subprocess.Popen(
      [sys.executable, '-c', 'import sys, time\nfrom transformer_jax.storage import workdirs\n'
       'with workdirs.lock(sys.argv[1]):\n  print("locked", flush=True)\n  time.sleep(300)',
       str(workdir)], stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == 'locked'
    with pytest.raises(RuntimeError, match=rf'in use by another training run .*"pid": '
                                           rf'{holder.pid}'):
      train_loop.train_and_evaluate(train_config(**_overrides(tmp_path, 4)), str(workdir))
    assert not os.path.exists(workdir / 'checkpoints')  # stopped before any work
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
  with caplog.at_level(logging.WARNING):
    train_loop.train_and_evaluate(train_config(**_overrides(tmp_path, 4)), str(workdir))
  assert 'left by a run that has ended' in caplog.text and f'"pid": {holder.pid}' in caplog.text
  assert _steps(workdir) == ['4']
  # Ended through Python: the file names no holder, so the next run takes it without a warning.
  assert (workdir / workdirs.LOCK_FILENAME).read_text() == ''
  # While a run holds the lock, translating from the workdir works.
  with workdirs.lock(str(workdir)):
    translator = Translator(str(workdir), average_last=1)
    assert translator.steps == [4] and len(translator.translate(['a dog .'])) == 1
    with pytest.raises(RuntimeError, match='in use by another training run'):
      with workdirs.lock(str(workdir)):
        pass


def test_a_damaged_checkpoint_is_skipped_and_moved_aside(tmp_path):
  workdir = tmp_path / 'run'
  train_loop.train_and_evaluate(train_config(**_overrides(tmp_path, 8)), str(workdir))
  assert _steps(workdir) == ['4', '8']
  _truncate(workdir / 'checkpoints' / '8' / 'params')

  # A reader skips it (and changes nothing).
  assert Translator(str(workdir), average_last=1).steps == [4]
  assert _steps(workdir) == ['4', '8']

  # Training resumes from step 4, exactly as the first run went on from there.
  first = {r['step']: r['loss'] for r in metrics_lines(workdir) if r['split'] == 'train'}
  train_loop.train_and_evaluate(train_config(**_overrides(tmp_path, 12)), str(workdir))
  assert _steps(workdir) == ['12', '4', '8', '8.corrupt']
  resumed = [r for r in metrics_lines(workdir) if r['split'] == 'train'][len(first):]
  assert [r['step'] for r in resumed] == list(range(5, 13))
  np.testing.assert_allclose([r['loss'] for r in resumed[:4]], [first[s] for s in range(5, 9)],
                             rtol=1e-6)

  # With every checkpoint damaged: one clear error, nothing moved.
  for step in ('4', '8', '12'):
    _truncate(workdir / 'checkpoints' / step / 'params')
  with pytest.raises(RuntimeError, match=r'no checkpoint in .*checkpoints can be read; the '
                                         r'newest, 12: '):
    train_loop.train_and_evaluate(train_config(**_overrides(tmp_path, 16)), str(workdir))
  assert _steps(workdir) == ['12', '4', '8', '8.corrupt']
  result = subprocess.run([sys.executable, '-m', 'transformer_jax.translate',
                           f'--workdir={workdir}'], input='a dog .\n', capture_output=True,
                          text=True, cwd=REPO)
  assert result.returncode != 0
  assert 'can be read' in result.stderr and 'Traceback' not in result.stderr


def test_sigterm_saves_at_the_next_step_and_exits_cleanly(tmp_path):
  workdir = tmp_path / 'run'
  overrides = {**_overrides(tmp_path, 400), 'train.checkpoint_every_steps': 1000}
  process = subprocess.Popen(train_command(overrides, workdir), cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
  _wait_for_step(process, workdir, 3)
  process.send_signal(signal.SIGTERM)
  output, _ = process.communicate(timeout=120)
  assert process.returncode == 0, output[-2000:]
  stopped = max(r['step'] for r in metrics_lines(workdir))
  assert stopped < 400
  assert f'Preempted (SIGTERM): saved step {stopped}' in output
  assert _steps(workdir) == [str(stopped)]  # the only checkpoint: the preemption's

  resumed = subprocess.run(train_command({**overrides, 'train.num_train_steps': stopped + 2},
                                    workdir), cwd=REPO, capture_output=True, text=True)
  assert resumed.returncode == 0, resumed.stderr[-2000:]
  assert f'Resumed from step {stopped}' in resumed.stdout
  # The preemption's checkpoint, off the schedule, is deleted once the newer one is complete.
  assert _steps(workdir) == [str(stopped + 2)]


def test_a_full_disk_during_training_is_a_clear_error_and_keeps_the_last_checkpoint(tmp_path):
  workdir = tmp_path / 'run'
  overrides = _overrides(tmp_path, 400)

  # The run ignores SIGXFSZ (inherited, kept through exec), so that writes past the file-size
  # limit fail with EFBIG as they would with ENOSPC, instead of killing it.
  previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
  try:
    process = subprocess.Popen(train_command(overrides, workdir), cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, restore_signals=False)
  finally:
    signal.signal(signal.SIGXFSZ, previous)
  _wait_for_step(process, workdir, 5)
  deadline = time.time() + 60
  while not (workdir / 'checkpoints' / '4').is_dir() and time.time() < deadline:
    time.sleep(0.1)  # step 4's checkpoint is written in the background
  # From now on no file of the run can grow: every write fails as on a full disk.
  resource.prlimit(process.pid, resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
  _, stderr = process.communicate(timeout=240)
  assert process.returncode != 0
  # The last line says what could not be written and why (orbax's own log lines come before).
  error = stderr.strip().splitlines()[-1]
  assert error.startswith('error: ') and 'File too large' in error, stderr[-3000:]
  assert str(workdir) in error, stderr[-3000:]
  # The checkpoint of step 4 is intact and readable.
  assert '4' in _steps(workdir)
  state = ocp.StandardCheckpointer().restore(workdir / 'checkpoints' / '4' / 'optimizer')
  assert int(state['step']) == 4


def test_the_error_line_starts_on_a_fresh_line_after_a_threads_half_written_line():
  # A background thread has written half a line to stderr when the command fails (as orbax's
  # threads do after a full disk): the error is still a line of its own, and the last one.
  program = """
import os, threading
from transformer_jax import cli
def report():
  os.write(2, b'    RuntimeError')
  written.set()
  threading.Event().wait()
def main():
  threading.Thread(target=report, daemon=True).start()
  written.wait()
  raise OSError('cannot write /some/dir/file')
written = threading.Event()
cli.run(main)
"""
  result = subprocess.run([sys.executable, '-c', program], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
  assert result.returncode == 1
  lines = result.stderr.splitlines()
  assert lines[-2:] == ['    RuntimeError', 'error: cannot write /some/dir/file'], result.stderr


@pytest.mark.parametrize('command, own', [('translate', ['--input', '--output']),
                                          ('evaluate', ['--split', '--[no]json'])])
def test_help_lists_every_flag_the_command_takes(command, own):
  # The translator's flags are defined in decoding/translator.py, not in the command's module:
  # absl's --help lists them only as key flags of the command (`cli.run`).
  result = subprocess.run([sys.executable, '-m', f'transformer_jax.{command}', '--help'],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
  for flag in ['--workdir', '--beam_size', '--alpha', '--average_last', '--batch_size', *own]:
    assert f'  {flag}' in result.stdout, (flag, result.stdout)
  assert '--helpfull' in result.stdout  # the rest (absl's and JAX's own) stays behind it


def test_sigterm_to_one_of_two_processes_stops_both_at_the_same_step(tmp_path):
  workdir = tmp_path / 'run'
  overrides = {**_overrides(tmp_path, 400), 'train.checkpoint_every_steps': 1000}
  env = {**os.environ, 'XLA_FLAGS': xla_flags(2)}
  processes = [subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
               for command in two_process_commands(overrides, workdir)]
  _wait_for_step(processes[0], workdir, 3)
  processes[1].send_signal(signal.SIGTERM)  # the notice reaches one process only
  outputs = [process.communicate(timeout=120)[0] for process in processes]
  for i, (process, output) in enumerate(zip(processes, outputs)):
    assert process.returncode == 0, f'process {i}:\n{output[-3000:]}'
  stopped = max(r['step'] for r in metrics_lines(workdir))
  assert stopped < 400
  assert f'Preempted (SIGTERM): saved step {stopped}' in outputs[0]
  assert _steps(workdir) == [str(stopped)]


def test_a_data_error_on_process_0_stops_the_other_process_too(tmp_path):
  """Process 0 prepares the data first; when that fails the other process is told and stops
  with an error, instead of waiting for process 0 in a collective that never comes."""
  overrides = {**_overrides(tmp_path, 4), 'data.tokens_per_batch': 48}  # < 4 sequences of 16
  env = {**os.environ, 'XLA_FLAGS': xla_flags(2)}
  processes = [subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
               for command in two_process_commands(overrides, tmp_path / 'run')]
  try:
    outputs = [process.communicate(timeout=300)[0] for process in processes]
  finally:
    for process in processes:
      process.kill()
  assert [process.returncode != 0 for process in processes] == [True, True]
  assert 'cannot hold 4 sequence(s) of config.data.max_length=16' in outputs[0].splitlines()[-1]
  assert outputs[1].splitlines()[-1] == ('error: process 0 could not prepare the data and '
                                         'vocabulary; see its error')


def test_bad_corpus_files_stop_training_first_and_a_corrected_rerun_trains(tmp_path):
  """A text file that is not UTF-8 stops `train` with an error naming file and line before any
  training, leaving nothing in the workdir (nor a prepared dataset) that the corrected rerun
  would trip over."""
  corpus = tmp_path / 'corpus'
  corpus.mkdir()
  pairs = builtin_grammar.splits(seed=0)['train'][:2000]
  for side, lang in enumerate(('en', 'de')):
    (corpus / f'train.{lang}').write_text(''.join(pair[side] + '\n' for pair in pairs),
                                          encoding='utf-8')
  good = (corpus / 'train.de').read_bytes()
  line = 1500
  lines = good.split(b'\n')
  lines[line - 1] = lines[line - 1].replace(b'e', b'\xe9', 1)
  (corpus / 'train.de').write_bytes(b'\n'.join(lines))
  config = train_config(**{**_overrides(tmp_path, 2), 'data.dataset': 'files',
                           'data.train_files': str(corpus / 'train.{lang}'),
                           'data.validation_files': str(corpus / 'train.{lang}')})
  workdir = tmp_path / 'run'
  with pytest.raises(ValueError, match=f'{corpus / "train.de"}, line {line}: not UTF-8'):
    train_loop.train_and_evaluate(config, str(workdir))
  assert os.listdir(workdir) == ['lock']
  (corpus / 'train.de').write_bytes(good)
  train_loop.train_and_evaluate(config, str(workdir))
  assert max(r['step'] for r in metrics_lines(workdir)) == 2


def test_a_bucket_that_cannot_be_used_stops_every_command_at_once_creating_nothing(
    tmp_path, gcs_emulator):
  """A `gs://` workdir of `train`, `sweep` or `evaluate` that cannot be used: the command ends
  within seconds (before loading data or compiling), naming the bucket and the fix, and the
  working directory stays empty (no `./gs:/bucket/run`). A bucket the emulator does not hold;
  a machine with no credentials (no emulator, key file, gcloud login or metadata server)."""
  with socket.socket() as probe:
    probe.bind(('127.0.0.1', 0))
    closed = f'127.0.0.1:{probe.getsockname()[1]}'  # where nothing listens
  without_credentials = {
      **{name: value for name, value in gcs_emulator.environment().items()
         if name not in ('STORAGE_EMULATOR_HOST', 'GOOGLE_APPLICATION_CREDENTIALS')},
      'CLOUDSDK_CONFIG': str(tmp_path / '.gcloud'), 'GCE_METADATA_HOST': closed,
      'GCE_METADATA_IP': closed}
  cases = [
      (train_command({}, 'gs://no-such-bucket/run'), gcs_emulator.environment(),
       'the bucket gs://no-such-bucket does not exist at http://127.0.0.1:',
       'gcloud storage buckets create gs://no-such-bucket'),
      ([sys.executable, '-m', 'transformer_jax.sweep',
        f'--sweep={REPO}/experiments/table3_multi30k/sweep.py', '--workdir=gs://bucket/run'],
       without_credentials, 'no Google Cloud credentials on this machine to reach gs://bucket',
       'gcloud auth application-default login'),
      ([sys.executable, '-m', 'transformer_jax.evaluate', '--workdir=gs://bucket/run'],
       without_credentials, 'no Google Cloud credentials', 'GOOGLE_APPLICATION_CREDENTIALS'),
  ]
  for command, environment, why, fix in cases:
    start = time.monotonic()
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env=environment)
    assert result.returncode == 1, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    workdir = next(arg for arg in command if arg.startswith('--workdir='))
    assert last.startswith(f'error: {workdir}: {why}'), last
    assert fix in last, last
    assert time.monotonic() - start < 60, command
    assert os.listdir(tmp_path) == [], command
