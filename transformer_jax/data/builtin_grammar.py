"""A small English→German parallel corpus generated from a bilingual grammar: no download.

It is the offline default corpus for the quick-start demo and for fast end-to-end tests:

  pairs = generate_pairs(seed=0, num_pairs=1000)  # [(english, german), ...]
  data = splits()  # {'train': 40000 pairs, 'validation': 1000, 'test': 1000}

The grammar covers definite and indefinite articles, numbers, adjectives and nouns with German
gender and case agreement (nominative subject, accusative object, dative after a preposition)
and weak, mixed and strong adjective endings; present-tense conjugation for pronoun and noun
subjects; main clauses (verb second, also after a fronted subordinate clause) and subordinate
clauses after weil/wenn/obwohl/dass (verb final). Every derivation gives a different English
and a different German sentence, so `capacity()` counts the distinct pairs exactly.

Sentences are deterministic in the seed: only `random.Random(seed)` draws, in a fixed order.
"""

import random
from typing import NamedTuple


class Noun(NamedTuple):
  en: str
  en_plural: str
  de: str
  de_plural: str
  gender: str  # 'm', 'f' or 'n'.


class Adjective(NamedTuple):
  en: str
  de: str  # The uninflected (predicative) form, which is also the stem of the endings.


class Determiner(NamedTuple):
  en: str
  de: str  # 'der' (definite), 'ein' (indefinite) or a number word.
  plural: bool


class NounPhrase(NamedTuple):
  determiner: Determiner
  adjective: Adjective | None
  noun: Noun


class Subject(NamedTuple):
  en: str
  de: str  # Nominative.
  person: int  # 0 ich, 1 du, 2 er/sie/es, 3 wir, 4 ihr, 5 sie (plural).


class Verb(NamedTuple):
  en: str
  en_third_singular: str
  de: str  # The infinitive.


class Clause(NamedTuple):
  subject: Subject
  verb: Verb
  en_rest: tuple[str, ...]  # What follows the verb: object, prepositional phrase, adjective.
  de_rest: tuple[str, ...]  # The same in German, in main-clause order.


ANIMATE_NOUNS = tuple(Noun(*row.split()) for row in (
    'man men Mann Männer m', 'woman women Frau Frauen f', 'child children Kind Kinder n',
    'girl girls Mädchen Mädchen n', 'teacher teachers Lehrer Lehrer m', 'dog dogs Hund Hunde m',
    'cat cats Katze Katzen f', 'mouse mice Maus Mäuse f', 'horse horses Pferd Pferde n',
    'bird birds Vogel Vögel m'))
THING_NOUNS = tuple(Noun(*row.split()) for row in (
    'book books Buch Bücher n', 'apple apples Apfel Äpfel m', 'car cars Auto Autos n',
    'house houses Haus Häuser n', 'table tables Tisch Tische m', 'letter letters Brief Briefe m',
    'ball balls Ball Bälle m', 'key keys Schlüssel Schlüssel m', 'cup cups Tasse Tassen f',
    'picture pictures Bild Bilder n', 'flower flowers Blume Blumen f',
    'chair chairs Stuhl Stühle m', 'lamp lamps Lampe Lampen f', 'egg eggs Ei Eier n',
    'box boxes Kiste Kisten f', 'knife knives Messer Messer n'))
NOUNS = ANIMATE_NOUNS + THING_NOUNS  # Objects; subjects are animate, prepositional phrases things.
# English words starting with a vowel letter take "an": the vocabulary has no "hour" or "unit".
ADJECTIVES = tuple(Adjective(*row.split()) for row in (
    'small klein', 'big groß', 'old alt', 'new neu', 'young jung', 'red rot', 'black schwarz',
    'white weiß', 'beautiful schön', 'ugly hässlich'))
ARTICLES = (Determiner('the', 'der', False), Determiner('a', 'ein', False),
            Determiner('the', 'der', True))
NUMBERS = tuple(Determiner(*row.split(), True) for row in (
    'two zwei', 'three drei', 'four vier', 'five fünf', 'six sechs', 'seven sieben',
    'eight acht', 'nine neun', 'ten zehn', 'eleven elf', 'twelve zwölf'))
PRONOUNS = (Subject('I', 'ich', 0), Subject('you', 'du', 1), Subject('he', 'er', 2),
            Subject('she', 'sie', 2), Subject('it', 'es', 2), Subject('we', 'wir', 3),
            Subject('you all', 'ihr', 4), Subject('they', 'sie', 5))
