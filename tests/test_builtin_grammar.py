"""The built-in English→German grammar: determinism, distinctness, splits and German grammar."""

import hashlib
import itertools
import pathlib
import random
import re
import subprocess
import sys

import pytest

from transformer_jax.data import builtin_grammar as grammar
from transformer_jax.data.builtin_grammar import (Clause, NounPhrase, Subject, conjugate,
                                                  english_noun_phrase, english_verb,
                                                  german_clause, german_noun_phrase,
                                                  german_prepositional_phrase)

NOUN = {noun.de: noun for noun in grammar.NOUNS}
ADJECTIVE = {adjective.de: adjective for adjective in grammar.ADJECTIVES}
VERB = {verb.de: verb for verb in grammar.TRANSITIVE_VERBS + grammar.INTRANSITIVE_VERBS}
THE, A, THE_PLURAL = grammar.ARTICLES
NUMBER = {number.de: number for number in grammar.NUMBERS}
ALL_VERB_FORMS = {
    conjugate(verb.de, person)
    for verb in grammar.TRANSITIVE_VERBS + grammar.INTRANSITIVE_VERBS + grammar.THAT_VERBS
    + (grammar.COPULA,) for person in range(6)}


def phrase(determiner, adjective, noun):
  return NounPhrase(determiner, ADJECTIVE[adjective] if adjective else None, NOUN[noun])


def test_same_seed_same_pairs_other_seed_other_pairs():
  assert grammar.generate_pairs(3, 500) == grammar.generate_pairs(3, 500)
  assert grammar.generate_pairs(3, 500) != grammar.generate_pairs(4, 500)
  assert grammar.generate_pairs(3, 200) == grammar.generate_pairs(3, 500)[:200]


def test_pairs_do_not_depend_on_hash_randomisation():
  script = ('import hashlib; from transformer_jax.data.builtin_grammar import generate_pairs; '
            'print(hashlib.sha256(repr(generate_pairs(5, 2000)).encode()).hexdigest())')
  expected = hashlib.sha256(repr(grammar.generate_pairs(5, 2000)).encode()).hexdigest()
  for hash_seed in ('1', '2'):
    result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                            check=True, cwd=pathlib.Path(__file__).parents[1],
                            env={'PYTHONHASHSEED': hash_seed, 'PYTHONPATH': '.'})
    assert result.stdout.strip() == expected


def test_pairs_are_distinct_in_both_languages():
  pairs = grammar.generate_pairs(0, 5000)
  assert len(pairs) == 5000
  assert len({en for en, _ in pairs}) == len({de for _, de in pairs}) == 5000


def test_sentences_are_capitalised_and_end_with_one_period():
  for en, de in grammar.generate_pairs(1, 2000):
    for sentence in (en, de):
      assert sentence[0].isupper() and sentence.endswith('.') and sentence.count('.') == 1


def test_each_sentence_has_one_translation():
  """The grammar is unambiguous: sampling with repeats, an English sentence always comes with
  the same German one and vice versa (which is what makes `capacity()` a count of pairs)."""
  rng = random.Random(0)
  pairs = {grammar.sample_pair(rng) for _ in range(20000)}
  assert len(pairs) < 20000  # Short sentences do repeat, so the check below has teeth.
  assert len({en for en, _ in pairs}) == len({de for _, de in pairs}) == len(pairs)


def test_noun_phrases_are_unambiguous():
  phrases = [NounPhrase(*parts) for parts in itertools.product(
      grammar.ARTICLES + grammar.NUMBERS, (None,) + grammar.ADJECTIVES, grammar.NOUNS)]
  assert len({english_noun_phrase(p) for p in phrases}) == len(phrases)
  for case in ('nom', 'acc', 'dat'):
    assert len({german_noun_phrase(p, case) for p in phrases}) == len(phrases)


def test_capacity_and_too_many_pairs():
  assert grammar.capacity() >= 60000
  with pytest.raises(ValueError, match='distinct sentence pairs'):
    grammar.generate_pairs(0, grammar.capacity() + 1)
  with pytest.raises(ValueError):
    grammar.generate_pairs(0, -1)
  assert grammar.generate_pairs(0, 0) == []


def test_default_splits_have_their_sizes_and_share_no_sentence():
  data = grammar.splits()
  assert {name: len(pairs) for name, pairs in data.items()} == {
      'train': 40000, 'validation': 1000, 'test': 1000}
  for side in (0, 1):
    sentences = [{pair[side] for pair in pairs} for pairs in data.values()]
    assert sum(map(len, sentences)) == 42000  # Distinct within and across the splits.


def test_held_out_splits_do_not_depend_on_train_size():
  small, large = grammar.splits(7, (100, 30, 20)), grammar.splits(7, (500, 30, 20))
  assert small['validation'] == large['validation'] and small['test'] == large['test']
  assert small['train'] == large['train'][:100]
  with pytest.raises(ValueError):
    grammar.splits(0, (10, -1, 5))


