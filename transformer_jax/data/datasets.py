"""Parallel corpora as TFDS datasets, prepared as array_record and read by random access.

  examples = load_split(config.data, 'train')  # len(examples); examples[i] == {'en': .., 'de': ..}
  source, target = source_target(examples[0], config.data)
  pairs = load_pairs(config.data, 'test')       # [(source, target), ...] of a whole split

`config.data.dataset` picks one of:

  'wmt14_translate/de-en', 'wmt14_translate/fr-en': WMT 2014 English-German and English-French
    (§5.1), TFDS's own builder: train = Europarl v7, Common Crawl and News Commentary v9
    (fr-en adds the UN corpus and Giga-FrEn); validation = newstest2013, the dev set of Table 3;
    test = newstest2014. Either direction reads the same dataset (de-en holds 'de' and 'en').
    Preparing it downloads archives from statmt.org, about 1.7 GB for de-en and several GB more
    for fr-en, and unpacks them with TFDS's extractor, which writes through `tf.io.gfile`: WMT
    preparation needs the `tensorflow` package (without it, it fails after the download with
    "ExtractError: ... No module named 'tensorflow'"); reading the prepared dataset does not.
    So install it first, `pip install 'transformer_jax[wmt]'` (the optional extra), and the
    first `load_split` (or training run) with this config prepares the dataset, once.
  'multi30k': Multi30k task 1 (Elliott et al., 2016), image descriptions with translations:
    29000 training, 1014 validation and 1000 test (test_2016_flickr) pairs, en-de or en-fr. The
    gzipped raw files (train.en.gz, val.de.gz, test_2016_flickr.fr.gz, ...) are downloaded from
    https://github.com/multi30k/dataset (data/task1/raw/), or read from `config.data.manual_dir`
    when that is set, offline. No TensorFlow needed.
  'builtin': `builtin_grammar.splits(seed=0)`, generated English-German pairs; no download.
  'files': your own parallel text, any language pair: one sentence a line, a file per language
    and split, plain or gzipped ('.gz'), named by `config.data.train_files`,
    `validation_files` and `test_files` (optional), patterns with '{lang}' where the names
    differ by language, e.g. 'corpus/train.{lang}.gz' for corpus/train.en.gz and
    corpus/train.de.gz. Relative paths are taken from the working directory; training saves
    them absolute in the run's config.json. Prepared by `_write_files_dataset`, streamed.

`config.data.tfds_data_dir` is where prepared datasets are kept (None: TFDS's default,
~/tensorflow_datasets). A dataset is prepared on first use, in the array_record format, whose
`as_data_source` gives random access without TensorFlow. Raw Multi30k files and parallel text
files are checked while preparing, i.e. before training: a missing file, files of different
line counts, text that is not UTF-8 or a corpus with no pairs is an error naming the file (and
line), and nothing of a failed preparation is kept.
"""

import collections.abc
import contextlib
import fcntl
import gzip
import hashlib
import itertools
import os
import shutil
import socket
import threading
import time
import urllib.parse
import zlib

from absl import logging
from array_record.python import array_record_module
from etils import epath
import ml_collections
import requests
import tensorflow_datasets as tfds
from tensorflow_datasets.translate import wmt
# Registers TFDS's WMT14 builder, which `import tensorflow_datasets` alone does not.
import tensorflow_datasets.translate.wmt14  # pylint: disable=unused-import

from transformer_jax.data import builtin_grammar

MULTI30K_URL = 'https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/'
# Split name -> raw file prefix (task 1; the test set is the 2016 Flickr test set).
MULTI30K_FILES = {'train': 'train', 'validation': 'val', 'test': 'test_2016_flickr'}
_MULTI30K_CITATION = """\
@inproceedings{elliott-etal-2016-multi30k,
  title = {Multi30K: Multilingual English-German Image Descriptions},
  author = {Elliott, Desmond and Frank, Stella and Sima'an, Khalil and Specia, Lucia},
  booktitle = {Proceedings of the 5th Workshop on Vision and Language},
  year = {2016},
  pages = {70--74},
}"""