COPULA = Verb('are', 'is', 'sein')
TRANSITIVE_VERBS = tuple(Verb(*row.split()) for row in (
    'see sees sehen', 'read reads lesen', 'eat eats essen', 'buy buys kaufen', 'have has haben',
    'find finds finden', 'carry carries tragen', 'take takes nehmen', 'paint paints malen',
    'need needs brauchen', 'love loves lieben'))
INTRANSITIVE_VERBS = tuple(Verb(*row.split()) for row in (
    'sleep sleeps schlafen', 'run runs laufen', 'play plays spielen', 'work works arbeiten',
    'wait waits warten', 'sit sits sitzen', 'sing sings singen', 'laugh laughs lachen'))
THAT_VERBS = tuple(Verb(*row.split()) for row in (  # Take a "that"/"dass" clause.
    'say says sagen', 'know knows wissen', 'believe believes glauben', 'hope hopes hoffen',
    'think thinks denken'))
PREPOSITIONS = (('with', 'mit'), ('next to', 'neben'), ('behind', 'hinter'), ('under', 'unter'),
                ('in front of', 'vor'), ('in', 'in'), ('on', 'auf'), ('at', 'an'))  # + dative.
CONJUNCTIONS = (('because', 'weil'), ('if', 'wenn'), ('although', 'obwohl'))

# Articles and adjective endings by case, for masculine, feminine, neuter and plural nouns.
_ARTICLES = {
    'der': {'nom': ('der', 'die', 'das', 'die'), 'acc': ('den', 'die', 'das', 'die'),
            'dat': ('dem', 'der', 'dem', 'den')},
    'ein': {'nom': ('ein', 'eine', 'ein'), 'acc': ('einen', 'eine', 'ein'),
            'dat': ('einem', 'einer', 'einem')},
}
_ADJECTIVE_ENDINGS = {
    'der': {'nom': ('e', 'e', 'e', 'en'), 'acc': ('en', 'e', 'e', 'en'),  # Weak.
            'dat': ('en', 'en', 'en', 'en')},
    'ein': {'nom': ('er', 'e', 'es'), 'acc': ('en', 'e', 'es'),  # Mixed.
            'dat': ('en', 'en', 'en')},
}
# Strong, after a number (numbers are not inflected), which is always plural here.
_STRONG_PLURAL_ENDINGS = {'nom': 'e', 'acc': 'e', 'dat': 'en'}
_CONTRACTIONS = {('in', 'dem'): 'im', ('an', 'dem'): 'am'}

_PERSON_ENDINGS = ('e', 'st', 't', 'en', 't', 'en')
_IRREGULAR_VERBS = {
    'sein': ('bin', 'bist', 'ist', 'sind', 'seid', 'sind'),
    'haben': ('habe', 'hast', 'hat', 'haben', 'habt', 'haben'),
    'wissen': ('weiß', 'weißt', 'weiß', 'wissen', 'wisst', 'wissen'),
}
# Stems whose vowel changes for du and er/sie/es.
_CHANGED_STEMS = {'sehen': 'sieh', 'lesen': 'lies', 'essen': 'iss', 'tragen': 'träg',
                  'nehmen': 'nimm', 'schlafen': 'schläf', 'laufen': 'läuf'}


def english_noun_phrase(phrase: NounPhrase) -> str:
  """'a small dog', 'an old house', 'the mice', 'three red apples'."""
  determiner, adjective, noun = phrase
  words = [adjective.en] if adjective else []
  words.append(noun.en_plural if determiner.plural else noun.en)
  article = 'an' if determiner.en == 'a' and words[0][0] in 'aeiou' else determiner.en
  return ' '.join([article] + words)


def german_noun_phrase(phrase: NounPhrase, case: str) -> str:
  """The phrase in case 'nom', 'acc' or 'dat': 'den kleinen Hund', 'drei kleinen Hunden'."""
  determiner, adjective, noun = phrase
  column = 3 if determiner.plural else 'mfn'.index(noun.gender)
  if determiner.de in _ARTICLES:
    words = [_ARTICLES[determiner.de][case][column]]
    ending = _ADJECTIVE_ENDINGS[determiner.de][case][column]
  else:
    words, ending = [determiner.de], _STRONG_PLURAL_ENDINGS[case]
  if adjective:
    words.append(adjective.de + ending)
  form = noun.de_plural if determiner.plural else noun.de
  if determiner.plural and case == 'dat' and form[-1] not in 'ns':
    form += 'n'  # Dative plural: den Hunden, den Äpfeln (but den Frauen, den Autos).
  return ' '.join(words + [form])