@pytest.mark.parametrize('determiner, adjective, noun, case, expected', [
    (THE, 'klein', 'Hund', 'acc', 'den kleinen Hund'),
    (THE, 'klein', 'Hund', 'nom', 'der kleine Hund'),
    (THE, 'neu', 'Buch', 'acc', 'das neue Buch'),
    (THE, 'groß', 'Tisch', 'dat', 'dem großen Tisch'),
    (A, 'klein', 'Haus', 'nom', 'ein kleines Haus'),
    (A, 'rot', 'Ball', 'acc', 'einen roten Ball'),
    (A, 'alt', 'Mann', 'nom', 'ein alter Mann'),
    (A, 'alt', 'Frau', 'nom', 'eine alte Frau'),
    (A, 'jung', 'Kind', 'dat', 'einem jungen Kind'),
    (A, None, 'Tasse', 'dat', 'einer Tasse'),
    (THE_PLURAL, 'klein', 'Katze', 'acc', 'die kleinen Katzen'),
    (THE_PLURAL, None, 'Apfel', 'dat', 'den Äpfeln'),
    (THE_PLURAL, None, 'Auto', 'dat', 'den Autos'),
    (NUMBER['drei'], 'klein', 'Hund', 'nom', 'drei kleine Hunde'),
    (NUMBER['drei'], 'klein', 'Hund', 'acc', 'drei kleine Hunde'),
    (NUMBER['drei'], 'klein', 'Hund', 'dat', 'drei kleinen Hunden'),
    (NUMBER['zwei'], None, 'Mädchen', 'dat', 'zwei Mädchen'),
])
def test_german_noun_phrase_agreement(determiner, adjective, noun, case, expected):
  assert german_noun_phrase(phrase(determiner, adjective, noun), case) == expected


@pytest.mark.parametrize('preposition, determiner, adjective, noun, expected', [
    ('mit', THE, 'alt', 'Frau', 'mit der alten Frau'),
    ('neben', A, 'schön', 'Pferd', 'neben einem schönen Pferd'),
    ('in', THE, 'alt', 'Haus', 'im alten Haus'),
    ('an', THE, None, 'Tisch', 'am Tisch'),
    ('in', THE_PLURAL, None, 'Haus', 'in den Häusern'),
    ('auf', NUMBER['vier'], 'rot', 'Stuhl', 'auf vier roten Stühlen'),
])
def test_german_prepositions_take_the_dative(preposition, determiner, adjective, noun, expected):
  assert german_prepositional_phrase(preposition, phrase(determiner, adjective, noun)) == expected


@pytest.mark.parametrize('determiner, adjective, noun, expected', [
    (A, 'klein', 'Hund', 'a small dog'),
    (A, 'alt', 'Haus', 'an old house'),
    (A, None, 'Apfel', 'an apple'),
    (A, 'rot', 'Ei', 'a red egg'),
    (THE_PLURAL, None, 'Maus', 'the mice'),
    (NUMBER['drei'], 'klein', 'Hund', 'three small dogs'),
    (NUMBER['zwei'], None, 'Messer', 'two knives'),
])
def test_english_noun_phrase(determiner, adjective, noun, expected):
  assert english_noun_phrase(phrase(determiner, adjective, noun)) == expected


def test_english_articles_in_sampled_sentences():
  for en, _ in grammar.generate_pairs(2, 3000):
    assert not re.search(r'\b[Aa] [aeiou]', en) and not re.search(r'\b[Aa]n [^aeiou]', en)


@pytest.mark.parametrize('infinitive, person, expected', [
    ('sehen', 0, 'sehe'), ('sehen', 1, 'siehst'), ('sehen', 2, 'sieht'), ('sehen', 3, 'sehen'),
    ('sehen', 4, 'seht'), ('sehen', 5, 'sehen'), ('lesen', 1, 'liest'), ('essen', 2, 'isst'),
    ('nehmen', 1, 'nimmst'), ('schlafen', 2, 'schläft'), ('schlafen', 4, 'schlaft'),
    ('arbeiten', 1, 'arbeitest'), ('arbeiten', 4, 'arbeitet'), ('finden', 2, 'findet'),
    ('sitzen', 1, 'sitzt'), ('spielen', 0, 'spiele'), ('haben', 2, 'hat'), ('sein', 0, 'bin'),
    ('sein', 4, 'seid'), ('wissen', 2, 'weiß'),
])
def test_german_conjugation(infinitive, person, expected):
  assert conjugate(infinitive, person) == expected


def test_english_conjugation():
  see, be, carry = VERB['sehen'], grammar.COPULA, VERB['tragen']
  assert [english_verb(see, person) for person in range(6)] == [
      'see', 'see', 'sees', 'see', 'see', 'see']
  assert [english_verb(be, person) for person in range(6)] == [
      'am', 'are', 'is', 'are', 'are', 'are']
  assert english_verb(carry, 2) == 'carries'


def test_german_clause_orders():
  clause = Clause(Subject('the man', 'der Mann', 2), VERB['sehen'], ('the small dog',),
                  (german_noun_phrase(phrase(THE, 'klein', 'Hund'), 'acc'),))
  assert german_clause(clause, 'main') == 'der Mann sieht den kleinen Hund'
  assert german_clause(clause, 'inverted') == 'sieht der Mann den kleinen Hund'
  assert german_clause(clause, 'final') == 'der Mann den kleinen Hund sieht'
  we = clause._replace(subject=grammar.PRONOUNS[5])
  assert german_clause(we, 'final') == 'wir den kleinen Hund sehen'


def test_subordinate_clauses_end_with_the_verb_and_main_clauses_keep_it_second():
  counts = {'after': 0, 'fronted': 0, 'dass': 0}
  for _, de in grammar.generate_pairs(3, 3000):
    if match := re.fullmatch(r'[^,]+, (?:weil|wenn|obwohl) ([^,]+)\.', de):
      counts['after'] += 1
      assert match[1].split()[-1] in ALL_VERB_FORMS
    elif match := re.fullmatch(r'(?:Weil|Wenn|Obwohl) ([^,]+), (\w+) [^,]+\.', de):
      counts['fronted'] += 1
      assert match[1].split()[-1] in ALL_VERB_FORMS and match[2] in ALL_VERB_FORMS
    elif match := re.fullmatch(r'[^,]+, dass ([^,]+)\.', de):
      counts['dass'] += 1
      assert match[1].split()[-1] in ALL_VERB_FORMS
  assert min(counts.values()) > 100
