"""Checkpoint averaging, the Translator, and the translate / evaluate / average commands, on a
small model trained once for this module, by the command, on text files."""

import io
import json
import os
import shutil
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
import sacrebleu

from conftest import (metrics_lines, text_of_max_length, train_command, two_process_commands,
                      write_corpus, xla_flags)
from transformer_jax import average, evaluate, translate
from transformer_jax.decoding import scoring
from transformer_jax.data import builtin_grammar, datasets, pipeline, tokenizer
from transformer_jax.decoding import batch_decode, bleu
from transformer_jax.decoding.dev_evaluation import DevEvaluator
from transformer_jax.decoding import translator
from transformer_jax.decoding.translator import Translator
from transformer_jax.model import sharding
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.training import saved_config

# End-to-end: trains models and runs commands (`pytest -m "not slow"` leaves them out).
pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SENTENCES = ['the man sees a dog .', '', 'a small cat sleeps .', 'the dogs run .']


CORPUS_SIZES = (10000, 64, 100)  # training, dev and test pairs of the built-in corpus


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  """The corpus directory and the overrides naming its files by relative paths."""
  directory = tmp_path_factory.mktemp('corpus')
  return directory, write_corpus(directory, CORPUS_SIZES, relative=True)


def _run_overrides(files: dict) -> dict:
  """The module's run (`workdir`) on the corpus files `files` names."""
  return {**files, 'train.warmup_steps': 60, 'train.num_train_steps': 150,
          'train.checkpoint_every_steps': 50, 'train.keep_checkpoints': 3,
          'train.eval_every_steps': 1000, 'train.num_eval_steps': 1, 'train.eval_bleu': False,
          'train.log_every_steps': 50}


@pytest.fixture(scope='module')
def workdir(corpus, tmp_path_factory) -> str:
  """150 steps on the built-in corpus's first pairs (`CORPUS_SIZES`) as text files, trained by
  the command from the corpus's directory with relative paths (dataset='files'); checkpoints
  at 50, 100 and 150. Every command below runs from another directory. Warmup 60 rather than
  SMALL's 10, whose peak rate (0.056 at d_model 32) left this model translating the eight
  sentences of the two-process test alike at step 150 for two seeds of three; with 60 the
  three seeds gave 5 to 8 different translations."""
  directory, files = corpus
  workdir = str(tmp_path_factory.mktemp('run'))
  result = subprocess.run(train_command(_run_overrides(files), workdir), cwd=directory,
                          capture_output=True, check=False)
  assert result.returncode == 0, result.stderr.decode()[-2000:]
  return workdir


def _saved_params(workdir: str, step: int) -> dict:
  return ocp.StandardCheckpointer().restore(
      os.path.join(workdir, 'checkpoints', str(step), 'params'))


def test_averaging_equals_the_numpy_mean(workdir):
  translator = Translator(workdir, average_last=3)
  assert translator.steps == [50, 100, 150]
  expected = jax.tree.map(lambda *leaves: np.mean(np.stack(leaves).astype(np.float64), 0),
                          *[_saved_params(workdir, step) for step in (50, 100, 150)])
  jax.tree.map(lambda got, want: np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7),
               translator.params, expected)
  # Only the last checkpoint: its parameters exactly.
  last = Translator(workdir, average_last=1)
  jax.tree.map(np.testing.assert_array_equal, last.params, _saved_params(workdir, 150))


