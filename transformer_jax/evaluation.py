"""Evaluation on a split during training: loss, per-token perplexity (Table 3's PPL), token
accuracy, and corpus BLEU (sacreBLEU on detokenized text) of translations decoded as
`config.decode` says (beam search, or greedy with beam_size 1).

References are the target token ids decoded back to text, so BLEU here follows the
vocabulary's round trip (exact for SentencePiece except for unknown characters).
"""

import itertools
import math

import jax
import sacrebleu

from transformer_jax import decoding, partitioning
from transformer_jax.data import pipeline, tokenizer
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
