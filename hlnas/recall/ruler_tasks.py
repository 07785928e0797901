"""RULER's 13 task generators, tokenizer-agnostic (NVIDIA/RULER ``main`` @ c3f5e3b4f87f, ``scripts/``;
the spec is reference/ruler-mqar.md section 1).

One :class:`TaskGenerator` per (task, tokenizer, length): it sizes the haystack once (binary search,
FWE: linear growth, as in RULER) so that prompt tokens + max new tokens <= length under the given
tokenizer, then draws sample ``i`` from its own RNG (``Random("ruler|task|seed|length|i")``), so a
sample does not depend on how many others are drawn. Prompts end with the answer prefix.

Deviations from NVIDIA RULER (no network, no shipped data):

- **Essay haystack**: Paul Graham's essays cannot be shipped. The ``essay`` haystack is hlnas's own
  synthetic corpus (:func:`hlnas.data.corpus.synthetic_document`, fixed seed ``ESSAY_CORPUS_SEED``,
  documents concatenated), the text proxy models are trained on, as the essays are in-distribution
  text for LLMs. Where that module is absent, essay-like English sentences built from fixed templates
  and the built-in word lists are used instead (sentence ``i`` from ``Random("essay|i")``).
  :data:`ESSAY_SOURCE` names the source and a fingerprint of its text, and enters the sample cache key.
  Either way the text is the same for every task and seed, as the essay corpus is in RULER. Sentences
  are split on end punctuation instead of NLTK ``sent_tokenize``.
- **Word lists**: wonderwords is not a dependency. NIAH word keys/values are ``adjective-noun`` pairs and
  CWE draws from a built-in list of ~400 English nouns, adjectives and verbs; when CWE needs more words
  than that (RULER falls back to ``english_words.json``), pronounceable made-up words are appended.
- **Small lengths**: the haystack search starts at the task's minimum unit count (RULER: at the step),
  a sample that overflows backs off by min(step, 5% of the count) (RULER: by the step), and VT's
  statements may share a slot when there are fewer noise blocks than statements. These only matter at
  the short byte-level lengths of proxy models; a length that cannot hold the task raises
  :class:`RulerLengthError`.
- **CWE at a length >= 4096 that cannot hold the full variant** (a byte-level proxy) uses RULER's
  short-context variant (x6/x1 repeats, 20-word example) instead of failing.
- **Distractor needles** never reuse a queried key (RULER does not check; a clash is ambiguous).
- **VT one-shot example**: the names follow the answer prefix's trailing space directly (RULER's
  ``input + " " + names`` writes two spaces), matching what the model is asked to write.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
import math
import random
import re
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from hlnas.errors import ConfigError, HlnasError

__all__ = ["RulerLengthError", "Instance", "TaskGenerator", "QAData", "MAX_NEW_TOKENS", "TASK_NAMES", "ESSAY_SOURCE", "essay_words", "word_pool"]

FIXED_SHUFFLE_SEED = 42  # RULER shuffles with a fresh Random(42): equal-length lists get the same permutation
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."
NIAH_TEMPLATE = (
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {type_needle_v} afterwards.\n{context}\n"
    "What are all the special magic {type_needle_v} for {query} mentioned in the provided text?"
)
NIAH_PREFIX = " The special magic {type_needle_v} for {query} mentioned in the provided text are"
VT_TEMPLATE = (
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n"
    "Question: Find all variables that are assigned the value {query} in the text above."
)
VT_PREFIX = (
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are "
    "assigned the value {query}, they are: "
)
CWE_TEMPLATE = (
    "Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones "
    "that appear most often.\n{context}\nQuestion: What are the 10 most common words in the above list?"
)
CWE_PREFIX = " Answer: The top 10 words that appear most often in the list are:"
FWE_TEMPLATE = (
    "Read the following coded text and track the frequency of each coded word. Find the three most frequently "
    "appeared coded words. {context}\nQuestion: Do not provide any explanation. Please ignore the dots '....'. "
    "What are the three most frequently appeared words in the above coded text?"
)
FWE_PREFIX = " Answer: According to the coded text above, the three most frequently appeared words are:"
QA_INSTRUCTION = "Answer the question based on the given documents. Only give me the answer and do not output any other words."
QA_TEMPLATE = f"{QA_INSTRUCTION}\n\nThe following are given documents.\n\n{{context}}\n\n{QA_INSTRUCTION}\n\nQuestion: {{query}}"
QA_PREFIX = " Answer:"


@dataclass(frozen=True)
class NiahSpec:
    haystack: str  # noise | needles | essay
    key_type: str  # words | uuids
    value_type: str  # numbers | words | uuids
    k: int
    v: int
    q: int


NIAH = {
    "niah_single_1": NiahSpec("noise", "words", "numbers", 1, 1, 1),
    "niah_single_2": NiahSpec("essay", "words", "numbers", 1, 1, 1),
    "niah_single_3": NiahSpec("essay", "words", "uuids", 1, 1, 1),
    "niah_multikey_1": NiahSpec("essay", "words", "numbers", 4, 1, 1),
    "niah_multikey_2": NiahSpec("needles", "words", "numbers", 1, 1, 1),
    "niah_multikey_3": NiahSpec("needles", "uuids", "uuids", 1, 1, 1),
    "niah_multivalue": NiahSpec("essay", "words", "numbers", 1, 4, 1),
    "niah_multiquery": NiahSpec("essay", "words", "numbers", 4, 1, 4),
}
TASK_NAMES = (*NIAH, "vt", "cwe", "fwe", "qa_1", "qa_2")
MAX_NEW_TOKENS = {**{t: 128 for t in NIAH}, "vt": 30, "cwe": 120, "fwe": 50, "qa_1": 32, "qa_2": 32}
DEPTHS = [round(100 * i / 39) for i in range(40)]  # round(linspace(0, 100, 40)): 40 distinct integers

_ADJ = """able bad big black blue bold brave bright broad brown busy calm careful cheap clean clear clever close cold
cool curious dark deep dry dull eager early easy empty fair famous fancy fast fine flat fresh friendly full gentle
giant glad golden good grand gray great green happy hard heavy high honest hot huge humble kind large late lazy light
little lively long loud lovely low lucky mighty modern narrow neat new nice noble odd old orange pale perfect plain
polite poor proud pure purple quick quiet rapid rare raw real red rich right rough round royal rude sad safe sharp
shiny short shy silent silly simple slow small smooth soft solid sour spicy steady steep sticky strange strong sunny
sweet swift tall tame thick thin tidy tiny tough true warm weak wet white wide wild wise witty yellow young""".split()
_NOUN = """acorn actor airport album anchor angle animal apple arch army arrow artist autumn badge bag ball banana band
bank barn basket beach bean bear bed bell bench bicycle bird blanket boat book boot bottle box bread bridge brush
bucket butter button cabin cake camera candle canyon car carpet castle cat cave chair cheese cherry chest chicken
circle city cliff clock cloud coat coin comet cookie copper corn cottage cotton crown cup curtain desert desk diamond
dinner doctor dog door dragon drum eagle earth engine farm feather fence field finger fire fish flag flower forest
fork fountain fox garden gate giraffe glass glove goat grape guitar hammer harbor hat hill honey horse house island
jacket jar jewel kettle key kingdom kitchen kite knife ladder lake lamp lemon letter library lion machine map market
meadow mirror monkey moon mountain needle nest ocean office onion orchard owl painter palace paper parrot pencil
pepper piano picture pillow planet plate pocket pond potato puzzle queen rabbit radio rain ribbon river road rocket
roof rose salt sand school sea shadow sheep shell ship shoe sky snow soap song spoon star stone storm street sugar
summer sun table teacher tent tiger tomato tower town train tree truck tulip turtle umbrella valley village violin
wagon wall whale wheel window winter wolf wood yard zebra""".split()
_VERB = """accept admire agree allow answer arrive ask bake balance begin believe borrow bounce breathe build carry catch
change chase climb collect cook count cover create cross dance decide deliver describe discover draw dream drink drive
enjoy explain explore fetch finish float fly follow gather give grow guard guess help hide hold hunt imagine invite
jump kick knock laugh learn lift listen march measure melt move notice offer open paint pick plant play polish pour
promise pull push reach read remember repair rescue return ride run sail save search send shout sing sketch skip sleep
smile solve sort speak spin study swim teach throw touch travel visit walk wander wash watch whisper win wonder write""".split()
_ESSAY = [
    "The {a} {n} will {v} the {n} before the {n} can {v}.",
    "When a {n} learns to {v}, the {a} {n} often becomes {a}.",
    "Most people {v} a {n} because it feels {a}, not because it is {a}.",
    "I think the {a} part of any {n} is how it helps you {v} the {n}.",
    "If you want to {v} a {n}, start with something {a} and {a}.",
    "A {a} {n} is rarely as {a} as it looks from the {n}.",
    "That is why every {n} needs a {a} {n} to {v}.",
    "In the end, the {n} and the {n} both {v} in {a} ways.",
    "Nobody expected the {n} to {v}, yet the {a} {n} did it anyway.",
    "You can {v} a {n} for years and still find it {a}.",
]


class RulerLengthError(HlnasError, ValueError):
    """The context length is too short to hold a task's minimal prompt plus its generation budget."""


