"""What scispaCy's AbbreviationDetector found, as the linker uses it: a short form's long form
(`long_forms`, from either of the detector's forms), entities put right by the definitions
(`follow_long_forms`) and mention texts with short forms expanded (`expand_abbreviations`)."""
import re
from typing import Dict, Iterable, List

from spacy.tokens import Doc, Span


def long_forms(doc: Doc) -> Dict[str, Span]:
    """Short form text → its long form's span, from scispaCy's AbbreviationDetector in either
    form (spans, or dicts with make_serializable=True); the first definition of a short form wins."""
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
    return found


def follow_long_forms(ents: Iterable[Span], forms: Dict[str, Span]) -> List[Span]:
    """Entities put right by the abbreviations' definitions (short form → long form span). An
    entity that ends where a long form ends but starts inside it ("diabetes mellitus" in
    "non-insulin-dependent diabetes mellitus (NIDDM)") is widened to the whole long form, when
    no other entity overlaps it: the author defined the term, so its span is known. Then a short
    form takes the label of the one entity over its long form ("NIDDM" tagged Chemical after a
    Disease long form becomes a Disease). kb_ids are kept."""
    ents = list(ents)
    label_of: Dict[str, int] = {}
    for short, form in forms.items():
        inside = [i for i, ent in enumerate(ents) if ent.start < form.end and form.start < ent.end]
        if len(inside) != 1:
            continue
        ent = ents[inside[0]]
        if ent.end == form.end and form.start < ent.start:
            ents[inside[0]] = ent = Span(ent.doc, form.start, form.end, label=ent.label, kb_id=ent.kb_id)
        label_of[short] = ent.label
    return [Span(ent.doc, ent.start, ent.end, label=label_of[ent.text], kb_id=ent.kb_id)
            if label_of.get(ent.text, ent.label) != ent.label else ent for ent in ents]


def expand_abbreviations(text: str, abbreviations: Dict[str, str]) -> str:
    """Replace each short form that stands as a whole word in `text` by its long form."""
    if not abbreviations:
        return text
    if text in abbreviations:
        return abbreviations[text]
    pattern = r"(?<!\w)(" + "|".join(re.escape(s) for s in sorted(abbreviations, key=len, reverse=True)) + r")(?!\w)"
    return re.sub(pattern, lambda m: abbreviations[m.group(0)], text)
