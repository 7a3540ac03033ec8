r"""Beam-search speed beside an established PyTorch implementation, same shapes, one run.

  pip install torch transformers   # not dependencies of transformer_jax
  python experiments/decode_vs_torch.py --workdir=DIR [--split=test] [--beam_size=4] \
      [--batch_size=64] [--repeats=2] [--json=experiments/results/decode_vs_torch_cpu.json]

Ours: the workdir's latest checkpoint translates every source sentence of the split
(`Translator.translate_ids`, batches by length bucket as `translate` makes them). Theirs:
Hugging Face transformers' `MarianMTModel` (the Marian NMT architecture: a post-norm
Transformer with sinusoidal positions), randomly initialised with the workdir's sizes (N,
d_model, h, d_ff, vocabulary; ReLU; shared embeddings), `generate` with the same beam size on
the same batches of source ids (attention mask on padding), its key/value cache on. A random
model never chooses when to stop, so each batch is made to generate exactly as many tokens
as our longest output of that batch (EOS included; `min_new_tokens = max_new_tokens`):
their work per batch is at most ours, since our search may run on past its longest output.
Both use every core, or both the GPU where there is one (theirs in float32 with TF32 matmuls,
as JAX's default precision does there). The two alternate `--repeats` times over the whole
split (ours compiled beforehand, one batch per bucket shape); the faster pass of each is
reported, as sentences/s and output tokens/s (our output tokens, EOS included, for both).
"""

import json
import os
import platform
import time

from absl import app, flags, logging
import jax
import numpy as np
import torch
import transformers

from transformer_jax.data import datasets
from transformer_jax.model_config import PAD_ID
from transformer_jax.translator import Translator

_WORKDIR = flags.DEFINE_string('workdir', None, 'A trained workdir.', required=True)
_SPLIT = flags.DEFINE_string('split', 'test', 'Which split to translate.')
_BEAM_SIZE = flags.DEFINE_integer('beam_size', 4, 'Beam size, both implementations.')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 64, 'Sentences per batch, both.')
_REPEATS = flags.DEFINE_integer('repeats', 2, 'Alternating passes over the split, each.')
_JSON = flags.DEFINE_string('json', None, 'Also write the figures to this file.')

_DEVICE = 'cuda' if torch.cuda.is_available() else 'cpu'


def _batches(translator: Translator, sources: list[np.ndarray]) -> list[tuple[list[int], int]]:
  """(sentence indices, padded length) of each batch, as `Translator.translate_ids` forms
  them."""
  lengths = translator.lengths
  bucket = np.searchsorted(lengths, [len(s) for s in sources])
  batches = []
  for b in reversed(range(len(lengths))):
    members = [i for i in np.flatnonzero(bucket == b) if len(sources[i])]
    batches += [(members[start:start + translator.rows], lengths[b])
                for start in range(0, len(members), translator.rows)]
  return batches


def _marian(config) -> transformers.MarianMTModel:
  model = config.model
  marian = transformers.MarianConfig(
      vocab_size=config.data.vocab_size, d_model=model.d_model,
      encoder_layers=model.num_layers, decoder_layers=model.num_layers,
      encoder_attention_heads=model.num_heads, decoder_attention_heads=model.num_heads,
      encoder_ffn_dim=model.d_ff, decoder_ffn_dim=model.d_ff, activation_function='relu',
      max_position_embeddings=config.data.max_length + 64, pad_token_id=PAD_ID,
      eos_token_id=1, decoder_start_token_id=PAD_ID, forced_eos_token_id=None,
      scale_embedding=True, share_encoder_decoder_embeddings=True)
  torch.manual_seed(0)
  return transformers.MarianMTModel(marian).to(_DEVICE).eval()


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  torch.set_num_threads(os.cpu_count())
  torch.backends.cuda.matmul.allow_tf32 = True
  translator = Translator(_WORKDIR.value, beam_size=_BEAM_SIZE.value, average_last=1,
                          batch_size=_BATCH_SIZE.value)
  pairs = datasets.load_pairs(translator.config.data, _SPLIT.value)
  sources = translator.encode([source for source, _ in pairs])
  batches = _batches(translator, sources)
  translator.translate_ids([sources[members[0]] for members, _ in batches])  # compiles
  marian = _marian(translator.config)

  def ours():
    return translator.translate_ids(sources)

  def theirs(outputs):
    for members, length in batches:
      ids = np.full((len(members), length), PAD_ID, np.int64)
      for row, i in enumerate(members):
        ids[row, :len(sources[i])] = sources[i]
      tokens = max(len(outputs[i]) + 1 for i in members)
      with torch.inference_mode():
        marian.generate(input_ids=torch.from_numpy(ids).to(_DEVICE),
                        attention_mask=torch.from_numpy(ids != PAD_ID).to(_DEVICE),
                        num_beams=_BEAM_SIZE.value, do_sample=False,
                        max_new_tokens=tokens, min_new_tokens=tokens, use_cache=True)
    if _DEVICE == 'cuda':
      torch.cuda.synchronize()

  seconds = {'transformer_jax': [], 'transformers_marian': []}
  outputs = None
  for _ in range(_REPEATS.value):
    start = time.perf_counter()
    outputs = ours()
    seconds['transformer_jax'].append(time.perf_counter() - start)
    start = time.perf_counter()
    theirs(outputs)
    seconds['transformers_marian'].append(time.perf_counter() - start)

  count = sum(len(members) for members, _ in batches)
  tokens = sum(len(outputs[i]) + 1 for members, _ in batches for i in members)
  figures = {'split': _SPLIT.value, 'beam_size': _BEAM_SIZE.value,
             'batch_size': _BATCH_SIZE.value, 'sentences': count, 'output_tokens': tokens,
             'machine': platform.processor() or platform.machine(), 'cpu_count': os.cpu_count(),
             'jax_device': jax.devices()[0].device_kind,
             'torch_device': torch.cuda.get_device_name() if _DEVICE == 'cuda' else 'cpu',
             'jax': jax.__version__, 'torch': torch.__version__,
             'transformers': transformers.__version__}
  for name, passes in seconds.items():
    best = min(passes)
    figures[name] = {'seconds': passes, 'sentences_per_second': count / best,
                     'output_tokens_per_second': tokens / best}
    print(f'{name:>19}: {count} sentences in {best:.1f} s (passes {passes}), '
          f'{count / best:.1f} sentences/s, {tokens / best:.0f} output tokens/s', flush=True)
  if _JSON.value:
    with open(_JSON.value, 'w') as f:
      json.dump(figures, f, indent=2)


if __name__ == '__main__':
  app.run(main)
