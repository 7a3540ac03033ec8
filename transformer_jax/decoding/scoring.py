"""Scores trained workdirs on a split as the paper did (§6.1): what the `evaluate` command and
each run of a group report (`evaluate`, `evaluate_runs`).

A `Translator`'s averaged checkpoints translate every source sentence of the split (one too
long for the model is truncated, with a warning), scored against the raw reference text:
sacreBLEU on detokenized text with its signature; the paper's tokenized, compound-split, cased
BLEU; the same lowercased, also without the compound splitting (Multi30k papers' usual
figure); per-token perplexity of the references (pairs longer than config.data.max_length are
left out of it and counted); the number of sentences; decoding time and the part of it spent
compiling, and how many programs were compiled or loaded from the persistent compilation cache.
A model of lowercased text (a `config.data.preprocessing` that lowercases) translates into
lowercase, which cased BLEU would only fault for its case: its sacreBLEU is sacreBLEU's
lowercased figure (`case:lc` in the signature), with the tokenized lowercased ones, and its
cased figures are left out. The JSON's `bleu_case` says which ('cased' or 'lowercased')
`bleu_detokenized`, `sacrebleu_signature` and `bleu_tokenized` are. The translations go to
`DIR/eval/<name>.txt` and the figures to `DIR/eval/<name>.json`, where the name records the
split, checkpoints and decoding settings.

A `GroupTranslator` (a sweep's group) decodes and scores its runs as one program: each run's
figures are those it would get alone; the decoding time and programs are the group's.
"""

import json
import os
import time

import jax
import numpy as np

from transformer_jax.data import batching, datasets, pipeline, preprocessing, tokenizer
from transformer_jax.decoding import bleu, dev_evaluation
from transformer_jax.decoding.translator import Translator, compile_translator
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.storage import atomic, provenance, workdirs
from transformer_jax.training import compilation


def perplexity(translator: Translator, pairs: list[tuple[str, str]], split: str) -> list[dict]:
  """Per-token perplexity of the references given their sources (teacher forcing, no
  dropout), over the pairs of `split` that fit config.data.max_length: one dict a run
  (`translator.workdirs`)."""
  model = translator.model
  batcher = _perplexity_batcher(translator.config, translator.tokenizer,
                                translator.preprocessing, model.batch_shards, pairs, split)
  totals = [{} for _ in translator.workdirs]
  for batch in batching.eval_batches(batcher, jax.process_index(), jax.process_count()):
    sums = translator.eval_step_per_run(model.put_batch(batch))
    totals = [dev_evaluation.add_sums(total, run) for total, run in zip(totals, sums)]
  return [{'perplexity': dev_evaluation.per_token(total)['perplexity'],
           'perplexity_pairs': len(batcher.split),
           'perplexity_pairs_too_long': batcher.split.num_dropped} for total in totals]


def _perplexity_batcher(config, processor, process: preprocessing.Preprocessing,
                        batch_shards: int, pairs: list[tuple[str, str]], split: str
                        ) -> batching.Batcher:
  pairs = [process.pair(source, target) for source, target in pairs]
  return pipeline.batcher(config, processor, pairs, batch_shards, split)


def compile_ahead(model: ShardedModel, config, processor, runs: int, split: str) -> None:
  """Compiles what `evaluate_runs` of the translator of `runs` runs of `model` (`config`: theirs
  with the decoding settings they will be evaluated with; `processor`: their vocabulary)
  runs on `split`, before the runs have trained (a sweep's next group: `sweep.ahead`)."""
  pairs = datasets.load_pairs(config.data, split)
  process = preprocessing.from_config(config.data)
  sources = [source for source, _ in pairs]
  ids = tokenizer.encode(processor, [process.source(source) for source in sources])
  # As `Translator.encode` gives them: empty for an empty text, cut to the model's maximum.
  sizes = np.array([min(len(i), config.data.max_length) if source.strip() else 0
                    for source, i in zip(sources, ids)])
  batcher = _perplexity_batcher(config, processor, process, model.batch_shards, pairs, split)
  compile_translator(model, config, runs, sizes,
                     batching.eval_batches(batcher, jax.process_index(), jax.process_count()))


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
  return evaluate_runs(translator, split)[0]


def evaluate_runs(translator: Translator, split: str) -> list[dict]:
  """`evaluate` of each run of `translator` (`workdirs`: one for a `Translator`, a group's for
  a `GroupTranslator`), decoded and scored together."""
  config = translator.config
  directories = [os.path.join(workdir, 'eval') for workdir in translator.workdirs]
  lead = jax.process_index() == 0
  for directory in directories:  # before decoding, which can take long
    workdirs.on_process_zero(lambda d=directory: workdirs.check_writable(d, 'evaluation output'),
                             f'write to {directory}')
  pairs = datasets.load_pairs(config.data, split)
  sources, references = [s for s, _ in pairs], [t for _, t in pairs]
  before = compilation.so_far()
  start = time.perf_counter()
  runs_ids = translator.translate_ids_per_run(translator.encode(sources, f'{split} source'),
                                              progress=True)
  seconds = time.perf_counter() - start
  decode_compiles = compilation.so_far() - before
  perplexities = perplexity(translator, pairs, split)
  compiles = compilation.so_far() - before  # decoding's and the perplexity's programs
  decode = config.decode
  steps = translator.steps if len(translator.workdirs) > 1 else [translator.steps]
  results = []
  for directory, ids, run_steps, run_perplexity in zip(directories, runs_ids, steps,
                                                       perplexities):
    hypotheses = [translator.text(output) for output in ids]
    name = (f'{split}-step{run_steps[-1]}-avg{len(run_steps)}'
            f'-beam{decode.beam_size}-alpha{decode.alpha:g}')
    hypothesis_path = os.path.join(directory, f'{name}.txt')
    if lead:
      atomic.write(hypothesis_path, ''.join(line + '\n' for line in hypotheses))
    scores = bleu.scores(hypotheses, references, config.data.target_lang)
    result = {
        'split': split,
        'sentences': len(sources),
        'checkpoint_steps': run_steps,
        'beam_size': decode.beam_size,
        'alpha': decode.alpha,
        **_bleu_figures(scores, translator.preprocessing.lowercases),
        **run_perplexity,
        'decode_seconds': seconds,
        'decode_compile_seconds': decode_compiles.seconds,
        'sentences_per_second': len(sources) / seconds,
        'hypotheses': hypothesis_path,
        'programs_compiled': compiles.compiled,
        'programs_loaded': compiles.loaded,
        'machine': provenance.machine(jax.devices()[0].device_kind),
    }
    if lead:
      atomic.write(os.path.join(directory, f'{name}.json'), json.dumps(result, indent=2))
    results.append(result)
  return results
