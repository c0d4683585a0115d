"""What scispaCy's AbbreviationDetector found, as the linker uses it: a short form's long form
(`long_forms`, from either of the detector's forms, with the definitions it misses added:
`missed_definitions` and `short_form_segments`, and the short forms used without one:
`undefined_short_forms`),
entities put right by the definitions (`follow_long_forms`) and mention texts with short forms
expanded (`expand_abbreviations`, `linked_text`)."""
import re
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from spacy.lang.en.stop_words import STOP_WORDS
from spacy.tokens import Doc, Span

from ..kb.concepts import is_short_form
from .elements import element_name
from .formulas import formula_name

# What may close a short form inside its parenthesis: "(T)", "(PB: 15 mg/kg)", "(MDS; n = 12)".
_SHORT_FORM_END = {")", ":", ";", ","}
# Words no name ends in, written in lower case (a capital "A" ends "cyclosporin A").
_FUNCTION_WORDS = {"the", "a", "an", "of", "and", "or", "in", "on", "at", "to", "for", "with", "by", "from", "as"}


def long_forms(doc: Doc, missed: bool = True, entities: Optional[Sequence[Span]] = None,
               is_name: Optional[Callable[[str], bool]] = None) -> Dict[str, Span]:
    """Short form text → its long form's span, from scispaCy's AbbreviationDetector in either
    form (spans, or dicts with make_serializable=True); the first definition of a short form
    wins. missed: add the definitions the detector misses (`missed_definitions`, then the parts
    of hyphenated short forms: `short_form_segments`), and, given
    the doc's `entities`, the short forms among them used without a definition
    (`undefined_short_forms`, which reads one-word long forms only given the dictionary's
    `is_name`)."""
    if not Doc.has_extension("abbreviations"):
        return {}
    found: Dict[str, Span] = {}
    for short in doc._.abbreviations or []:
        if isinstance(short, dict):  # AbbreviationDetector(make_serializable=True)
            if short.get("short_text") and short.get("long_text") and "long_start" in short:
                found.setdefault(short["short_text"], doc[short["long_start"]:short["long_end"]])
            continue
        long_form = getattr(short._, "long_form", None) if Span.has_extension("long_form") else None
        if isinstance(long_form, Span):
            found.setdefault(short.text, long_form)
    found = {short: right for short, form in found.items() if (right := put_right(short, form)) is not None}
    if missed:
        for short, form in missed_definitions(doc, found).items():
            found.setdefault(short, form)
        for short, form in short_form_segments(found).items():
            found.setdefault(short, form)
        for short, form in undefined_short_forms(entities or (), found, is_name).items():
            found.setdefault(short, form)
    return found


def undefined_short_forms(entities: Sequence[Span], found: Dict[str, Span],
                          is_name: Optional[Callable[[str], bool]] = None) -> Dict[str, Span]:
    """Short forms an author uses without defining them ("OAB" in a text that says "overactive
    bladder" once): an entity that looks like a short form and has no definition in `found`
    takes the other entity it abbreviates, which must be the only such entity text (case
    aside), have two or more words, match it by Schwartz & Hearst's rule from its first word,
    and have word initials (hyphens split words) that the short form spells in order:
    "insulin-dependent diabetes mellitus" for IDDM, never "DMPK deficient" for DM. On the
    train splits of NCBI-disease and BC5CDR these resolved 115 mentions, every one to an entity
    of the same gold concept.

    Failing that, given `is_name`, a short form of three or more letters that is no name of the
    dictionary takes the one entity of one word that it abbreviates by the same rule, the word
    starting with its first letter and holding the others in order ("TAC" for "tacrolimus",
    "BZDs" for "benzodiazepines"); never a name the dictionary knows ("ATP" is no "atropine").
    On the train splits of BC5CDR-chemical and NCBI-disease this resolved 12 mentions, every
    one to an entity of the same gold concept."""
    from .schwartz_hearst import find_abbreviation  # scispaCy's, copied: the same output

    longer = [ent for ent in entities if len(ent.text.split()) >= 2 and not is_short_form(ent.text)]
    words = [ent for ent in entities if ent.text.isalpha() and not is_short_form(ent.text)]
    added: Dict[str, Span] = {}
    tried = set(found)
    for ent in entities:
        short = ent.text
        if short in tried or not is_short_form(short):
            continue
        tried.add(short)
        short_span = Doc(ent.doc.vocab, words=[short])[:]
        matches = [other for other in longer if _spells_initials(short, other.text)
                   and getattr(find_abbreviation(other, short_span)[1], "start", None) == other.start]
        if not matches and is_name is not None and not is_name(short):
            matches = [other for other in words if _spells_word(short, other.text)]
        if len({other.text.lower() for other in matches}) == 1:
            added[short] = matches[0]
    return added


