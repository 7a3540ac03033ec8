"""Incremental decoding against the full forward pass, and the search algorithms against
exhaustive search over hand-built scoring tables."""

import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import init_params, random_tokens, tiny_config
from transformer_jax.data.tokenizer import EOS_ID, PAD_ID
from transformer_jax.decoding import batch_decode, search, translator
from transformer_jax.model import attention
from transformer_jax.model.attention import CACHE_BLOCK
from transformer_jax.model.transformer import Transformer

MODEL_OPTIONS = [
    {},
    {'norm_position': 'pre'},
    {'position_encoding': 'learned'},
    {'share_embeddings': False, 'num_heads': 1},
]


@pytest.mark.slow
@pytest.mark.parametrize('options', MODEL_OPTIONS)
def test_cached_logits_equal_the_full_forward_pass(rng, options):
  """Feeding a target one token at a time through the cache gives, at every position, the
  logits that the uncached decoder computes over the whole target at once. The target spans
  three of the blocks that a step reads the cache by (attention.CACHE_BLOCK), the last one
  partial, one compiled step reading each."""
  cfg = tiny_config(max_len=48, **options)
  module, params = Transformer(cfg), init_params(cfg)
  inputs = jnp.asarray(random_tokens(rng, (3, 6), cfg.vocab_size, lengths=[6, 3, 1]))
  target_length, cache_length = 2 * CACHE_BLOCK + 7, 2 * CACHE_BLOCK + 12
  decoder_inputs = jnp.asarray(
      random_tokens(rng, (3, target_length), cfg.vocab_size)).at[:, 0].set(PAD_ID)
  source_mask = inputs != PAD_ID
  encoded = module.apply({'params': params}, inputs, source_mask, method='encode')
  full = module.apply({'params': params}, encoded, source_mask, decoder_inputs, method='decode')

  _, variables = module.apply({'params': params}, encoded, source_mask, cache_length,
                             method='init_cache', mutable=['cache'])
  step = jax.jit(lambda cache, tokens, i: module.apply(
      {'params': params, 'cache': cache}, encoded, source_mask, tokens, incremental=True,
      position=i, method='decode', mutable=['cache']))
  cache, stepwise = variables['cache'], []
  for i in range(target_length):
    logits, variables = step(cache, decoder_inputs[:, i:i + 1], i)
    cache = variables['cache']
    stepwise.append(logits[:, 0])
  np.testing.assert_allclose(np.stack(stepwise, 1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_cache_holds_the_encoder_keys_once_per_sentence_and_a_copy_per_hypothesis():
  cfg = tiny_config(max_len=24)
  module, params = Transformer(cfg), init_params(cfg)
  inputs = jnp.ones((2, 5), jnp.int32)
  encoded = module.apply({'params': params}, inputs, inputs != 0, method='encode')
  length = CACHE_BLOCK + 4
  _, variables = module.apply({'params': params}, encoded, inputs != 0, length, 3,
                             method='init_cache', mutable=['cache'])
  decoder = variables['cache']['decoder']
  layer = decoder['layer_0']
  # Keys heads-major and transposed, values heads-major: the layouts of eq. (1)'s products.
  assert layer['encoder_attention']['key'].shape == (2, cfg.num_heads, cfg.d_k, 5)
  assert layer['encoder_attention']['value'].shape == (2, cfg.num_heads, 5, cfg.d_v)
  # Self-attention: blocks of CACHE_BLOCK positions (the last one shorter), 3 copies each.
  assert [k.shape for k in layer['self_attention']['key']] == [
      (2, cfg.num_heads, cfg.d_k, CACHE_BLOCK * 3), (2, cfg.num_heads, cfg.d_k, 4 * 3)]
  assert [v.shape for v in layer['self_attention']['value']] == [
      (2, cfg.num_heads, CACHE_BLOCK * 3, cfg.d_v), (2, cfg.num_heads, 4 * 3, cfg.d_v)]
  assert not any(np.any(k) for k in layer['self_attention']['key'])
  # Every hypothesis starts in its own copy.
  np.testing.assert_array_equal(decoder['history'],
                                np.broadcast_to([[0], [1], [2]] * 2, (6, length)))


@pytest.mark.slow
@pytest.mark.parametrize('options', MODEL_OPTIONS[:2])
def test_reordered_hypotheses_score_their_own_history(rng, options):
  """Beam search reorders hypotheses (a sentence's hypotheses take over each other's
  histories, some twice) while the cache stays where it was written: at every step, each
  hypothesis's logits are those of the full decoder over its own token history."""
  cfg = tiny_config(max_len=24, **options)
  module, params = Transformer(cfg), init_params(cfg)
  copies, length = 3, CACHE_BLOCK + 4
  inputs = jnp.asarray(random_tokens(rng, (2, 6), cfg.vocab_size, lengths=[6, 2]))
  source_mask = inputs != PAD_ID
  encoded = module.apply({'params': params}, inputs, source_mask, method='encode')
  scorer = batch_decode.model_scorer(module, params, encoded, source_mask, length, copies)
  step, reorder = jax.jit(scorer.step), jax.jit(scorer.reorder)
  repeated = (jnp.repeat(encoded, copies, 0), jnp.repeat(source_mask, copies, 0))
  # The full decoder over each hypothesis's history, padded to `length` (one compiled shape; the
  # causal mask keeps the padding out of position i).
  full_decoder = jax.jit(lambda history: module.apply(
      {'params': params}, *repeated, history, method='decode'))
  state, history = scorer.state, np.zeros((2 * copies, 0), np.int32)
  for i in range(length):
    tokens = (np.zeros(2 * copies, np.int32) if i == 0
              else random_tokens(rng, (2 * copies,), cfg.vocab_size))
    history = np.concatenate([history, tokens[:, None]], 1)
    logits, state = step(state, jnp.asarray(tokens), i)
    full = full_decoder(np.pad(history, ((0, 0), (0, length - history.shape[1]))))
    expected = full[:, i].at[:, PAD_ID].set(-jnp.inf)
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)
    # Each hypothesis takes the history of a random hypothesis of its own sentence.
    parents = (rng.integers(0, copies, 2 * copies)
               + np.repeat([0, copies], copies)).astype(np.int32)
    state, history = reorder(state, jnp.asarray(parents)), history[parents]


def _without_eos(monkeypatch) -> None:
  """The decoders never end a hypothesis (EOS's logit -inf, as PAD_ID's): every output runs on
  to the length cap, through every block of the cached decoder's loops, by construction rather
  than by how random parameters happen to score EOS."""
  next_logits = batch_decode._next_logits  # pylint: disable=protected-access
  monkeypatch.setattr(batch_decode, '_next_logits',
                      lambda logits: next_logits(logits.at[:, EOS_ID].set(-jnp.inf)))


def _greedy_by_full_forward(module, params, inputs, length, ends=True):
  """Reference: at every step re-run the whole decoder and take the argmax (numpy loop); with
  `ends` False, EOS is never taken."""
  source_mask = inputs != PAD_ID
  encoded = module.apply({'params': params}, inputs, source_mask, method='encode')
  full_decoder = jax.jit(lambda decoder_inputs: module.apply(
      {'params': params}, encoded, source_mask, decoder_inputs, method='decode'))
  outputs = np.zeros((inputs.shape[0], length), np.int32)
  done = ~np.asarray(source_mask).any(1)
  for i in range(length):
    decoder_inputs = np.pad(outputs[:, :-1], ((0, 0), (1, 0)))
    logits = np.array(full_decoder(decoder_inputs)[:, i])
    logits[:, PAD_ID] = -np.inf
    if not ends:
      logits[:, EOS_ID] = -np.inf
    outputs[:, i] = np.where(done, PAD_ID, logits.argmax(-1))
    done |= outputs[:, i] == EOS_ID
  return outputs


def _lively_params(cfg, seed=0):
  """Random parameters whose greedy outputs vary from step to step: target embeddings small
  next to the positions, the output projection large, so consecutive tokens differ."""
  params = init_params(cfg, seed)
  embeddings = dict(params['embeddings'])
  embeddings['target'] = embeddings['target'] * 0.01
  embeddings['output'] = embeddings['output'] * 30.0
  return {**params, 'embeddings': embeddings}


@pytest.mark.slow
@pytest.mark.parametrize('backend', ['cpu', 'gpu'])
def test_cached_greedy_equals_argmax_of_the_full_forward_pass(rng, monkeypatch, backend):
  """Over every block that the cached decoder reads the cache by: without EOS, every output
  runs on to the cap. (EOS ending a hypothesis: the hand-built scorers' tests below.) Off a CPU
  (the backend's name stood in for here) the cache is one block, read whole with no branch."""
  _without_eos(monkeypatch)
  monkeypatch.setattr(jax, 'default_backend', lambda: backend)
  assert len(attention.cache_blocks(6 + 2 * CACHE_BLOCK)) == (3 if backend == 'cpu' else 1)
  cfg = tiny_config(share_embeddings=False, max_len=40)
  module, params = Transformer(cfg), _lively_params(cfg)
  inputs = jnp.asarray(random_tokens(rng, (4, 6), cfg.vocab_size, lengths=[6, 4, 2, 0]))
  outputs = jax.jit(lambda p, x: batch_decode.decode(
      module, p, x, beam_size=1, alpha=0.6, max_extra_length=2 * CACHE_BLOCK))(params, inputs)
  expected = _greedy_by_full_forward(module, params, inputs, 6 + 2 * CACHE_BLOCK, ends=False)
  np.testing.assert_array_equal(outputs, expected)
  assert [len(batch_decode.strip(o)) for o in expected] == [6 + 2 * CACHE_BLOCK] * 3 + [0]
  assert not np.any(outputs[3])  # an empty input gives an empty output


@pytest.mark.slow
@pytest.mark.parametrize('beam_size', [1, 4])
def test_cached_and_uncached_translations_agree(rng, monkeypatch, beam_size):
  """Over every block of the cached decoder's loops: without EOS, every output runs on to the
  cap."""
  _without_eos(monkeypatch)
  cfg = tiny_config(share_embeddings=False, max_len=40)
  module, params = Transformer(cfg), _lively_params(cfg, seed=3)
  inputs = jnp.asarray(random_tokens(rng, (3, 5), cfg.vocab_size, lengths=[5, 2, 4]))
  run = {cached: jax.jit(lambda p, x, cached=cached: batch_decode.decode(
      module, p, x, beam_size=beam_size, alpha=0.6, max_extra_length=2 * CACHE_BLOCK,
      cached=cached)) for cached in (True, False)}
  outputs = run[True](params, inputs)
  assert [len(batch_decode.strip(o)) for o in np.asarray(outputs)] == [5 + 2 * CACHE_BLOCK] * 3
  np.testing.assert_array_equal(outputs, run[False](params, inputs))


# Hand-built scorers: the next token's probabilities depend only on the previous token.
# Vocabulary: 0 = PAD (never produced), 1 = EOS, 2 = a, 3 = b.
A, B = 2, 3


def _ending_scorer(scorer: search.Scorer, ends: np.ndarray, copies: int) -> search.Scorer:
  """`scorer` with every hypothesis of sentence s forced to EOS at position ends[s], the ends kept
  with the sentences (`Scorer.keep`): sentences that end when the test says."""

  def step(state, tokens, i):
    inner, hypothesis_ends = state
    logits, inner = scorer.step(inner, tokens, i)
    return jnp.where((i == hypothesis_ends)[:, None] & (jnp.arange(logits.shape[1]) == EOS_ID),
                     1e9, logits), (inner, hypothesis_ends)

  return search.Scorer((scorer.state, jnp.repeat(jnp.asarray(ends, jnp.int32), copies)), step,
                       lambda state, parents: (scorer.reorder(state[0], parents),
                                               state[1][parents]),
                       lambda state, kept: (scorer.keep(state[0], kept),
                                            state[1].reshape(-1, copies)[kept].reshape(-1)))


@pytest.mark.slow
@pytest.mark.parametrize('cached', [True, False])
@pytest.mark.parametrize('beam_size', [1, 3])
def test_sentences_dropped_as_they_end_translate_as_when_kept(rng, cached, beam_size):
  """A search that drops its finished sentences (the batch narrowed as they end) returns, for
  every sentence, what the search keeping all of them to the end returns; the sentences end at
  steps set by construction, the last ones in the cache's second block."""
  cfg = tiny_config(share_embeddings=False, max_len=40)
  module, params = Transformer(cfg), _lively_params(cfg, seed=5)
  batch, length = 16, 5 + 2 * CACHE_BLOCK
  ends = np.array([1, 2, 3, 2, 9, 4, 1, 5, 3, CACHE_BLOCK + 3, 6, 2, 7, 1, 2, 8])
  inputs = jnp.asarray(random_tokens(rng, (batch, 5), cfg.vocab_size,
                                     lengths=rng.integers(1, 6, batch)))
  source_mask = inputs != PAD_ID

  @functools.partial(jax.jit, static_argnames='widths')
  def run(params, widths):
    encoded = module.apply({'params': params}, inputs, source_mask, method='encode')
    scorer = _ending_scorer(batch_decode.model_scorer(module, params, encoded, source_mask,
                                                      length, beam_size, cached),
                            ends, beam_size)
    active = jnp.ones(batch, bool)
    if beam_size == 1:
      return search.greedy(scorer, length, active, widths)
    return search.beam_search(scorer, beam_size, 0.6, length, active, widths)[0]

  kept, dropped = run(params, widths=()), run(params, widths=(16, 8, 4))
  np.testing.assert_array_equal(dropped, kept)
  assert [len(batch_decode.strip(o)) for o in np.asarray(kept)] == list(ends)


def test_a_search_narrows_its_batch_once_to_a_size_that_splits_over_the_shards():
  """`batch_decode.widths`: the batch, then 1/NARROWING of it where that is a whole number of
  sentences, a multiple of the batch shards, at least FEWEST_SENTENCES; nothing more."""
  narrowing, fewest = batch_decode.NARROWING, batch_decode.FEWEST_SENTENCES
  assert batch_decode.widths(narrowing * fewest) == (narrowing * fewest, fewest)
  assert batch_decode.widths(narrowing * fewest // 2) == (narrowing * fewest // 2,)
  assert batch_decode.widths(narrowing * fewest + 1) == (narrowing * fewest + 1,)
  for sentences, shards in itertools.product((1, 3, 8, 24, 64, 96, 128), (1, 2, 8, 32)):
    if sentences % shards:
      continue
    result = batch_decode.widths(sentences, shards)
    narrow = sentences // narrowing
    fits = narrow * narrowing == sentences and narrow % shards == 0 and narrow >= fewest
    assert result == ((sentences, narrow) if fits else (sentences,))


def _table(rows: dict) -> np.ndarray:
  """{previous token: {next token: probability}} -> (4, 4) log-probabilities."""
  table = np.full((4, 4), -np.inf, np.float32)
  for previous, probabilities in rows.items():
    for token, p in probabilities.items():
      table[previous, token] = np.log(p)
  return table


def _table_scorer(table: np.ndarray, hypotheses: int, copies: int = 1) -> search.Scorer:
  """Scores from a table indexed by the previous token, or with tables (sentences, 4, 4) one a
  sentence of `copies` hypotheses."""
  tables = jnp.asarray(table).reshape(-1, *table.shape[-2:])
  # The state: each hypothesis's table.
  sentence = jnp.arange(hypotheses, dtype=jnp.int32) // copies % tables.shape[0]
  return search.Scorer(state=sentence,
                       step=lambda state, tokens, i: (tables[state, tokens], state),
                       reorder=lambda state, parents: state[parents],
                       keep=lambda state, kept: state.reshape(-1, copies)[kept].reshape(-1))


@functools.partial(jax.jit, static_argnames=('beam_size', 'length', 'batch'))
def _beam_program(table, alpha, *, beam_size, length, batch):
  """The table and α are arguments, not constants: one program for every table of a shape."""
  scorer = _table_scorer(table, batch * beam_size)
  return search.beam_search(scorer, beam_size, alpha, length, jnp.ones(batch, bool))


@functools.partial(jax.jit, static_argnames=('length', 'batch'))
def _greedy_program(table, *, length, batch):
  return search.greedy(_table_scorer(table, batch), length, jnp.ones(batch, bool))


def _beam(table, beam_size, alpha, length, batch=1):
  tokens, scores = _beam_program(jnp.asarray(table), jnp.float32(alpha), beam_size=beam_size,
                                 length=length, batch=batch)
  return np.asarray(tokens), np.asarray(scores)


def _exhaustive(table, alpha, length):
  """The finished sequence (ending in EOS, at most `length` tokens) of the highest
  log-probability / ((5 + len) / 6)^alpha, by enumerating them all in float64."""
  best, best_score = None, -np.inf
  table = table.astype(np.float64)
  for n in range(1, length + 1):
    for body in itertools.product(range(1, table.shape[1]), repeat=n - 1):
      if EOS_ID in body:
        continue
      sequence = (*body, EOS_ID)
      previous = (PAD_ID, *body)
      log_prob = sum(table[p, t] for p, t in zip(previous, sequence))
      score = log_prob / ((5.0 + n) / 6.0) ** alpha
      if score > best_score:
        best, best_score = sequence, score
  return best, best_score


def _as_sequence(tokens: np.ndarray) -> tuple:
  ids = tokens.tolist()
  return tuple(ids[:ids.index(EOS_ID) + 1]) if EOS_ID in ids else tuple(ids)


def test_beam_search_finds_what_greedy_misses():
  # Greedy takes a (0.6) and then EOS (0.4): 0.24. "b EOS" has 0.4 * 0.95 = 0.38.
  table = _table({PAD_ID: {A: 0.6, B: 0.4}, A: {EOS_ID: 0.4, A: 0.3, B: 0.3},
                  B: {EOS_ID: 0.95, A: 0.025, B: 0.025}})
  greedy = _greedy_program(jnp.asarray(table), length=5, batch=1)
  assert _as_sequence(np.asarray(greedy[0])) == (A, EOS_ID)
  tokens, score = _beam(table, beam_size=2, alpha=0.0, length=5)
  assert _as_sequence(tokens[0]) == (B, EOS_ID)
  np.testing.assert_allclose(score[0], np.log(0.38), rtol=1e-6)


def test_search_stops_once_no_live_hypothesis_can_overtake_the_best_finished_one():
  # "EOS" finishes at the first step, scoring log 0.9. After "a" only "a" can follow, so
  # nothing else ever finishes, and the live hypothesis scores at most log 0.1 / lp(20) =
  # -0.98, below -0.11: the search must stop after that step, not run to `length` waiting
  # for k finished hypotheses.
  table = _table({PAD_ID: {EOS_ID: 0.9, A: 0.1}, A: {A: 1.0}})
  scorer, positions = _table_scorer(table, 2), []

  def step(state, tokens, i):
    jax.debug.callback(lambda i: positions.append(int(i)), i)
    return scorer.step(state, tokens, i)

  counted = search.Scorer(scorer.state, step, scorer.reorder)
  tokens, score = jax.jit(lambda: search.beam_search(counted, 2, 0.6, 20, jnp.ones(1, bool)))()
  jax.effects_barrier()
  assert _as_sequence(np.asarray(tokens[0])) == (EOS_ID,)
  np.testing.assert_allclose(score[0], np.log(0.9), rtol=1e-6)
  assert positions == [0]


@pytest.mark.parametrize('alpha, expected', [(0.0, (EOS_ID,)), (0.6, (EOS_ID,)),
                                             (0.9, (EOS_ID,)), (0.95, (A, EOS_ID)),
                                             (2.0, (A, EOS_ID))])
def test_length_penalty_changes_the_choice_where_the_formula_says(alpha, expected):
  # "EOS": log 0.5 / lp(1) with lp(1) = 1; "a EOS": log 0.45 / lp(2) with lp(2) = (7/6)^α.
  # The longer one wins when (7/6)^α > log 0.45 / log 0.5, i.e. α > 0.924.
  table = _table({PAD_ID: {EOS_ID: 0.5, A: 0.5}, A: {EOS_ID: 0.9, A: 0.1}})
  threshold = np.log(np.log(0.45) / np.log(0.5)) / np.log(7 / 6)
  assert (alpha > threshold) == (expected == (A, EOS_ID))
  tokens, _ = _beam(table, beam_size=2, alpha=alpha, length=4)
  assert _as_sequence(tokens[0]) == expected


@pytest.mark.parametrize('seed', range(6))
@pytest.mark.parametrize('alpha', [0.0, 0.6, 1.5])
def test_wide_beam_equals_exhaustive_search(seed, alpha):
  """A beam wide enough to hold every live hypothesis returns the exact optimum: early
  termination never cuts off a better one."""
  rng = np.random.default_rng(seed)
  table = np.log(rng.dirichlet(np.full(3, 0.7), size=4)).astype(np.float32)
  table = np.concatenate([np.full((4, 1), -np.inf, np.float32), table], 1)  # no PAD output
  length = 5
  tokens, score = _beam(table, beam_size=16, alpha=alpha, length=length)
  best, best_score = _exhaustive(table, alpha, length)
  assert _as_sequence(tokens[0]) == best
  np.testing.assert_allclose(score[0], best_score, rtol=1e-5)


@pytest.mark.parametrize('seed', range(4))
def test_beam_of_one_is_greedy_without_length_penalty(seed):
  rng = np.random.default_rng(seed)
  batch, length = 3, 7
  table = np.log(rng.dirichlet(np.full(5, 0.5), size=6)).astype(np.float32)
  table = np.concatenate([np.full((6, 1), -np.inf, np.float32), table], 1)
  greedy = _greedy_program(jnp.asarray(table), length=length, batch=batch)
  tokens, _ = _beam(table, beam_size=1, alpha=0.0, length=length, batch=batch)
  np.testing.assert_array_equal(tokens, greedy)


@pytest.mark.parametrize('seed', range(3))
@pytest.mark.parametrize('beam_size', [1, 2])
def test_dropping_sentences_as_they_end_changes_no_result(seed, beam_size):
  """Sentences of their own tables (ending at different steps) searched with the batch halved
  as they end get the tokens and scores they get searched to the end; the steps run on fewer
  hypotheses once half are done."""
  rng = np.random.default_rng(seed)
  batch, length = 8, 12
  tables = np.log(rng.dirichlet(np.full(3, 0.4), size=(batch, 4))).astype(np.float32)
  tables = np.concatenate([np.full((batch, 4, 1), -np.inf, np.float32), tables], 2)
  hypotheses_per_step = []

  def search_with(widths):
    scorer = _table_scorer(tables, batch * beam_size, copies=beam_size)

    def step(state, tokens, i):
      jax.debug.callback(lambda i, n=tokens.shape[0]: hypotheses_per_step.append(n), i)
      return scorer.step(state, tokens, i)

    counted = dataclasses.replace(scorer, step=step)
    active = jnp.asarray(np.arange(batch) != 3)  # one empty source
    if beam_size == 1:
      return jax.jit(lambda: (search.greedy(counted, length, active, widths), 0))()
    return jax.jit(lambda: search.beam_search(counted, beam_size, 0.6, length, active,
                                              widths))()

  kept = search_with(())
  jax.effects_barrier()
  steps, hypotheses_per_step[:] = len(hypotheses_per_step), []
  dropped = search_with((8, 4, 2))
  jax.effects_barrier()
  for got, want in zip(dropped, kept):
    np.testing.assert_array_equal(got, want)
  assert len(hypotheses_per_step) == steps and hypotheses_per_step[0] == batch * beam_size
  assert hypotheses_per_step[-1] < batch * beam_size
  assert hypotheses_per_step == sorted(hypotheses_per_step)[::-1]


def test_sentences_are_searched_independently():
  """Each sentence of a batch gets what it gets alone; an inactive one gets nothing."""
  rng = np.random.default_rng(7)
  table = np.log(rng.dirichlet(np.full(3, 0.7), size=4)).astype(np.float32)
  table = np.concatenate([np.full((4, 1), -np.inf, np.float32), table], 1)
  alone, _ = _beam(table, beam_size=3, alpha=0.6, length=6)
  scorer = _table_scorer(table, 3 * 3)
  tokens, _ = jax.jit(lambda: search.beam_search(
      scorer, 3, 0.6, 6, jnp.array([True, False, True])))()
  np.testing.assert_array_equal(tokens[0], alone[0])
  np.testing.assert_array_equal(tokens[2], alone[0])
  assert not np.any(tokens[1])


@pytest.mark.parametrize('seed', range(3))
def test_first_argmax_is_argmax_ties_included(seed):
  rng = np.random.default_rng(seed)
  scores = rng.integers(-3, 3, size=(64, 50)).astype(np.float32)  # many ties
  scores[0] = -np.inf
  scores[1, 7] = np.inf
  np.testing.assert_array_equal(search.first_argmax(jnp.asarray(scores)),
                                np.argmax(scores, axis=-1))


def test_first_argmax_refuses_rows_longer_than_float32_counts():
  """Its indices are float32: a row of more than 2^24 scores is an error, not a wrong index
  (traced only, nothing allocated)."""
  with pytest.raises(ValueError, match='2\\^24'):
    jax.eval_shape(search.first_argmax, jax.ShapeDtypeStruct((1, 2 ** 24 + 1), jnp.float32))
  assert jax.eval_shape(search.first_argmax,
                        jax.ShapeDtypeStruct((3, 2 ** 24), jnp.float32)).shape == (3,)


@pytest.mark.parametrize('length', [9, 97, 1000, 4096])
@pytest.mark.parametrize('n', [1, 8])
def test_top_k_by_blocks_is_lax_top_k_ties_included(length, n):
  """`search.top_k` against `lax.top_k`: the same values and indices, with many ties (a few
  integer values), rows of -inf, the largest at either end; rows cut into blocks that divide
  them (9, 1000, 4096) or padded (97)."""
  rng = np.random.default_rng(length + n)
  x = rng.integers(-3, 3, size=(3, 5, length)).astype(np.float32)
  x[0, 0] = -np.inf
  x[0, 1, -1] = x[0, 2, 0] = np.inf
  values, indices = search.top_k(jnp.asarray(x), n)
  want_values, want_indices = jax.lax.top_k(jnp.asarray(x), n)
  np.testing.assert_array_equal(values, want_values)
  np.testing.assert_array_equal(indices, want_indices)


@pytest.mark.parametrize('seed', range(3))
def test_the_top_of_each_beam_first_is_the_top_of_all_ties_included(seed):
  """`top_of_beams` against `lax.top_k` over every beam's candidates at once, each live
  log-probability plus `jax.nn.log_softmax` of its logits: the same values, and the same beams
  and tokens wherever the value is finite, also where many candidates tie (integer logits).
  Beams at -inf (as at the first step) make candidates at -inf, which the search never
  returns: the order of those may differ."""
  rng = np.random.default_rng(seed)
  batch, k, vocab = 5, 4, 97
  logits = rng.integers(-4, 2, size=(batch * k, vocab)).astype(np.float32)
  logits[:, 0] = -np.inf  # never produced, as PAD_ID
  live = rng.integers(-3, 0, size=(batch, k)).astype(np.float32)
  live[0, 1:] = -np.inf  # one live beam
  live[1] = -np.inf
  candidates = live[:, :, None] + jax.nn.log_softmax(jnp.asarray(logits)).reshape(batch, k, vocab)
  for n in (2 * k, vocab + 3):  # more than a beam holds: every beam's whole vocabulary
    values, beam, token = search.top_of_beams(jnp.asarray(live), jnp.asarray(logits), n)
    want_values, flat = jax.lax.top_k(candidates.reshape(batch, k * vocab), n)
    np.testing.assert_array_equal(values, want_values)
    finite = np.isfinite(want_values)
    assert finite[2:].all() and finite[0].sum() == min(n, vocab - 1)  # one beam's all
    np.testing.assert_array_equal(np.asarray(beam)[finite], (flat // vocab)[finite])
    np.testing.assert_array_equal(np.asarray(token)[finite], (flat % vocab)[finite])


def test_a_buckets_sources_go_to_its_batches_by_length():
  """`translator.decode_batches`: every non-empty source once, in the shortest bucket that
  holds it, at most `most` a batch, the longest bucket first; within a bucket, by length (equal
  lengths in input order), so that a batch's sources, and so its outputs, are alike in length."""
  rng = np.random.default_rng(0)
  lengths, most = [8, 16, 24], 5
  sizes = rng.integers(0, 25, size=60)
  batches = list(translator.decode_batches(lengths, sizes, most))
  placed = [i for _, chunk in batches for i in chunk]
  assert sorted(placed) == [i for i in range(len(sizes)) if sizes[i]]
  assert [length for length, _ in batches] == sorted((length for length, _ in batches),
                                                     reverse=True)
  for length, chunk in batches:
    assert 0 < len(chunk) <= most
    assert all(lengths[np.searchsorted(lengths, sizes[i])] == length for i in chunk)
  for length in lengths:
    members = [i for bucket, chunk in batches if bucket == length for i in chunk]
    assert members == sorted(members, key=lambda i: (sizes[i], i))


@pytest.mark.parametrize('shards, most', [(1, 64), (2, 64), (3, 48), (8, 64)])
def test_a_last_batch_runs_few_padding_sentences_in_few_shapes(shards, most):
  """`translator.sentences_for`: every batch holds its sentences, splits over the batch shards,
  is at most the full batch and less than twice what it needs (the shards' own minimum apart);
  the sizes over every count are few."""
  sizes = {translator.sentences_for(n, most, shards) for n in range(1, most + 1)}
  for n in range(1, most + 1):
    size = translator.sentences_for(n, most, shards)
    assert n <= size <= most and size % shards == 0
    assert size < 2 * n or size == shards
  assert len(sizes) <= int(np.log2(most / shards)) + 2
