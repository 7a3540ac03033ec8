r"""A trained workdir's model here and exported to Hugging Face `transformers`
(`transformer_jax.export`): their logits, and their decoding of a whole split (sentences/s at
the same beam, and how often the translations agree).

  python experiments/hf_export_check.py --workdir=DIR [--split=test] [--beam_sizes=1,5] \
      [--batch_size=64] [--json=experiments/results/hf_export_cpu.json]

Logits: the largest difference between ours and the exported model's over the split's first
`batch_size` pairs, teacher-forced (every real target position, every vocabulary entry), as
exported (Marian's layer-norm ε of 1e-5) and with the loaded model's ε set to our 1e-6: the
second isolates the conversion, the difference between the two is ε's part.

Decoding: both sides decode the same batches: the sentences grouped by `translate`'s length buckets,
`batch_size` at a time, each group capped at translate's output length (its bucket + 
config.decode.max_extra_length), with the run's averaged checkpoints and α. The exported model
gets its input from MarianTokenizer (counted: sentences whose ids differ from ours) and the
text preprocessing of the run's config, as its model card says. Each side decodes one batch of
every bucket first, untimed (our compilation; PyTorch's first calls); then the whole split is
timed. For every sentence whose translations differ, the report gives both hypotheses'
log-probabilities under our model and their scores under each length penalty, §6.1's
((5 + |Y|) / 6)^α and transformers' |Y|^β with the exported β, so that the cause of the
difference can be read off. For beam search, transformers also decodes the split (untimed) with
β = α, to show what the matched β gains.
"""

import json
import os
import tempfile
import time

from absl import app, flags, logging
import jax
import numpy as np
import torch
import transformers

from transformer_jax import export, provenance
from transformer_jax.data import datasets
from transformer_jax.data.tokenizer import EOS_ID, PAD_ID
from transformer_jax.decoding import decoding, search
from transformer_jax.decoding.translator import Translator

_WORKDIR = flags.DEFINE_string('workdir', None, 'A trained workdir.', required=True)
_SPLIT = flags.DEFINE_string('split', 'test', 'Which split to translate.')
_BEAM_SIZES = flags.DEFINE_list('beam_sizes', None, 'Beam sizes to measure (default: 1 and '
                                 'the run\'s config.decode.beam_size).')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 64, 'Sentences per batch.')
_JSON = flags.DEFINE_string('json', None, 'Also write the figures to this file.')


def batches(translator: Translator, sources: list[np.ndarray]) -> list[tuple[int, list[int]]]:
  """(bucket length, sentence indices) of each batch `translate_ids` decodes."""
  lengths = translator.lengths
  bucket = np.searchsorted(lengths, [len(s) for s in sources])
  plan = []
  for b in reversed(range(len(lengths))):
    members = [i for i in np.flatnonzero(bucket == b) if len(sources[i])]
    plan += [(int(lengths[b]), members[start:start + translator.rows])
             for start in range(0, len(members), translator.rows)]
  return plan


def generate(model, tokenizer, texts: list[str], cap: int, beam_size: int,
             **settings) -> list[list[int]]:
  """The exported model's output ids (without the start symbol and EOS) for `texts`, with its
  generation defaults but for the beam size, the cap and `settings`."""
  batch = tokenizer(texts, return_tensors='pt', padding=True)
  with torch.inference_mode():
    outputs = model.generate(**batch, num_beams=beam_size, max_length=cap + 1, **settings)
  return [decoding.strip(row[1:]) for row in outputs.numpy()]


def log_prob(model, source: list[int], output: list[int]) -> float:
  """log P(output + EOS | source) under the exported model, the padding id excluded as our
  decoder excludes it."""
  target = output + [EOS_ID]
  with torch.inference_mode():
    logits = model(input_ids=torch.tensor([source]),
                   decoder_input_ids=torch.tensor([[PAD_ID] + target[:-1]])).logits[0].double()
    logits[:, PAD_ID] = -float('inf')
    return float(torch.log_softmax(logits, -1)[range(len(target)), target].sum())


def logit_differences(translator: Translator, model, pairs: list[tuple[str, str]]) -> dict:
  """Largest |ours - exported| over the real target positions of `pairs`, as exported and
  with our layer-norm ε."""
  sources = translator.encode([s for s, _ in pairs])
  targets = translator.encode([t for _, t in pairs], side='target')
  keep = [i for i in range(len(pairs)) if len(sources[i]) and len(targets[i])]
  inputs = _padded([sources[i].tolist() for i in keep])
  decoder_inputs = _padded([[PAD_ID] + targets[i][:-1].tolist() for i in keep])
  real = _padded([[1] * len(targets[i]) for i in keep]).astype(bool)
  ours = np.asarray(translator.model.eval_model.apply(
      {'params': translator.params}, inputs, decoder_inputs))[real]
  result = {'pairs': len(keep), 'positions': int(real.sum()),
            'logit_scale': float(np.abs(ours).max())}
  for name, epsilon in (('as_exported', None), ('with_our_epsilon', 1e-6)):
    if epsilon is not None:
      for module in model.modules():
        if isinstance(module, torch.nn.LayerNorm):
          module.eps = epsilon
    with torch.inference_mode():
      theirs = model(input_ids=torch.tensor(inputs),
                     attention_mask=torch.tensor(inputs != PAD_ID),
                     decoder_input_ids=torch.tensor(decoder_inputs)).logits.numpy()[real]
    result[name] = float(np.abs(theirs - ours).max())
  return result


def _padded(rows: list[list[int]]) -> np.ndarray:
  out = np.full((len(rows), max(map(len, rows))), PAD_ID, np.int32)
  for i, row in enumerate(rows):
    out[i, :len(row)] = row
  return out


