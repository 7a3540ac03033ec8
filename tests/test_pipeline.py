"""The whole data pipeline on the built-in corpus, and the inspect command."""

import collections
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from transformer_jax.config import loading
from transformer_jax.data import batching, builtin_grammar, pipeline, token_store, tokenizer

tiny = loading.import_sibling(__file__, '../configs/tiny')

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope='module')
def config():
  return tiny.get_config()


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
  return str(tmp_path_factory.mktemp('workdir'))


@pytest.fixture(scope='module')
def data(config, workdir):
  return pipeline.load(config, workdir, sequences_multiple=2)


def test_vocabulary_is_saved_in_the_workdir_and_reused(config, workdir, data, monkeypatch):
  path = os.path.join(workdir, tokenizer.MODEL_FILENAME)
  assert os.path.isfile(path) and data.tokenizer.vocab_size() == config.data.vocab_size

  def must_not_train(*args, **kwargs):
    raise AssertionError('the saved vocabulary should have been reused')

  monkeypatch.setattr(tokenizer, 'train', must_not_train)
  again = pipeline.vocabulary(config, workdir)
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
    sequences, length = batch['inputs'].shape
    assert sequences * length <= config.data.tokens_per_batch and length <= config.data.max_length
    np.testing.assert_array_equal(batch['decoder_inputs'][:, 1:], batch['targets'][:, :-1])


def _shapes(batches) -> set:
  return {batch['inputs'].shape for batch in batches}


@pytest.mark.parametrize('accelerator', [False, True])
def test_the_platform_picks_the_batch_shapes(config, workdir, data, accelerator, monkeypatch):
  """By default a CPU batches by the fine buckets; an accelerator trains on packed sequences of one
  shape and evaluates in at most three bucket shapes."""
  monkeypatch.setattr(pipeline, 'on_accelerator', lambda platform=None: accelerator)
  assert (config.data.buckets, config.data.pack_length) == ('auto', None)
  reused = config.copy_and_resolve_references()
  reused.data.spm_model = os.path.join(workdir, tokenizer.MODEL_FILENAME)
  loaded = pipeline.load(reused, workdir, sequences_multiple=2)
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
  evaluation batch holds one: a k-th of the tokens, its sequences a multiple of the batch shards."""
  accumulating = config.copy_and_resolve_references()
  accumulating.train.grad_accum_steps = 2
  accumulating.data.spm_model = os.path.join(workdir, tokenizer.MODEL_FILENAME)
  batchers = pipeline.load(accumulating, workdir, sequences_multiple=4).batchers  # 2 shards x 2
  assert batchers['train'].tokens_per_batch == config.data.tokens_per_batch
  assert batchers['train'].sequences_multiple == 4
  for split in ('validation', 'test'):
    assert batchers[split].tokens_per_batch == config.data.tokens_per_batch // 2
    assert batchers[split].sequences_multiple == 2
    assert data.batchers[split].tokens_per_batch == config.data.tokens_per_batch


def test_a_bad_vocabulary_file_is_reported_before_the_data_is_read(config, tmp_path,
                                                                    monkeypatch):
  def must_not_read(*args, **kwargs):
    raise AssertionError('the data was read before the vocabulary was checked')

  monkeypatch.setattr(pipeline.datasets, 'load_split', must_not_read)
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
       '--json'],
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
  assert set(stats['load_seconds']) == {'vocabulary', 'prepare', 'encode'}
  assert stats['first_batch_seconds'] > 0 and stats['peak_memory_bytes'] > 2**20
  assert stats['plan_seconds'] > 0


def test_encoded_splits_are_the_tokenizer_ids_and_a_second_load_reads_no_text(
    config, workdir, data, monkeypatch):
  splits = builtin_grammar.splits(seed=0)
  for split in ('train', 'test'):
    sources = tokenizer.encode(data.tokenizer, [source for source, _ in splits[split]])
    targets = tokenizer.encode(data.tokenizer, [target for _, target in splits[split]])
    expected = batching.TokenizedSplit.from_pairs(sources, targets, config.data.max_length)
    kept = data.batchers[split].split
    assert len(kept) == len(expected) and kept.num_dropped == expected.num_dropped
    for i in (0, 1, len(kept) // 2, len(kept) - 1):
      np.testing.assert_array_equal(kept.sources[i], expected.sources[i])
      np.testing.assert_array_equal(kept.targets[i], expected.targets[i])
  assert set(data.seconds) == {'vocabulary', 'prepare', 'encode'}

  def must_not_read(*args, **kwargs):
    raise AssertionError('the encoded splits should have been reused')

  monkeypatch.setattr(tokenizer, 'encode_flat', must_not_read)
  monkeypatch.setattr(pipeline.datasets, 'load_split', must_not_read)
  again = pipeline.load(config, workdir, sequences_multiple=2)
  assert 'open_tokens' in again.seconds and 'encode' not in again.seconds
  assert isinstance(again.batchers['train'].split.sources.ids.base, np.memmap)
  first, second = data.train_iterator(seed=3), again.train_iterator(seed=3)
  for _ in range(5):
    expected, got = next(first), next(second)
    assert set(got) == set(expected)
    for name, array in expected.items():
      np.testing.assert_array_equal(got[name], array)


def _encode(texts, dtype=np.uint16, calls=None):
  """Each character's code point, then EOS."""
  if calls is not None:
    calls.append(len(texts))
  lengths = np.array([len(text) + 1 for text in texts])
  ids = np.concatenate([np.append([ord(c) for c in text], tokenizer.EOS_ID) for text in texts])
  return ids.astype(dtype), lengths


