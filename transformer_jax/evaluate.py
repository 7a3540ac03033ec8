r"""Scores a trained workdir on a split as the paper did (§6.1) and reports each figure
labelled: the command of `decoding.scoring`.

`decoding.scoring` says what is scored and where the translations and figures go. During
training, `decoding.dev_evaluation` scores the dev split.

  python -m transformer_jax.evaluate --workdir=DIR --split=test [--json] \
      [--beam_size=4] [--alpha=0.6] [--average_last=5] [--batch_size=64]

A second evaluation of a run compiles nothing (`compilation`): its programs are loaded from the
persistent compilation cache.
"""

import json

from absl import flags
import jax

from transformer_jax import cli
from transformer_jax.decoding import scoring
from transformer_jax.decoding.translator import define_translator_flags


def _bleu_lines(result: dict) -> list[tuple[str, str]]:
  """The report's BLEU lines (label, value); of a model of lowercased text, lowercased only."""
  sacre = f'{result["bleu_detokenized"]:.2f}  {result["sacrebleu_signature"]}'
  lowercase = (f'{result["bleu_tokenized_lowercase"]:.2f}  '
               f'({result["bleu_tokenized_lowercase_unsplit"]:.2f} without compound splitting, '
               'as Multi30k papers report it)')
  if result['bleu_case'] == 'lowercased':
    return [('BLEU (sacreBLEU, detokenized, lowercased)', sacre),
            ('BLEU (tokenized, lowercased)', lowercase),
            ('cased BLEU', 'not reported: the model translates into lowercased text')]
  return [('BLEU (sacreBLEU, detokenized)', sacre),
          ('BLEU (tokenized, compound-split, cased)',
           f'{result["bleu_tokenized"]:.2f}  (the paper\'s)'),
          ('BLEU (tokenized, lowercased)', lowercase)]


def report(result: dict) -> str:
  """`evaluate`'s figures as labelled lines."""
  lines = [
      *_bleu_lines(result),
      ('perplexity per token', f'{result["perplexity"]:.3f}  ({result["perplexity_pairs"]} '
       f'pairs; {result["perplexity_pairs_too_long"]} too long)'),
      ('decoding', f'{result["decode_seconds"]:.1f} s, {result["sentences_per_second"]:.1f} '
       f'sentences/s ({result["decode_compile_seconds"]:.1f} s of it compiling)'),
      ('programs', f'{result["programs_compiled"]} compiled, {result["programs_loaded"]} '
       'loaded from the compilation cache'),
      ('translations', result['hypotheses']),
  ]
  return '\n'.join([
      f'{result["split"]}: {result["sentences"]} sentences, checkpoints '
      f'{result["checkpoint_steps"]} averaged, beam {result["beam_size"]}, '
      f'alpha {result["alpha"]}',
      *(f'{label:<41} {value}' for label, value in lines)])


if __name__ == '__main__':
  _TRANSLATOR = define_translator_flags()
  _SPLIT = flags.DEFINE_enum('split', 'test', ['train', 'validation', 'test'], 'Which split.')
  _JSON = flags.DEFINE_boolean('json', False, 'Print the figures as one JSON object.')

  def main():
    result = scoring.evaluate(_TRANSLATOR(), _SPLIT.value)
    if jax.process_index() == 0:
      print(json.dumps(result) if _JSON.value else report(result), flush=True)

  cli.run(main)
