"""The 'lowercase_moses' preprocessing option: hand-checked tokenizations, its inverse on real
Multi30k sentences, and that training data, translation inputs and outputs all go through it."""

import gzip

import pytest

from conftest import CORPUS
from test_datasets import MULTI30K_DIR
from transformer_jax.config import loading
from transformer_jax.data import pipeline, preprocessing, tokenizer

tiny = loading.import_sibling(__file__, '../configs/tiny')


@pytest.fixture(scope='module')
def moses():
  return preprocessing.Preprocessing('lowercase_moses', 'en', 'de')


@pytest.mark.parametrize('side, text, expected', [
    ('source', 'A man in a Red-Sox cap, holding "two" dogs.',
     'a man in a red-sox cap , holding " two " dogs .'),
    ('source', "The dog's ball isn't green!", "the dog 's ball isn 't green !"),
    ('target', 'Zwei Männer stehen am Herd, um Essen zuzubereiten.',
     'zwei männer stehen am herd , um essen zuzubereiten .'),
    ('target', 'Ein Hund & eine Katze (3,5 kg).', 'ein hund & eine katze ( 3,5 kg ) .'),
])
def test_lowercases_and_splits_punctuation_as_tokenizer_perl(moses, side, text, expected):
  assert getattr(moses, side)(text) == expected


def test_restore_joins_punctuation_back(moses):
  assert moses.restore('zwei männer stehen am herd , um essen ( kalt ) zuzubereiten .') == (
      'zwei männer stehen am herd, um essen (kalt) zuzubereiten.')


def test_none_changes_nothing():
  none = preprocessing.Preprocessing('none', 'en', 'de')
  text = 'A man , Hat-stand.'
  assert none.pair(text, text) == (text, text) and none.restore(text) == text


def test_restore_inverts_it_on_the_multi30k_dev_set(moses):
  """Detokenizing the tokenized text gives the lowercased original for at least 99% of the
  1014 German dev sentences (Moses is not exactly invertible: "Joe's" comes back "joe 's")."""
  with gzip.open(MULTI30K_DIR / 'val.de.gz', 'rt', encoding='utf-8') as f:
    lines = f.read().splitlines()
  restored = sum(moses.restore(moses.target(line)) == line.lower() for line in lines)
  assert len(lines) == 1014 and restored >= 0.99 * len(lines)


@pytest.mark.slow
def test_the_vocabulary_and_batches_are_built_from_preprocessed_text(tmp_path):
  # On the session's corpus (conftest.py): its text files, cased and punctuated.
  config = tiny.get_config()
  config.update_from_flattened_dict({**CORPUS, 'data.vocab_size': 256,
                                     'data.preprocessing': 'lowercase_moses'})
  data = pipeline.load(config, str(tmp_path / 'workdir'))
  pieces = [data.tokenizer.id_to_piece(i) for i in range(data.tokenizer.vocab_size())]
  assert not any(piece != piece.lower() for piece in pieces)
  moses = preprocessing.from_config(config.data)
  sides = []
  for lang in ('en', 'de'):
    with open(config.data.validation_files.format(lang=lang), encoding='utf-8') as f:
      sides.append(f.read().splitlines())
  assert any(line != line.lower() for line in sides[0])
  expected = {moses.pair(source, target) for source, target in zip(*sides)}
  decoded = {(tokenizer.decode(data.tokenizer, source), tokenizer.decode(data.tokenizer, target))
             for batch in data.eval_batches('validation')
             for source, target in zip(batch['inputs'], batch['targets']) if source.any()}
  assert decoded and decoded <= expected
