r"""Scoring a model on a split, during training (`Evaluator`) and after it (`evaluate`, and
the command below, which scores a trained workdir as the paper did, §6.1).

  python -m transformer_jax.evaluate --workdir=DIR --split=test [--json] \
      [--beam_size=4] [--alpha=0.6] [--average_last=5] [--batch_size=64]

`Evaluator`, during training: loss, per-token perplexity (Table 3's PPL), token accuracy, and
corpus BLEU (sacreBLEU on detokenized text) of translations decoded as `config.decode` says
(beam search, or greedy with beam_size 1). Its references are the target token ids decoded
back to text, so BLEU there follows the vocabulary's round trip (SentencePiece's NFKC
normalisation and unknown characters change a few; docs/data.md) and is computed on
preprocessed text when `config.data.preprocessing` is set: with 'lowercase_moses', on
lowercased Moses tokens, so it is logged as `bleu_lowercased` too (the same figure; `bleu` is
kept for readers of metrics.jsonl). It decodes the loss's batches,
padded to the bucket of each pair's longer side, so the output cap (padded input length + 50)
can be a bucket longer than `evaluate`'s, which pads by the source alone: the two BLEU figures
of one checkpoint can differ slightly, and `evaluate`'s is the one to report.

`evaluate`, after training: a `Translator`'s averaged checkpoints translate every source
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

import itertools
import json
import os
import time

from absl import flags
import jax
import sacrebleu

from transformer_jax import cli
from transformer_jax.data import batching, datasets, pipeline, preprocessing, tokenizer
from transformer_jax.data.tokenizer import PAD_ID
from transformer_jax.decoding import bleu, decoding
from transformer_jax.decoding.translator import Translator, define_translator_flags
from transformer_jax.model import loss, partitioning
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.storage import atomic, workdirs
from transformer_jax.training import compilation


def _add_sums(totals: dict, sums: dict) -> dict:
  return {name: totals.get(name, 0.0) + float(sums[name]) for name in loss.SUM_NAMES}


def _per_token(totals: dict) -> dict:
  return {name: float(value) for name, value in loss.per_token(totals).items()}


class Evaluator:
  """Evaluates a split of `data`; decoding compiles once per bucket shape."""

  def __init__(self, model: ShardedModel, data: pipeline.Data):
    self._model = model
    self._data = data
    decode = model.config.decode
    self._decode = decoding.jit_decode(model, decode.beam_size, decode.alpha,
                                       decode.max_extra_length)
    self._lowercased = preprocessing.from_config(model.config.data).lowercases

  def __call__(self, params, split: str, num_batches: int = -1, with_bleu: bool = True
               ) -> dict:
    """Metrics over the first `num_batches` batches of `split` (-1: all of it). The batches
    come shortest bucket first, so a part of a split is a quick check, biased towards short
    sentences, not an estimate of the whole."""
    batches = self._data.eval_batches(split, jax.process_index(), jax.process_count())
    if num_batches > 0:
      batches = itertools.islice(batches, num_batches)
    totals = {}
    hypotheses, references = [], []
    for local_batch in batches:
      batch = self._model.put_batch(local_batch)
      totals = _add_sums(totals, self._model.loss_sums(params, batch))
      if with_bleu:
        outputs = partitioning.gather_rows(self._decode(params, batch['inputs']))
        targets = partitioning.gather_rows(batch['targets'])
        for output, target in zip(outputs, targets):
          if target[0] != PAD_ID:  # skip the empty rows that fill a bucket's last batch
            hypotheses.append(tokenizer.decode(self._data.tokenizer, output))
            references.append(tokenizer.decode(self._data.tokenizer, target))
    metrics = _per_token(totals)
    if with_bleu:
      metrics['bleu'] = sacrebleu.corpus_bleu(hypotheses, [references]).score
      if self._lowercased:  # named, so that the log says which BLEU it is
        metrics['bleu_lowercased'] = metrics['bleu']
    return metrics


def perplexity(translator: Translator, pairs: list[tuple[str, str]], split: str) -> dict:
  """Per-token perplexity of the references given their sources (teacher forcing, no
  dropout), over the pairs of `split` that fit config.data.max_length."""
  model = translator.model
  pairs = [translator.preprocessing.pair(source, target) for source, target in pairs]
  batcher = pipeline.batcher(translator.config, translator.tokenizer, pairs, model.batch_shards,
                             split)
  totals = {}
  for batch in batching.eval_batches(batcher, jax.process_index(), jax.process_count()):
    totals = _add_sums(totals, model.loss_sums(translator.params, model.put_batch(batch)))
  return {'perplexity': _per_token(totals)['perplexity'], 'perplexity_pairs': len(batcher.split),
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