def german_prepositional_phrase(preposition: str, phrase: NounPhrase) -> str:
  """A dative prepositional phrase: 'mit der alten Frau'; 'in dem' contracts to 'im'."""
  article, rest = german_noun_phrase(phrase, 'dat').split(' ', 1)
  contracted = _CONTRACTIONS.get((preposition, article))
  return f'{contracted} {rest}' if contracted else f'{preposition} {article} {rest}'


def conjugate(infinitive: str, person: int) -> str:
  """The German present tense: conjugate('sehen', 2) == 'sieht' (person as in `Subject`).

  Regular verbs add the person's ending to the stem; a stem ending in -t/-d inserts an e
  (du arbeitest, er findet) and one in -s/-ß/-z drops the s of -st (du liest, du sitzt). A
  changed stem ending in -t/-d (er hält) would need a rule of its own: the vocabulary has none.
  """
  if infinitive in _IRREGULAR_VERBS:
    return _IRREGULAR_VERBS[infinitive][person]
  stem = _CHANGED_STEMS.get(infinitive, infinitive[:-2]) if person in (1, 2) else infinitive[:-2]
  ending = _PERSON_ENDINGS[person]
  if stem[-1] in 'td' and ending in ('st', 't'):
    ending = 'e' + ending
  elif stem[-1] in 'sßz' and ending == 'st':
    ending = 't'
  return stem + ending


def english_verb(verb: Verb, person: int) -> str:
  """'sees' for he/she/it and singular nouns, 'see' otherwise; 'am', 'is', 'are' for be."""
  if verb == COPULA and person == 0:
    return 'am'
  return verb.en_third_singular if person == 2 else verb.en


def english_clause(clause: Clause) -> str:
  """Subject, verb, rest: 'the man sees a dog'."""
  verb = english_verb(clause.verb, clause.subject.person)
  return ' '.join((clause.subject.en, verb) + clause.en_rest)


def german_clause(clause: Clause, order: str) -> str:
  """The clause with its conjugated verb placed for `order`.

  'main': subject, verb, rest (verb second); 'inverted': verb, subject, rest (verb second after
  a fronted subordinate clause); 'final': subject, rest, verb (a subordinate clause).
  """
  subject, verb = clause.subject.de, conjugate(clause.verb.de, clause.subject.person)
  words = {'main': (subject, verb) + clause.de_rest, 'inverted': (verb, subject) + clause.de_rest,
           'final': (subject,) + clause.de_rest + (verb,)}[order]
  return ' '.join(words)


def _sample_noun_phrase(rng: random.Random, nouns: tuple[Noun, ...]) -> NounPhrase:
  determiner = rng.choice(NUMBERS) if rng.random() < 0.25 else rng.choice(ARTICLES)
  adjective = rng.choice(ADJECTIVES) if rng.random() < 0.4 else None
  return NounPhrase(determiner, adjective, rng.choice(nouns))


def _sample_subject(rng: random.Random) -> Subject:
  if rng.random() < 0.3:
    return rng.choice(PRONOUNS)
  phrase = _sample_noun_phrase(rng, ANIMATE_NOUNS)
  person = 5 if phrase.determiner.plural else 2
  return Subject(english_noun_phrase(phrase), german_noun_phrase(phrase, 'nom'), person)


def _sample_clause(rng: random.Random) -> Clause:
  """A copula with an adjective, or an intransitive or transitive verb with an optional
  prepositional phrase."""
  subject, kind = _sample_subject(rng), rng.random()
  if kind < 0.2:
    adjective = rng.choice(ADJECTIVES)
    return Clause(subject, COPULA, (adjective.en,), (adjective.de,))
  if kind < 0.5:
    verb, en_rest, de_rest = rng.choice(INTRANSITIVE_VERBS), (), ()
  else:
    verb, obj = rng.choice(TRANSITIVE_VERBS), _sample_noun_phrase(rng, NOUNS)
    en_rest, de_rest = (english_noun_phrase(obj),), (german_noun_phrase(obj, 'acc'),)
  if rng.random() < 0.3:
    (en_preposition, de_preposition) = rng.choice(PREPOSITIONS)
    phrase = _sample_noun_phrase(rng, THING_NOUNS)
    en_rest += (f'{en_preposition} {english_noun_phrase(phrase)}',)
    de_rest += (german_prepositional_phrase(de_preposition, phrase),)
  return Clause(subject, verb, en_rest, de_rest)


