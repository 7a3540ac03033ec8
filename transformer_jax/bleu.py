"""Corpus BLEU, labelled by how it was computed.

- `detokenized`: sacreBLEU on detokenized text (its default 13a tokenization, cased), with
  sacreBLEU's signature: the figure to compare across papers today.
- `tokenized`: the paper's figure (§6.1), as tensor2tensor's `get_ende_bleu.sh` computed it:
  Moses-tokenized (`tokenizer.perl -l <lang>`, here sacremoses), compounds split
  (`a-b` -> `a ##AT##-##AT## b`), cased, multi-bleu on the tokens. Left out: the script's first
  step, `replace-unicode-punctuation.perl` on the translations alone (`“ ”` -> `"`, `…` ->
  `...`, full-width forms), whose references were tokenized elsewhere; both sides here are
  tokenized alike.
- `tokenized_lowercase`: the same, lowercased. Multi30k papers usually report lowercased
  tokenized BLEU without the compound splitting, which adds about 0.1 on test2016
  (experiments/results/multi30k.md: 40.55 split, 40.47 not).
"""

import re
from typing import Sequence

import sacrebleu
import sacremoses

_COMPOUND = re.compile(r'(\S)-(\S)')


def compound_split(text: str) -> str:
  """get_ende_bleu.sh's `s{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g`: a hyphen between two
  non-space characters becomes its own token (matches do not overlap, as in Perl)."""
  return _COMPOUND.sub(r'\1 ##AT##-##AT## \2', text)


def _tokenize(texts: Sequence[str], lang: str, lowercase: bool) -> list[str]:
  tokenizer = sacremoses.MosesTokenizer(lang=lang)
  tokenized = [compound_split(tokenizer.tokenize(text, return_str=True)) for text in texts]
  return [text.lower() for text in tokenized] if lowercase else tokenized


def scores(hypotheses: Sequence[str], references: Sequence[str], lang: str) -> dict:
  """The three BLEU figures of `hypotheses` against one reference each, in target language
  `lang`, and sacreBLEU's signature for the detokenized one."""
  if len(hypotheses) != len(references):
    raise ValueError(f'{len(hypotheses)} hypotheses but {len(references)} references')
  metric = sacrebleu.BLEU()
  detokenized = metric.corpus_score(list(hypotheses), [list(references)])
  result = {'detokenized': detokenized.score, 'signature': str(metric.get_signature())}
  for name, lowercase in (('tokenized', False), ('tokenized_lowercase', True)):
    result[name] = sacrebleu.corpus_bleu(
        _tokenize(hypotheses, lang, lowercase), [_tokenize(references, lang, lowercase)],
        tokenize='none', force=True).score
  return result
