r"""Scores a trained workdir on a split as the paper did (§6.1): `evaluate`, and its command.

During training, `decoding.evaluator` scores the dev split.

  python -m transformer_jax.evaluate --workdir=DIR --split=test [--json] \
      [--beam_size=4] [--alpha=0.6] [--average_last=5] [--batch_size=64]

`evaluate`: a `Translator`'s averaged checkpoints translate every source
sentence of the split (one too long for the model is truncated, with a warning), scored
against the raw reference text. Reported, each labelled: sacreBLEU on detokenized text with its
signature; the paper's tokenized, compound-split, cased BLEU; the same lowercased, also without
the compound splitting (Multi30k papers' usual figure); per-token perplexity of the references
(pairs longer than config.data.max_length are left out of it and counted); the number of
sentences; decoding time and the part of it spent compiling, and how many programs were
compiled or loaded from the persistent compilation cache (a second evaluation of a run
compiles none: `compilation`). A model of lowercased text (a `config.data.preprocessing` that
lowercases) translates into lowercase, which cased BLEU would only fault for its case: its
sacreBLEU is sacreBLEU's lowercased figure (`case:lc` in the signature), reported first, with the
tokenized lowercased ones, and its cased figures are left out. The JSON's `bleu_case` says which
('cased' or 'lowercased') `bleu_detokenized`, `sacrebleu_signature` and `bleu_tokenized` are.
The translations go to `DIR/eval/<name>.txt` and the figures to `DIR/eval/<name>.json`, where
the name records the split, checkpoints and decoding settings.
"""

import json
import os
import time

from absl import flags
import jax

from transformer_jax import cli
from transformer_jax.data import batching, datasets, pipeline
from transformer_jax.decoding import bleu, evaluator
from transformer_jax.decoding.translator import Translator, define_translator_flags
from transformer_jax.storage import atomic, workdirs
from transformer_jax.training import compilation


def perplexity(translator: Translator, pairs: list[tuple[str, str]], split: str) -> dict:
  """Per-token perplexity of the references given their sources (teacher forcing, no
  dropout), over the pairs of `split` that fit config.data.max_length."""
  model = translator.model
  pairs = [translator.preprocessing.pair(source, target) for source, target in pairs]
  batcher = pipeline.batcher(translator.config, translator.tokenizer, pairs, model.batch_shards,
                             split)
  totals = {}
  for batch in batching.eval_batches(batcher, jax.process_index(), jax.process_count()):
    totals = evaluator.add_sums(totals, model.loss_sums(translator.params, model.put_batch(batch)))
  return {'perplexity': evaluator.per_token(totals)['perplexity'],
          'perplexity_pairs': len(batcher.split),
          'perplexity_pairs_too_long': batcher.split.num_dropped}


def _bleu_figures(scores: dict, lowercased: bool) -> dict:
  """`bleu.scores` as `evaluate`'s keys. `bleu_case` names the case of `bleu_detokenized`,
  `sacrebleu_signature` and `bleu_tokenized`: 'cased', or 'lowercased' for a model of lowercased
  text, whose lowercase translations only lowercased BLEU compares with the raw references; its
  cased figures are left out (`bleu_tokenized` then equals `bleu_tokenized_lowercase`)."""
  case = '_lowercase' if lowercased else ''
  return {'bleu_case': 'lowercased' if lowercased else 'cased',
          'bleu_detokenized': scores[f'detokenized{case}'],
          'sacrebleu_signature': scores[f'signature{case}'],
          'bleu_tokenized': scores[f'tokenized{case}'],
          'bleu_tokenized_lowercase': scores['tokenized_lowercase'],
          'bleu_tokenized_lowercase_unsplit': scores['tokenized_lowercase_unsplit']}


def evaluate(translator: Translator, split: str) -> dict:
  """Translates and scores `split`; writes the translations and the figures under
  `<the translator's workdir>/eval/` and returns the figures."""
  config = translator.config
  directory = os.path.join(translator.workdir, 'eval')
  lead = jax.process_index() == 0
  # Before decoding, which can take long.
  workdirs.on_lead(lambda: workdirs.check_writable(directory, 'evaluation output'),
                   f'write to {directory}')
  pairs = datasets.load_pairs(config.data, split)
  sources, references = [s for s, _ in pairs], [t for _, t in pairs]
  before = compilation.so_far()
  start = time.perf_counter()
  hypotheses = translator.translate(sources, f'{split} source', progress=True)
  seconds = time.perf_counter() - start
  decode_compiles = compilation.so_far() - before
  decode = config.decode
  name = (f'{split}-step{translator.steps[-1]}-avg{len(translator.steps)}'
          f'-beam{decode.beam_size}-alpha{decode.alpha:g}')
  hypothesis_path = os.path.join(directory, f'{name}.txt')
  if lead:
    atomic.write(hypothesis_path, ''.join(line + '\n' for line in hypotheses))
  scores = bleu.scores(hypotheses, references, config.data.target_lang)
  result = {
      'split': split,
      'sentences': len(sources),
      'checkpoint_steps': translator.steps,
      'beam_size': decode.beam_size,
      'alpha': decode.alpha,
      **_bleu_figures(scores, translator.preprocessing.lowercases),
      **perplexity(translator, pairs, split),
      'decode_seconds': seconds,
      'decode_compile_seconds': decode_compiles.seconds,
      'sentences_per_second': len(sources) / seconds,
      'hypotheses': hypothesis_path,
  }
  compiles = compilation.so_far() - before  # decoding's and the perplexity's programs
  result.update(programs_compiled=compiles.compiled, programs_loaded=compiles.loaded)
  if lead:
    atomic.write(os.path.join(directory, f'{name}.json'), json.dumps(result, indent=2))
  return result


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
    result = evaluate(_TRANSLATOR(), _SPLIT.value)
    if jax.process_index() == 0:
      print(json.dumps(result) if _JSON.value else report(result), flush=True)

  cli.run(main)