def _spells_word(short: str, word: str) -> bool:
    """Whether a short form of three or more letters only (a plural's "s" aside) abbreviates
    the one word `word` by Schwartz & Hearst's rule: the word is longer, starts with its first
    letter and holds the others in order. Two letters in order are found in too many words to
    tell ("NO" is no "nitroglycerin")."""
    letters = short[:-1] if _plural(short) else short
    return (len(letters) >= 3 and letters.isalpha() and len(word) > len(letters)
            and word[0].lower() == letters[0].lower() and _in_order(letters[1:].lower(), word[1:].lower()))


def put_right(short: str, form: Span) -> Optional[Span]:
    """A long form as Schwartz & Hearst's algorithm finds it, put right: none if it holds a
    parenthesis of its own or half of one ("carboplatin's advantages (CBDCA) over cisplatin" is
    no definition of CDDP; a bracket inside a word, "poly(ADP-ribose) polymerase", stays), or if
    the short form holds half of one, or if it ends in a function word, as no name does ("Na+-binding
    properties of the (Na,K)-ATPase"); and the words right before it when their initials spell
    the short form, a plural's "s" aside, where the algorithm stopped at the shortest match
    inside a word ("combined oral contraceptives (COCs)", not "contraceptives"), or the whole
    word where it began after the locants a chemical name opens with (`_whole_word`)."""
    if (not _balanced(short) or not _balanced(form.text) or re.search(r"\s[(\[]", form.text)
            or form[-1].text in _FUNCTION_WORDS):
        return None
    letters = short[:-1] if _plural(short) else short
    if len(letters) >= 2 and letters.isalpha() and len(form) < len(letters) <= form.end:
        words = form.doc[form.end - len(letters):form.end]
        if all(t.is_alpha for t in words) and all(t.text[0].lower() == c.lower() for t, c in zip(words, letters)):
            return words
    return _whole_word(form)


# What a chemical name can open with before a hyphen: a locant ("2", "3'", "N(6)"), a letter
# ("X-linked", "p-", "L-"), a Greek letter, a stereo descriptor ("(R)", "(+/-)", "cis"), any of
# them in a list ("2,3"); case aside.
_LOCANT = (r"(?:\d+[a-z]?'*|[a-z](?:\(\d+\))?|alpha|beta|gamma|delta|epsilon|kappa|omega|[\u03b1-\u03c9]"
           r"|\([rsez+-]\)|\(\+/-\)|cis|trans|tert|sec|iso|dl)")
_PREFIXES = re.compile(rf"(?:{_LOCANT}(?:,{_LOCANT})*-)+", re.IGNORECASE)


def _whole_word(form: Span) -> Span:
    """`form` from the start of its first word where Schwartz & Hearst began it after the
    locants and letters a chemical name opens with ("2-methyl-6-(phenylethynyl)pyridine (MPEP)",
    not "methyl-6-(phenylethynyl)pyridine"; "gamma-glutamyltransferase (GT)")."""
    doc, start = form.doc, form.start_char
    word_start = start
    while word_start > 0 and not doc.text[word_start - 1].isspace():
        word_start -= 1
    prefix = doc.text[word_start:start] + ("-" if form.text.startswith("-") else "")
    if word_start == start or not _PREFIXES.fullmatch(prefix):
        return form
    whole = doc.char_span(word_start, form.end_char)
    return whole if whole is not None else form


def _balanced(text: str) -> bool:
    """Whether every bracket in `text` closes one opened before it, and every one opened closes."""
    depth = 0
    for c in text:
        depth += (c in "([") - (c in ")]")
        if depth < 0:
            return False
    return depth == 0