def test_perplexity_is_the_exp_of_the_mean_nll_per_reference_token(workdir):
  # Table 3's PPL: the independent figure scores each pair alone, in float64, from the logits
  # of its reference (EOS included) after the start symbol, over the pairs whose sides both fit
  # data.max_length tokens.
  translator = Translator(workdir, average_last=1)
  pairs = datasets.load_pairs(translator.config.data, 'test')[:40]
  got = scoring.perplexity(translator, pairs, 'test')[0]
  # Each pair alone, padded to max_length on both sides (padding is masked: test_model.py), so
  # that one program scores every pair.
  max_length = translator.config.data.max_length
  logits_of = jax.jit(lambda params, inputs, decoder_inputs: translator.model.eval_module.apply(
      {'params': params}, inputs, decoder_inputs))
  nll, tokens, kept = 0.0, 0, 0
  for source, target in pairs:
    source_ids, target_ids = tokenizer.encode(translator.tokenizer, [source, target])
    if max(len(source_ids), len(target_ids)) > max_length:
      continue
    inputs, decoder_inputs = np.zeros((2, 1, max_length), np.int32)
    inputs[0, :len(source_ids)] = source_ids
    decoder_inputs[0, 1:len(target_ids)] = target_ids[:-1]
    logits = np.asarray(logits_of(translator.params, inputs, decoder_inputs),
                        np.float64)[0, :len(target_ids)]
    peak = logits.max(-1, keepdims=True)
    log_probs = logits - peak - np.log(np.exp(logits - peak).sum(-1, keepdims=True))
    nll -= log_probs[np.arange(len(target_ids)), target_ids].sum()
    tokens += len(target_ids)
    kept += 1
  assert 0 < kept < len(pairs)  # both kinds of pair are present
  np.testing.assert_allclose(got['perplexity'], np.exp(nll / tokens), rtol=1e-5)
  assert (got['perplexity_pairs'], got['perplexity_pairs_too_long']) == (kept, len(pairs) - kept)
  assert scoring.perplexity(translator, pairs, 'test')[0] == got  # no dropout


def _lowercasing_copy(workdir: str, tmp_path) -> str:
  """A copy of `workdir` whose config.json says data.preprocessing='lowercase_moses': the same
  model, read as a model of lowercased text."""
  moses_workdir = str(tmp_path / 'moses')
  shutil.copytree(workdir, moses_workdir)
  config = saved_config.load_config(moses_workdir)
  config.data.preprocessing = 'lowercase_moses'
  saved_config.write_config(config, moses_workdir)
  return moses_workdir


def test_preprocessing_applies_to_inputs_and_is_undone_on_outputs(workdir, tmp_path):
  """The same model read with data.preprocessing='lowercase_moses': inputs are lowercased and
  tokenized before the vocabulary, and translations Moses-detokenized."""
  moses_workdir = _lowercasing_copy(workdir, tmp_path)
  plain = Translator(workdir, average_last=1)
  moses = Translator(moses_workdir, average_last=1)
  texts = ['The man sees a dog.', 'A small cat sleeps.']
  tokenized = ['the man sees a dog .', 'a small cat sleeps .']
  for got, want in zip(moses.encode(texts), plain.encode(tokenized)):
    np.testing.assert_array_equal(got, want)
  assert moses.translate(texts) == [moses.preprocessing.restore(translation)
                                    for translation in plain.translate(tokenized)]
  # A target side follows the target language's rules: German's tokenizer splits an
  # apostrophe off both words, English's keeps it on the second.
  english, german = plain.encode(["the dog 's ball ."]), plain.encode(["the dog ' s ball ."])
  assert not np.array_equal(english[0], german[0])
  np.testing.assert_array_equal(moses.encode(["The dog's ball."])[0], english[0])
  np.testing.assert_array_equal(moses.encode(["The dog's ball."], side='target')[0], german[0])


def test_saved_average_is_a_workdir_that_translates_like_the_average(workdir, tmp_path):
  output = str(tmp_path / 'averaged')
  result = _run('transformer_jax.average', f'--workdir={workdir}', '--average_last=2',
                f'--output={output}')
  assert result.returncode == 0, result.stderr.decode()[-2000:]
  assert 'the average of checkpoints [100, 150]' in result.stdout.decode()
  in_memory = Translator(workdir, average_last=2)
  saved = Translator(output, average_last=1)
  assert saved.steps == [150]
  jax.tree.map(np.testing.assert_array_equal, saved.params, in_memory.params)
  assert saved.translate(SENTENCES) == in_memory.translate(SENTENCES)
  with pytest.raises(FileExistsError, match='already holds checkpoints'):
    average.save_average(workdir, 2, output)