@dataclass(frozen=True)
class Instance:
    prompt: str  # ends with the answer prefix
    answers: list[str]
    completion: str  # what a perfect model writes after the prompt


@dataclass(frozen=True)
class QAData:
    """Questions (query, references, gold doc ids, same-article doc ids) and the sorted document pool."""

    kind: str  # squad | hotpotqa
    questions: list[tuple[str, list[str], list[int], list[int]]]
    docs: list[str]


def word_pool(n: int) -> list[str]:
    """CWE's pool: the built-in words (deduplicated, sorted, fixed-seed shuffled), then made-up words if n exceeds it."""
    real = _real_words()
    if n <= len(real):
        return list(real)
    extra: list[str] = []
    for k in itertools.count(2):
        extra += _made_words(k)
        if len(real) + len(extra) >= n:
            return list(real) + extra[: n - len(real)]
    raise AssertionError  # unreachable


@functools.cache
def _real_words() -> tuple[str, ...]:
    real = sorted(set(_ADJ + _NOUN + _VERB))
    random.Random(FIXED_SHUFFLE_SEED).shuffle(real)
    return tuple(real)


@functools.cache
def _made_words(syllables: int) -> tuple[str, ...]:
    taken = set(_real_words())
    syll = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    made = sorted("".join(p) for p in itertools.product(syll, repeat=syllables))
    random.Random(FIXED_SHUFFLE_SEED + syllables).shuffle(made)
    return tuple(w for w in made if w not in taken)


