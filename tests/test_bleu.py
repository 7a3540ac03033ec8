"""BLEU figures against sacreBLEU itself and against the BLEU formula written out here."""

import collections
import math

import pytest
import sacrebleu
import sacremoses

from transformer_jax.decoding import bleu

HYPOTHESES = ['Der Arbeits-Markt ist gut.', 'Ein Hund läuft im Park.', 'Das ist ein Test!',
              'Die Kinder spielen draußen mit dem Ball.']
REFERENCES = ['Der Arbeits-Markt ist sehr gut.', 'Ein Hund rennt im Park.',
              'das ist ein Test!', 'Die Kinder spielen draußen mit einem Ball.']


def _bleu(hypotheses: list[list[str]], references: list[list[str]]) -> float:
  """Papineni et al. (2002): geometric mean of clipped 1-4-gram precisions times the brevity
  penalty, over the corpus, no smoothing (multi-bleu.perl)."""
  matches, totals = [0] * 4, [0] * 4
  for hyp, ref in zip(hypotheses, references):
    for n in range(1, 5):
      hyp_ngrams = collections.Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))
      ref_ngrams = collections.Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
      matches[n - 1] += sum(min(c, ref_ngrams[g]) for g, c in hyp_ngrams.items())
      totals[n - 1] += max(len(hyp) - n + 1, 0)
  hyp_len, ref_len = sum(map(len, hypotheses)), sum(map(len, references))
  brevity = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
  return 100 * brevity * math.exp(sum(math.log(m / t) for m, t in zip(matches, totals)) / 4)


def test_compound_splitting_as_get_ende_bleu():
  assert bleu.compound_split('Arbeits-Markt') == 'Arbeits ##AT##-##AT## Markt'
  assert bleu.compound_split('a - b') == 'a - b'  # a free-standing hyphen is left alone
  assert bleu.compound_split('a-b-c') == 'a ##AT##-##AT## b-c'  # no overlapping matches


def test_detokenized_bleu_is_sacrebleus():
  result = bleu.scores(HYPOTHESES, REFERENCES, 'de')
  assert result['detokenized'] == sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES]).score
  assert result['signature'].startswith('nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp')


def test_lowercased_detokenized_bleu_is_sacrebleu_on_text_lowercased_beforehand():
  result = bleu.scores(HYPOTHESES, REFERENCES, 'de')
  expected = sacrebleu.corpus_bleu([h.lower() for h in HYPOTHESES],
                                   [[r.lower() for r in REFERENCES]]).score
  assert result['detokenized_lowercase'] == pytest.approx(expected)
  assert result['detokenized_lowercase'] > result['detokenized']  # 'das' matches 'Das'
  assert result['signature_lowercase'].startswith('nrefs:1|case:lc|eff:no|tok:13a|smooth:exp')


@pytest.mark.parametrize('name, lowercase, split', [('tokenized', False, True),
                                                    ('tokenized_lowercase', True, True),
                                                    ('tokenized_lowercase_unsplit', True, False)])
def test_tokenized_bleu_is_the_formula_on_moses_tokens(name, lowercase, split):
  tokenizer = sacremoses.MosesTokenizer(lang='de')

  def tokens(text):
    text = tokenizer.tokenize(text, return_str=True)
    text = text.replace('-', ' ##AT##-##AT## ') if split else text
    return (text.lower() if lowercase else text).split()

  expected = _bleu([tokens(h) for h in HYPOTHESES], [tokens(r) for r in REFERENCES])
  result = bleu.scores(HYPOTHESES, REFERENCES, 'de')
  assert result[name] == pytest.approx(expected)


def test_lowercasing_and_compound_splitting_change_the_tokenized_figure():
  result = bleu.scores(HYPOTHESES, REFERENCES, 'de')
  assert result['tokenized_lowercase'] > result['tokenized']  # 'das' matches 'Das' lowercased
  # 'Arbeits-Markt' is one token unsplit, three split (all matching the reference's): fewer
  # n-grams match without the splitting.
  assert result['tokenized_lowercase_unsplit'] < result['tokenized_lowercase']


def test_unequal_counts_are_an_error():
  with pytest.raises(ValueError, match='2 hypotheses but 1 references'):
    bleu.scores(['a', 'b'], ['a'], 'de')