def test_translations_on_the_mesh_equal_one_device_and_the_uncached_decoder(workdir):
  """The Translator shards over the 8 test devices; one device decoding the same ids, with or
  without the cache, gives the same tokens."""
  translator = Translator(workdir, beam_size=4, alpha=0.6, average_last=1)
  assert translator.model.batch_shards == 8
  sources = translator.encode(SENTENCES)
  outputs = translator.translate_ids(sources)
  assert outputs[1] == []
  params = jax.device_put(translator.params, jax.devices()[0])
  lengths = translator.lengths
  for cached in (True, False):
    run = jax.jit(lambda p, x, cached=cached: batch_decode.decode(
        translator.model.eval_module, p, x, beam_size=4, alpha=0.6, max_extra_length=50,
        cached=cached))
    for ids, output in zip(sources, outputs):
      if len(ids):  # one sentence alone, padded to its bucket as the Translator does
        inputs = np.zeros((1, lengths[np.searchsorted(lengths, len(ids))]), np.int32)
        inputs[0, :len(ids)] = ids
        assert batch_decode.strip(np.asarray(run(params, jnp.asarray(inputs)))[0]) == output


def test_batches_decoded_at_once_on_one_cpu_device_keep_every_output_in_order(workdir,
                                                                              monkeypatch):
  """On one CPU device a Translator decodes a batch per core at once (`batches_at_once`), each
  from its own thread; the outputs are those decoded one batch at a time, source by source."""
  config = saved_config.read_config(workdir)
  model = ShardedModel(config, sharding.make_mesh(config, jax.devices()[:1]))
  assert translator.batches_at_once(model) == len(os.sched_getaffinity(0))
  assert translator.batches_at_once(ShardedModel(config)) == 1  # 8 devices: the batch split
  monkeypatch.setattr(translator, 'batches_at_once', lambda model: 3)
  decoding = Translator(workdir, beam_size=2, average_last=1, batch_size=2, model=model)
  texts = [f'{sentence} {extra}' for extra in ('', 'the cat .', 'a dog runs .')
           for sentence in SENTENCES]
  sources = decoding.encode(texts)
  at_once = decoding.translate_ids(sources)
  monkeypatch.setattr(translator, 'batches_at_once', lambda model: 1)
  assert decoding.translate_ids(sources) == at_once
  assert len(set(map(tuple, at_once))) > 3  # outputs that differ, from six batches or more


def test_long_lines_are_truncated_with_a_warning_naming_the_line(workdir, caplog):
  translator = Translator(workdir, average_last=1)
  long_line = ' '.join(['the man sees a dog'] * 20)
  with caplog.at_level('WARNING'):
    ids = translator.encode(['a dog .', long_line], source='input.txt')
  assert len(ids[1]) == translator.config.data.max_length
  assert [r.getMessage().split(':')[:2] for r in caplog.records] == [['input.txt', '2']]
  with pytest.raises(ValueError, match=r"input.txt:2: \d+ tokens, more than the model's maximum"):
    translator.encode(['a dog .', long_line], source='input.txt', truncate=False)
  # A text of exactly the maximum is kept whole either way.
  [kept] = translator.encode([text_of_max_length(translator)], truncate=False)
  assert len(kept) == translator.config.data.max_length and kept[-1] == tokenizer.EOS_ID
  # Ids not truncated by `encode` are refused, not silently left untranslated.
  max_length = translator.config.data.max_length
  with pytest.raises(ValueError, match=f'source 1 has {max_length + 1} tokens'):
    translator.translate_ids([ids[0], np.full(max_length + 1, 5, np.int32)])


