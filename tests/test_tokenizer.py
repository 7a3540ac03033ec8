"""The shared SentencePiece vocabulary."""

import pytest

from transformer_jax.data import builtin_grammar, tokenizer

TEXTS = [side for pair in builtin_grammar.generate_pairs(seed=1, num_pairs=3000) for side in pair]


@pytest.fixture(scope='module')
def model_path(tmp_path_factory):
  path = str(tmp_path_factory.mktemp('spm') / tokenizer.MODEL_FILENAME)
  tokenizer.train(TEXTS, path, vocab_size=400, model_type='bpe', max_corpus_chars=10**9, seed=0)
  return path


def test_round_trip_and_special_ids(model_path):
  processor = tokenizer.load(model_path)
  assert processor.vocab_size() == 400
  assert (processor.pad_id(), processor.eos_id(), processor.unk_id(), processor.bos_id()) == (
      0, 1, 2, -1)
  texts = TEXTS[:200] + ['Der Hund läuft, weil die Katze schläft.']
  for text, ids in zip(texts, tokenizer.encode(processor, texts)):
    assert ids[-1] == tokenizer.EOS_ID and tokenizer.EOS_ID not in ids[:-1]
    assert 0 not in ids
    assert tokenizer.decode(processor, list(ids) + [0, 0]) == text


def test_unknown_characters_map_to_unk(model_path):
  processor = tokenizer.load(model_path)
  assert tokenizer.UNK_ID in tokenizer.encode(processor, ['Ωmega'])[0]


def test_max_corpus_chars_samples_deterministically(tmp_path):
  paths = [str(tmp_path / f'{i}.model') for i in range(3)]
  for path, seed in zip(paths, (0, 0, 1)):
    tokenizer.train(TEXTS, path, vocab_size=300, model_type='unigram', max_corpus_chars=20_000,
                    seed=seed)
  contents = [open(p, 'rb').read() for p in paths]
  assert contents[0] == contents[1]  # same seed, same sample, same model
  assert contents[0] != contents[2]


def test_too_large_vocabulary_names_the_field(tmp_path):
  with pytest.raises(ValueError, match='config.data.vocab_size=50000'):
    tokenizer.train(TEXTS[:100], str(tmp_path / 'x.model'), vocab_size=50000, model_type='bpe',
                    max_corpus_chars=10**9, seed=0)
  assert list(tmp_path.iterdir()) == []  # nothing half-written is left behind


def test_missing_model_file_is_named(tmp_path):
  with pytest.raises(FileNotFoundError, match='nothing.model'):
    tokenizer.load(str(tmp_path / 'nothing.model'))