def _lines(path: epath.PathLike) -> collections.abc.Iterator[str]:
  """The lines of a UTF-8 text file, gzipped if its name ends in '.gz', without surrounding
  whitespace (in Multi30k only noise: 40 lines of train.de end in a space), read as a stream.

  Lines end at '\\n' only (str.splitlines would also split at characters such as U+2028 and
  shift one side against the other); a final newline does not start another line.
  """
  path = epath.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f'No such file: {path}')
  number = 0
  try:
    with path.open('rb') as raw, (gzip.open(raw) if path.name.endswith('.gz')
                                  else contextlib.nullcontext(raw)) as stream:
      for number, line in enumerate(stream, start=1):
        yield line.decode('utf-8').strip()
  except (gzip.BadGzipFile, EOFError, zlib.error) as error:
    raise ValueError(f'{path} is not a valid gzip file: {error}') from error
  except UnicodeDecodeError as error:
    raise ValueError(f'{path}, line {number}: not UTF-8 text ({error.reason})') from error


class ParallelText(collections.abc.Iterable):
  """Aligned (source, target) sentences of two UTF-8 files (gzipped: '.gz'), line i with line
  i, streamed: memory does not grow with the corpus.

  A pair with an empty (or whitespace-only) side is skipped, not shifted against the other
  side, with a warning that counts them (`skipped` after iterating). Iterating raises
  FileNotFoundError for a missing file and ValueError for files of different line counts,
  bytes that are not UTF-8 (naming the file and line) or no pairs; the last two only once the
  files are read to the end.
  """

  def __init__(self, source_path: epath.PathLike, target_path: epath.PathLike):
    self.source_path, self.target_path = source_path, target_path
    self.skipped = 0

  def __iter__(self) -> collections.abc.Iterator[tuple[str, str]]:
    source_lines = target_lines = kept = 0
    for source, target in itertools.zip_longest(_lines(self.source_path),
                                                _lines(self.target_path)):
      source_lines += source is not None
      target_lines += target is not None
      if source and target:
        kept += 1
        yield source, target
    if source_lines != target_lines:
      raise ValueError(f'Parallel files differ in length: {self.source_path} has '
                       f'{source_lines} lines, {self.target_path} has {target_lines}')
    if not kept:
      raise ValueError(f'No sentence pairs in {self.source_path} and {self.target_path}: every '
                       'line pair has an empty side')
    self.skipped = source_lines - kept
    if self.skipped:
      logging.warning('Skipped %d of %d line pairs with an empty side in %s and %s',
                      self.skipped, source_lines, self.source_path, self.target_path)


def read_parallel(source_path: epath.PathLike,
                  target_path: epath.PathLike) -> tuple[list[tuple[str, str]], int]:
  """`ParallelText`'s pairs as a list, and the number of line pairs skipped."""
  text = ParallelText(source_path, target_path)
  pairs = list(text)
  return pairs, text.skipped


def _keyed_examples(pairs: collections.abc.Iterable[tuple[str, str]],
                    languages: tuple[str, str]):
  """(key, {source_language: source, target_language: target}) in corpus order."""
  for key, pair in enumerate(pairs):
    yield key, dict(zip(languages, pair))


def _text_features(languages: tuple[str, str]) -> tfds.features.FeaturesDict:
  return tfds.features.FeaturesDict({language: tfds.features.Text() for language in languages})