def _run(*args, stdin: bytes = b'') -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, '-m', *args], cwd=REPO, input=stdin,
                        capture_output=True)


def test_translate_command_keeps_every_line_in_order(workdir, tmp_path):
  source = tmp_path / 'input.txt'
  long_line = ' '.join(['the man sees a dog'] * 20)
  source.write_text('\n'.join(SENTENCES + [long_line]) + '\n', encoding='utf-8')
  output = tmp_path / 'output.txt'
  result = _run('transformer_jax.translate', f'--workdir={workdir}', f'--input={source}',
                f'--output={output}', '--beam_size=2', '--average_last=2')
  assert result.returncode == 0, result.stderr.decode()[-2000:]
  lines = output.read_text(encoding='utf-8').split('\n')
  assert lines[-1] == '' and len(lines) - 1 == len(SENTENCES) + 1
  assert lines[1] == ''  # the empty input line
  # Line by line, each input's own translation, as translating it alone gives.
  translator = Translator(workdir, beam_size=2, average_last=2)
  assert lines[:-1] == [translator.translate([line])[0] for line in SENTENCES + [long_line]]
  assert f'{source}:5: ' in result.stderr.decode()  # the long line, named
  # It says what the translations come from: the checkpoints averaged, the beam and α.
  assert (f'translating 5 sentences of {source} with {workdir}: checkpoints '
          f'{translator.steps} averaged, beam 2, alpha {translator.config.decode.alpha}'
          ) in result.stderr.decode()
  # stdin to stdout gives the same translations.
  piped = _run('transformer_jax.translate', f'--workdir={workdir}', '--beam_size=2',
               '--average_last=2', stdin=source.read_bytes())
  assert piped.returncode == 0, piped.stderr.decode()[-2000:]
  assert piped.stdout.decode('utf-8') == output.read_text(encoding='utf-8')


def test_undecodable_input_is_an_error_naming_the_line(workdir):
  result = _run('transformer_jax.translate', f'--workdir={workdir}',
                stdin=b'a dog .\nthe cat \xff sleeps .\n')
  assert result.returncode != 0
  assert '<stdin>:2: not valid UTF-8' in result.stderr.decode()


def test_an_unwritable_output_is_reported_before_anything_is_read_or_decoded(workdir, tmp_path):
  blocker = tmp_path / 'file'
  blocker.write_text('')
  output = blocker / 'translations.txt'  # its directory would be a regular file
  result = _run('transformer_jax.translate', f'--workdir={workdir}', f'--output={output}',
                stdin=b'the cat \xff sleeps .\n')  # undecodable: reading it would fail too
  assert result.returncode != 0
  assert f'{blocker} (--output) is not a writable directory' in result.stderr.decode()
  assert not blocker.read_text()


def test_a_workdir_without_checkpoints_is_an_error(workdir, tmp_path):
  empty = tmp_path / 'empty'
  empty.mkdir()
  result = _run('transformer_jax.translate', f'--workdir={empty}', stdin=b'a dog .\n')
  assert result.returncode != 0
  assert 'config.json not found' in result.stderr.decode()
  (empty / 'config.json').write_bytes(open(os.path.join(workdir, 'config.json'), 'rb').read())
  (empty / 'spm.model').write_bytes(open(os.path.join(workdir, 'spm.model'), 'rb').read())
  result = _run('transformer_jax.translate', f'--workdir={empty}', stdin=b'a dog .\n')
  assert result.returncode != 0
  assert f'no checkpoint in {empty / "checkpoints"}' in result.stderr.decode()