def sample_pair(rng: random.Random) -> tuple[str, str]:
  """One (english, german) sentence pair: a main clause alone (40%), followed (25%) or preceded
  (15%) by a weil/wenn/obwohl clause, or (20%) a dass clause after a verb such as sagen."""
  clause, form = _sample_clause(rng), rng.random()
  if form < 0.4:
    en, de = english_clause(clause), german_clause(clause, 'main')
  elif form < 0.8:
    (en_conjunction, de_conjunction), other = rng.choice(CONJUNCTIONS), _sample_clause(rng)
    en_other, de_other = english_clause(other), german_clause(other, 'final')
    if form < 0.65:
      en = f'{english_clause(clause)} {en_conjunction} {en_other}'
      de = f'{german_clause(clause, "main")}, {de_conjunction} {de_other}'
    else:
      en = f'{en_conjunction} {en_other}, {english_clause(clause)}'
      de = f'{de_conjunction} {de_other}, {german_clause(clause, "inverted")}'
  else:
    subject, verb = _sample_subject(rng), rng.choice(THAT_VERBS)
    en = f'{subject.en} {english_verb(verb, subject.person)} that {english_clause(clause)}'
    de = f'{subject.de} {conjugate(verb.de, subject.person)}, dass {german_clause(clause, "final")}'
  return en[0].upper() + en[1:] + '.', de[0].upper() + de[1:] + '.'


def capacity() -> int:
  """The number of distinct pairs the grammar can produce: one per derivation.

  No two derivations give the same English or the same German sentence (pronouns are
  unambiguous in English, 'you' for du and 'you all' for ihr; sie is told apart by its verb).
  """
  def noun_phrases(nouns):
    return (len(ARTICLES) + len(NUMBERS)) * (len(ADJECTIVES) + 1) * len(nouns)

  subjects = len(PRONOUNS) + noun_phrases(ANIMATE_NOUNS)
  with_optional_phrase = 1 + len(PREPOSITIONS) * noun_phrases(THING_NOUNS)
  verb_phrases = len(ADJECTIVES) + with_optional_phrase * (
      len(INTRANSITIVE_VERBS) + len(TRANSITIVE_VERBS) * noun_phrases(NOUNS))
  clauses = subjects * verb_phrases
  return clauses + 2 * len(CONJUNCTIONS) * clauses**2 + subjects * len(THAT_VERBS) * clauses


def generate_pairs(seed: int, num_pairs: int) -> list[tuple[str, str]]:
  """`num_pairs` (english, german) pairs, deterministic in `seed`.

  Pairs are sampled until there are enough, skipping any whose English or German sentence was
  drawn before, so no sentence occurs twice. Raises ValueError if `num_pairs` is negative or
  more than the grammar's `capacity()` (about 1e25).
  """
  if not 0 <= num_pairs <= capacity():
    raise ValueError(f'num_pairs={num_pairs}: the built-in grammar can produce between 0 and '
                     f'{capacity()} distinct sentence pairs')
  rng = random.Random(seed)
  pairs, seen_en, seen_de = [], set(), set()
  while len(pairs) < num_pairs:
    en, de = sample_pair(rng)
    if en not in seen_en and de not in seen_de:
      seen_en.add(en)
      seen_de.add(de)
      pairs.append((en, de))
  return pairs


def splits(seed: int = 0,
           sizes: tuple[int, int, int] = (40000, 1000, 1000)) -> dict[str, list[tuple[str, str]]]:
  """'train', 'validation' and 'test' pairs of the given sizes, disjoint by sentence.

  They are cut from one `generate_pairs` list, test first and train last, so that test and
  validation stay the same when only the training size changes.
  """
  num_train, num_validation, num_test = sizes
  if min(sizes) < 0:
    raise ValueError(f'split sizes must be non-negative, got {sizes}')
  pairs = generate_pairs(seed, num_train + num_validation + num_test)
  return {'train': pairs[num_test + num_validation:],
          'validation': pairs[num_test:num_test + num_validation], 'test': pairs[:num_test]}