class Multi30k(tfds.core.GeneratorBasedBuilder):
  """Multi30k task 1: English image descriptions with German and French translations."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Task 1 raw files; test = test_2016_flickr.'}
  BUILDER_CONFIGS = [
      tfds.core.BuilderConfig(name='en-de', description='English-German'),
      tfds.core.BuilderConfig(name='en-fr', description='English-French'),
  ]
  MANUAL_DOWNLOAD_INSTRUCTIONS = f"""\
  Optional, to prepare offline: put the task 1 raw files from {MULTI30K_URL}
  ({{train,val,test_2016_flickr}}.{{en,de,fr}}.gz) into the manual directory."""

  @property
  def _languages(self) -> tuple[str, str]:
    return tuple(self.builder_config.name.split('-'))

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self, description='Multi30k task 1 (Elliott et al., 2016).',
        features=_text_features(self._languages), supervised_keys=self._languages,
        homepage='https://github.com/multi30k/dataset', citation=_MULTI30K_CITATION,
        disable_shuffling=True)  # Example i is line i of the raw files (without skipped pairs).

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    names = {split: [f'{prefix}.{language}.gz' for language in self._languages]
             for split, prefix in MULTI30K_FILES.items()}
    try:
      manual_dir = dl_manager.manual_dir
      paths = {split: [manual_dir / name for name in pair] for split, pair in names.items()}
    except AssertionError:  # TFDS's way to say no manual directory, or an empty one.
      why = unreachable(MULTI30K_URL)
      if why:  # said now: TFDS retries a failed download for minutes
        raise requests.exceptions.ConnectionError(why)
      paths = dl_manager.download(
          {split: [MULTI30K_URL + name for name in pair] for split, pair in names.items()})
    return {split: self._generate_examples(*pair) for split, pair in paths.items()}

  def _generate_examples(self, source_path: epath.Path, target_path: epath.Path):
    return _keyed_examples(ParallelText(source_path, target_path), self._languages)


class BuiltinTranslation(tfds.core.GeneratorBasedBuilder):
  """The corpus of `builtin_grammar.splits(seed=0)`, generated: nothing to download.

  Its examples are fixed by the grammar: a change to the grammar must bump VERSION, or a
  dataset prepared before it would still be read.
  """

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'builtin_grammar.splits(seed=0): 40000 / 1000 / 1000 pairs.'}

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self, description='English-German pairs from a small bilingual grammar.',
        features=_text_features(('en', 'de')), supervised_keys=('en', 'de'),
        disable_shuffling=True)

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    del dl_manager  # Nothing to download.
    return {split: self._generate_examples(pairs)
            for split, pairs in builtin_grammar.splits(seed=0).items()}

  def _generate_examples(self, pairs: list[tuple[str, str]]):
    return _keyed_examples(pairs, ('en', 'de'))


FILES_FIELDS = {'train': 'train_files', 'validation': 'validation_files', 'test': 'test_files'}
FILES_VERSION = '1.0.0'


def files_of(data_config: ml_collections.ConfigDict, split: str) -> tuple[str, str]:
  """The absolute (source, target) paths of `split` in a 'files' dataset: its pattern
  (config.data.train_files, ...) with '{lang}' replaced by each language."""
  field = FILES_FIELDS[split]
  pattern = data_config[field]
  if not pattern:
    raise ValueError(f'config.data.{field} is not set: config.data.dataset=\'files\' has no '
                     f'{split} split')
  return tuple(os.path.abspath(os.path.expanduser(pattern.replace('{lang}', language)))
               for language in (data_config.source_lang, data_config.target_lang))


def with_absolute_files(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """`config` with config.data.train_files, ... made absolute (a copy), so that the run's
  config.json names the files wherever `evaluate` reads it."""
  config = config.copy_and_resolve_references()
  for field in FILES_FIELDS.values():
    if config.data[field]:
      config.data[field] = os.path.abspath(os.path.expanduser(config.data[field]))
  return config


def _files_name(data_config: ml_collections.ConfigDict, split: str) -> str:
  """'<source>-<target>-<digest>', the digest of the split's two files' absolute paths, sizes
  and modification times: a changed file is another dataset, prepared (and encoded) anew, and
  an unchanged one is read where it was. Each split is a dataset of its own, so evaluating the
  test split needs only the test files."""
  languages = (data_config.source_lang, data_config.target_lang)
  identity = hashlib.sha256(repr((languages, split)).encode())
  for path in files_of(data_config, split):
    # A missing file joins the digest as missing; preparing then names it.
    stat = os.stat(path) if os.path.isfile(path) else None
    identity.update(repr((path, stat and stat.st_size, stat and stat.st_mtime_ns)).encode())
  return f'{"-".join(languages)}-{identity.hexdigest()[:16]}'


def _write_files_dataset(data_config: ml_collections.ConfigDict, split: str,
                         directory: epath.Path) -> None:
  """Prepares a split of a 'files' dataset: its pairs streamed from its text files
  (`ParallelText`) into one array_record file, then TFDS's metadata (`write_metadata`), all in
  a temporary directory renamed to `directory` once complete, removed on an error (and, left by
  a killed process, by the next preparation beside it).

  TFDS's own generator-based preparation holds a split's examples in memory up to 1 GB and
  then spills them through TensorFlow: a corpus of WMT's size would need both.
  """
  for left in directory.parent.glob('.incomplete.*'):
    shutil.rmtree(left, ignore_errors=True)
  languages = (data_config.source_lang, data_config.target_lang)
  features = _text_features(languages)
  temporary = directory.parent / f'.incomplete.{directory.name}.{os.getpid()}'
  temporary.mkdir(parents=True)
  try:
    path = temporary / f'parallel_files-{split}.array_record-00000-of-00001'
    writer = array_record_module.ArrayRecordWriter(str(path), 'group_size:1')
    count = 0
    try:
      for pair in ParallelText(*files_of(data_config, split)):
        writer.write(features.serialize_example(dict(zip(languages, pair))))
        count += 1
    finally:
      writer.close()
    tfds.folder_dataset.write_metadata(
        data_dir=temporary, features=features, version=FILES_VERSION, check_data=False,
        split_infos=[tfds.core.SplitInfo(name=split, shard_lengths=[count],
                                         num_bytes=os.path.getsize(path))],
        supervised_keys=languages,
        description='Parallel text files: ' + ', '.join(files_of(data_config, split)))
    temporary.rename(directory)
  finally:
    shutil.rmtree(temporary, ignore_errors=True)


def _files_builder(data_config: ml_collections.ConfigDict,
                   split: str) -> tfds.core.DatasetBuilder:
  """The prepared split of a 'files' dataset, prepared first if missing (one process at a
  time), in tfds_data_dir/parallel_files/<_files_name>/1.0.0."""
  _check_languages(data_config, [data_config.source_lang, data_config.target_lang])
  root = epath.Path(data_config.tfds_data_dir or tfds.core.constants.DATA_DIR)
  directory = root / 'parallel_files' / _files_name(data_config, split) / FILES_VERSION
  if not (directory / 'dataset_info.json').exists():
    with _locked(directory.parent):
      if not (directory / 'dataset_info.json').exists():
        _write_files_dataset(data_config, split, directory)
  return tfds.builder_from_directory(directory)


def dataset_name(data_config: ml_collections.ConfigDict, split: str) -> str:
  """What `load_split(data_config, split)` reads, as a name that changes when its content may
  have: TFDS's name, config and version, or for a 'files' split the digest of its files. Reads
  no data (only the files' sizes and times)."""
  if data_config.dataset == 'files':
    return f'parallel_files/{_files_name(data_config, split)}/{FILES_VERSION}'
  return _builder(data_config).info.full_name


def _decoded(example: dict) -> dict[str, str]:
  return {language: text.decode('utf-8') if isinstance(text, bytes) else text
          for language, text in example.items()}


class _Examples(collections.abc.Sequence):
  """A TFDS data source with examples as {language: str}: its Text features come as bytes."""

  # Iteration reads this many examples per `__getitems__` call: one by one, each example is a
  # call of its own into the data source.
  _CHUNK = 1000

  def __init__(self, data_source: collections.abc.Sequence):
    self._data_source = data_source

  def __len__(self) -> int:
    return len(self._data_source)

  def __getitem__(self, index):
    positions = range(len(self))[index]  # IndexError out of range, as a sequence must.
    if isinstance(positions, range):
      return [_decoded(example) for example in self._data_source.__getitems__(positions)]
    return _decoded(self._data_source[positions])

  def __iter__(self):
    for start in range(0, len(self), self._CHUNK):
      yield from self[start:start + self._CHUNK]

  def take(self, indices: collections.abc.Sequence[int]) -> list[dict[str, str]]:
    """The examples at `indices`, read together."""
    return [_decoded(example) for example in self._data_source.__getitems__(list(indices))]


def _multi30k_name(source_lang: str, target_lang: str) -> str:
  """English first: en->de and de->en both read 'multi30k/en-de'."""
  other, field = ((target_lang, 'target_lang') if source_lang == 'en'
                  else (source_lang, 'source_lang'))
  configs = [config.name for config in Multi30k.BUILDER_CONFIGS]
  if f'en-{other}' not in configs:
    raise ValueError(f'config.data.{field}={other!r}: multi30k pairs English with one of '
                     f'{", ".join(config[3:] for config in configs)} (configs {configs})')
  return f'multi30k/en-{other}'


def _builder(data_config: ml_collections.ConfigDict) -> tfds.core.DatasetBuilder:
  """The TFDS builder of `data_config.dataset`, its languages checked."""
  dataset, data_dir = data_config.dataset, data_config.tfds_data_dir
  if dataset in ('wmt14_translate/de-en', 'wmt14_translate/fr-en'):
    name = dataset
  elif dataset == 'multi30k':
    name = _multi30k_name(data_config.source_lang, data_config.target_lang)
  elif dataset == 'builtin':
    name = 'builtin_translation'
  else:
    raise ValueError(f"config.data.dataset={dataset!r}: expected 'wmt14_translate/de-en', "
                     "'wmt14_translate/fr-en', 'multi30k', 'builtin' or 'files'")
  builder = tfds.builder(name, data_dir=data_dir)
  _check_languages(data_config, list(builder.info.features.keys()))
  if isinstance(builder, wmt.WmtTranslate):
    _ask_hosts_first(builder)
  return builder


def splits(data_config: ml_collections.ConfigDict) -> tuple[str, ...]:
  """The splits the dataset has: 'train', 'validation' and 'test', except a 'files' dataset
  without config.data.test_files."""
  if data_config.dataset == 'files' and not data_config.test_files:
    return ('train', 'validation')
  return ('train', 'validation', 'test')


def _check_languages(data_config: ml_collections.ConfigDict, languages: list[str]) -> None:
  for field in ('source_lang', 'target_lang'):
    if data_config[field] not in languages:
      raise ValueError(f'config.data.{field}={data_config[field]!r} is not a language of '
                       f'{data_config.dataset!r}, which has {sorted(languages)}')


# How long the hosts a dataset downloads from are given to answer before its download: a machine
# offline is told so in seconds, where TFDS retries a failed download for minutes (209 s for
# Multi30k, 206 s for WMT14 when the host did not resolve).
REACH_SECONDS = 5.0


def unreachable(*urls: str) -> str | None:
  """Why the hosts of `urls` cannot be reached ('HOST cannot be reached: WHY' for each that
  does not resolve, refuses or does not answer within REACH_SECONDS, all asked at once), or
  None when every one accepts a connection."""
  hosts = {}
  for url in urls:
    parts = urllib.parse.urlsplit(url)
    hosts[parts.hostname] = parts.port or (443 if parts.scheme == 'https' else 80)
  why = {}

  def connect(host, port):  # resolving has no timeout of its own: a thread waits for it
    try:
      socket.create_connection((host, port), timeout=REACH_SECONDS).close()
      why[host] = None
    except OSError as e:
      why[host] = f'{type(e).__name__}: {e}'

  threads = [threading.Thread(target=connect, args=item, daemon=True) for item in hosts.items()]
  for thread in threads:
    thread.start()
  deadline = time.monotonic() + REACH_SECONDS
  for thread in threads:
    thread.join(max(0.0, deadline - time.monotonic()))
  said = [f'{host} cannot be reached: '
          + (why[host] if host in why else f'no answer within {REACH_SECONDS:g} s')
          for host in hosts if why.get(host, '') is not None]
  return '; '.join(said) or None


def _ask_hosts_first(builder: wmt.WmtTranslate) -> None:
  """TFDS's WMT builder downloads its archives in its download step (`_split_generators`),
  retrying a host that does not answer for minutes: that step now asks the hosts first
  (`unreachable`) and fails at once, naming them, where one cannot be reached."""
  download_step = builder._split_generators  # pylint: disable=protected-access

  def asking_first(dl_manager):
    why = unreachable(*_wmt_urls(builder))
    if why:
      raise requests.exceptions.ConnectionError(why)
    return download_step(dl_manager)

  builder._split_generators = asking_first  # pylint: disable=protected-access


def _wmt_urls(builder: tfds.core.DatasetBuilder) -> list[str]:
  """The addresses TFDS's WMT builder downloads its subsets from (statmt.org's archives)."""
  source = builder.builder_config.language_pair[0]
  return [url for names in builder.subsets.values() for name in names
          for url in wmt.DATASET_MAP[name].get_url(source)]


def _download_config(manual_dir: str | None) -> tfds.download.DownloadConfig:
  """A missing or empty manual directory would let Multi30k download instead: refuse it."""
  if manual_dir is not None and not (epath.Path(manual_dir).is_dir()
                                     and any(epath.Path(manual_dir).iterdir())):
    raise FileNotFoundError(f'config.data.manual_dir={manual_dir!r} is not a directory with '
                            'files in it')
  return tfds.download.DownloadConfig(manual_dir=manual_dir)


@contextlib.contextmanager
def _locked(directory: epath.PathLike) -> collections.abc.Iterator[None]:
  """Holds an exclusive lock in `directory`, beside a dataset's directory, while it is prepared.

  Two processes that prepare the same dataset at once (two sweep runners on a fresh machine)
  would both write it, and the second to finish fails: TFDS cannot rename its directory onto
  the first one's. With the lock, the second waits and then reuses the first one's dataset.
  Only local directories are locked (fcntl locks mean nothing on gs:// and other remote paths).
  """
  directory = str(directory)
  if '://' in directory:
    yield
    return
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, '.prepare.lock'), 'w', encoding='utf-8') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    yield  # closing the file releases the lock


