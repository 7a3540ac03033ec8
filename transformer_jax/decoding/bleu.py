"""Corpus BLEU, labelled by how it was computed.

- `detokenized`: sacreBLEU on detokenized text (its default 13a tokenization, cased), with
  sacreBLEU's signature: the figure to compare across papers today.
- `detokenized_lowercase`: the same with sacreBLEU's own lowercasing (`BLEU(lowercase=True)`,
  `case:lc` in its signature): the one to compare for a model of lowercased text.
- `tokenized`: the paper's figure (§6.1), as tensor2tensor's `get_ende_bleu.sh` computed it:
  Moses-tokenized (`tokenizer.perl -l <lang>`, here sacremoses), compounds split
  (`a-b` -> `a ##AT##-##AT## b`), cased, multi-bleu on the tokens. Left out: the step that
  later revisions of the script run first, `replace-unicode-punctuation.perl` on the
  translations alone (`“ ”` -> `"`, `…` -> `...`, full-width forms), whose references were
  tokenized elsewhere; both sides here are tokenized alike.
- `tokenized_lowercase`: the same, lowercased.
- `tokenized_lowercase_unsplit`: lowercased Moses tokens without the compound splitting, the
  figure Multi30k papers report: the published 41.0 text-only baseline scored 12103 reference
  tokens on test2016, the count of this tokenization (12241 split). The splitting added 0.01
  to 0.08 there in our runs (experiments/multi30k/README.md).
"""

import re
from typing import Sequence

import sacrebleu

_COMPOUND = re.compile(r'(\S)-(\S)')


def compound_split(text: str) -> str:
  """get_ende_bleu.sh's `s{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g`: a hyphen between two
  non-space characters becomes its own token (matches do not overlap, as in Perl)."""
  return _COMPOUND.sub(r'\1 ##AT##-##AT## \2', text)


def _variants(texts: Sequence[str], lang: str) -> dict:
  """Moses tokens of `texts` (once), in the three forms the tokenized figures score."""
  import sacremoses  # here, not at the top: its import is slow and only a score needs it
  tokenizer = sacremoses.MosesTokenizer(lang=lang)
  unsplit = [tokenizer.tokenize(text, return_str=True) for text in texts]
  split = [compound_split(text) for text in unsplit]
  return {'tokenized': split, 'tokenized_lowercase': [text.lower() for text in split],
          'tokenized_lowercase_unsplit': [text.lower() for text in unsplit]}


def scores(hypotheses: Sequence[str], references: Sequence[str], lang: str) -> dict:
  """The five BLEU figures of `hypotheses` against one reference each, in target language
  `lang`, and sacreBLEU's signatures for the two detokenized ones (`signature`,
  `signature_lowercase`)."""
  if len(hypotheses) != len(references):
    raise ValueError(f'{len(hypotheses)} hypotheses but {len(references)} references')
  result = {}
  for suffix, lowercase in (('', False), ('_lowercase', True)):
    metric = sacrebleu.BLEU(lowercase=lowercase)
    result[f'detokenized{suffix}'] = metric.corpus_score(list(hypotheses),
                                                         [list(references)]).score
    result[f'signature{suffix}'] = str(metric.get_signature())
  hypothesis_tokens, reference_tokens = _variants(hypotheses, lang), _variants(references, lang)
  for name, tokens in hypothesis_tokens.items():
    result[name] = sacrebleu.corpus_bleu(tokens, [reference_tokens[name]], tokenize='none',
                                         force=True).score
  return result