try:  # the project's synthetic corpus when present (see the module docstring)
    from hlnas.data.corpus import synthetic_document as _corpus_document
except ImportError:  # pragma: no cover - depends on the checkout
    _corpus_document = None
ESSAY_CORPUS_SEED = 4242


def _essay_chunk(i: int) -> str:
    """Chunk ``i`` of the essay text: a corpus document, or one built-in sentence."""
    if _corpus_document is not None:
        return _corpus_document(ESSAY_CORPUS_SEED, i)
    rng = random.Random(f"essay|{i}")
    s = re.sub(r"\{(\w)\}", lambda m: rng.choice({"a": _ADJ, "n": _NOUN, "v": _VERB}[m.group(1)]), rng.choice(_ESSAY))
    return re.sub(r"\b([Aa]) (?=[aeiou])", r"\1n ", s)  # a -> an before a vowel


ESSAY_SOURCE = (
    ("hlnas.data.corpus" if _corpus_document is not None else "builtin")
    + ":"
    + hashlib.sha256((_essay_chunk(0) + _essay_chunk(1)).encode()).hexdigest()[:12]
)
_essay_chunks: list[str] = []
_essay_word_ends: list[int] = []  # cumulative word count after each chunk


def essay_words(n: int) -> list[str]:
    """The first ``n`` words of the essay haystack text (see the module docstring)."""
    while not _essay_word_ends or _essay_word_ends[-1] < n:
        text = _essay_chunk(len(_essay_chunks))
        _essay_chunks.append(text)
        _essay_word_ends.append((_essay_word_ends[-1] if _essay_word_ends else 0) + len(text.split()))
    last = bisect.bisect_left(_essay_word_ends, n)
    return " ".join(_essay_chunks[: last + 1]).split()[:n]


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