def measure(translator: Translator, model, tokenizer, texts: list[str], beam_size: int) -> dict:
  sources = translator.encode(texts, f'{_SPLIT.value} source')
  prepared = [translator.preprocessing.source(text) for text in texts]
  plan = batches(translator, sources)
  alpha, beta = translator.config.decode.alpha, model.generation_config.length_penalty
  cap = lambda length: length + translator.config.decode.max_extra_length

  # Ours: one batch of each bucket first, then the split.
  translator.translate_ids([sources[members[0]] for _, members in
                            {length: m for length, m in plan}.items()])
  start = time.perf_counter()
  ours = translator.translate_ids(sources)
  ours_seconds = time.perf_counter() - start

  theirs = [[] for _ in texts]
  for length, members in {length: m for length, m in plan}.items():
    generate(model, tokenizer, [prepared[i] for i in members[:2]], cap(length), beam_size)
  start = time.perf_counter()
  for length, members in plan:
    for i, ids in zip(members, generate(model, tokenizer, [prepared[i] for i in members],
                                        cap(length), beam_size)):
      theirs[i] = ids
  theirs_seconds = time.perf_counter() - start

  # The same search with transformers' penalty exponent set to α itself, untimed.
  with_alpha = [[] for _ in texts]
  if beam_size > 1:
    for length, members in plan:
      for i, ids in zip(members, generate(model, tokenizer, [prepared[i] for i in members],
                                          cap(length), beam_size, length_penalty=alpha)):
        with_alpha[i] = ids

  tokenized = tokenizer(prepared)['input_ids']
  differ = [i for i in range(len(texts)) if ours[i] != theirs[i]]
  differences = []
  for i in differ:
    source = sources[i].tolist()
    entry = {'sentence': i, 'ours': translator.text(ours[i]),
             'transformers': translator.text(theirs[i])}
    for name, ids in (('ours', ours[i]), ('transformers', theirs[i])):
      lp = log_prob(model, source, ids)
      length = len(ids) + 1
      entry[f'{name}_log_prob'] = lp
      entry[f'{name}_score_paper'] = lp / float(search.length_penalty(length, alpha))
      entry[f'{name}_score_transformers'] = lp / length**beta
    # Each search chose the better hypothesis under its own length penalty.
    entry['explained_by_length_penalty'] = (
        entry['ours_score_paper'] > entry['transformers_score_paper'] and
        entry['transformers_score_transformers'] > entry['ours_score_transformers'])
    differences.append(entry)
  return {
      'beam_size': beam_size,
      'ours': {'seconds': ours_seconds, 'sentences_per_second': len(texts) / ours_seconds},
      'transformers': {'seconds': theirs_seconds,
                       'sentences_per_second': len(texts) / theirs_seconds},
      'speed_ratio': theirs_seconds / ours_seconds,
      'same_input_ids': sum(list(s) == t for s, t in zip(sources, tokenized) if len(s)),
      'same_translations': len(texts) - len(differ),
      'same_translations_with_beta_alpha': (sum(o == t for o, t in zip(ours, with_alpha))
                                            if beam_size > 1 else None),
      'differences_explained_by_length_penalty': sum(
          entry['explained_by_length_penalty'] for entry in differences),
      'differences': differences,
  }


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  torch.set_num_threads(os.cpu_count())
  figures = {'workdir': _WORKDIR.value, 'split': _SPLIT.value, 'batch_size': _BATCH_SIZE.value,
             'provenance': provenance.record(jax.devices()[0].device_kind), 'results': []}
  with tempfile.TemporaryDirectory() as directory:
    out = os.path.join(directory, 'hf')
    figures['checkpoint_steps'] = export.export(_WORKDIR.value, out)
    tokenizer = transformers.MarianTokenizer.from_pretrained(out)
    translator = Translator(_WORKDIR.value)
    pairs = datasets.load_pairs(translator.config.data, _SPLIT.value)
    figures['logits'] = logit_differences(
        translator, transformers.MarianMTModel.from_pretrained(out).eval(),
        pairs[:_BATCH_SIZE.value])
    print('largest logit difference:', json.dumps(figures['logits']), flush=True)
    model = transformers.MarianMTModel.from_pretrained(out).eval()
    beam_sizes = (map(int, _BEAM_SIZES.value) if _BEAM_SIZES.value
                  else sorted({1, translator.config.decode.beam_size}))
    for beam_size in beam_sizes:
      translator = Translator(_WORKDIR.value, beam_size=beam_size,
                              batch_size=_BATCH_SIZE.value)
      texts = [source for source, _ in pairs]
      figures['sentences'] = len(texts)
      figures['alpha'] = translator.config.decode.alpha
      figures['transformers_length_penalty'] = model.generation_config.length_penalty
      result = measure(translator, model, tokenizer, texts, beam_size)
      figures['results'].append(result)
      print(f'beam {beam_size}: ours {result["ours"]["sentences_per_second"]:.1f} sentences/s, '
            f'transformers {result["transformers"]["sentences_per_second"]:.1f} '
            f'({result["speed_ratio"]:.2f}x the time); same translations '
            f'{result["same_translations"]}/{len(texts)} (of the others, '
            f'{result["differences_explained_by_length_penalty"]} explained by the length '
            f'penalty), same input ids {result["same_input_ids"]}', flush=True)
      for entry in result['differences']:
        print(json.dumps(entry, ensure_ascii=False))
  if _JSON.value:
    with open(_JSON.value, 'w') as f:
      json.dump(figures, f, indent=2, ensure_ascii=False)


if __name__ == '__main__':
  app.run(main)
