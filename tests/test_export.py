"""Export to Hugging Face transformers (`marian.py`, `export.py`): the exported MarianMT model is
checked against transformers' own implementation of it, not against our reading of it.

The slow tests train a small model on Multi30k once for the module and compare what the
exported directory does in transformers, loaded with nothing but `from_pretrained`, with what
`translate` does.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
import safetensors.numpy
import torch
import transformers

from conftest import train_command, train_config
from test_datasets import MULTI30K_DIR, read_lines
from transformer_jax import export
from transformer_jax.data import tokenizer
from transformer_jax.data.tokenizer import PAD_ID
from transformer_jax.decoding import batch_decode, search
from transformer_jax.decoding.translator import Translator
from transformer_jax.model import marian
from transformer_jax.model import model_config
from transformer_jax.model.embeddings import sinusoid
from transformer_jax.model.model_config import TransformerConfig
from transformer_jax.model.transformer import Transformer
from transformer_jax.training import saved_config


def small_config(**changes) -> TransformerConfig:
  return TransformerConfig(**{**dict(vocab_size=40, num_layers=2, d_model=16, d_ff=24,
                                     num_heads=4, d_k=4, d_v=4, max_len=32,
                                     deterministic=True), **changes})


def random_params(cfg: TransformerConfig, seed: int = 0, noise: float = 0.02):
  """Initial parameters with normal(0, noise) added to every leaf, so that the layer-norm gains
  and biases, which start constant and so would pass any permutation, take part."""
  tokens = jnp.ones((1, 4), jnp.int32)
  params = nn.unbox(Transformer(cfg).init({'params': jax.random.key(seed)}, tokens,
                                          tokens)['params'])
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda p: p + noise * rng.standard_normal(p.shape).astype(p.dtype), params)


def load_exported(directory) -> transformers.MarianMTModel:
  """The exported model as anyone would load it, checking that every weight came from the
  file: none missing (left randomly initialised), none unused."""
  model, info = transformers.MarianMTModel.from_pretrained(directory, output_loading_info=True)
  assert not info['missing_keys'] and not info['unexpected_keys'], info
  return model.eval()


def exported(cfg: TransformerConfig, params, directory) -> transformers.MarianMTModel:
  export.write_model(cfg, params, str(directory))
  return load_exported(directory)


def to_marian(ids, vocab_size: int) -> np.ndarray:
  """Our token ids as the export numbers them, Opus-MT's layout: ours less one, <pad> (our 0)
  last."""
  return (np.asarray(ids) - 1) % vocab_size


def to_ours(ids, vocab_size: int) -> np.ndarray:
  """`to_marian`'s inverse: the export's token ids as ours."""
  return (np.asarray(ids, np.int64) + 1) % vocab_size


def their_logits(model, inputs: np.ndarray, decoder_inputs: np.ndarray) -> np.ndarray:
  """The exported model's logits for our token ids, its vocabulary axis in our order."""
  vocab = model.config.vocab_size
  with torch.inference_mode():
    logits = model(input_ids=torch.tensor(to_marian(inputs, vocab)),
                   attention_mask=torch.tensor(inputs != PAD_ID),
                   decoder_input_ids=torch.tensor(to_marian(decoder_inputs, vocab))).logits
  return logits.numpy()[..., to_marian(np.arange(vocab), vocab)]


def our_logits(cfg: TransformerConfig, params, inputs, decoder_inputs) -> np.ndarray:
  return np.asarray(Transformer(cfg).apply({'params': params}, jnp.asarray(inputs),
                                           jnp.asarray(decoder_inputs)))


def padded(sequences: list[list[int]]) -> np.ndarray:
  out = np.full((len(sequences), max(map(len, sequences))), PAD_ID, np.int32)
  for i, sequence in enumerate(sequences):
    out[i, :len(sequence)] = sequence
  return out