def short_form_segments(found: Dict[str, Span]) -> Dict[str, Span]:
    """The parts of a hyphenated short form that are short forms themselves, each with its own
    words of the long form: "HPT" → "hyperparathyroidism" and "JT" → "jaw tumor" once
    "hyperparathyroidism-jaw tumor syndrome (HPT-JT)" is defined, "ALD" after "X-linked
    adrenoleukodystrophy (X-ALD)", "HT" after "glucocorticoid-induced hypertension (GC-HT)".
    Each part takes a run of the long form's words (split at spaces and hyphens), the first
    part's from the first word, every run starting with its part's initial and holding its
    letters and digits in order; a part's long form is the shortest start of its run that holds
    them. A short form whose long form splits so in more than one way, or with a part that does
    not start with a letter ("5-HT": "HT" is no serotonin), gives nothing. `found`:
    the definitions so far, which these never replace."""
    added: Dict[str, Span] = {}
    for short, form in found.items():
        parts = short.split("-")
        # "5-HT", "6-OHDA": a part after a number is no short form of its own
        if len(parts) < 2 or not all(part[:1].isalpha() for part in parts):
            continue
        words = [t for t in form if any(c.isalnum() for c in t.text)]
        splits = _segment_starts(parts, [t.text.lower() for t in words], 0, 0)
        if len(splits) != 1:
            continue
        starts = splits[0] + [len(words)]
        for k, part in enumerate(parts):
            if len(part) < 2 or not is_short_form(part) or part in found or part in added:
                continue
            letters = [c.lower() for c in part if c.isalnum()]
            end = next(e for e in range(starts[k] + 1, starts[k + 1] + 1)
                       if _in_order(letters, "".join(t.text.lower() for t in words[starts[k]:e])))
            added[part] = form.doc[words[starts[k]].i:words[end - 1].i + 1]
    return added


def _segment_starts(parts: Sequence[str], words: Sequence[str], k: int, start: int) -> List[List[int]]:
    """Every way to give parts[k:] runs of `words` from `start` on (short_form_segments), as the
    runs' first word indices; at most two, which is all the caller asks."""
    if k == len(parts):
        return [[]]
    if start >= len(words) or words[start][0] != parts[k][0].lower():
        return []
    letters = [c.lower() for c in parts[k] if c.isalnum()]
    ways: List[List[int]] = []
    ends = range(start + 1, len(words)) if k + 1 < len(parts) else [len(words)]
    for end in ends:
        if not _in_order(letters, "".join(words[start:end])):
            continue
        for rest in (_segment_starts(parts, words, k + 1, end) if k + 1 < len(parts) else [[]]):
            ways.append([start] + rest)
            if len(ways) > 1:
                return ways
    return ways


def _in_order(letters: Iterable[str], text: Iterable[str]) -> bool:
    """Whether `letters` occur in `text` (a string or other sequence of characters) in order."""
    remaining = iter(text)
    return all(c in remaining for c in letters)


def _spells_initials(short: str, long_form: str) -> bool:
    """Whether the initials of `long_form`'s words (split at spaces and hyphens) occur in order
    among the letters and digits of `short`, case aside."""
    initials = (word[0].lower() for word in re.split(r"[\s-]+", long_form) if word)
    return _in_order(initials, (c.lower() for c in short if c.isalnum()))


def missed_definitions(doc: Doc, found: Dict[str, Span]) -> Dict[str, Span]:
    """Definitions scispaCy's detector (Schwartz & Hearst's algorithm) does not report, as Ab3P,
    the detector BioSyn's protocol used, does: a short form followed by more text in its
    parenthesis ("phenobarbital (PB: 15 mg/kg)", "(T, 5 mg)"); a one-letter short form, which
    must be the initial of the word before it ("testosterone (T)"); a plural short form whose
    "s" the long form lacks ("excited delirium (EDDs)"); and the singular of a plural short form
    ("VSD" once "ventricular septal defects (VSDs)" is defined). `found`: what the detector
    found, which these never replace."""
    added: Dict[str, Span] = {}
    for open_at in (t.i for t in doc if t.text == "(" and t.i > 0):
        end = open_at + 1
        while end < len(doc) and end - open_at <= 3 and doc[end].text not in _SHORT_FORM_END:
            if end > open_at + 1 and doc[end - 1].whitespace_:
                break
            end += 1
        if end >= len(doc) or doc[end].text not in _SHORT_FORM_END or end == open_at + 1:
            continue
        short = doc[open_at + 1:end].text
        if short in found or short in added or not is_short_form(short):
            continue
        long_form = _long_form(doc, open_at, short)
        if long_form is not None and (long_form := put_right(short, long_form)) is not None:
            added[short] = long_form
    for short, form in list({**found, **added}.items()):
        singular = short[:-1]
        if _plural(short) and singular not in found and singular not in added:
            added[singular] = form
    return added


def _plural(short: str) -> bool:
    """A plural short form: capitals, then a lower-case "s" ("VSDs", "PAs")."""
    return len(short) >= 3 and short.endswith("s") and short[:-1].isupper()


