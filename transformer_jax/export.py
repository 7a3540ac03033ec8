r"""Exports a trained workdir as a Hugging Face `transformers` MarianMT model: the same network
(`model/marian.py`), its vocabulary, its decoding settings and a model card.

  python -m transformer_jax.export --workdir=DIR --output=HF_DIR [--average_last=5] [--overwrite]

  import transformers
  model = transformers.MarianMTModel.from_pretrained(HF_DIR)
  tokenizer = transformers.MarianTokenizer.from_pretrained(HF_DIR)
  batch = tokenizer(['A man is sleeping.'], return_tensors='pt', padding=True)
  print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))

HF_DIR gets config.json, model.safetensors (float32), generation_config.json, the run's
SentencePiece model as source.spm and target.spm with vocab.json (the ids renumbered as Marian
has them, `<pad>` last: `marian.marian_id`), the tokenizer's
configuration, and README.md, a model card with the run's config, data and evaluations. The
parameters are the average of the last `--average_last` checkpoints (default
`config.decode.average_last`), as `evaluate` and `translate` average them (§6.1).

Decoding defaults (`generation_settings`): the run's beam size, `translate`'s longest output,
the padding id never emitted, and beam search that stops only when no live hypothesis can beat
the finished ones, as ours; greedy decoding is then ours exactly. transformers' length penalty
|Y|^β cannot equal §6.1's ((5 + |Y|) / 6)^α; β is set where the two grow alike
(`length_penalty`).

Everything is checked before anything is written (a workdir with no checkpoint, a model
MarianMT cannot express, an --output that exists and is not empty unless --overwrite, a training
workdir or a CTranslate2 model as --output even then), and the directory is written beside --output
and renamed into place. A run trained on preprocessed text
(`config.data.preprocessing`) is exported with a warning, in the log and the model card, which
says how to prepare the input. docs/evaluation.md has the details,
experiments/hf_export/README.md the measurements.
"""

import contextlib
import json
import os

from absl import flags, logging
from etils import epath
import numpy as np

from transformer_jax import cli
from transformer_jax.data import token_store, tokenizer
from transformer_jax.data.tokenizer import PAD_ID
from transformer_jax.decoding import translator
from transformer_jax.model import marian
from transformer_jax.model import model_config
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.storage import atomic, buckets, workdirs
from transformer_jax.training import checkpointing, metrics_log, saved_config


def _transformers():
  """The `transformers` module, or a RuntimeError saying how to install it."""
  try:
    import transformers  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise RuntimeError('exporting needs transformers: pip install "transformer_jax[hf]"') from e
  return transformers


def check_out(out: str, overwrite: bool) -> None:
  """An error unless `out` can become the exported directory: absent or empty, or replaced
  with `overwrite` (an earlier export or other files, not a training workdir or a CTranslate2
  model); its parent writable."""
  path = epath.Path(out)
  if path.exists() and not path.is_dir():
    raise FileExistsError(f'--output={out} exists and is not a directory')
  if path.is_dir() and any(path.iterdir()) and not overwrite:
    raise FileExistsError(f'--output={out} exists and is not empty: choose a new directory, or '
                          'pass --overwrite to replace it')
  if path.is_dir() and (kind := _not_replaceable(out)):
    raise FileExistsError(f'--output={out} is {kind}: --overwrite replaces an earlier export or '
                          'other files, never a training run or a converted model')
  workdirs.check_writable(os.path.dirname(buckets.absolute(out)), '--output')


def _not_replaceable(directory: str) -> str | None:
  """What `directory` is, when it is a training workdir or a CTranslate2 model (which
  --overwrite must not delete); else None."""
  names = {path.name for path in epath.Path(directory).iterdir()}
  if 'checkpoints' in names or 'metrics.jsonl' in names:
    return 'a training workdir (checkpoints/, metrics.jsonl)'
  if 'model.bin' in names:
    return 'a CTranslate2 model directory (model.bin)'
  return None


def length_penalty(alpha: float, mean_length: float | None) -> float:
  """transformers' length-penalty exponent β for §6.1's α: β = α·L / (5 + L) at the mean
  target length L, where |Y|^β and ((5 + |Y|) / 6)^α grow by the same factor per token (equal
  d ln lp / d ln |Y|), so that the two rank hypotheses of about that length alike; α when L is
  not known."""
  return alpha if mean_length is None else alpha * mean_length / (5.0 + mean_length)


