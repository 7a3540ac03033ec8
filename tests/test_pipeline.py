"""The whole data pipeline on the built-in corpus, and the inspect command."""

import collections
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from transformer_jax import config_lib
from transformer_jax.data import batching, builtin_grammar, pipeline, tokenizer

tiny = config_lib.import_sibling(__file__, '../configs/tiny')

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope='module')
def config(tmp_path_factory):
  config = tiny.get_config()
  config.data.tfds_data_dir = str(tmp_path_factory.mktemp('tfds'))
  return config


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
  return str(tmp_path_factory.mktemp('workdir'))


@pytest.fixture(scope='module')
def data(config, workdir):
  return pipeline.load(config, workdir, rows_multiple=2)


def test_vocabulary_is_saved_in_the_workdir_and_reused(config, workdir, data, monkeypatch):
  path = os.path.join(workdir, tokenizer.MODEL_FILENAME)
  assert os.path.isfile(path) and data.tokenizer.vocab_size() == config.data.vocab_size

  def must_not_train(*args, **kwargs):
    raise AssertionError('the saved vocabulary should have been reused')

  monkeypatch.setattr(tokenizer, 'train', must_not_train)
  again = pipeline.vocabulary(config, workdir, train_pairs=[])
  assert again.serialized_model_proto() == data.tokenizer.serialized_model_proto()


def test_eval_batches_hold_every_kept_pair_once(config, data):
  splits = builtin_grammar.splits(seed=0)
  for split in ('validation', 'test'):
    decoded = []
    for batch in data.eval_batches(split):
      assert batch['inputs'].shape[0] % 2 == 0
      for source, target in zip(batch['inputs'], batch['targets']):
        if source.any():
          decoded.append((tokenizer.decode(data.tokenizer, source),
                          tokenizer.decode(data.tokenizer, target)))
    kept = data.batchers[split].split
    assert len(decoded) == len(kept) == len(splits[split]) - kept.num_dropped
    # As a multiset: no pair comes out more often than the split holds it.
    assert collections.Counter(decoded) <= collections.Counter(splits[split])


def test_train_iterator_respects_the_token_budget(config, data):
  iterator = data.train_iterator(seed=0)
  for _ in range(20):
    batch = next(iterator)
    rows, length = batch['inputs'].shape
    assert rows * length <= config.data.tokens_per_batch and length <= config.data.max_length
    np.testing.assert_array_equal(batch['decoder_inputs'][:, 1:], batch['targets'][:, :-1])


def _shapes(batches) -> set:
  return {batch['inputs'].shape for batch in batches}


@pytest.mark.parametrize('accelerator', [False, True])
def test_the_platform_picks_the_batch_shapes(config, workdir, data, accelerator, monkeypatch):
  """By default a CPU batches by the fine buckets; an accelerator trains on packed rows of one
  shape and evaluates in at most three bucket shapes."""
  monkeypatch.setattr(pipeline, 'on_accelerator', lambda: accelerator)
  assert (config.data.buckets, config.data.pack_length) == ('auto', None)
  reused = config.copy_and_resolve_references()
  reused.data.spm_model = os.path.join(workdir, tokenizer.MODEL_FILENAME)
  loaded = pipeline.load(reused, workdir, rows_multiple=2)
  iterator = loaded.train_iterator(seed=0)
  epoch = [next(iterator) for _ in range(iterator.get_state()['batches'])]
  validation = _shapes(loaded.eval_batches('validation'))
  max_length = config.data.max_length
  if accelerator:
    assert _shapes(epoch) == {(config.data.tokens_per_batch // max_length, max_length)}
    assert all('source_segments' in batch for batch in epoch)
    widths = batching.bucket_lengths(max_length, 'coarse')
  else:
    assert len(_shapes(epoch)) > 3 and all('source_segments' not in batch for batch in epoch)
    widths = batching.bucket_lengths(max_length, 'fine')
  assert {width for _, width in _shapes(epoch) | validation} <= set(widths)


def test_evaluation_batches_are_one_micro_batch(config, workdir, data):
  """With gradient accumulation a training batch holds grad_accum_steps micro-batches; an
  evaluation batch holds one: a k-th of the tokens, its rows a multiple of the batch shards."""
  accumulating = config.copy_and_resolve_references()
  accumulating.train.grad_accum_steps = 2
  accumulating.data.spm_model = os.path.join(workdir, tokenizer.MODEL_FILENAME)
  batchers = pipeline.load(accumulating, workdir, rows_multiple=4).batchers  # 2 shards x 2
  assert batchers['train'].tokens_per_batch == config.data.tokens_per_batch
  assert batchers['train'].rows_multiple == 4
  for split in ('validation', 'test'):
    assert batchers[split].tokens_per_batch == config.data.tokens_per_batch // 2
    assert batchers[split].rows_multiple == 2
    assert data.batchers[split].tokens_per_batch == config.data.tokens_per_batch


def test_a_bad_vocabulary_file_is_reported_before_the_data_is_read(config, tmp_path,
                                                                    monkeypatch):
  def must_not_read(*args, **kwargs):
    raise AssertionError('the data was read before the vocabulary was checked')

  monkeypatch.setattr(pipeline.datasets, 'load_pairs', must_not_read)
  missing = config.copy_and_resolve_references()
  missing.data.spm_model = str(tmp_path / 'missing.model')
  with pytest.raises(OSError, match='missing.model'):
    pipeline.load(missing, str(tmp_path))


def test_a_split_with_every_pair_too_long_is_an_error_naming_the_field(config, data):
  short = config.copy_and_resolve_references()
  short.data.max_length = 1  # every tokenized sentence ends with EOS: 2 tokens at least
  pairs = builtin_grammar.splits(seed=0)['validation']
  with pytest.raises(ValueError, match=f'the validation split has no pairs left: all '
                     f'{len(pairs)} have a side longer than config.data.max_length=1'):
    pipeline.batcher(short, data.tokenizer, pairs, name='validation')


@pytest.mark.slow
def test_inspect_command_json(config):
  result = subprocess.run(
      [sys.executable, '-m', 'transformer_jax.data', '--config=configs/tiny.py', '--inspect',
       '--json', f'--config.data.tfds_data_dir={config.data.tfds_data_dir}'],
      cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  # The last line: TFDS announces on stdout a dataset it prepares first.
  stats = json.loads(result.stdout.strip().splitlines()[-1])
  assert stats['vocab_size'] == 1000
  sizes = {split: len(pairs) for split, pairs in builtin_grammar.splits(seed=0).items()}
  for split, counts in stats['pairs'].items():
    assert counts['kept'] + counts['dropped'] == sizes[split]
  assert 1 <= stats['batch_shapes'] <= 8
  assert 0 < stats['padding_fraction'] < 1 and 0 < stats['target_padding_fraction'] < 1
  assert stats['mean_tokens_per_batch'] <= 2 * 2048
  assert stats['pipeline_tokens_per_second'] > 0
