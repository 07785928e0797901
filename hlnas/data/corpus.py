"""A deterministic synthetic English-like corpus: hlnas's offline default training data.

The corpus has structure at three ranges, so language-model loss separates architectures:

* local: a fixed "language" of pseudo-words (Zipf-distributed nouns, verbs, adjectives, names,
  places) in grammar-driven sentences with subject-verb agreement and one tense per document;
* document-level: each document invents its own words (its people and topic terms, drawn fresh
  from syllables) and reuses them, so after their first use they are predictable only from the
  context, as names and terms are in real text;
* recall: facts about people stated once and asked about later, ``key: value`` tables later looked
  up (MQAR-like), lists later counted and recalled, quotes of invented words repeated verbatim,
  refrain sentences and an end-of-document recap. About 15% of the bytes repeat earlier text.
  Most answers come a few sentences (a few hundred bytes) after their source, so recall pays
  even in short proxy contexts; one in six comes anywhere later.

Everything is drawn from ``random.Random`` seeded with strings (SHA-512 seeding) and integer
weights, so the text is identical on every machine (checked on CPython 3.10-3.13). Document ``i``
of seed ``s`` depends only on ``(s, i)``. Documents run from about 200 to 5000 characters
(median about 1800).
"""

from __future__ import annotations

import functools
import itertools
import random
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["synthetic_documents", "synthetic_document", "LANGUAGE_SEED"]

# The language (its word lists) is fixed for all seeds; the seed picks the documents.
LANGUAGE_SEED = 20250709

_ONSETS = ("b", "bl", "br", "c", "ch", "cl", "cr", "d", "dr", "f", "fl", "fr", "g", "gl", "gr", "h", "j",
           "k", "l", "m", "n", "p", "pl", "pr", "qu", "r", "s", "sh", "sk", "sl", "sm", "sn", "sp", "st",
           "str", "t", "th", "tr", "v", "w", "wh", "y", "z")