def _write(workdir, pairs, identity, calls=None, dtype=np.uint16):
  return token_store.write(str(workdir), 'train', pairs,
                           lambda texts: _encode(texts, dtype, calls), identity, dtype)


def test_token_store_writes_in_chunks_and_reads_back_only_for_the_same_data(tmp_path,
                                                                            monkeypatch):
  monkeypatch.setattr(token_store, 'CHUNK', 3)
  pairs = [(f's{i}', 't' * (i % 4 + 1)) for i in range(8)]
  calls = []
  sources, targets = _write(tmp_path, pairs, {'vocabulary': 'a'}, calls)
  assert calls == [3, 3, 3, 3, 2, 2]  # each side of each chunk
  for i, (source, target) in enumerate(pairs):
    assert sources[i].tolist() == [ord(c) for c in source] + [tokenizer.EOS_ID]
    assert targets[i].tolist() == [ord(c) for c in target] + [tokenizer.EOS_ID]
  again = token_store.saved(str(tmp_path), 'train', {'vocabulary': 'a'})
  assert [a.tolist() for a in again[0]] == [a.tolist() for a in sources]
  assert token_store.saved(str(tmp_path), 'train', {'vocabulary': 'b'}) is None
  assert token_store.saved(str(tmp_path), 'validation', {'vocabulary': 'a'}) is None
  # Ids that do not add up to the lengths (a damaged file) are not read back.
  with open(tmp_path / 'tokens' / 'train.target', 'r+b') as f:
    f.truncate(4)
  assert token_store.saved(str(tmp_path), 'train', {'vocabulary': 'a'}) is None


def test_token_store_keeps_ids_beyond_16_bits_as_int32(tmp_path):
  pairs = [('\U0001F600 x', 'y'), ('z', '\U0001F601')]  # code points above 65535
  sources, targets = _write(tmp_path, pairs, {'vocabulary': 'big'}, dtype=np.int32)
  assert sources[0].tolist() == [0x1F600, ord(' '), ord('x'), tokenizer.EOS_ID]
  assert targets[1].tolist() == [0x1F601, tokenizer.EOS_ID]
  assert sources.ids.dtype == np.int32


def test_a_split_interrupted_while_encoding_is_encoded_again(tmp_path, monkeypatch):
  monkeypatch.setattr(token_store, 'CHUNK', 3)
  pairs = [(f'source {i}', f'target {i}') for i in range(8)]
  _write(tmp_path, pairs, {'vocabulary': 'a'})
  calls = []

  class Interrupted(Exception):
    pass

  def failing(texts):
    calls.append(len(texts))
    if len(calls) == 3:
      raise Interrupted
    return _encode(texts)

  with pytest.raises(Interrupted):
    token_store.write(str(tmp_path), 'train', pairs, failing, {'vocabulary': 'b'}, np.uint16)
  assert sorted(os.listdir(tmp_path / 'tokens')) == ['train.lengths.npy', 'train.source',
                                                     'train.target']  # no JSON, no temporaries
  assert token_store.saved(str(tmp_path), 'train', {'vocabulary': 'a'}) is None
  sources, _ = _write(tmp_path, pairs, {'vocabulary': 'b'})
  assert sources[7].tolist() == [ord(c) for c in 'source 7'] + [tokenizer.EOS_ID]


