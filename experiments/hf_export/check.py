r"""A trained workdir's model here, exported to Hugging Face `transformers`
(`transformer_jax.export`) and converted from that to CTranslate2 (`ct2-transformers-converter`'s
converter, unmodified): their logits, and their decoding of a whole split (sentences/s at the
same beam, and how often the translations agree).

  python experiments/hf_export/check.py --workdir=DIR [--split=test] [--beam_sizes=1,5] \
      [--batch_size=64] [--output=experiments/hf_export/cpu.json]

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
β = α, to show what the matched β gains. CTranslate2 decodes the same batches, float32, with
one thread and with two (`intra_threads`), given the exported β (its model keeps no length
penalty); ours and transformers use every core.
"""

import json
import os
import tempfile
import time

from absl import app, flags, logging
import jax
import ctranslate2
import numpy as np
import torch
import transformers

from transformer_jax import cli, export
from transformer_jax.data import datasets
from transformer_jax.data.tokenizer import EOS_ID, PAD_ID
from transformer_jax.decoding import batch_decode, search
from transformer_jax.decoding.translator import Translator, decode_batches
from transformer_jax.model import marian
from transformer_jax.storage import provenance

_WORKDIR = flags.DEFINE_string('workdir', None, 'A trained workdir.', required=True)
_SPLIT = flags.DEFINE_string('split', 'test', 'Which split to translate.')
_BEAM_SIZES = flags.DEFINE_list('beam_sizes', None, 'Beam sizes to measure (default: 1 and '
                                 'the run\'s config.decode.beam_size).')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 64, 'Sentences per batch.')
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the figures to this file.')
cli.renamed('json', 'output', 'the file the figures are written to; --json is a switch')


def to_ours(model, ids) -> np.ndarray:
  """The exported model's token ids as ours (the export numbers them as Marian does,
  `marian.marian_id`)."""
  return marian.our_ids(model.config.vocab_size)[np.asarray(ids)]


def to_marian(model, ids) -> np.ndarray:
  """Our token ids as the exported model numbers them."""
  return marian.marian_id(ids, model.config.vocab_size)


def generate(model, tokenizer, texts: list[str], cap: int, beam_size: int,
             **settings) -> list[list[int]]:
  """The exported model's output ids as ours (without the start symbol and EOS) for `texts`,
  with its generation defaults but for the beam size, the cap and `settings`."""
  batch = tokenizer(texts, return_tensors='pt', padding=True)
  with torch.inference_mode():
    outputs = model.generate(**batch, num_beams=beam_size, max_length=cap + 1, **settings)
  return [batch_decode.strip(output[1:]) for output in to_ours(model, outputs.numpy())]


def ct2_translate(ct2_model, tokenizer, texts: list[str], cap: int, beam_size: int,
                  length_penalty: float) -> list[list[int]]:
  """CTranslate2's output ids as ours for `texts`: the converted export, fed the tokens of
  the export's MarianTokenizer, with the exported length penalty (it keeps none itself)."""
  tokens = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(texts)['input_ids']]
  results = ct2_model.translate_batch(tokens, beam_size=beam_size, max_decoding_length=cap,
                                      length_penalty=length_penalty)
  vocab = len(tokenizer.get_vocab())
  return [[int(i) for i in marian.our_ids(vocab)[tokenizer.convert_tokens_to_ids(
      result.hypotheses[0])]] for result in results]


def log_prob(model, source: list[int], output: list[int]) -> float:
  """log P(output + EOS | source) under the exported model (our ids), the padding id excluded
  as our decoder excludes it."""
  target = output + [EOS_ID]
  with torch.inference_mode():
    logits = model(input_ids=torch.tensor(to_marian(model, [source])),
                   decoder_input_ids=torch.tensor(to_marian(model, [[PAD_ID] + target[:-1]]))
                   ).logits[0].double()
    logits[:, int(to_marian(model, PAD_ID))] = -float('inf')
    return float(torch.log_softmax(logits, -1)[range(len(target)),
                                               to_marian(model, target)].sum())


def logit_differences(translator: Translator, model, pairs: list[tuple[str, str]]) -> dict:
  """Largest |ours - exported| over the real target positions of `pairs`, as exported and
  with our layer-norm ε."""
  sources = translator.encode([s for s, _ in pairs])
  targets = translator.encode([t for _, t in pairs], side='target')
  keep = [i for i in range(len(pairs)) if len(sources[i]) and len(targets[i])]
  inputs = _padded([sources[i].tolist() for i in keep])
  decoder_inputs = _padded([[PAD_ID] + targets[i][:-1].tolist() for i in keep])
  real = _padded([[1] * len(targets[i]) for i in keep]).astype(bool)
  mine = np.asarray(translator.model.eval_module.apply(
      {'params': translator.params}, inputs, decoder_inputs))[real]
  result = {'pairs': len(keep), 'positions': int(real.sum()),
            'logit_scale': float(np.abs(mine).max())}
  for name, epsilon in (('as_exported', None), ('with_our_epsilon', 1e-6)):
    if epsilon is not None:
      for module in model.modules():
        if isinstance(module, torch.nn.LayerNorm):
          module.eps = epsilon
    with torch.inference_mode():
      exported = model(input_ids=torch.tensor(to_marian(model, inputs)),
                       attention_mask=torch.tensor(inputs != PAD_ID),
                       decoder_input_ids=torch.tensor(to_marian(model, decoder_inputs))
                       ).logits.numpy()[real]
    in_our_order = exported[..., to_marian(model, np.arange(model.config.vocab_size))]
    result[name] = float(np.abs(in_our_order - mine).max())
  return result


