"""Data prepared once for several processes (`config.data.prepared`): the prepare command in a
directory and in a bucket, a place for other data refused naming the field, and a run of two
processes that both read it, neither preparing nor waiting for the other."""

import json
import os
import subprocess
import sys

from etils import epath
import numpy as np
import pytest

from conftest import (CORPUS, REPO, SMALL, train_config, two_process_commands,
                      xla_flags)
from transformer_jax.data import datasets, pipeline, prepared, token_store, tokenizer
from transformer_jax.loop import runs, train_loop
from transformer_jax.training import checkpointing, metrics_log

# The smallest vocabulary the session's corpus serves, as the tests of `train` use.
VOCAB = {'data.vocab_size': 64}


@pytest.fixture(scope='module')
def place(tmp_path_factory) -> str:
  """The session's corpus prepared into a directory."""
  output = str(tmp_path_factory.mktemp('prepared') / 'place')
  pipeline.prepare(train_config(**VOCAB), output)
  return output


def _files(place: str) -> dict[str, bytes]:
  """Every file of a prepared place (local or in a bucket), by path: its layout is two levels
  deep (`tokens/`)."""
  return {str(path): path.read_bytes() for pattern in ('*', f'{token_store.DIRECTORY}/*')
          for path in epath.Path(place).glob(pattern) if path.is_file()}


def _corpus_pairs(split: str, count: int) -> list[tuple[str, str]]:
  """The first `count` (English, German) lines of the corpus's text files, read directly."""
  sides = []
  for lang in ('en', 'de'):
    with open(CORPUS[f'data.{split}_files'].replace('{lang}', lang), encoding='utf-8') as f:
      sides.append([next(f).strip() for _ in range(count)])
  return list(zip(*sides))


def test_a_prepared_place_is_read_without_preparing_or_writing(place, tmp_path, monkeypatch):
  def must_not_run(*args, **kwargs):
    raise AssertionError('data read from config.data.prepared should not be prepared again')

  for module, name in ((datasets, 'load_split'), (tokenizer, 'train'),
                       (tokenizer, 'encode_flat')):
    monkeypatch.setattr(module, name, must_not_run)
  before = _files(place)
  workdir = tmp_path / 'run'
  data = pipeline.load(train_config(**VOCAB, **{'data.prepared': place}), str(workdir))
  assert set(data.seconds) == {'vocabulary', 'open_tokens'}
  assert not workdir.exists()
  assert _files(place) == before
  # The ids are the vocabulary's encoding of the corpus's text, in corpus order, without the
  # pairs with a side longer than max_length tokens (EOS included).
  for split in ('train', 'validation'):
    encoded = [(tokenizer.encode(data.tokenizer, [source])[0],
                tokenizer.encode(data.tokenizer, [target])[0])
               for source, target in _corpus_pairs(split, 40)]
    expected = [pair for pair in encoded if max(map(len, pair)) <= SMALL['data.max_length']]
    kept = data.batchers[split].split
    assert expected
    for i, (source, target) in enumerate(expected):
      np.testing.assert_array_equal(kept.sources[i], source)
      np.testing.assert_array_equal(kept.targets[i], target)


def test_processes_read_a_prepared_place_before_any_collective(place, tmp_path, monkeypatch):
  """Each process loads at once; only process 0's writing of the config and vocabulary into
  the workdir is waited on (`workdirs.on_process_zero`), after every process has its data."""
  config = train_config(**VOCAB, **{'data.prepared': place})
  for process in (0, 1):
    events = []

    def on_process_zero(action, what, process=process, events=events):
      events.append(f'collective: {what}')
      return action() if process == 0 else None

    monkeypatch.setattr(runs.jax, 'process_index', lambda process=process: process)
    monkeypatch.setattr(runs.workdirs, 'on_process_zero', on_process_zero)
    workdir = str(tmp_path / str(process))
    os.makedirs(workdir)  # as `train` makes it, before taking its lock
    data = runs.load_data([config], [workdir], lambda events=events: events.append('load') or
                          pipeline.load(config, workdir))
    assert events == ['load', 'collective: write the config and vocabulary']
    assert set(data.seconds) == {'vocabulary', 'open_tokens'}
    # Process 0 makes the workdir whole (config and vocabulary); process 1 writes nothing.
    assert sorted(os.listdir(workdir)) == (['config.json', 'spm.model'] if process == 0 else [])
  with open(os.path.join(place, 'spm.model'), 'rb') as f:
    assert (tmp_path / '0' / 'spm.model').read_bytes() == f.read()


@pytest.mark.parametrize('field, value', [
    ('data.vocab_size', 128),
    ('data.target_lang', 'en'),  # the other direction
    ('data.preprocessing', 'lowercase_moses'),
    ('data.dataset', 'builtin'),
])
def test_a_place_prepared_for_other_data_is_refused_naming_the_field(place, field, value):
  changes = {field: value}
  if field == 'data.target_lang':
    changes['data.source_lang'] = 'de'
  config = train_config(**{**VOCAB, **changes, 'data.prepared': place})
  with pytest.raises(ValueError, match=f'config.data.prepared={place} was prepared for other '
                                       f'data .*{field} '):
    pipeline.load(config, place)


