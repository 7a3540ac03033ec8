"""Scoring a model on a split.

`Evaluator`, during training: loss, per-token perplexity (Table 3's PPL), token accuracy, and
corpus BLEU (sacreBLEU on detokenized text) of translations decoded as `config.decode` says
(beam search, or greedy with beam_size 1). Its references are the target token ids decoded
back to text, so BLEU there follows the vocabulary's round trip (exact for SentencePiece
except for unknown characters) and is computed on preprocessed text when
`config.data.preprocessing` is set.

`evaluate`, after training (`python -m transformer_jax.evaluate`): a `Translator`'s averaged
checkpoints translate every source sentence of a split as §6.1 did, scored against the raw
reference text with every BLEU the papers report, and the per-token perplexity.
"""

import itertools
import json
import math
import os
import time

import jax
import sacrebleu

from transformer_jax import bleu, checkpointing, decoding, inference, partitioning
from transformer_jax.data import batching, datasets, pipeline, tokenizer
from transformer_jax.steps import Trainer


class Evaluator:
  """Evaluates a split of `data`; decoding compiles once per bucket shape."""

  def __init__(self, trainer: Trainer, data: pipeline.Data):
    self._trainer = trainer
    self._data = data
    decode = trainer.config.decode
    self._translate = decoding.jit_translate(trainer, decode.beam_size, decode.alpha,
                                             decode.max_extra_length)

  def __call__(self, params, split: str, num_batches: int = -1, bleu: bool = True) -> dict:
    """Metrics over the first `num_batches` batches of `split` (-1: all of it)."""
    batches = self._data.eval_batches(split, jax.process_index(), jax.process_count())
    if num_batches > 0:
      batches = itertools.islice(batches, num_batches)
    totals = {'loss': 0.0, 'nll': 0.0, 'correct': 0.0, 'tokens': 0.0}
    hypotheses, references = [], []
    for local_batch in batches:
      batch = self._trainer.put_batch(local_batch)
      sums = self._trainer.eval_step(params, batch)
      for name in totals:
        totals[name] += float(sums[name])
      if bleu:
        outputs = partitioning.gather_rows(self._translate(params, batch['inputs']))
        targets = partitioning.gather_rows(batch['targets'])
        for output, target in zip(outputs, targets):
          if target[0] != 0:  # skip the empty rows that fill a bucket's last batch
            hypotheses.append(tokenizer.decode(self._data.tokenizer, decoding.strip(output)))
            references.append(tokenizer.decode(self._data.tokenizer, decoding.strip(target)))
    tokens = max(totals['tokens'], 1.0)
    metrics = {
        'loss': totals['loss'] / tokens,
        'nll': totals['nll'] / tokens,
        'perplexity': math.exp(totals['nll'] / tokens),
        'accuracy': totals['correct'] / tokens,
    }
    if bleu:
      metrics['bleu'] = sacrebleu.corpus_bleu(hypotheses, [references]).score
    return metrics


def perplexity(translator: inference.Translator, pairs: list[tuple[str, str]]) -> dict:
  """Per-token perplexity of the references given their sources (teacher forcing, no
  dropout), over the pairs that fit config.data.max_length."""
  trainer = translator.trainer
  pairs = [translator.preprocessing.pair(source, target) for source, target in pairs]
  batcher = pipeline.batcher(translator.config, translator.tokenizer, pairs,
                             trainer.batch_shards)
  nll = tokens = 0.0
  for batch in batching.eval_batches(batcher, jax.process_index(), jax.process_count()):
    sums = trainer.eval_step(translator.params, trainer.put_batch(batch))
    nll, tokens = nll + float(sums['nll']), tokens + float(sums['tokens'])
  return {'perplexity': math.exp(nll / max(tokens, 1.0)), 'perplexity_pairs': len(batcher.split),
          'perplexity_pairs_too_long': batcher.split.num_dropped}


def evaluate(translator: inference.Translator, workdir: str, split: str) -> dict:
  """Translates and scores `split`; writes the translations and the figures under
  `workdir/eval/` and returns the figures."""
  config = translator.config
  pairs = [datasets.source_target(example, config.data)
           for example in datasets.load_split(config.data, split)]
  sources, references = [s for s, _ in pairs], [t for _, t in pairs]
  start = time.perf_counter()
  hypotheses = translator.translate(sources, f'{split} source', progress=True)
  seconds = time.perf_counter() - start
  decode = config.decode
  name = (f'{split}-step{translator.steps[-1]}-avg{len(translator.steps)}'
          f'-beam{decode.beam_size}-alpha{decode.alpha:g}')
  directory = os.path.join(workdir, 'eval')
  hypothesis_path = os.path.join(directory, f'{name}.txt')
  lead = jax.process_index() == 0
  if lead:
    os.makedirs(directory, exist_ok=True)
    checkpointing.atomic_write(hypothesis_path,
                               ''.join(line + '\n' for line in hypotheses))
  scores = bleu.scores(hypotheses, references, config.data.target_lang)
  result = {
      'split': split,
      'sentences': len(sources),
      'checkpoint_steps': translator.steps,
      'beam_size': decode.beam_size,
      'alpha': decode.alpha,
      'bleu_detokenized': scores['detokenized'],
      'sacrebleu_signature': scores['signature'],
      'bleu_tokenized': scores['tokenized'],
      'bleu_tokenized_lowercase': scores['tokenized_lowercase'],
      **perplexity(translator, pairs),
      'decode_seconds': seconds,
      'sentences_per_second': len(sources) / seconds,
      'hypotheses': hypothesis_path,
  }
  if lead:
    checkpointing.atomic_write(os.path.join(directory, f'{name}.json'),
                               json.dumps(result, indent=2))
  return result


def report(result: dict) -> str:
  """`evaluate`'s figures as labelled lines."""
  return '\n'.join([
      f'{result["split"]}: {result["sentences"]} sentences, checkpoints '
      f'{result["checkpoint_steps"]} averaged, beam {result["beam_size"]}, '
      f'alpha {result["alpha"]}',
      f'BLEU (sacreBLEU, detokenized)          {result["bleu_detokenized"]:.2f}  '
      f'{result["sacrebleu_signature"]}',
      f'BLEU (tokenized, compound-split, cased) {result["bleu_tokenized"]:.2f}  (the paper\'s)',
      f'BLEU (tokenized, lowercased)            {result["bleu_tokenized_lowercase"]:.2f}',
      f'perplexity per token                   {result["perplexity"]:.3f}  '
      f'({result["perplexity_pairs"]} pairs; {result["perplexity_pairs_too_long"]} too long)',
      f'decoding                               {result["decode_seconds"]:.1f} s, '
      f'{result["sentences_per_second"]:.1f} sentences/s (compilation included)',
      f'translations                           {result["hypotheses"]}',
  ])