def generation_settings(config, mean_length: float | None) -> dict:
  """`transformers.GenerationConfig` keyword arguments for `config.decode` (module docstring);
  `mean_length`, the training targets' mean length (EOS included), sets the length penalty.
  Token ids are Marian's (`marian.marian_id`)."""
  decode = config.decode
  pad, eos = (int(marian.marian_id(i, config.data.vocab_size))
              for i in (PAD_ID, tokenizer.EOS_ID))
  settings = dict(decoder_start_token_id=pad, pad_token_id=pad, eos_token_id=eos,
                  forced_eos_token_id=None, suppress_tokens=[pad],
                  max_length=config.data.max_length + decode.max_extra_length + 1,
                  num_beams=decode.beam_size)
  if decode.beam_size > 1:
    settings.update(length_penalty=length_penalty(decode.alpha, mean_length),
                    early_stopping='never')
  return settings


def export(workdir: str, out: str, average_last: int | None = None,
           overwrite: bool = False) -> list[int]:
  """Writes `workdir`'s model to `out` (module docstring); returns the averaged steps."""
  config = saved_config.load_config(workdir)
  cfg = model_config.from_config(config)
  marian.check_exportable(cfg)
  average_last = config.decode.average_last if average_last is None else average_last
  if average_last <= 0:
    raise ValueError(f'--average_last must be a positive integer, got {average_last}')
  if not checkpointing.saved_steps(workdir):
    raise FileNotFoundError(f'no checkpoint in {os.path.join(workdir, "checkpoints")}: train '
                            'with transformer_jax.train first')
  check_out(out, overwrite)
  transformers = _transformers()
  spm_model = os.path.join(workdir, tokenizer.MODEL_FILENAME)
  vocabulary = tokenizer.load(spm_model)
  with contextlib.closing(checkpointing.Checkpoints(workdir)) as checkpoints:
    params, steps = checkpoints.average_last(average_last,
                                             ShardedModel(config).abstract_params)
  if len(steps) < average_last:
    logging.warning('averaging the %d checkpoints %s: fewer than the %d asked for', len(steps),
                    steps, average_last)
  lengths = token_store.target_lengths(workdir, 'train')
  mean_length = None if lengths is None else float(np.mean(lengths))
  if config.data.preprocessing != 'none':
    logging.warning('%s was trained on text preprocessed as %r, which MarianTokenizer does not '
                    'do: the model card says how to prepare its input', workdir,
                    config.data.preprocessing)

  with atomic.replacing_directory(out) as staging:
    write_model(cfg, params, staging)
    transformers.GenerationConfig(**generation_settings(config, mean_length)
                                  ).save_pretrained(staging)
    _write_tokenizer(transformers, config, spm_model, vocabulary, staging)
    with open(os.path.join(staging, 'README.md'), 'w', encoding='utf-8') as f:
      f.write(model_card(config, workdir, steps, mean_length))
  return steps


def write_model(cfg, params, directory: str) -> None:
  """The network `cfg` with `params` as MarianMT's config.json and model.safetensors."""
  import safetensors.numpy  # pylint: disable=import-outside-toplevel  (comes with transformers)
  _transformers().MarianConfig(**marian.marian_config(cfg), architectures=['MarianMTModel'],
                            ).save_pretrained(directory)
  safetensors.numpy.save_file(marian.marian_weights(cfg, params),
                              os.path.join(directory, 'model.safetensors'),
                              metadata={'format': 'pt'})


def _write_tokenizer(transformers, config, spm_model: str, vocabulary, directory: str) -> None:
  """MarianTokenizer's files: the one SentencePiece model for both sides and vocab.json mapping
  each of its pieces to the model's id for it (Marian's order, `marian.marian_id`)."""
  for name in ('source.spm', 'target.spm'):
    atomic.copy(spm_model, os.path.join(directory, name))
  size = vocabulary.get_piece_size()
  pieces = {vocabulary.id_to_piece(int(i)): m
            for m, i in enumerate(marian.our_ids(size))}
  with open(os.path.join(directory, 'vocab.json'), 'w', encoding='utf-8') as f:
    json.dump(pieces, f, ensure_ascii=False, indent=1)
  marian_tokenizer = transformers.MarianTokenizer(
      source_spm=os.path.join(directory, 'source.spm'),
      target_spm=os.path.join(directory, 'target.spm'),
      vocab=os.path.join(directory, 'vocab.json'),
      source_lang=config.data.source_lang, target_lang=config.data.target_lang,
      unk_token=vocabulary.id_to_piece(tokenizer.UNK_ID),
      eos_token=vocabulary.id_to_piece(tokenizer.EOS_ID),
      pad_token=vocabulary.id_to_piece(PAD_ID),
      model_max_length=config.data.max_length)
  marian_tokenizer.save_pretrained(directory)