def test_evaluate_command_reports_labelled_figures_and_a_second_evaluation_compiles_nothing(
    workdir, tmp_path):
  """The command run twice on a copy of the run with a compilation cache of its own: the first
  evaluation's figures are labelled, computed from the run's own test files and saved beside
  its hypotheses; the second compiles nothing and scores the same."""
  copy = str(tmp_path / 'run')
  shutil.copytree(workdir, copy)
  config = saved_config.load_config(copy)
  config.train.compilation_cache_dir = str(tmp_path / 'cache')
  saved_config.write_config(config, copy)

  def evaluated() -> dict:
    result = _run('transformer_jax.evaluate', f'--workdir={copy}', '--split=test', '--json',
                  '--beam_size=2', '--average_last=3', '--batch_size=128')
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    return json.loads(result.stdout.decode().strip().splitlines()[-1])

  figures = evaluated()
  pairs = datasets.load_pairs(config.data, 'test')
  # The whole test split, read from the run's test files (from another directory, no data flags).
  assert pairs == builtin_grammar.splits(seed=0)['test'][:CORPUS_SIZES[2]]
  assert figures['sentences'] == len(pairs) == CORPUS_SIZES[2]
  assert figures['checkpoint_steps'] == [50, 100, 150] and figures['beam_size'] == 2
  with open(figures['hypotheses'], encoding='utf-8') as f:
    hypotheses = f.read().split('\n')[:-1]
  assert len(hypotheses) == len(pairs)
  expected = bleu.scores(hypotheses, [t for _, t in pairs], 'de')
  assert figures['bleu_detokenized'] == expected['detokenized']
  assert figures['bleu_tokenized'] == expected['tokenized']
  assert figures['bleu_tokenized_lowercase'] == expected['tokenized_lowercase']
  assert (figures['bleu_tokenized_lowercase_unsplit']
          == expected['tokenized_lowercase_unsplit'])
  assert figures['sacrebleu_signature'].startswith('nrefs:1|case:mixed')
  assert figures['bleu_case'] == 'cased'
  lines = evaluate.report(figures).splitlines()
  assert lines[1].startswith('BLEU (sacreBLEU, detokenized) ') and 'case:mixed' in lines[1]
  assert lines[2].startswith('BLEU (tokenized, compound-split, cased)')
  assert 1.0 < figures['perplexity'] < config.data.vocab_size
  saved = figures['hypotheses'][:-len('.txt')] + '.json'
  with open(saved) as f:
    assert json.load(f) == figures
  # The second: nothing compiled, every program loaded from the cache, the same scores.
  second = evaluated()
  assert figures['programs_compiled'] > 0 and figures['decode_compile_seconds'] > 0
  assert second['programs_compiled'] == 0
  assert second['programs_loaded'] == figures['programs_compiled'] + figures['programs_loaded']
  assert second['bleu_tokenized'] == figures['bleu_tokenized']
  assert 'loaded from the compilation cache' in evaluate.report(second)


def test_a_model_of_lowercased_text_is_scored_lowercased_only(workdir, tmp_path):
  """Its report leads with sacreBLEU's lowercased figure and the tokenized lowercased ones, and
  leaves the cased figures out; the JSON's keys for them hold the lowercased figures."""
  translator = Translator(_lowercasing_copy(workdir, tmp_path), beam_size=1, average_last=1)
  result = scoring.evaluate(translator, 'test')
  with open(result['hypotheses'], encoding='utf-8') as f:
    hypotheses = f.read().split('\n')[:-1]
  references = [t for _, t in datasets.load_pairs(translator.config.data, 'test')]
  assert any(t != t.lower() for t in references)  # the raw references are cased
  lowercased = sacrebleu.corpus_bleu([h.lower() for h in hypotheses],
                                     [[r.lower() for r in references]]).score
  expected = bleu.scores(hypotheses, references, 'de')
  assert result['bleu_case'] == 'lowercased'
  assert result['bleu_detokenized'] == pytest.approx(lowercased)
  assert result['sacrebleu_signature'].startswith('nrefs:1|case:lc')
  assert result['bleu_tokenized'] == expected['tokenized_lowercase']
  assert (result['bleu_tokenized_lowercase'], result['bleu_tokenized_lowercase_unsplit']) == (
      expected['tokenized_lowercase'], expected['tokenized_lowercase_unsplit'])
  lines = evaluate.report(result).splitlines()
  assert lines[1].startswith('BLEU (sacreBLEU, detokenized, lowercased)')
  assert f'{lowercased:.2f}  nrefs:1|case:lc' in lines[1]
  assert lines[2].startswith('BLEU (tokenized, lowercased)')
  assert (f'{expected["tokenized_lowercase"]:.2f}  '
          f'({expected["tokenized_lowercase_unsplit"]:.2f} without') in lines[2]
  assert lines[3].startswith('cased BLEU') and 'not reported' in lines[3]
  assert not any('case:mixed' in line or ', cased)' in line for line in lines)