def test_a_corpus_file_changed_in_place_is_prepared_and_encoded_again(tmp_path):
  """A train file edited without changing its line count: the next load of the same workdir
  reads and encodes the new text, not the ids saved from the old."""
  corpus = tmp_path / 'corpus'
  corpus.mkdir()
  pairs = builtin_grammar.splits(seed=0)['train'][:600]

  def write(pairs):
    for side, lang in enumerate(('en', 'de')):
      (corpus / f'train.{lang}').write_text(''.join(p[side] + '\n' for p in pairs),
                                            encoding='utf-8')

  write(pairs)
  config = tiny.get_config()
  config.data.update({'dataset': 'files', 'vocab_size': 100, 'max_length': 64,
                      'tfds_data_dir': str(tmp_path / 'tfds'),
                      'train_files': str(corpus / 'train.{lang}'),
                      'validation_files': str(corpus / 'train.{lang}')})
  workdir = str(tmp_path / 'run')
  first = pipeline.load(config, workdir)
  changed = [(source, 'der Hund der Hund') if i == 0 else (source, target)
             for i, (source, target) in enumerate(pairs)]
  write(changed)
  second = pipeline.load(config, workdir)
  assert 'encode' in second.seconds
  expected = tokenizer.encode(second.tokenizer, ['der Hund der Hund'])[0]
  np.testing.assert_array_equal(second.batchers['train'].split.targets[0], expected)
  assert not np.array_equal(first.batchers['train'].split.targets[0], expected)


class _Texts(list):
  def take(self, indices):
    return [self[i] for i in indices]


def test_the_vocabulary_sample_is_seeded_whole_pairs_up_to_the_character_budget():
  rng = np.random.default_rng(0)
  pairs = _Texts((f'{i} ' + 'x' * int(rng.integers(1, 40)), f'{i} y') for i in range(30000))
  everything = pipeline.vocabulary_sample(pairs, max_chars=10**9, seed=0)
  assert everything == [text for pair in pairs for text in pair]  # in corpus order
  sample = pipeline.vocabulary_sample(pairs, max_chars=50000, seed=1)
  chosen = [int(text.split()[0]) for text in sample[::2]]
  assert chosen == sorted(chosen) and sample == [text for i in chosen for text in pairs[i]]
  chars = sum(map(len, sample))
  assert 50000 <= chars < 50000 + max(map(len, sample)) * 2
  assert pipeline.vocabulary_sample(pairs, max_chars=50000, seed=1) == sample
  assert pipeline.vocabulary_sample(pairs, max_chars=50000, seed=2) != sample
  # Spread over the corpus, not its beginning.
  assert max(chosen) > 25000 and min(chosen) < 5000


_PROCESS = textwrap.dedent("""
    import json, sys
    from transformer_jax.config import loading
    from transformer_jax.data import batching, pipeline, tokenizer
    process, workdir = int(sys.argv[1]), sys.argv[2]
    config = loading.import_sibling('{repo}/configs/x', 'tiny').get_config()
    encoded, read = [], set()
    encode = tokenizer.encode_flat
    tokenizer.encode_flat = lambda *args, **kwargs: (encoded.append(len(args[1])),
                                                     encode(*args, **kwargs))[1]
    gather = batching._padded  # what reads a batch's ids
    def recording(side, indices, length):
      read.update((id(side), int(i)) for i in indices if i >= 0)
      return gather(side, indices, length)
    batching._padded = recording
    data = pipeline.load(config, workdir, sequences_multiple=2)
    iterator = data.train_iterator(seed=0, process_index=process, process_count=2)
    for _ in range(iterator.get_state()['batches']):
      next(iterator)
    train = data.batchers['train'].split
    print(json.dumps({{'encoded': sum(encoded), 'kept': len(train),
                      'pairs': sorted(i for side, i in read if side == id(train.sources))}}))
""")


@pytest.mark.slow
def test_two_processes_encode_once_and_each_reads_its_own_sequences(config, tmp_path):
  """As `train` runs them: process 0 loads the data first (and encodes it), then process 1,
  which finds the encoded splits; in an epoch each reads the ids of its own sequences only, and
  together they read every training pair."""
  script = _PROCESS.format(repo=REPO)
  results = []
  for process in range(2):
    result = subprocess.run([sys.executable, '-c', script, str(process), str(tmp_path / 'run')],
                            cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    results.append(json.loads(result.stdout.strip().splitlines()[-1]))
  sizes = {split: len(pairs) for split, pairs in builtin_grammar.splits(seed=0).items()}
  assert results[0]['encoded'] == 2 * sum(sizes.values()) and results[1]['encoded'] == 0
  first, second = (set(result['pairs']) for result in results)
  assert not first & second
  kept = results[0]['kept']
  assert len(first | second) == kept and abs(len(first) - len(second)) < 0.01 * kept
