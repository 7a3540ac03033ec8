"""Scoring the dev split during training (`DevEvaluator`, which the training loop calls).

`DevEvaluator`: loss, per-token perplexity (Table 3's PPL), token accuracy, and
corpus BLEU (sacreBLEU on detokenized text, with the number of sentences it scored) of
translations decoded as `config.decode` says
(beam search, or greedy with beam_size 1). Its references are the target token ids decoded
back to text, so BLEU there follows the vocabulary's round trip (SentencePiece's NFKC
normalisation and unknown characters change a few; docs/data.md) and is computed on
preprocessed text when `config.data.preprocessing` is set: with 'lowercase_moses', on
lowercased Moses tokens, so it is logged as `bleu_lowercased` too (the same figure; `bleu` is
kept for readers of metrics.jsonl). It decodes the loss's batches,
padded to the bucket of each pair's longer side, so the output cap (padded input length + 50)
can be a bucket longer than `evaluate`'s, which pads by the source alone: the two BLEU figures
of one checkpoint can differ slightly, and `evaluate`'s is the one to report.
"""

import itertools

import jax
import sacrebleu

from transformer_jax.data import pipeline, preprocessing, tokenizer
from transformer_jax.data.tokenizer import PAD_ID
from transformer_jax.decoding import batch_decode
from transformer_jax.model import loss, sharding
from transformer_jax.model.sharded_model import ShardedModel


def add_sums(totals: dict, sums: dict) -> dict:
  """`totals` plus a batch's `loss.SUM_NAMES` sums, fetched to the host."""
  return {name: totals.get(name, 0.0) + float(sums[name]) for name in loss.SUM_NAMES}


def per_token(totals: dict) -> dict:
  """`loss.per_token` of summed totals, as Python floats."""
  return {name: float(value) for name, value in loss.per_token(totals).items()}


class DevEvaluator:
  """Evaluates a split of `data`; decoding compiles once per bucket shape."""

  def __init__(self, model: ShardedModel, data: pipeline.Data):
    self._model = model
    self._data = data
    decode = model.config.decode
    self._decode = batch_decode.jit_decode(model, decode.beam_size, decode.alpha,
                                           decode.max_extra_length)
    self._lowercased = preprocessing.from_config(model.config.data).lowercases

  def _batches(self, split: str, num_batches: int):
    batches = self._data.eval_batches(split, jax.process_index(), jax.process_count())
    return itertools.islice(batches, num_batches) if num_batches > 0 else batches

  def compile(self, params, split: str, num_batches: int = -1, with_bleu: bool = True) -> None:
    """Compiles what `__call__` with these arguments runs, for parameters shaped as `params`
    (a pytree of `jax.ShapeDtypeStruct`s will do), before its first call."""
    shapes = set()
    for local_batch in self._batches(split, num_batches):
      shape = tuple(sorted((name, value.shape) for name, value in local_batch.items()))
      if shape not in shapes:
        shapes.add(shape)
        batch = self._model.put_batch(local_batch)
        self._model.eval_step.lower(params, batch).compile()
        if with_bleu:
          self._decode.lower(params, batch['inputs']).compile()

  def __call__(self, params, split: str, num_batches: int = -1, with_bleu: bool = True
               ) -> dict:
    """Metrics over the first `num_batches` batches of `split` (-1: all of it). The batches
    come shortest bucket first, so a part of a split is a quick check, biased towards short
    sentences, not an estimate of the whole."""
    totals = {}
    hypotheses, references = [], []
    for local_batch in self._batches(split, num_batches):
      batch = self._model.put_batch(local_batch)
      totals = add_sums(totals, self._model.eval_step(params, batch))
      if with_bleu:
        outputs = sharding.gather_sequences(self._decode(params, batch['inputs']))
        targets = sharding.gather_sequences(batch['targets'])
        for output, target in zip(outputs, targets):
          if target[0] != PAD_ID:  # skip the empty sequences that fill a bucket's last batch
            hypotheses.append(tokenizer.decode(self._data.tokenizer, output))
            references.append(tokenizer.decode(self._data.tokenizer, target))
    metrics = per_token(totals)
    if with_bleu:
      metrics['bleu'] = sacrebleu.corpus_bleu(hypotheses, [references]).score
      metrics['sentences'] = len(hypotheses)  # every process's, gathered: each pair once
      if self._lowercased:  # named, so that the log says which BLEU it is
        metrics['bleu_lowercased'] = metrics['bleu']
    return metrics