def test_the_training_evaluator_names_bleu_of_lowercased_text(workdir, tmp_path):
  """During training BLEU is computed on the preprocessed text: of a model of lowercased text,
  it is logged as `bleu_lowercased` too (and stays `bleu` for readers of metrics.jsonl)."""
  for path, lowercased in ((workdir, False), (_lowercasing_copy(workdir, tmp_path), True)):
    translator = Translator(path, beam_size=1, average_last=1)
    data = pipeline.load(translator.config, path, translator.model.batch_shards)
    metrics = DevEvaluator(translator.model, data)(translator.params, 'validation', 1)
    assert 0 <= metrics['bleu'] <= 100
    assert metrics.get('bleu_lowercased') == (metrics['bleu'] if lowercased else None)


@pytest.mark.parametrize('data, expected', [
    (b'', []),
    (b'\n', ['']),
    (b'ein Hund .\n\nzwei Katzen .', ['ein Hund .', '', 'zwei Katzen .']),
    (b'ein Hund .\r\nzwei Katzen .\r\n', ['ein Hund .', 'zwei Katzen .']),  # CRLF
    (b'ein\rHund .\n', ['ein\rHund .']),  # a stray carriage return does not split its line
    (b'a\x85b\n', None),  # not UTF-8 (U+0085, NEL, is b'\xc2\x85')
])
def test_input_lines_end_at_newlines_only(data, expected):
  if expected is None:
    with pytest.raises(ValueError, match='in.txt:1: not valid UTF-8'):
      translate.read_lines(io.BytesIO(data), 'in.txt')
  else:
    assert translate.read_lines(io.BytesIO(data), 'in.txt') == expected


_TWO_PROCESS_TRANSLATION = '''
import json, sys
import jax, numpy as np
process, port, workdir, sentences = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
jax.config.update('jax_cpu_collectives_implementation', 'gloo')
jax.distributed.initialize(f'127.0.0.1:{port}', num_processes=2, process_id=process)
from transformer_jax.decoding.dev_evaluation import DevEvaluator
from transformer_jax.decoding import translator
from transformer_jax.decoding.translator import Translator
from transformer_jax.model import sharding
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.model import sharding
# The data axis alternates between the processes, as a pod's topology-ordered mesh may:
# process 0's devices hold global sequences 0 and 2 of every four.
by_process = [[d for d in jax.devices() if d.process_index == p] for p in (0, 1)]
devices = [device for pair in zip(*by_process) for device in pair]
make_mesh = sharding.make_mesh
sharding.make_mesh = lambda config, devices_=None: make_mesh(config, devices)
translator = Translator(workdir, average_last=1, batch_size=8)
assert [d.process_index for d in translator.model.mesh.devices.flat] == [0, 1, 0, 1]
print(json.dumps(translator.translate(sentences)))
'''