def _long_form(doc: Doc, open_at: int, short: str) -> Optional[Span]:
    """The long form of `short` in the words before the parenthesis at `open_at`, or None."""
    from .schwartz_hearst import find_abbreviation  # scispaCy's, copied: the same output

    if len(short) == 1:
        word = doc[open_at - 1]
        fits = word.is_alpha and len(word) >= 3 and word.text[0].lower() == short.lower()
        return doc[open_at - 1:open_at] if fits else None
    n_words = min(len(short) + 5, len(short) * 2)
    candidate = doc[max(open_at - n_words, 0):open_at]
    for form in (short, short[:-1]) if _plural(short) else (short,):
        _, long_form = find_abbreviation(candidate, Doc(doc.vocab, words=[form])[:])
        if long_form is not None and len(long_form.text) > len(form):
            # Schwartz & Hearst stop at the nearest word with the right initial, which can take
            # a letter from inside a word: "attenuated adenomatous polyposis coli (AAPC)" gives
            # "adenomatous polyposis coli". While the short form has more letters than the long
            # form words, a word before with its initial joins.
            start, letters = long_form.start, sum(c.isalpha() for c in form)
            while (start > candidate.start and long_form.end - start < letters and doc[start - 1].is_alpha
                   and doc[start - 1].text[0].lower() == form[0].lower()):
                start -= 1
            return doc[start:long_form.end]
    return None


def follow_long_forms(ents: Iterable[Span], forms: Dict[str, Span]) -> List[Span]:
    """Entities put right by the abbreviations' definitions (short form → long form span). An
    entity that ends where a long form ends but starts inside it ("diabetes mellitus" in
    "non-insulin-dependent diabetes mellitus (NIDDM)") is widened to the whole long form, when
    no other entity overlaps it and the words before it hold no function word (spaCy's stop
    words: in "mammalian target of rapamycin (mTOR)" or "Deleted in Colorectal Cancer (DCC)" the
    entity is not what the short form names, and neither moves). Then a short form takes the
    label of the one entity over its long form ("NIDDM" tagged Chemical after a
    Disease long form becomes a Disease). kb_ids are kept."""
    ents = list(ents)
    label_of: Dict[str, int] = {}
    for short, form in forms.items():
        inside = [i for i, ent in enumerate(ents) if ent.start < form.end and form.start < ent.end]
        if len(inside) != 1:
            continue
        ent = ents[inside[0]]
        if ent.end == form.end and form.start < ent.start:
            if any(token.lower_ in STOP_WORDS for token in ent.doc[form.start:ent.start]):
                continue  # the entity is no head of the long form: "mammalian target of rapamycin (mTOR)"
            ents[inside[0]] = ent = Span(ent.doc, form.start, form.end, label=ent.label, kb_id=ent.kb_id)
        label_of[short] = ent.label
    return [Span(ent.doc, ent.start, ent.end, label=label_of[ent.text], kb_id=ent.kb_id)
            if label_of.get(ent.text, ent.label) != ent.label else ent for ent in ents]


def short_form_entities(ents: Sequence[Span], forms: Dict[str, Span]) -> List[Span]:
    """`ents` and, added, every occurrence of a short form whose long form is exactly an entity,
    or which is an entity itself somewhere, as an entity of that label, where no entity
    overlaps it: an NER that tags "grape seed proanthocyanidin extract (GSPE)" once often
    misses the "GSPE" that follows. The short form is matched as written (case kept), token
    for token. On train fold 0 of BC5CDR and NCBI-disease held out from the bundled NER's
    training, span F1 78.3 → 80.2 and 78.8 → 80.2 (docs/results.md)."""
    if not ents or not forms:
        return list(ents)
    bounds = {(ent.start, ent.end): ent.label for ent in ents}
    labels: Dict[str, int] = {}
    for short, form in forms.items():
        if (form.start, form.end) in bounds:
            labels[short] = bounds[(form.start, form.end)]
    for ent in ents:
        if ent.text in forms:
            labels.setdefault(ent.text, ent.label)
    return _tagged_where_written(ents, labels.items())


# The shortest entity text repeated_entities repeats: shorter ones are mostly short forms, which
# short_form_entities repeats where the document defines them. Chosen on the held-out train
# folds (4, 5 or 7 characters, case kept or not: within 0.06 of each other; docs/results.md).
REPEAT_MIN_CHARS = 5


def repeated_entities(ents: Sequence[Span], min_chars: int = REPEAT_MIN_CHARS) -> List[Span]:
    """`ents` and, added, every other occurrence of an entity's text (as written, token for
    token, at least `min_chars` characters) as an entity of its label, where no entity overlaps
    it; a text the document's entities give two labels is left alone, and longer texts are
    placed first. An NER that tags "cisplatin" in one sentence of an abstract often misses it in
    the next: on the five held-out train folds, the bundled NER's span F1 on BC5CDR rose by 0.67
    on average, on no fold less than 0.04, and NCBI-disease's did not move (docs/results.md)."""
    labels: Dict[str, set] = {}
    for ent in ents:
        labels.setdefault(ent.text, set()).add(ent.label)
    repeated = [(text, next(iter(labels[text]))) for text in sorted(labels, key=lambda text: (-len(text), text))
                if len(labels[text]) == 1 and len(text) >= min_chars]
    return _tagged_where_written(ents, repeated)