def teacher_forced(pairs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
  """(inputs, decoder inputs) of encoded (source, target) pairs: the targets shifted right with
  the start symbol in front."""
  return (padded([list(s) for s, _ in pairs]),
          padded([[PAD_ID] + list(t[:-1]) for _, t in pairs]))


@pytest.fixture(scope='module')
def multi30k_pairs() -> list[tuple[str, str]]:
  """The English-German pairs of Multi30k's test2016."""
  return list(zip(*([line.strip() for line in read_lines(MULTI30K_DIR / f'test_2016_flickr.{lang}.gz')]
                    for lang in ('en', 'de'))))


@pytest.mark.slow
@pytest.mark.parametrize('d_model', [512, 12])
def test_marians_positions_are_the_papers_in_marian_order(d_model):
  """The premise of the conversion, checked on transformers' own table: Marian's sinusoid
  is §3.5's with its dimensions permuted by `marian_order`, not merely alike."""
  model = transformers.MarianMTModel(transformers.MarianConfig(
      d_model=d_model, encoder_attention_heads=4, decoder_attention_heads=4, encoder_layers=1,
      decoder_layers=1, vocab_size=8, pad_token_id=0, decoder_start_token_id=0,
      max_position_embeddings=64))
  theirs = model.model.encoder.embed_positions.weight.detach().numpy()
  np.testing.assert_array_equal(theirs, sinusoid(64, d_model)[:, marian.marian_order(d_model)])
  assert sorted(marian.marian_order(d_model)) == list(range(d_model))


@pytest.mark.slow
def test_random_base_model_gives_our_logits(tmp_path, multi30k_pairs):
  """The base model's shape (N = 6, d_model 512, h = 8, d_ff 2048) with random parameters, on
  Multi30k sentences encoded with a vocabulary learned from them: every logit of every
  position, padding included, to 1e-4, with Marian's layer-norm ε of 1e-5 against our 1e-6."""
  vocabulary = str(tmp_path / 'spm.model')
  tokenizer.train([text for pair in multi30k_pairs for text in pair], vocabulary, 500, 'bpe',
                  10**7, 0)
  processor = tokenizer.load(vocabulary)
  sources = tokenizer.encode(processor, [s for s, _ in multi30k_pairs[:6]])
  targets = tokenizer.encode(processor, [t for _, t in multi30k_pairs[:6]])
  inputs, decoder_inputs = teacher_forced(list(zip(sources, targets)))
  cfg = TransformerConfig(vocab_size=500, deterministic=True)
  params = random_params(cfg)
  model = exported(cfg, params, tmp_path / 'hf')
  assert model.config.num_attention_heads == 8 and model.config.d_model == 512
  ours = our_logits(cfg, params, inputs, decoder_inputs)
  np.testing.assert_allclose(their_logits(model, inputs, decoder_inputs), ours, rtol=0,
                             atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize('changes', [
    {}, {'decoder_start': 'learned'}, {'share_embeddings': False},
    {'share_embeddings': False, 'decoder_start': 'learned'}, {'attention_bias': True},
])
def test_every_exportable_variant_gives_our_logits(tmp_path, rng, changes):
  """Each way the embeddings and the start symbol can be set, and attention biases: the same
  logits, and one matrix in the file exactly when ours serve all three roles."""
  cfg = small_config(**changes)
  params = random_params(cfg, noise=0.1)
  model = exported(cfg, params, tmp_path)
  lengths_in, lengths_out = [7, 3, 5], [6, 6, 2]
  inputs = padded([rng.integers(3, cfg.vocab_size, n).tolist() for n in lengths_in])
  decoder_inputs = padded([[PAD_ID] + rng.integers(3, cfg.vocab_size, n - 1).tolist()
                           for n in lengths_out])
  np.testing.assert_allclose(their_logits(model, inputs, decoder_inputs),
                             our_logits(cfg, params, inputs, decoder_inputs), rtol=0, atol=1e-4)
  stored = safetensors.numpy.load_file(str(tmp_path / 'model.safetensors'))
  tables = [name for name in stored if name.endswith(('embed_tokens.weight', 'shared.weight',
                                                      'lm_head.weight'))]
  one = model.get_input_embeddings().weight.data_ptr() == (
      model.get_output_embeddings().weight.data_ptr())
  assert one == (len(tables) == 1) == (changes.get('decoder_start') == 'learned'
                                       and changes.get('share_embeddings', True))


@pytest.mark.parametrize('changes, field', [
    ({'norm_position': 'pre'}, 'norm_position'), ({'norm_type': 'scale_norm'}, 'norm_type'),
    ({'position_encoding': 'learned'}, 'position_encoding'), ({'fixnorm': True}, 'fixnorm'),
    ({'d_k': 8}, 'd_k'), ({'d_v': 2}, 'd_v'), ({'drophead_rate': 0.1}, 'drophead_rate'),
])
def test_what_marian_cannot_express_is_refused_naming_the_field(changes, field):
  with pytest.raises(ValueError, match=f'config.model.{field}='):
    marian.check_exportable(small_config(**changes))


def test_an_unexportable_run_is_refused_before_anything_is_written(tmp_path):
  workdir = tmp_path / 'run'
  workdir.mkdir()
  saved_config.write_config(train_config(**{'model.norm_position': 'pre'}), str(workdir))
  with pytest.raises(ValueError, match='config.model.norm_position'):
    export.export(str(workdir), str(tmp_path / 'hf'))
  assert sorted(os.listdir(tmp_path)) == ['run']


def test_a_workdir_without_checkpoints_is_refused(tmp_path):
  workdir = tmp_path / 'run'
  workdir.mkdir()
  saved_config.write_config(train_config(), str(workdir))
  with pytest.raises(FileNotFoundError, match='no checkpoint'):
    export.export(str(workdir), str(tmp_path / 'hf'))
  with pytest.raises(FileNotFoundError, match='config.json'):
    export.export(str(tmp_path / 'hf'), str(tmp_path / 'elsewhere'))
  assert sorted(os.listdir(tmp_path)) == ['run']


def test_the_model_card_of_a_run_on_preprocessed_text_says_how_to_prepare_input(tmp_path):
  config = train_config(**{'data.preprocessing': 'lowercase_moses'})
  card = export.model_card(config, str(tmp_path), [100], 12.0)
  assert 'Warning: prepare the input as in training' in card
  assert 'MosesTokenizer(lang="en")' in card and 'text.lower()' in card
  assert 'Warning' not in export.model_card(train_config(), str(tmp_path), [100], 12.0)


def test_the_length_penalty_grows_as_the_papers_at_the_mean_length():
  """transformers' |Y|^β and §6.1's ((5 + |Y|) / 6)^α (written here in float64) change by the
  same factor near the mean length: their logarithms have the same slope there."""
  alpha, mean, step = 0.6, 20.0, 1e-6
  beta = export.length_penalty(alpha, mean)
  paper = (alpha * np.log((5.0 + mean + step) / 6.0) - alpha * np.log((5.0 + mean) / 6.0)) / step
  theirs = (beta * np.log(mean + step) - beta * np.log(mean)) / step
  np.testing.assert_allclose(theirs, paper, rtol=1e-4)
  assert export.length_penalty(alpha, None) == alpha


# --- a small model trained on Multi30k ---------------------------------------------------------

SENTENCES = 50


@pytest.fixture(scope='module')
def run(tmp_path_factory) -> str:
  """200 steps on Multi30k en->de (raw text), checkpoints at 100 and 200: the command, in a
  process of its own with one CPU device (conftest.py; on 8 this run aborted in XLA's
  rendezvous timeout in most tries on 2 cores, tests/README.md); the export needs no mesh.
  Its training batches are packed (one shape, compiled once, with less padding than a
  bucket's); dev and test sentences are decoded in coarse buckets. XLA optimises at its
  default level here, not the suite's 0 (conftest.py): a run of hundreds of steps takes about
  twice as long at 0, and nothing here resumes it or compares it with a run of this
  process."""
  workdir = str(tmp_path_factory.mktemp('run'))
  trained = subprocess.run(train_command({
      'data.dataset': 'multi30k', 'data.manual_dir': str(MULTI30K_DIR),
      'data.vocab_size': 2000,
      'data.max_length': 64, 'data.tokens_per_batch': 2048, 'data.buckets': 'coarse',
      'data.pack_length': 64,
      'model.num_layers': 2, 'model.d_model': 64, 'model.d_ff': 128, 'model.num_heads': 4,
      'model.d_k': 16, 'model.d_v': 16, 'train.warmup_steps': 100, 'train.num_train_steps': 200,
      'train.checkpoint_every_steps': 100, 'train.keep_checkpoints': 2,
      'train.eval_every_steps': 10**6, 'train.num_eval_steps': 1, 'train.eval_bleu': False,
      'train.log_every_steps': 100,
      'decode.average_last': 2}, workdir), capture_output=True, text=True,
      env={**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=1'})
  assert trained.returncode == 0, trained.stderr[-3000:]
  return workdir


@pytest.fixture(scope='module')
def hf_dir(run, tmp_path_factory) -> str:
  """The command, run from a directory other than the repository's."""
  out = str(tmp_path_factory.mktemp('exported') / 'hf')
  subprocess.run([sys.executable, '-m', 'transformer_jax.export', f'--workdir={run}',
                  f'--output={out}'], check=True, cwd=str(tmp_path_factory.mktemp('elsewhere')))
  return out


@pytest.fixture(scope='module')
def capped(run, tmp_path_factory) -> tuple[str, str]:
  """A copy of the run decoding greedily with its outputs capped at their source's length
  bucket (`decode.max_extra_length` 0, beam 1), and its export: the same network as `hf_dir`
  and `ct2_dir` (which keeps no decoding settings), with a model card and generation settings
  of its own. A translation longer than its source's bucket reaches that cap, as about one in
  four of Multi30k's test sentences does with the run's model."""
  workdir = str(tmp_path_factory.mktemp('capped') / 'run')
  shutil.copytree(run, workdir)
  config = saved_config.load_config(workdir)
  config.decode.max_extra_length, config.decode.beam_size = 0, 1
  saved_config.write_config(config, workdir)
  out = str(tmp_path_factory.mktemp('capped_export') / 'hf')
  export.export(workdir, out)
  return workdir, out


@pytest.mark.slow
def test_the_exported_directory_loads_with_nothing_else(hf_dir, run):
  assert {'README.md', 'config.json', 'generation_config.json', 'model.safetensors',
          'source.spm', 'target.spm', 'tokenizer_config.json', 'vocab.json'} <= set(
              os.listdir(hf_dir))
  model = load_exported(hf_dir)
  tokenizer_ = transformers.MarianTokenizer.from_pretrained(hf_dir)
  config = saved_config.load_config(run)
  generation = model.generation_config
  assert (generation.num_beams, generation.max_length) == (
      config.decode.beam_size, config.data.max_length + config.decode.max_extra_length + 1)
  vocab = config.data.vocab_size
  assert generation.early_stopping == 'never' and generation.suppress_tokens == [vocab - 1]
  # Opus-MT's numbering, which CTranslate2's converter assumes: <pad> last, then eos 0.
  assert (model.config.pad_token_id, model.config.decoder_start_token_id,
          model.config.eos_token_id) == (vocab - 1, vocab - 1, 0)
  assert tokenizer_.pad_token_id == vocab - 1 and tokenizer_.eos_token_id == 0
  card = open(os.path.join(hf_dir, 'README.md')).read()
  assert '"num_train_steps": 200' in card and 'checkpoints at steps [100, 200]' in card
  # transformers 4.x's translation pipeline decodes with 4 beams unless told the run's.
  assert f'`num_beams={config.decode.beam_size}`' in card
  assert tokenizer_.model_max_length == config.data.max_length


@pytest.mark.slow
def test_the_exported_model_is_the_averaged_checkpoints(hf_dir, run):
  """The file holds the element-wise mean of the two checkpoints, computed here in float64
  from what orbax saved."""
  saved = [ocp.StandardCheckpointer().restore(os.path.join(run, 'checkpoints', str(step),
                                                           'params'))
           for step in (100, 200)]
  mean = jax.tree.map(lambda a, b: (np.float64(a) + b) / 2, *saved)
  cfg = model_config.from_config(saved_config.load_config(run))
  want = marian.marian_weights(cfg, mean)
  got = safetensors.numpy.load_file(os.path.join(hf_dir, 'model.safetensors'))
  assert got.keys() == want.keys()
  for name in want:
    np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-7, err_msg=name)


@pytest.mark.slow
def test_the_trained_model_gives_our_logits_and_token_ids(hf_dir, run, multi30k_pairs):
  translator = Translator(run, beam_size=1)
  marian_tokenizer = transformers.MarianTokenizer.from_pretrained(hf_dir)
  pairs = multi30k_pairs[:SENTENCES]
  sources = translator.encode([s for s, _ in pairs])
  targets = translator.encode([t for _, t in pairs], side='target')
  vocab = translator.config.data.vocab_size
  assert marian_tokenizer([s for s, _ in pairs])['input_ids'] == [
      to_marian(s, vocab).tolist() for s in sources]
  inputs, decoder_inputs = teacher_forced(list(zip(sources, targets))[:16])
  np.testing.assert_allclose(
      their_logits(load_exported(hf_dir), inputs, decoder_inputs),
      our_logits(translator.model.eval_module.config, translator.params, inputs, decoder_inputs),
      rtol=0, atol=1e-4)


def _generate_like_translate(translator: Translator, hf_dir: str, texts: list[str],
                             beam_size: int, **generation) -> list[list[int]]:
  """The exported model's outputs (as our token ids) with its generation defaults but for the
  beam size (and `generation`'s settings), each sentence capped at the length `translate`
  allows it (its length bucket + max_extra_length), batched by bucket as `translate`
  batches."""
  model = load_exported(hf_dir)
  marian_tokenizer = transformers.MarianTokenizer.from_pretrained(hf_dir)
  sources = translator.encode(texts)
  buckets = np.searchsorted(translator.lengths, [len(s) for s in sources])
  outputs = [None] * len(texts)
  for bucket in set(buckets.tolist()):
    members = np.flatnonzero(buckets == bucket)
    batch = marian_tokenizer([texts[i] for i in members], return_tensors='pt', padding=True)
    cap = int(translator.lengths[bucket]) + translator.config.decode.max_extra_length
    with torch.inference_mode():
      generated = model.generate(**batch, num_beams=beam_size, max_length=cap + 1,
                                 **generation)
    ours = to_ours(generated.numpy(), model.config.vocab_size)
    for i, output in zip(members, ours):
      outputs[i] = batch_decode.strip(output[1:])  # after the start symbol, up to EOS
  return outputs


@pytest.mark.slow
def test_greedy_generate_translates_as_translate(capped, multi30k_pairs):
  """On the run decoding greedily with a short cap (`capped`), so that some outputs run on to
  it: `generate`, capped as `translate` caps each sentence, gives its ids and texts."""
  workdir, model_dir = capped
  texts = [s for s, _ in multi30k_pairs[:SENTENCES]]
  translator = Translator(workdir)
  ours = translator.translate_ids(translator.encode(texts))
  theirs = _generate_like_translate(translator, model_dir, texts, 1)
  assert theirs == ours
  marian_tokenizer = transformers.MarianTokenizer.from_pretrained(model_dir)
  vocab = translator.config.data.vocab_size
  assert (marian_tokenizer.batch_decode([to_marian(ids, vocab).tolist() for ids in theirs],
                                        skip_special_tokens=True) == translator.translate(texts))


def _log_prob(model, source: np.ndarray, output: list[int]) -> float:
  """log P(output, EOS | source), the padding id excluded as in our beam search."""
  target = list(output) + [tokenizer.EOS_ID]
  logits = their_logits(model, source[None], np.array([[PAD_ID] + target[:-1]]))[0]
  logits = logits.astype(np.float64)
  logits[:, PAD_ID] = -np.inf
  log_probs = logits - np.log(np.sum(np.exp(logits - logits.max(-1, keepdims=True)), -1,
                                     keepdims=True)) - logits.max(-1, keepdims=True)
  return float(log_probs[np.arange(len(target)), target].sum())


def _shuffled(texts: list[str]) -> list[str]:
  """Each text with its words in a random order: inputs unlike any training sentence, on which
  a small model's beam search and greedy decoding part."""
  rng = np.random.default_rng(0)
  return [' '.join(rng.permutation(text.split())) for text in texts]


def _caps(translator: Translator, sources: list[np.ndarray]) -> list[int]:
  """The most output tokens `translate` allows each source (EOS included): its length bucket
  + decode.max_extra_length (`batch_decode.decode`)."""
  return [int(translator.lengths[np.searchsorted(translator.lengths, len(s))])
          + translator.config.decode.max_extra_length for s in sources]


@pytest.mark.slow
def test_beam_generate_translates_as_translate_but_for_the_length_penalty(hf_dir, run,
                                                                          multi30k_pairs):
  """The exported length penalty is β = α·L / (5 + L), L the training targets' mean length
  (EOS included), computed here from the raw training text. Beam search with the run's beam
  size, on word-shuffled sentences (inputs unlike any training sentence, where beam search
  parts from greedy decoding most): wherever `generate` parts from `translate`, each search's
  choice is the better one under its own length penalty, so the penalty is what makes the
  difference; at the exported β and at transformers' default 1.0. How many sentences differ is
  the trained model's, and differs from one CPU to another: it is not asserted. An output cut
  off at the length cap is left out: there the searches differ by design (ours returns a
  hypothesis ended by EOS whenever it found one; transformers ranks cut-off ones with them).
  The sentences are of one length bucket, the middle one (most of Multi30k's), so that one
  beam search program compiles: the cap of each bucket is the greedy tests' concern."""
  translator = Translator(run)
  model = load_exported(hf_dir)
  alpha = translator.config.decode.alpha
  beta = model.generation_config.length_penalty
  targets = tokenizer.encode(translator.tokenizer, read_lines(MULTI30K_DIR / 'train.de.gz'))
  mean = np.mean([len(ids) for ids in targets], dtype=np.float64)
  assert beta == pytest.approx(alpha * mean / (5.0 + mean), rel=1e-9)

  shuffled = _shuffled([s for s, _ in multi30k_pairs[:4 * SENTENCES]])
  lengths = translator.lengths
  texts = [text for text, ids in zip(shuffled, translator.encode(shuffled))
           if lengths[0] < len(ids) <= lengths[1]][:SENTENCES]
  assert len(texts) == SENTENCES
  sources = translator.encode(texts)
  caps = _caps(translator, sources)
  ours = translator.translate_ids(sources)
  beam_size = translator.config.decode.beam_size
  for penalty in (beta, 1.0):
    theirs = _generate_like_translate(translator, hf_dir, texts, beam_size,
                                      length_penalty=penalty)
    for i in range(len(texts)):
      if ours[i] == theirs[i] or caps[i] in (len(ours[i]), len(theirs[i])):
        continue
      ours_lp, theirs_lp = (_log_prob(model, sources[i], ids) for ids in (ours[i], theirs[i]))
      ours_n, theirs_n = len(ours[i]) + 1, len(theirs[i]) + 1
      paper = lambda lp, n: lp / float(search.length_penalty(n, alpha))
      assert paper(ours_lp, ours_n) > paper(theirs_lp, theirs_n), (i, penalty)
      assert theirs_lp / theirs_n**penalty > ours_lp / ours_n**penalty, (i, penalty)


def console_script(name: str) -> str:
  """The path of console script `name` as the running interpreter installed it (its scripts
  directory, the `bin/` of a virtual environment), else as found on `PATH`: a virtual
  environment used by its interpreter's path, not activated, has its scripts off `PATH`."""
  for directory in (sysconfig.get_path('scripts'), os.path.dirname(sys.executable)):
    path = shutil.which(name, path=directory)
    if path:
      return path
  path = shutil.which(name)
  assert path, f'{name} is neither beside {sys.executable} nor on PATH'
  return path


def without_interpreter_scripts(path: str) -> str:
  """`path` (a PATH value) without the running interpreter's scripts directories, as when a
  virtual environment's python is run by its path."""
  ours = {os.path.realpath(d) for d in (sysconfig.get_path('scripts'),
                                        os.path.dirname(sys.executable))}
  return os.pathsep.join(d for d in path.split(os.pathsep) if os.path.realpath(d) not in ours)


def test_a_console_script_is_found_beside_the_interpreter_with_it_off_path(monkeypatch):
  """Found where pip put it, whatever PATH holds; and found on PATH when it is not there."""
  monkeypatch.setenv('PATH', without_interpreter_scripts(os.environ.get('PATH', '')))
  pip = console_script('pip')
  assert os.path.dirname(pip) in (sysconfig.get_path('scripts'), os.path.dirname(sys.executable))
  assert console_script('sh') == shutil.which('sh')
  with pytest.raises(AssertionError, match='no-such-script'):
    console_script('no-such-script')


@pytest.fixture(scope='module')
def ct2_dir(hf_dir, tmp_path_factory) -> str:
  """The export converted by CTranslate2's own command, unmodified, float32; run with the
  interpreter's scripts directory off PATH, so that every run checks the case of a virtual
  environment that is not activated."""
  out = str(tmp_path_factory.mktemp('ct2') / 'model')
  env = {**os.environ, 'PATH': without_interpreter_scripts(os.environ.get('PATH', ''))}
  converted = subprocess.run([console_script('ct2-transformers-converter'), '--model', hf_dir,
                              '--output_dir', out], capture_output=True, text=True, env=env)
  assert converted.returncode == 0, converted.stderr[-3000:]
  return out


def _ct2_like_translate(translator: Translator, hf_dir: str, ct2_dir: str, texts: list[str],
                        beam_size: int) -> list[list[int]]:
  """CTranslate2's outputs (as our token ids) for `texts`, tokenized by the export's
  MarianTokenizer as CTranslate2's documentation does it, each capped at the length `translate`
  allows it, with the exported generation settings' length penalty (a greedy run's export has
  none: greedy decoding has no use for one)."""
  import ctranslate2  # pylint: disable=import-outside-toplevel
  marian_tokenizer = transformers.MarianTokenizer.from_pretrained(hf_dir)
  generation = transformers.GenerationConfig.from_pretrained(hf_dir)
  model = ctranslate2.Translator(ct2_dir, device='cpu', compute_type='float32')
  sources = translator.encode(texts)
  caps = _caps(translator, sources)
  vocab = translator.config.data.vocab_size
  outputs = []
  for text, cap in zip(texts, caps):
    tokens = marian_tokenizer.convert_ids_to_tokens(marian_tokenizer(text)['input_ids'])
    result = model.translate_batch([tokens], beam_size=beam_size, max_decoding_length=cap,
                                   length_penalty=generation.length_penalty or 1.0)[0]
    ids = marian_tokenizer.convert_tokens_to_ids(result.hypotheses[0])
    outputs.append([int(i) for i in to_ours(ids, vocab)])
  return outputs


def _card_code(model_dir: str) -> dict[str, str]:
  """The model card's Python lines as a user pastes them: 'cap' (the length cap's function),
  'transformers' and 'CTranslate2' (each section's, after the cap's)."""
  card = open(os.path.join(model_dir, 'README.md'), encoding='utf-8').read()
  use, ct2 = card.split('## Use')[1].split('### CTranslate2')
  cap, transformers_lines = (block.split('```')[0] for block in use.split('```python\n')[1:])
  return {'cap': cap, 'transformers': cap + transformers_lines,
          'CTranslate2': cap + ct2.split('```python\n')[1].split('```')[0]}


def _run_card(model_dir: str, ct2_model: str, section: str, texts: list[str]) -> list[str]:
  scope = {'PATH': model_dir, 'CT2_PATH': ct2_model, 'texts': texts}
  exec(_card_code(model_dir)[section], scope)  # pylint: disable=exec-used
  return scope['outputs']


@pytest.mark.slow
def test_ctranslate2_beam_search_gives_generates_outputs(
    hf_dir, ct2_dir, run, multi30k_pairs):
  """CTranslate2's converter assumes Opus-MT's layout (<pad> last); the export has it. Beam
  search with the exported length penalty (not §6.1's, which CTranslate2 does not have) gives
  `generate`'s outputs (the same penalty, lp / n^β) wherever neither is cut off at the length
  cap (where they rank cut-off hypotheses differently). The model card's CTranslate2 lines,
  pasted, give these outputs. (Greedy decoding, `translate`'s outputs:
  `test_the_model_cards_lines_translate_as_translate_where_outputs_reach_the_cap`.)"""
  texts = [s for s, _ in multi30k_pairs[:64]]
  translator = Translator(run)
  sources = translator.encode(texts)
  beam_size = translator.config.decode.beam_size
  theirs = _ct2_like_translate(translator, hf_dir, ct2_dir, texts, beam_size)
  generated = _generate_like_translate(translator, hf_dir, texts, beam_size)
  caps = _caps(translator, sources)
  kept = [i for i in range(len(texts)) if caps[i] not in (len(theirs[i]), len(generated[i]))]
  assert [theirs[i] for i in kept] == [generated[i] for i in kept]
  assert (_run_card(hf_dir, ct2_dir, 'CTranslate2', texts)
          == [translator.text(ids) for ids in theirs])


@pytest.mark.slow
def test_the_model_cards_lines_translate_as_translate_where_outputs_reach_the_cap(
    capped, ct2_dir, multi30k_pairs):
  """The card's cap is `translate`'s for every source length. CTranslate2, capped as
  `translate` caps, gives `translate`'s greedy output ids on 300 test2016 sentences, about
  one in four of them cut off at the cap; the card's transformers and CTranslate2 lines,
  pasted, give its translations on 16 sentences whose output runs on to the cap and 16 that
  end before it, chosen by `translate`'s own outputs (greedy, so decoding has no length
  penalty to differ in)."""
  workdir, model_dir = capped
  translator = Translator(workdir)
  scope = {}
  exec(_card_code(model_dir)['cap'], scope)  # pylint: disable=exec-used
  max_length = translator.config.data.max_length
  assert [scope['max_output_tokens'](range(n)) for n in range(1, max_length + 1)] == _caps(
      translator, [np.zeros(n) for n in range(1, max_length + 1)])

  texts = [s for s, _ in multi30k_pairs[:300]]
  sources = translator.encode(texts)
  ours = translator.translate_ids(sources)
  reach = [len(o) == cap for o, cap in zip(ours, _caps(translator, sources))]
  chosen = ([i for i in range(len(texts)) if reach[i]][:16]
            + [i for i in range(len(texts)) if not reach[i]][:16])
  assert len(chosen) == 32, f'{sum(reach)} of {len(texts)} outputs reach the cap'
  assert _ct2_like_translate(translator, model_dir, ct2_dir, texts, 1) == ours
  want = [translator.text(ours[i]) for i in chosen]
  for section in ('transformers', 'CTranslate2'):
    assert _run_card(model_dir, ct2_dir, section, [texts[i] for i in chosen]) == want, section


@pytest.mark.slow
@pytest.mark.parametrize('fixture, kind', [('hf_dir', 'a Hugging Face model directory'),
                                            ('ct2_dir', 'a CTranslate2 model directory')])
def test_an_exported_model_passed_as_a_workdir_is_named(fixture, kind, run, tmp_path, request):
  # Both have a config.json, as a workdir has: each command that reads a workdir, and
  # training into one, says what was given instead of failing on its config.
  directory = request.getfixturevalue(fixture)
  with pytest.raises(ValueError, match=f'{directory} is {kind}.*not a training workdir'):
    Translator(directory)
  with pytest.raises(ValueError, match=f'{directory} is {kind}'):
    export.export(directory, str(tmp_path / 'out'))
  with pytest.raises(ValueError, match=f'{directory} is {kind}'):
    saved_config.check_compatible(saved_config.load_config(run), directory)


@pytest.mark.slow
def test_a_workdir_without_its_vocabulary_is_named_before_anything_is_written(run, tmp_path):
  workdir = tmp_path / 'run'
  shutil.copytree(run, workdir)
  os.remove(workdir / tokenizer.MODEL_FILENAME)
  with pytest.raises(FileNotFoundError, match=f'SentencePiece model not found: {workdir}'):
    export.export(str(workdir), str(tmp_path / 'out'))
  assert not os.path.exists(tmp_path / 'out')


@pytest.mark.slow
def test_an_existing_output_is_kept_unless_overwrite_which_spares_runs_and_conversions(
    hf_dir, run, tmp_path):
  out = tmp_path / 'hf'
  out.mkdir()
  (out / 'notes.txt').write_text('mine')
  with pytest.raises(FileExistsError, match='--overwrite'):
    export.export(run, str(out))
  assert os.listdir(out) == ['notes.txt']
  assert export.export(run, str(out), average_last=1, overwrite=True) == [200]
  assert 'notes.txt' not in os.listdir(out) and 'model.safetensors' in os.listdir(out)
  assert sorted(os.listdir(tmp_path)) == ['hf']  # nothing left beside it
  with open(out / 'config.json') as f:
    assert json.load(f)['model_type'] == 'marian'
  before = sorted(os.listdir(run))
  with pytest.raises(FileExistsError, match='is a training workdir'):
    export.export(run, run, overwrite=True)  # --output mistyped as the workdir itself
  assert sorted(os.listdir(run)) == before
  converted = tmp_path / 'ct2'
  converted.mkdir()
  (converted / 'model.bin').write_bytes(b'')
  with pytest.raises(FileExistsError, match='is a CTranslate2 model directory'):
    export.export(run, str(converted), overwrite=True)
  assert os.listdir(converted) == ['model.bin']