# What to do where a dataset cannot be downloaded: Multi30k's raw files can be given; WMT14 is
# prepared elsewhere (its download is about 1.7 GB) or replaced by a copy of its text.
_PREPARE_ELSEWHERE = (
    'Prepare it where the network is reachable and set config.data.tfds_data_dir, or give '
    'config.data.manual_dir (a directory of its raw files)',
    'Prepare it where the network is reachable (python -m transformer_jax.data --inspect '
    '--config=CONFIG --config.data.tfds_data_dir=DIR) and set config.data.tfds_data_dir to a '
    "copy of DIR, or give a copy of its text as config.data.dataset='files' (docs/data.md)")


def load_split(data_config: ml_collections.ConfigDict,
               split: str) -> collections.abc.Sequence[dict[str, str]]:
  """The examples of `split` ('train', 'validation', 'test') of `data_config.dataset`.

  Prepares the dataset first if `data_config.tfds_data_dir` does not hold it yet (one process
  at a time; others wait for it). Each example is {language: sentence} with both languages;
  `source_target` orders them for translation.
  """
  if split not in splits(data_config):
    if data_config.dataset == 'files' and split in FILES_FIELDS:
      files_of(data_config, split)  # raises, naming the field that is not set
    raise ValueError(f'no split {split!r}: config.data.dataset={data_config.dataset!r} has '
                     f'{splits(data_config)}')
  if data_config.dataset == 'files':
    return _Examples(_files_builder(data_config, split).as_data_source(split=split))
  builder = _builder(data_config)
  if not builder.is_prepared():
    with _locked(os.path.dirname(str(builder.data_dir))):
      # A builder made before another process finished preparing does not know its splits.
      builder = _builder(data_config)
      try:
        builder.download_and_prepare(file_format='array_record',
                                     download_config=_download_config(data_config.manual_dir))
      except requests.exceptions.RequestException as e:
        raise RuntimeError(
            f'{builder.name} is not prepared in {builder.data_dir} and downloading it failed '
            f'({type(e).__name__}: {e}). {_PREPARE_ELSEWHERE[data_config.dataset != "multi30k"]}'
        ) from e
  return _Examples(builder.as_data_source(split=split))


def source_target(example: dict[str, str],
                  data_config: ml_collections.ConfigDict) -> tuple[str, str]:
  """(source sentence, target sentence) of one example for the configured direction."""
  return example[data_config.source_lang], example[data_config.target_lang]


def load_pairs(data_config: ml_collections.ConfigDict, split: str) -> list[tuple[str, str]]:
  """Every (source sentence, target sentence) of `split`, in order."""
  return [source_target(example, data_config) for example in load_split(data_config, split)]