def test_translations_over_two_processes_follow_the_input_order(workdir, tmp_path):
  """Two processes whose devices interleave on the data axis translate the same sentences,
  in the same order, as one process does: sentences whose translations differ, chosen from a
  pool by this process's own, so that any wrong order shows."""
  pool = ['the man sees a dog .', 'a small cat sleeps .', 'the dogs run .', 'the woman eats .',
          'a big dog sleeps .', 'the cats see the man .', 'a child runs .',
          'the man eats a cat .', 'the woman sees the child .', 'a dog eats .',
          'the small child sleeps .', 'the cat sees a big dog .', 'a woman runs .',
          'the men see the cats .', 'a big cat eats the dog .', 'the child sees a woman .']
  translations = dict(zip(Translator(workdir, average_last=1).translate(pool), pool))
  sentences = list(translations.values())[:8]
  expected = list(translations)[:8]
  assert len(sentences) >= 3, translations  # so that a wrong order shows
  script = tmp_path / 'translate.py'
  script.write_text(_TWO_PROCESS_TRANSLATION)
  with socket.socket() as probe:
    probe.bind(('127.0.0.1', 0))
    port = probe.getsockname()[1]
  processes = [subprocess.Popen([sys.executable, str(script), str(i), str(port), workdir,
                                 *sentences], cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env={**os.environ, 'XLA_FLAGS': xla_flags(2)})
               for i in range(2)]
  results = [process.communicate(timeout=600) for process in processes]
  for process, (_, stderr) in zip(processes, results):
    assert process.returncode == 0, stderr[-3000:]
  assert [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in results] == [expected] * 2


def test_bleu_during_training_over_two_processes_is_that_of_one_process(corpus, workdir,
                                                                      tmp_path):
  """The module's run resumed for one step by two processes (two CPU devices each), its dev
  evaluation with BLEU over the whole split (`DevEvaluator` gathers both processes' translations
  and references): the BLEU, loss and number of sentences it logs are those of one process's
  `DevEvaluator` on the checkpoint it saved, each sentence of the split counted once."""
  run = str(tmp_path / 'run')
  shutil.copytree(workdir, run)
  directory, _ = corpus
  overrides = {**_run_overrides(write_corpus(directory, CORPUS_SIZES, write=False)),
               'train.num_train_steps': 151, 'train.eval_bleu': True,
               'train.num_eval_steps': -1}
  env = {**os.environ, 'XLA_FLAGS': xla_flags(2)}
  processes = [subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
               for command in two_process_commands(overrides, run)]
  outputs = [process.communicate(timeout=600)[0] for process in processes]
  for i, (process, output) in enumerate(zip(processes, outputs)):
    assert process.returncode == 0, f'process {i}:\n{output[-3000:]}'
  [logged] = [r for r in metrics_lines(run) if r['split'] == 'validation' and r['step'] == 151]

  translator = Translator(run, average_last=1)
  assert translator.steps == [151]
  data = pipeline.load(translator.config, run, translator.model.batch_shards)
  alone = DevEvaluator(translator.model, data)(translator.params, 'validation')
  assert alone['bleu'] > 0  # a model that translates
  assert logged['bleu'] == pytest.approx(alone['bleu'], abs=1e-6)
  assert logged['nll'] == pytest.approx(alone['nll'], rel=1e-5)
  # Each pair scored once: a process's share missing or doubled would leave BLEU and the
  # per-token loss as they are, but not the count.
  assert logged['sentences'] == alone['sentences'] == len(data.batchers['validation'].split)


def test_a_run_on_text_files_keeps_their_absolute_paths(corpus, workdir):
  """The module's run (trained from the corpus's directory with relative paths) saved its
  files' absolute paths, so that evaluate and translate, above, find its splits (the references
  of test_evaluate_command_reports_labelled_figures_and_a_second_evaluation_compiles_nothing)
  from another directory."""
  directory, _ = corpus
  data = saved_config.load_config(workdir).data
  assert (data.train_files, data.validation_files, data.test_files) == tuple(
      str(directory / f'{split}.{{lang}}') for split in ('train', 'validation', 'test'))
  assert os.path.realpath(REPO) != os.path.realpath(directory)  # where the commands run
