r"""Data prepared once for every process of a run: the vocabulary and the encoded splits in a
shared place (a directory every host mounts, or a bucket), named by `config.data.prepared`.

  python -m transformer_jax.data --config=CONFIG --prepare --output=gs://bucket/wmt14_ende
  python -m transformer_jax.train --config=CONFIG --workdir=gs://bucket/runs/base \
      --config.data.prepared=gs://bucket/wmt14_ende

The place holds what a run's workdir would, `spm.model` and `tokens/` (`token_store`), and
`prepared.json`, the record: the config fields the data was prepared for (`FIELDS`), and once
every split is encoded, the vocabulary's digest and each split's identity (what its ids were
encoded from). `check` reads the record and compares it with a config, before any long work;
`pipeline.load` then reads the vocabulary and the splits from there on every process at once,
without reading the dataset.
"""

import hashlib
import json
import os

from etils import epath
import ml_collections
import sentencepiece as spm

from transformer_jax.data import datasets, tokenizer
from transformer_jax.storage import atomic, buckets

RECORD = 'prepared.json'
FORMAT = 1

# What the token ids mean and which text they stand for (those of `saved_config`'s check of a
# resumed run, the direction and every split's files). Not the seed: runs of any seed share the
# vocabulary and ids, as a resumed run of another seed shares its workdir's.
FIELDS = ('data.dataset', 'data.source_lang', 'data.target_lang', 'data.preprocessing',
          'data.vocab_size', 'data.spm_model_type', 'data.max_corpus_chars',
          'data.train_files', 'data.validation_files', 'data.test_files')


def digest(processor: spm.SentencePieceProcessor) -> str:
  """The SHA-256 of a vocabulary's model, as hex: what its token ids stand for."""
  return hashlib.sha256(processor.serialized_model_proto()).hexdigest()


def fields(config: ml_collections.ConfigDict) -> dict:
  """`config`'s values of `FIELDS`, its files' paths made absolute."""
  config = datasets.with_absolute_files(config)
  values = {}
  for name in FIELDS:
    node = config
    for part in name.split('.'):
      node = node[part]
    values[name] = node
  return values


def _read(place: str) -> dict | None:
  try:
    return json.loads(epath.Path(place, RECORD).read_text(encoding='utf-8'))
  except FileNotFoundError:
    return None


def _differences(record: dict, config: ml_collections.ConfigDict) -> list[str]:
  """'FIELD THERE -> HERE' for each of `FIELDS` whose value in `record` is not `config`'s."""
  here = fields(config)
  return [f'{name} {record["fields"].get(name)!r} -> {value!r}' for name, value in here.items()
          if record['fields'].get(name) != value]


def begin(config: ml_collections.ConfigDict, output: str) -> None:
  """Starts preparing `config`'s data into `output` (`--output`): writes the record of its
  fields there, without splits. Raises ValueError where `output` holds data prepared for other
  fields, or files that are not prepared data; a preparation of the same fields left unfinished
  is continued."""
  record = _read(output)
  if record is None:
    if epath.Path(output).exists() and any(epath.Path(output).iterdir()):
      raise ValueError(f'--output={output} holds files but no {RECORD}: data is prepared into a '
                       'new or empty directory')
  elif record.get('format') != FORMAT or _differences(record, config):
    raise ValueError(f'--output={output} holds data prepared for other fields '
                     f'({", ".join(_differences(record, config)) or "another format"}): prepare '
                     'into another --output, or delete it first')
  else:
    return
  epath.Path(output).mkdir(parents=True, exist_ok=True)
  atomic.write(os.path.join(output, RECORD),
               json.dumps({'format': FORMAT, 'fields': fields(config)}, indent=1))


def finish(config: ml_collections.ConfigDict, output: str, vocabulary: str,
           splits: dict[str, dict]) -> None:
  """Completes the record of `output`: the vocabulary's `digest` and each split's identity
  (`token_store`), all written into `output` by now."""
  atomic.write(os.path.join(output, RECORD),
               json.dumps({'format': FORMAT, 'fields': fields(config), 'vocabulary': vocabulary,
                           'splits': splits}, indent=1))


def _prepare_command(place: str) -> str:
  return f'python -m transformer_jax.data --config=CONFIG --prepare --output={place}'


def check(config: ml_collections.ConfigDict) -> dict | None:
  """The record of `config.data.prepared` (None where the field is not set), checked against
  `config`: a bucket refused as `buckets.check` refuses it, FileNotFoundError where the place
  holds no complete record, ValueError naming the fields whose values differ, or a
  `data.spm_model` that is not the place's vocabulary. Reads only the record (and the
  `data.spm_model` given)."""
  place = config.data.prepared
  if not place:
    return None
  buckets.check(place, 'config.data.prepared')
  record = _read(place)
  if record is None or 'splits' not in record:
    why = 'holds no prepared data' if record is None else 'was not prepared to the end'
    raise FileNotFoundError(f'config.data.prepared={place} {why} (no complete {RECORD}): '
                            f'prepare it first, {_prepare_command(place)}')
  if record.get('format') != FORMAT:
    raise ValueError(f'config.data.prepared={place} was prepared in format '
                     f'{record.get("format")}, not {FORMAT}: prepare it again, '
                     f'{_prepare_command(place)}')
  differences = _differences(record, config)
  if differences:
    raise ValueError(f'config.data.prepared={place} was prepared for other data '
                     f'({", ".join(differences)}): prepare this config\'s into another place '
                     f'({_prepare_command("PLACE")}), or use the same data fields')
  spm_model = config.data.spm_model
  if spm_model and digest(tokenizer.load(spm_model)) != record['vocabulary']:
    raise ValueError(f'config.data.spm_model={spm_model} is not the vocabulary of '
                     f'config.data.prepared={place}: leave data.spm_model out, or prepare '
                     'with it')
  return record