def _evaluations(workdir: str) -> list[str]:
  """Table rows of the run's `evaluate` results (workdir/eval/*.json) and its last dev
  evaluation during training (metrics.jsonl)."""
  rows = []
  for path in sorted(epath.Path(workdir, 'eval').glob('*.json')):
    with path.open() as f:
      result = json.load(f)
    signature = result['sacrebleu_signature'].replace('|', '\\|')  # a table cell
    rows.append(f'| {result["split"]} (`evaluate`, checkpoints {result["checkpoint_steps"]}, '
                f'beam {result["beam_size"]}, α {result["alpha"]}) | '
                f'{result["bleu_detokenized"]:.2f} ({result["bleu_case"]}; sacreBLEU '
                f'`{signature}`) | {result["perplexity"]:.3f} |')
  metrics = os.path.join(workdir, 'metrics.jsonl')
  if epath.Path(metrics).is_file():
    dev = [r for r in metrics_log.read(metrics) if r['split'] == 'validation' and 'bleu' in r]
    if dev:
      last = dev[-1]
      rows.append(f'| validation (during training, step {last["step"]}, one checkpoint) | '
                  f'{last["bleu"]:.2f} (on the vocabulary\'s round trip of the references) | '
                  f'{last["perplexity"]:.3f} |')
  return rows


def model_card(config, workdir: str, steps: list[int], mean_length: float | None) -> str:
  """README.md of the exported model: what it is, how to use it (transformers, CTranslate2),
  how it was trained and scored."""
  data = config.data
  lines = _card_header(config, steps)
  if data.preprocessing != 'none':
    lines += _card_preprocessing(config)
  lines += _card_use(config, mean_length) + _card_ctranslate2(config, mean_length)
  lines += _card_model(config)
  rows = _evaluations(workdir)
  if rows:
    lines += ['| split | BLEU | perplexity per token |', '|---|---|---|', *rows]
  else:
    lines.append('None recorded in the run\'s directory.')
  lines += ['', '## Training configuration', '', '```json',
            config.to_json_best_effort(indent=2), '```', '']
  return '\n'.join(lines)


def _card_header(config, steps: list[int]) -> list[str]:
  data = config.data
  source, target = data.source_lang, data.target_lang
  return [
      '---',
      f'language: [{source}, {target}]',
      'tags: [translation, marian, transformer_jax]',
      '---',
      '',
      f'# {source}→{target} Transformer trained with transformer_jax',
      '',
      'The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017), '
      f'trained with transformer_jax on `{data.dataset}` and exported as a MarianMT model: '
      'the same network (see transformer_jax/model/marian.py for the mapping). Parameters: the '
      f'average of the checkpoints at steps {steps}.',
      '',
  ]


def _card_preprocessing(config) -> list[str]:
  """The warning of a model trained on preprocessed text, and how to prepare its input."""
  data = config.data
  source, target = data.source_lang, data.target_lang
  return [
      '## Warning: prepare the input as in training',
      '',
      f'This model was trained on text preprocessed as `{data.preprocessing}`: lowercased and '
      'Moses-tokenized (sacremoses, without XML escaping). MarianTokenizer does neither, so '
      'raw text gives poor translations. Prepare the input, and restore the output, as in '
      'training:',
      '',
      '```python',
      'import sacremoses',
      f'tokenize = sacremoses.MosesTokenizer(lang="{source}")',
      f'detokenize = sacremoses.MosesDetokenizer(lang="{target}")',
      'inputs = [tokenize.tokenize(text.lower(), return_str=True, escape=False) '
      'for text in texts]',
      '# ... translate `inputs` as below, then:',
      'outputs = [detokenize.detokenize(text.split(), return_str=True) for text in outputs]',
      '```',
      '',
      'The translations are lowercase.',
      '',
  ]


