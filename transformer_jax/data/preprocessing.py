"""Text preprocessing before the vocabulary, and its inverse on translations (an option).

`config.data.preprocessing`:
- 'none' (default): raw text goes to SentencePiece. §5.1 says only "byte-pair encoding";
  tensor2tensor learned its subwords on raw text too.
- 'lowercase_moses': lowercased, then Moses-tokenized (sacremoses, tokenizer.perl's rules
  without its XML escaping): the preprocessing of the published Multi30k text-only baseline,
  whose 41.0 BLEU is scored on such text. Translations are Moses-detokenized and stay
  lowercase, so only lowercased BLEU compares them with raw references.
"""


class Preprocessing:
  """The same text transformation for training data, translation inputs and references."""

  def __init__(self, kind: str, source_lang: str, target_lang: str):
    self.kind = kind
    if kind == 'lowercase_moses':
      import sacremoses  # here, not at the top: its import is slow and only this option needs it
      self._tokenizers = {lang: sacremoses.MosesTokenizer(lang=lang)
                          for lang in (source_lang, target_lang)}
      self._detokenizer = sacremoses.MosesDetokenizer(lang=target_lang)
    self._source_lang, self._target_lang = source_lang, target_lang

  @property
  def lowercases(self) -> bool:
    """Whether the text is lowercased: then translations are lowercase too, and only
    lowercased BLEU compares them with the raw references."""
    return self.kind == 'lowercase_moses'

  def _apply(self, text: str, lang: str) -> str:
    if self.kind == 'none':
      return text
    return self._tokenizers[lang].tokenize(text.lower(), return_str=True, escape=False)

  def source(self, text: str) -> str:
    return self._apply(text, self._source_lang)

  def target(self, text: str) -> str:
    return self._apply(text, self._target_lang)

  def pair(self, source: str, target: str) -> tuple[str, str]:
    return self.source(source), self.target(target)

  def restore(self, translation: str) -> str:
    """A translation (in the preprocessed form) as running text."""
    if self.kind == 'none':
      return translation
    return self._detokenizer.detokenize(translation.split(), return_str=True)


def from_config(data_config) -> Preprocessing:
  return Preprocessing(data_config.preprocessing, data_config.source_lang, data_config.target_lang)