def test_training_on_a_place_for_other_data_stops_before_building_anything(place, tmp_path,
                                                                          monkeypatch):
  def must_not_build(self):
    raise AssertionError('the prepared place should have been refused first')

  monkeypatch.setattr(runs.OneRun, 'programs', must_not_build)
  config = train_config(**{'data.vocab_size': 128, 'data.prepared': place})
  with pytest.raises(ValueError, match=r'data\.vocab_size 64 -> 128'):
    train_loop.train_and_evaluate(config, str(tmp_path / 'run'))


def test_a_missing_or_unfinished_place_is_an_error_naming_the_field(tmp_path):
  missing = str(tmp_path / 'missing')
  with pytest.raises(FileNotFoundError,
                     match=f'config.data.prepared={missing} holds no prepared data.*--prepare'):
    pipeline.load(train_config(**VOCAB, **{'data.prepared': missing}), str(tmp_path))
  unfinished = tmp_path / 'unfinished'
  prepared.begin(train_config(**VOCAB), str(unfinished))  # as a preparation that was killed
  with pytest.raises(FileNotFoundError, match='was not prepared to the end'):
    pipeline.load(train_config(**VOCAB, **{'data.prepared': str(unfinished)}), str(tmp_path))


def test_a_missing_bucket_or_an_empty_one_is_an_error_naming_the_field(in_emulator, tmp_path):
  for place, error, said in (
      ('gs://no-such-bucket/data', ValueError, 'the bucket gs://no-such-bucket does not exist'),
      (f'gs://{in_emulator.bucket()}/data', FileNotFoundError, 'holds no prepared data')):
    with pytest.raises(error, match=f'config.data.prepared={place}.*{said}'):
      pipeline.load(train_config(**VOCAB, **{'data.prepared': place}), str(tmp_path))


def test_preparing_into_a_place_of_other_data_or_other_files_is_refused(place, tmp_path):
  with pytest.raises(ValueError, match=r'--output=.* holds data prepared for other fields '
                                       r'\(data\.vocab_size 64 -> 128\)'):
    pipeline.prepare(train_config(**{'data.vocab_size': 128}), place)
  (tmp_path / 'notes.txt').write_text('')
  with pytest.raises(ValueError, match='holds files but no prepared.json'):
    pipeline.prepare(train_config(**VOCAB), str(tmp_path))


@pytest.mark.slow
def test_the_command_prepares_into_a_bucket_and_two_processes_train_from_it(
    gcs_emulator, tmp_path):
  """`--prepare --output=gs://...`, then `train` over two processes with config.data.prepared
  there and its workdir in the bucket too: both read it, neither prepares (the run's 'data'
  record opens tokens only), nothing prepared changes, and the workdir holds the config, a copy
  of the vocabulary and the two processes' checkpoint, and no token ids."""
  url = f'gs://{gcs_emulator.bucket()}/multi30k_like'
  overrides = {**VOCAB, 'train.num_train_steps': 2, 'train.eval_every_steps': 100,
               'train.eval_bleu': False, 'train.checkpoint_every_steps': 2}
  env = {**gcs_emulator.environment(), 'XLA_FLAGS': xla_flags(1)}
  prepare = subprocess.run(
      [sys.executable, '-m', 'transformer_jax.data',
       f'--config={REPO}/configs/base.py', '--prepare', f'--output={url}',
       *(f'--config.{name}={value}' for name, value in {**CORPUS, **VOCAB}.items())],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
  assert prepare.returncode == 0, prepare.stderr[-3000:]
  assert f'train with --config.data.prepared={url}' in prepare.stdout
  with gcs_emulator.reached():
    before = _files(url)
    assert json.loads(before[f'{url}/prepared.json'])['fields']['data.vocab_size'] == 64
  # The run's workdir in the bucket too, as on a TPU pod slice whose hosts share no disk.
  workdir = url.replace('multi30k_like', 'runs/run')
  processes = [subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
               for command in two_process_commands({**overrides, 'data.prepared': url},
                                                   workdir)]
  outputs = [process.communicate(timeout=300)[0].decode() for process in processes]
  for i, (process, output) in enumerate(zip(processes, outputs)):
    assert process.returncode == 0, f'process {i}:\n{output[-3000:]}'
  with gcs_emulator.reached():
    [data] = [r for r in metrics_log.read(f'{workdir}/metrics.jsonl') if r['split'] == 'data']
    assert set(data) - {'step', 'split'} == {'vocabulary', 'open_tokens'}
    assert {path.name for path in epath.Path(workdir).iterdir()} == {
        'checkpoints', 'config.json', 'metrics.jsonl', 'spm.model', 'tensorboard'}  # no tokens/
    assert checkpointing.saved_steps(workdir) == [2]  # both processes' shards, saved whole
    assert json.loads(epath.Path(workdir, 'config.json').read_text())['data']['prepared'] == url
    assert _files(url) == before
    assert epath.Path(workdir, 'spm.model').read_bytes() == before[f'{url}/spm.model']