def _random_value(kind: str, rng: random.Random) -> str:
    if kind == "numbers":
        return str(rng.randint(1000000, 9999999))
    if kind == "words":
        return f"{rng.choice(_ADJ)}-{rng.choice(_NOUN)}"
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _and_join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + ", and " + items[-1]


class TaskGenerator:
    """Samples of one task at one length under one tokenizer (see the module docstring)."""

    def __init__(
        self, task: str, tokenizer, length: int, seed: int, qa: QAData | None = None, question_offset: int = 0, wrap_questions: bool = False
    ):
        if task not in TASK_NAMES:
            raise ConfigError(f"unknown RULER task '{task}'; allowed: {', '.join(TASK_NAMES)}")
        if task.startswith("qa") and qa is None:
            raise ConfigError(f"task '{task}' needs a local SQuAD/HotpotQA JSON file")
        self.task, self.tok, self.length, self.seed = task, tokenizer, int(length), int(seed)
        # QA sample i uses question offset + i (RULER: question i); an endless training stream wraps around
        self.qa, self.question_offset, self.wrap = qa, question_offset, wrap_questions
        self.max_new = MAX_NEW_TOKENS[task]
        self.small = self.length < 4096  # RULER's short-context variants (smaller steps, CWE repeats)
        make, self.step, self.min_count = self._plan()
        self._make: Callable[[int, random.Random, int], Instance] = make
        self._vt_icl_count: int | None = None
        # CWE's full variant (x30/x3, 40-word example) needs ~6k byte tokens; a byte-level proxy at 4096 falls
        # back to RULER's short-context variant (x6/x1, 20-word example) instead of failing
        self.cwe_short = self.small
        try:
            self.count = self._calibrate_fwe() if task == "fwe" else self._calibrate()
        except RulerLengthError:
            if task != "cwe" or self.cwe_short:
                raise
            self.cwe_short = True
            self.count = self._calibrate()

    # -- budget and search -----------------------------------------------------------------
    def tokens(self, text: str) -> int:
        return len(self.tok.encode(text))

    def fits(self, inst: Instance) -> bool:
        return self.tokens(inst.prompt) + self.max_new <= self.length

    def _rng(self, tag) -> random.Random:
        return random.Random(f"ruler|{self.task}|{self.seed}|{self.length}|{tag}")

    def _too_short(self, count: int, inst: Instance) -> RulerLengthError:
        need = self.tokens(inst.prompt) + self.max_new
        return RulerLengthError(
            f"RULER task '{self.task}' does not fit in length {self.length}: its smallest prompt ({count} haystack "
            f"units) plus {self.max_new} new tokens needs {need} tokens under tokenizer "
            f"'{getattr(self.tok, 'name', type(self.tok).__name__)}'; use a longer length or drop the task"
        )

    def _calibrate(self) -> int:
        """Largest haystack count whose calibration sample fits (RULER's binary search)."""
        lo = self.min_count
        probe = self._make(max(self.step, lo), self._rng("calibrate"), 0)
        per_unit = max(self.tokens(probe.prompt) / max(self.step, lo), 1e-9)
        factor = 3
        if self.task == "cwe":  # RULER estimates CWE on 4,096 pool words, factor 2
            per_unit, factor = self.tokens(" ".join(word_pool(4096)[:4096])) / 4096, 2
        hi = max(int(factor * self.length / per_unit), 2 * self.step, lo)
        if self.qa is not None:
            hi = min(hi, len(self.qa.docs))
        best = None
        while lo <= hi:
            mid = (lo + hi) // 2
            if self.fits(self._make(mid, self._rng("calibrate"), 0)):
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        if best is None:
            raise self._too_short(self.min_count, self._make(self.min_count, self._rng("calibrate"), 0))
        return best

    def _calibrate_fwe(self) -> int:
        """RULER's FWE search: start at L'//6 words, add L'//32 until the prompt reaches L' = L - 50, step back once."""
        budget = self.length - self.max_new
        inc = max(budget // 32, 1)
        n = max(budget // 6, 1)
        rng = self._rng("calibrate")
        while self.tokens(self._make(n, rng, 0).prompt) < budget:
            n += inc
        return max(n - inc, 1)

    def sample(self, index: int) -> Instance:
        """Sample ``index`` at the calibrated count, backing off until it fits."""
        count = self.count
        while True:
            inst = self._make(count, self._rng(index), index)
            if self.fits(inst):
                return inst
            if count <= self.min_count:
                raise self._too_short(count, inst)
            back = self.step if self.task == "fwe" else min(self.step, max(1, count // 20))
            count = max(self.min_count, count - back)

    # -- tasks -----------------------------------------------------------------------------
    def _plan(self) -> tuple[Callable, int, int]:
        t = self.task
        if t in NIAH:
            spec = NIAH[t]
            step = 500 if spec.haystack == "essay" else (5 if self.small else 25)
            return self._niah, step, 1 if spec.haystack == "essay" else max(spec.k, spec.q) * spec.v
        if t == "vt":
            return self._vt, 5 if self.small else 10, 0
        if t == "cwe":
            return self._cwe, 10, 10
        if t == "fwe":
            return self._fwe, max((self.length - self.max_new) // 32, 1), 1
        return self._qa, 10, 1

    def _niah(self, count: int, rng: random.Random, index: int) -> Instance:
        spec = NIAH[self.task]
        k = max(spec.k, spec.q)
        keys, values, needles = [], [], []
        for _ in range(k):
            keys.append(_random_value(spec.key_type, rng))
            values.append([_random_value(spec.value_type, rng) for _ in range(spec.v)])
            needles += [NEEDLE.format(type_needle_v=spec.value_type, key=keys[-1], value=v) for v in values[-1]]
        random.Random(FIXED_SHUFFLE_SEED).shuffle(needles)
        if spec.haystack == "essay":
            sents = _sentences(" ".join(essay_words(count)))
            cuts = sorted(int(len(sents) * d / 100) for d in rng.sample(DEPTHS, len(needles)))
            pieces, last = [], 0
            for cut, needle in zip(cuts, needles):
                pieces += [" ".join(sents[last:cut]), needle]
                last = cut
            pieces.append(" ".join(sents[last:]))
            context = " ".join(p for p in pieces if p)
        else:
            if spec.haystack == "noise":
                units = [NOISE] * count
            else:
                units = []
                while len(units) < count:  # distractors never reuse a queried key (that would make it ambiguous)
                    key = _random_value(spec.key_type, rng)
                    if key not in keys:
                        units.append(NEEDLE.format(type_needle_v=spec.value_type, key=key, value=_random_value(spec.value_type, rng)))
            for pos, needle in zip(sorted(rng.sample(range(count), len(needles)), reverse=True), needles):
                units.insert(pos, needle)
            context = "\n".join(units)
        picked = rng.sample(range(k), spec.q)
        query = _and_join([keys[i] for i in picked])
        answers = [v for i in picked for v in values[i]]
        template, type_v = NIAH_TEMPLATE + NIAH_PREFIX, spec.value_type
        if spec.q * spec.v == 1:  # RULER's singular rewrite of template and prefix
            for a, b in (("Some", "A"), ("are all", "is"), ("are", "is"), ("answers", "answer")):
                template = template.replace(a, b)
            type_v = type_v[:-1]
        prompt = template.format(type_needle_v=type_v, context=context, query=query)
        return Instance(prompt, answers, " " + _and_join(answers) + ".")

    def _vt_text(self, count: int, rng: random.Random, name_len: int) -> tuple[str, list[str]]:
        names: list[str] = []
        while len(names) < 5:  # 1 chain, 4 hops
            name = "".join(rng.choices(string.ascii_uppercase, k=name_len))
            if name not in names:
                names.append(name)
        value = str(rng.randint(10000, 99998))  # numpy randint(10000, 99999) excludes 99999
        chain = [f"VAR {names[0]} = {value}"] + [f"VAR {names[j + 1]} = VAR {names[j]} " for j in range(4)]
        units: list[str] = [NOISE] * count
        if count >= len(chain):
            slots = sorted(rng.sample(range(count), len(chain)))
        else:  # fewer noise blocks than statements: statements may share a slot, order kept
            slots = sorted(rng.choices(range(count + 1), k=len(chain)))
        for j, (pos, stmt) in enumerate(zip(slots, chain)):
            units.insert(pos + j, stmt)
        context = "\n".join(units).replace(". \n", ".\n")
        prompt = VT_TEMPLATE.format(context=context, query=value) + VT_PREFIX.format(num_v=5, query=value)
        return prompt, names

    def _vt(self, count: int, rng: random.Random, index: int) -> Instance:
        if self._vt_icl_count is None:  # the one-shot example: its own search within 500 tokens
            best = None
            for c in range(0, 64):
                p, _ = self._vt_text(c, self._rng("icl-calibrate"), 3)
                if self.tokens(p) + self.max_new > 500:
                    break
                best = c
            self._vt_icl_count = 0 if best is None else best
        icl_prompt, icl_names = self._vt_text(self._vt_icl_count, rng, 3)
        prompt, names = self._vt_text(count, rng, 5)
        return Instance(icl_prompt + " ".join(icl_names) + "\n\n" + prompt, names, " ".join(names))

    def _cwe_list(self, words: list[str], num: int, rep_c: int, rep_u: int) -> tuple[str, list[str]]:
        common = words[:10]
        entries = common * rep_c + words[10:num] * rep_u
        random.Random(FIXED_SHUFFLE_SEED).shuffle(entries)
        return " ".join(f"{i + 1}. {w}" for i, w in enumerate(entries)), common

    def _cwe(self, count: int, rng: random.Random, index: int) -> Instance:
        pool = word_pool(count)
        ex_num, ex_c, ex_u, rep_c, rep_u = (20, 3, 1, 6, 1) if self.cwe_short else (40, 10, 3, 30, 3)
        ex_ctx, ex_ans = self._cwe_list(rng.sample(pool, ex_num), ex_num, ex_c, ex_u)
        ctx, answers = self._cwe_list(rng.sample(pool, count), count, rep_c, rep_u)
        numbered = " ".join(f"{i + 1}. {w}" for i, w in enumerate(answers))
        example = CWE_TEMPLATE.format(context=ex_ctx) + CWE_PREFIX + " " + " ".join(f"{i + 1}. {w}" for i, w in enumerate(ex_ans))
        return Instance(example + "\n" + CWE_TEMPLATE.format(context=ctx) + CWE_PREFIX, answers, " " + numbered)

    def _fwe(self, num_words: int, rng: random.Random, index: int) -> Instance:
        size = max((self.length - self.max_new) // 50, 5)
        vocab: set[str] = set()
        while len(vocab) < size:
            vocab.add("".join(rng.choices(string.ascii_lowercase, k=6)))
        words = sorted(vocab)
        random.Random(FIXED_SHUFFLE_SEED).shuffle(words)
        words[0] = "..."  # rank 1 is noise
        zeta2 = math.pi**2 / 6  # zeta(alpha) at RULER's alpha = 2.0
        text = [w for k, w in enumerate(words, 1) for _ in range(int(num_words * k**-2.0 / zeta2))]
        random.Random(FIXED_SHUFFLE_SEED).shuffle(text)
        answers = words[1:4]
        return Instance(FWE_TEMPLATE.format(context=" ".join(text)) + FWE_PREFIX, answers, " " + " ".join(answers))

    def _qa(self, num_docs: int, rng: random.Random, index: int) -> Instance:
        qa = self.qa
        qi = self.question_offset + index
        if self.wrap and len(qa.questions) > self.question_offset:
            qi = self.question_offset + index % (len(qa.questions) - self.question_offset)
        if qi >= len(qa.questions):
            raise ConfigError(
                f"task '{self.task}': question {qi} requested but the {qa.kind} file holds {len(qa.questions)} usable questions"
            )
        query, refs, gold, more = qa.questions[qi]
        if num_docs >= len(qa.docs):
            ids = list(range(len(qa.docs)))
        elif num_docs - len(gold) > len(more):
            taken = set(gold) | set(more)
            rest = [i for i in range(len(qa.docs)) if i not in taken]
            ids = gold + more + rng.sample(rest, min(len(rest), num_docs - len(gold) - len(more)))
        else:
            ids = gold + rng.sample(more, max(0, num_docs - len(gold)))
        docs = [qa.docs[i] for i in ids]
        random.Random(FIXED_SHUFFLE_SEED).shuffle(docs)
        context = "\n\n".join(f"Document {i + 1}:\n{d}" for i, d in enumerate(docs))
        return Instance(QA_TEMPLATE.format(context=context, query=query) + QA_PREFIX, list(refs), " " + refs[0])