def _padded(sequences: list[list[int]]) -> np.ndarray:
  out = np.full((len(sequences), max(map(len, sequences))), PAD_ID, np.int32)
  for i, sequence in enumerate(sequences):
    out[i, :len(sequence)] = sequence
  return out


def measure(translator: Translator, model, tokenizer, texts: list[str], beam_size: int,
            ct2_models: dict) -> dict:
  """Ours, transformers' and CTranslate2's (each of `ct2_models`, by its thread count)
  decoding of `texts` at `beam_size`: seconds and agreement with ours (module docstring)."""
  sources = translator.encode(texts, f'{_SPLIT.value} source')
  prepared = [translator.preprocessing.source(text) for text in texts]
  # The batches `translate_ids` decodes: (bucket length, sentence indices).
  plan = list(decode_batches(translator.lengths, np.array([len(s) for s in sources]),
                             translator.batch_sentences))
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

  ct2 = {}
  for threads, ct2_model in ct2_models.items():
    ct2_ids = [[] for _ in texts]
    for length, members in {length: m for length, m in plan}.items():  # untimed, as above
      ct2_translate(ct2_model, tokenizer, [prepared[i] for i in members[:2]], cap(length),
                    beam_size, beta)
    start = time.perf_counter()
    for length, members in plan:
      for i, ids in zip(members, ct2_translate(ct2_model, tokenizer,
                                               [prepared[i] for i in members], cap(length),
                                               beam_size, beta)):
        ct2_ids[i] = ids
    seconds = time.perf_counter() - start
    ct2[f'{threads}_threads'] = {
        'seconds': seconds, 'sentences_per_second': len(texts) / seconds,
        'time_over_ours': seconds / ours_seconds,
        'same_translations': sum(o == c for o, c in zip(ours, ct2_ids)),
        'same_translations_as_transformers': sum(t == c for t, c in zip(theirs, ct2_ids))}

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
      'ctranslate2': ct2,
      'same_input_ids': sum(to_marian(model, s).tolist() == t
                            for s, t in zip(sources, tokenized) if len(s)),
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
    ct2_dir = os.path.join(directory, 'ct2')
    ctranslate2.converters.TransformersConverter(out).convert(ct2_dir)
    ct2_models = {threads: ctranslate2.Translator(ct2_dir, device='cpu', compute_type='float32',
                                                  intra_threads=threads)
                  for threads in (1, 2)}
    figures['ctranslate2'] = ctranslate2.__version__
    beam_sizes = (map(int, _BEAM_SIZES.value) if _BEAM_SIZES.value
                  else sorted({1, translator.config.decode.beam_size}))
    for beam_size in beam_sizes:
      translator = Translator(_WORKDIR.value, beam_size=beam_size,
                              batch_size=_BATCH_SIZE.value)
      texts = [source for source, _ in pairs]
      figures['sentences'] = len(texts)
      figures['alpha'] = translator.config.decode.alpha
      figures['transformers_length_penalty'] = model.generation_config.length_penalty
      result = measure(translator, model, tokenizer, texts, beam_size, ct2_models)
      figures['results'].append(result)
      print(f'beam {beam_size}: ours {result["ours"]["sentences_per_second"]:.1f} sentences/s, '
            f'transformers {result["transformers"]["sentences_per_second"]:.1f} '
            f'({result["speed_ratio"]:.2f}x the time); same translations '
            f'{result["same_translations"]}/{len(texts)} (of the others, '
            f'{result["differences_explained_by_length_penalty"]} explained by the length '
            f'penalty), same input ids {result["same_input_ids"]}', flush=True)
      for threads, ct2 in result['ctranslate2'].items():
        print(f'  CTranslate2, {threads.replace("_", " ")}: {ct2["sentences_per_second"]:.1f} '
              f'sentences/s ({ct2["time_over_ours"]:.2f}x our time); same translations as '
              f'ours {ct2["same_translations"]}/{len(texts)}', flush=True)
      for entry in result['differences']:
        print(json.dumps(entry, ensure_ascii=False))
  if _OUTPUT.value:
    with open(_OUTPUT.value, 'w') as f:
      json.dump(figures, f, indent=2, ensure_ascii=False)


if __name__ == '__main__':
  app.run(main)