_NUCLEI = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "ai", "ea", "ee", "oo", "ou", "ie", "oa")
_CODAS = ("", "", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ng", "ck", "rt", "th", "x", "mp")
_DETS_SG = ("the", "the", "the", "a", "this", "every", "that", "one")
_DETS_PL = ("the", "the", "some", "these", "many", "all the", "two", "few")
_PREPS = ("in", "on", "near", "under", "with", "behind", "over", "beside", "from", "around", "without")
_CONJS = ("and", "but", "so", "because", "while", "until")
_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth")
_KEY_CHARS = "abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class _Lang:
    nouns: tuple[str, ...]
    verbs: tuple[str, ...]
    adjs: tuple[str, ...]
    advs: tuple[str, ...]
    names: tuple[str, ...]
    places: tuple[str, ...]
    # Integer Zipf cumulative weights (w_r = 10**12 // (r + 3)): exact on every platform, unlike pow().
    noun_cw: tuple[float, ...]
    verb_cw: tuple[float, ...]
    adj_cw: tuple[float, ...]
    adv_cw: tuple[float, ...]
    name_cw: tuple[float, ...]
    place_cw: tuple[float, ...]


def _zipf_cw(n: int) -> tuple[float, ...]:
    # Integer sums stay below 2**53, so the floats are exact (floats only because bisect compares them faster).
    return tuple(float(c) for c in itertools.accumulate(10**12 // (r + 3) for r in range(n)))


def _words(rng: random.Random, n: int, min_syl: int, max_syl: int, taken: set[str]) -> tuple[str, ...]:
    out: list[str] = []
    while len(out) < n:
        w = "".join(rng.choice(_ONSETS) + rng.choice(_NUCLEI) + rng.choice(_CODAS)
                     for _ in range(rng.randint(min_syl, max_syl)))
        if 2 <= len(w) <= 12 and w not in taken:
            taken.add(w)
            out.append(w)
    return tuple(out)


@functools.cache
def _language() -> _Lang:
    rng = random.Random(LANGUAGE_SEED)
    taken: set[str] = set()
    nouns = _words(rng, 2400, 1, 3, taken)
    verbs = _words(rng, 600, 1, 2, taken)
    adjs = _words(rng, 500, 1, 3, taken)
    advs = tuple(w + "ly" for w in _words(rng, 150, 1, 2, taken))
    names = tuple(w.capitalize() for w in _words(rng, 400, 2, 3, taken))
    places = tuple(w.capitalize() for w in _words(rng, 200, 2, 3, taken))
    return _Lang(nouns, verbs, adjs, advs, names, places, _zipf_cw(len(nouns)), _zipf_cw(len(verbs)),
                 _zipf_cw(len(adjs)), _zipf_cw(len(advs)), _zipf_cw(len(names)), _zipf_cw(len(places)))


def _plural(noun: str) -> str:
    return noun + "es" if noun.endswith(("s", "x", "sh", "ch")) else noun + "s"


def _verb(verb: str, plural_subject: bool, past: bool) -> str:
    if past:
        return verb + "d" if verb.endswith("e") else verb + "ed"
    return verb if plural_subject else _plural(verb)


class _Doc:
    """Draws one document; all randomness comes from ``rng``."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.rnd = rng.random
        self.lang = _language()
        self.past = rng.random() < 0.5
        # Words invented for this document (rarely also in the lexicon): after their first use they can
        # only be predicted by copying from the context.
        novel = [self.novel_word() for _ in range(rng.randint(6, 16))]
        # Topic nouns: novel words plus lexicon nouns drawn uniformly (rare words made frequent here).
        self.topic = novel + rng.sample(self.lang.nouns, rng.randint(2, 8))
        self.cast = [self.novel_word().capitalize() for _ in range(6)]
        self.unfactual = list(self.cast)  # people without stated facts yet

    def novel_word(self) -> str:
        one = self.one
        return "".join(one(_ONSETS) + one(_NUCLEI) + one(_CODAS) for _ in range(2 + int(self.rnd() * 2)))

    def pick(self, words: tuple[str, ...], cw: tuple[float, ...]) -> str:
        """A Zipf draw (what ``rng.choices(words, cum_weights=cw)`` does, without its overhead)."""
        return words[bisect_right(cw, self.rnd() * cw[-1], 0, len(words) - 1)]

    def one(self, seq):
        """A uniform draw; float-based so it is cheaper than ``rng.choice`` and still exact."""
        return seq[int(self.rnd() * len(seq))]

    def noun(self) -> str:
        if self.rnd() < 0.5:
            return self.one(self.topic)
        return self.pick(self.lang.nouns, self.lang.noun_cw)

    def verb(self, plural_subject: bool) -> str:
        return _verb(self.pick(self.lang.verbs, self.lang.verb_cw), plural_subject, self.past)

    def adj(self) -> str:
        return self.pick(self.lang.adjs, self.lang.adj_cw)

    def name(self) -> str:
        return self.one(self.cast) if self.rnd() < 0.7 else self.pick(self.lang.names, self.lang.name_cw)

    def place(self) -> str:
        return self.pick(self.lang.places, self.lang.place_cw)

    def noun_phrase(self, allow_pp: bool = True) -> tuple[str, bool]:
        """A noun phrase and whether it is plural (for verb agreement)."""
        if self.rnd() < 0.25:
            return self.name(), False
        plural = self.rnd() < 0.3
        parts = [self.one(_DETS_PL if plural else _DETS_SG)]
        if self.rnd() < 0.35:
            parts.append(self.adj())
        n = self.noun()
        parts.append(_plural(n) if plural else n)
        if allow_pp and self.rnd() < 0.2:
            parts += [self.one(_PREPS), self.noun_phrase(False)[0]]
        return " ".join(parts), plural

    def clause(self) -> str:
        subj, plural = self.noun_phrase()
        parts = [subj, self.verb(plural)]
        u = self.rnd()
        if u < 0.6:
            parts.append(self.noun_phrase()[0])
        elif u < 0.8:
            parts.append(self.pick(self.lang.advs, self.lang.adv_cw))
        else:
            parts += [self.one(_PREPS), self.noun_phrase(False)[0]]
        return " ".join(parts)

    def sentence(self) -> str:
        text = self.clause()
        if self.rnd() < 0.25:
            text += f" {self.one(_CONJS)} {self.clause()}"
        return text[0].upper() + text[1:] + "."

    # Long-range structures: (definition, [queries]); every query needs its definition to be answered.
    def facts(self) -> tuple[str, list[str]]:
        r = self.rng
        if len(self.unfactual) < 2:  # each person's facts are stated once, so questions have one answer
            return self.quote()
        people = self.unfactual[: r.randint(2, min(4, len(self.unfactual)))]
        del self.unfactual[: len(people)]
        info = {p: (self.adj(), self.noun(), self.place(), self.noun(), r.randint(12, 89)) for p in people}
        definition = " ".join(
            f"{p} is a {a} {job} from {pl}. {p} likes the {like} and is {age} years old."
            for p, (a, job, pl, like, age) in info.items())
        queries = []
        for _ in range(r.randint(1, 2 * len(people))):
            p = self.one(people)
            a, job, pl, like, age = info[p]
            queries.append(self.one((
                f"Where is {p} from? {p} is from {pl}.",
                f"What does {p} like? {p} likes the {like}.",
                f"How old is {p}? {p} is {age}.",
                f"Who is the {a} {job}? It is {p}.",
                f"Later, {p} went back to {pl} with the {like}.",
            )))
        return definition, queries

    def table(self) -> tuple[str, list[str]]:
        r = self.rng
        keys: list[str] = []
        n_keys = r.randint(4, 16)
        while len(keys) < n_keys:
            k = "".join(self.one(_KEY_CHARS) for _ in range(2)) + "-" + str(r.randint(10, 999))
            if k not in keys:
                keys.append(k)
        values = {k: (self.noun() if self.rnd() < 0.6 else str(r.randint(0, 9999))) for k in keys}
        definition = f"Table of {_plural(self.noun())}:\n" + "\n".join(f"{k}: {values[k]}" for k in keys) + "\n"
        queries = [f"Look up {k}: {values[k]}." for k in r.sample(keys, r.randint(2, len(keys)))]
        return definition, queries

    def listing(self) -> tuple[str, list[str]]:
        r = self.rng
        who = self.name()
        items = r.sample(self.lang.nouns, r.randint(3, 9))
        verb = _verb(self.pick(self.lang.verbs, self.lang.verb_cw), False, True)
        definition = f"{who} {verb} these things: {', '.join(items)}."
        i = r.randrange(len(items))
        queries = [
            f"{who} {verb} {len(items)} things, and the {_ORDINALS[i]} was the {items[i]}.",
            self.one((f"Again, the list of {who}: {', '.join(items)}.", f"The last thing {who} {verb} was the {items[-1]}.")),
        ]
        return definition, queries[: r.randint(1, 2)]

    def quote(self) -> tuple[str, list[str]]:
        # Fresh invented words: unpredictable the first time, free to copy the second.
        words = " ".join(self.novel_word() for _ in range(self.rng.randint(6, 16)))
        who = self.name()
        return f'{who} wrote: "{words}".', [f'Once more, {who} wrote: "{words}".'] * self.rng.randint(1, 3)

    def refrain(self) -> tuple[str, list[str]]:
        line = self.sentence()
        return line, [line] * self.rng.randint(2, 4)

    def text(self) -> str:
        r = self.rng
        n_fill = 3 + int(45 * self.rnd() ** 2)
        fill = [self.sentence() for _ in range(n_fill)]
        # Copy-heavy structures (quotes, refrains) are drawn twice as often: verbatim repeats are where
        # models that retrieve from context gain most, so they make the loss reflect recall.
        makers = (self.facts, self.table, self.listing, self.quote, self.quote, self.refrain, self.refrain)
        n_struct = min(r.choices((1, 2, 3, 4, 5, 6), cum_weights=(2, 5, 9, 12, 14, 15))[0], 1 + n_fill // 6)
        inserts: list[tuple[int, int, str]] = []  # (before filler index, order, text)
        for make in r.choices(makers, k=n_struct):
            definition, queries = make()
            at = r.randint(0, n_fill // 2)
            inserts.append((at, len(inserts), definition))
            for q in queries:
                # Mostly a few sentences after the definition, so recall pays within short proxy contexts
                # (a few hundred bytes); one query in six anywhere later (long-range recall).
                span = n_fill - at if self.rnd() < 1 / 6 else min(n_fill - at, 4)
                inserts.append((at + 1 + int(self.rnd() ** 2 * span), len(inserts), q))
        inserts.sort()
        title = f"{self.adj().capitalize()} {_plural(self.noun())} of {self.place()}\n"
        pieces, j, since_break = [title], 0, 0
        for i in range(n_fill + 1):
            while j < len(inserts) and inserts[j][0] == i:
                pieces.append(inserts[j][2])
                j += 1
            if i < n_fill:
                pieces.append(fill[i])
                since_break += 1
                if since_break >= 5 and self.rnd() < 0.4:  # paragraph break
                    pieces.append("\n")
                    since_break = 0
        if n_fill >= 4 and self.rnd() < 0.5:  # a recap repeating earlier sentences verbatim
            pieces.append("In short: " + " ".join(r.sample(fill, min(n_fill // 2, r.randint(1, 3)))))
        out = " ".join(pieces)
        return out.replace(" \n ", "\n").replace("\n ", "\n").replace(" \n", "\n").strip()


def synthetic_document(seed: int, index: int) -> str:
    """Document ``index`` (>= 0) of the corpus of ``seed``; depends on nothing else."""
    return _Doc(random.Random(f"hlnas.synthetic:{int(seed)}:{int(index)}")).text()


def synthetic_documents(seed: int, start: int = 0) -> Iterator[str]:
    """The infinite corpus of ``seed``, from document ``start`` on (same text on every machine)."""
    for index in itertools.count(start):
        yield synthetic_document(seed, index)