def _tagged_where_written(ents: Sequence[Span], labelled: Iterable[Tuple[str, int]]) -> List[Span]:
    """`ents` and, added, each occurrence of each text of `labelled` ((text, label), in order) as
    an entity of its label where no entity (given or added before) overlaps it, sorted."""
    if not ents:
        return list(ents)
    doc = ents[0].doc
    taken = [False] * len(doc)
    for ent in ents:
        taken[ent.start:ent.end] = [True] * (ent.end - ent.start)
    added: List[Span] = []
    starts = _token_starts(doc)
    for text, label in labelled:
        for start, end in _occurrences(doc, text, starts):
            if not any(taken[start:end]):
                taken[start:end] = [True] * (end - start)
                added.append(Span(doc, start, end, label=label))
    return sorted([*ents, *added], key=lambda span: span.start) if added else list(ents)


def _token_starts(doc: Doc) -> Dict[str, List[int]]:
    """Each token text's positions in `doc`, ascending."""
    starts: Dict[str, List[int]] = {}
    for i, token in enumerate(doc):
        starts.setdefault(token.text, []).append(i)
    return starts


def _occurrences(doc: Doc, text: str, starts: Dict[str, List[int]]) -> Iterable[Tuple[int, int]]:
    """(start, end) of each run of tokens that reads exactly `text`, in order. starts: each token
    text's positions in `doc` (_token_starts): a run is read only from a token whose text begins
    `text`, found in as many lookups as `text` has characters (reading from every token took
    26 s for the 1,300 entity texts of a 92,000-token document; this, 0.66 s)."""
    begins = sorted(i for length in range(1, len(text) + 1) for i in starts.get(text[:length], ()))
    for start in begins:
        token = doc[start]
        end, read = start + 1, token.text
        while len(read) < len(text) and end < len(doc):
            read += doc[end - 1].whitespace_ + doc[end].text
            end += 1
        if read == text:
            yield start, end


def expand_abbreviations(text: str, abbreviations: Dict[str, str]) -> str:
    """Replace each short form that stands as a whole word in `text` by its long form. A short
    form in parentheses right after its own long form is the definition itself
    ("glucose-6-phosphate dehydrogenase (G6PD) deficiency"), so it is dropped rather than
    expanded into the long form twice; and a long form of two or more words whose last word
    the text repeats right after the short form leaves that word once ("HPT-JT syndrome" is
    "hyperparathyroidism-jaw tumor syndrome", not "… syndrome syndrome")."""
    if not abbreviations:
        return text
    if text in abbreviations:
        return abbreviations[text]
    forms = "|".join(re.escape(s) for s in sorted(abbreviations, key=len, reverse=True))

    def echo(match: "re.Match") -> str:
        before = text[: match.start()].rstrip().casefold()
        return "" if before.endswith(abbreviations[match.group(1)].casefold()) else match.group(0)

    def expand(match: "re.Match") -> str:
        long_form = abbreviations[match.group(0)]
        head, _, last = long_form.rpartition(" ")
        after = re.match(r"\s+(\w+)", text[match.end():])
        return head if head and after and after.group(1).casefold() == last.casefold() else long_form

    text = re.sub(r"\s*\(\s*(" + forms + r")\s*\)", echo, text)
    return re.sub(r"(?<!\w)(" + forms + r")(?!\w)", expand, text)


def linked_text(text: str, abbreviations: Dict[str, str], is_name: Callable[[str], bool]) -> str:
    """The text a mention is linked as: `text` with its short forms expanded, unless it is more
    than a short form and the dictionary holds it as written (`is_name`): "diminished GALC
    activity" is a MEDIC name, "diminished galactosylceramidase activity" none. A bare short
    form is always expanded ("PD" is a name of several concepts, Parkinson's disease's defined
    one among them). A chemical element's symbol that the text does not define otherwise is
    linked as the element's name, and a molecular formula as its compound's, when that is a name
    of the dictionary: "Na" as sodium (elements.element_name), "NaCl" as sodium chloride
    (formulas.formula_name)."""
    expanded = expand_abbreviations(text, abbreviations)
    if expanded == text:
        name = element_name(text) or formula_name(text)
        return name if name is not None and is_name(name) else text
    if text not in abbreviations and is_name(text):
        return text
    return expanded