def _card_use(config, mean_length: float | None) -> list[str]:
  """Translating with transformers as `translate` does: the length cap and the penalty."""
  data, decode = config.data, config.decode
  lengths = translator.bucket_lengths(config)
  if mean_length is None:
    penalty = (f'{decode.alpha}, the run\'s α: no encoded training split was found to adapt it '
               'to')
  else:
    penalty = (f'{length_penalty(decode.alpha, mean_length):.4f}, the exponent at which '
               'transformers\' penalty |Y|^β grows as fast per token as the paper\'s ((5 + |Y|) / '
               f'6)^α (§6.1, α = {decode.alpha}) at the training targets\' mean length of '
               f'{mean_length:.1f} tokens')
  return [
      '## Use',
      '',
      'transformer_jax\'s `translate` caps each output at its source\'s length bucket plus '
      f'{decode.max_extra_length} tokens (`decode.max_extra_length`; §6.1 allows the input '
      'length + 50, the input padded to its bucket): a source of n tokens (`</s>` included) is '
      f'padded to the first of {lengths} that is at least n. `max_output_tokens` gives that cap, '
      'so that the lines below translate as `translate` does even where a sentence runs on to '
      'it:',
      '',
      '```python',
      'import bisect',
      f'LENGTHS = {lengths}',
      'def max_output_tokens(ids):',
      f'    return LENGTHS[bisect.bisect_left(LENGTHS, len(ids))] + {decode.max_extra_length}',
      '```',
      '',
      '```python',
      'import torch, transformers',
      'model = transformers.MarianMTModel.from_pretrained(PATH)',
      'tokenizer = transformers.MarianTokenizer.from_pretrained(PATH)',
      'outputs = []',
      'for ids in tokenizer(texts)["input_ids"]:',
      '    # max_length counts the start symbol as well',
      '    generated = model.generate(input_ids=torch.tensor([ids]), '
      'max_length=max_output_tokens(ids) + 1)',
      '    outputs += tokenizer.batch_decode(generated, skip_special_tokens=True)',
      '```',
      '',
      f'`generate` defaults to the run\'s other decoding settings: beam {decode.beam_size}, '
      f'length penalty {penalty}; without `max_length`, at most '
      f'{data.max_length + decode.max_extra_length} output tokens, the longest source\'s cap. '
      'No exponent gives the paper\'s penalty exactly, so beam search can rank hypotheses of '
      'different lengths differently from transformer_jax; greedy decoding (`num_beams=1`) '
      'gives its translations.',
      '',
      'transformers 4.x also runs it as `transformers.pipeline("translation", model=PATH)`, '
      f'called with `num_beams={decode.beam_size}`: the 4.x pipeline\'s own default, 4 beams, '
      'takes the place of the exported beam size. transformers 5 removed the translation '
      'pipeline, so `generate` (above) is the way on both.',
      '',
  ]


def _card_ctranslate2(config, mean_length: float | None) -> list[str]:
  decode = config.decode
  return [
      '### CTranslate2',
      '',
      'The vocabulary is numbered as Opus-MT models number theirs (`<pad>` last), so '
      'CTranslate2\'s converter takes this directory as it is '
      '(`ct2-transformers-converter --model PATH --output_dir CT2_PATH`). Its model keeps no '
      'decoding settings: pass the beam size, the length penalty and the length cap '
      '(`max_output_tokens`, above) to each call:',
      '',
      '```python',
      'import ctranslate2, transformers',
      'translator = ctranslate2.Translator(CT2_PATH)',
      'tokenizer = transformers.MarianTokenizer.from_pretrained(PATH)',
      'outputs = []',
      'for ids in tokenizer(texts)["input_ids"]:',
      f'    result = translator.translate_batch([tokenizer.convert_ids_to_tokens(ids)], '
      f'beam_size={decode.beam_size}, length_penalty='
      f'{length_penalty(decode.alpha, mean_length):.4f}, '
      'max_decoding_length=max_output_tokens(ids))[0]',
      '    outputs.append(tokenizer.convert_tokens_to_string(result.hypotheses[0]))',
      '```',
      '',
  ]


def _card_model(config) -> list[str]:
  data, model = config.data, config.model
  return [
      '## Model',
      '',
      f'N = {model.num_layers} layers, d_model = {model.d_model}, d_ff = {model.d_ff}, '
      f'h = {model.num_heads}, P_drop = {model.dropout_rate}, post-norm, sinusoid positions, '
      f'{"shared" if model.share_embeddings else "separate"} embeddings; a '
      f'{data.vocab_size}-token SentencePiece vocabulary ({data.spm_model_type}) shared by both '
      'languages. Layer normalisation uses ε = 1e-5 here (torch\'s default, which MarianMT '
      'cannot change) where transformer_jax used 1e-6, a small difference in the logits '
      '(measured in transformer_jax\'s experiments/hf_export/README.md).',
      '',
      '## Evaluation',
      '',
  ]

if __name__ == '__main__':
  _WORKDIR = flags.DEFINE_string('workdir', None, 'A training run\'s directory.', required=True)
  _OUTPUT = flags.DEFINE_string('output', None, 'The directory to write the Hugging Face model '
                                'to.', required=True)
  cli.renamed('out', 'output', 'the directory written')
  _AVERAGE_LAST = flags.DEFINE_integer('average_last', None, 'Average the parameters of the '
                                       'last K checkpoints (default: config.decode.average_last).')
  _OVERWRITE = flags.DEFINE_bool('overwrite', False, 'Replace --output if it exists.')

  def main():
    steps = export(_WORKDIR.value, _OUTPUT.value, _AVERAGE_LAST.value, _OVERWRITE.value)
    print(f'{_OUTPUT.value}: MarianMT model of {_WORKDIR.value}, checkpoints {steps} averaged')

  cli.run(main)
