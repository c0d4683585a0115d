"""The pipe's own knobs (`PipeSettings`), the Span extensions it writes (`ATTRIBUTES`), the
`Setting` descriptor that makes every knob an attribute of the live pipe, and the stack level
that makes a warning name the user's line."""
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from ..candidates import check_settings

# The Span extensions the pipe sets, by role; `attributes` renames them.
ATTRIBUTES = {"cui": "cui", "score": "cui_score", "candidates": "kb_ents", "nil_candidates": "nil_kb_ents"}


@dataclass
class PipeSettings:
    """What the pipe links and where it writes (knobs of the pipe's config).

    resolve_abbreviations: link the long form of abbreviations found by scispaCy's
        AbbreviationDetector (`doc._.abbreviations`), with the definitions it misses when such a
        detector runs before this pipe, and a short form the text never defines as the one other
        entity it abbreviates; and put entities right by the definitions (an entity that ends a
        long form but starts inside it is widened to it; a short form takes the label of the
        entity over its long form). docs/evaluation.md names each step.
    labels: entity labels to link; empty links every entity (any case: DISEASE is Disease).
    label_types: entity label → allowed concept type prefixes (e.g. {"Disease": ["C", "F03"]});
        None takes the index's own mapping, {} restricts nothing.
    spans_key: link the span group `doc.spans[spans_key]` (as medspaCy keeps its entities)
        instead of `doc.ents`.
    batch_size: documents per batch in `pipe` at most (their distinct mentions are encoded
        together); a larger batch that `nlp.pipe` hands over (its default is 1,000) is linked in
        parts of this size, which took 42 MB off the peak at the same speed.
    attributes: the names of the Span extensions set, {"cui": …, "score": …, "candidates": …,
        "nil_candidates": …}: a NIL entity's candidates (below the threshold, so its `kb_ents`
        is empty) go in the last, so a user can see how close it came; a linked entity's is [].
    parenthetical_labels: entity labels (any case) whose "A (B)" pairs read B as another name of A:
        the one scoring lower and its repeats in the document take the other's candidates
        ("amrubicin (SM-5887)", "WR-2721 (amifostine)"; mentions.parenthetical); empty: none.
        Chemical only by default:
        for diseases a parenthesis is as often a subtype or a cause as a synonym.
    short_form_entities: with resolve_abbreviations, a short form whose long form is exactly an
        entity (or which is an entity where it is defined) becomes an entity of that label
        wherever else the text uses it and no entity overlaps it: an NER that tags
        "grape seed proanthocyanidin extract (GSPE)" often misses the later "GSPE"s
        (mentions.abbreviations.short_form_entities). false: the NER's entities only.
    repeated_entities: an entity's text (at least 5 characters, as written) becomes an entity of
        its label wherever else the document writes it and no entity overlaps it, unless the
        document's entities give it two labels (mentions.abbreviations.repeated_entities). The
        bundled pipeline sets it (docs/results.md: span F1 on held-out train folds); false keeps
        the NER's entities, as scispaCy's linker does.
    drop_unlinked: an entity of a label this pipe links whose best concept scores below
        `threshold` is removed (from doc.ents, or the span group) instead of kept as a NIL
        entity: the linker as a second opinion on an NER that tags what no concept names. The
        bundled pipeline sets it (docs/results.md: span F1 on held-out train folds); false keeps
        every entity the NER gives, as scispaCy's linker does.
    """

    resolve_abbreviations: bool = True
    labels: List[str] = field(default_factory=list)
    label_types: Optional[Dict[str, List[str]]] = None
    spans_key: Optional[str] = None
    batch_size: int = 256
    attributes: Dict[str, str] = field(default_factory=lambda: dict(ATTRIBUTES))
    parenthetical_labels: List[str] = field(default_factory=lambda: ["Chemical"])
    short_form_entities: bool = True
    repeated_entities: bool = False
    drop_unlinked: bool = False

    def __post_init__(self) -> None:
        check_settings(self)
        for key in ("labels", "parenthetical_labels"):
            value = getattr(self, key)
            if not (isinstance(value, (list, tuple)) and all(isinstance(label, str) for label in value)):
                raise ValueError(f"{key} ({value!r}) must be a list of entity labels, such as [\"Chemical\"]; set it "
                                 "in the sapbert_linker config.")
        if isinstance(self.attributes, dict) and set(self.attributes) < set(ATTRIBUTES):
            self.attributes = {**ATTRIBUTES, **self.attributes}
        if not (isinstance(self.attributes, dict) and set(self.attributes) == set(ATTRIBUTES)
                and all(isinstance(v, str) and v for v in self.attributes.values())):
            raise ValueError(f"attributes ({self.attributes!r}) must name the Span extensions {sorted(ATTRIBUTES)}, such as "
                             f"{ATTRIBUTES}; set it in the sapbert_linker config.")


class Setting:
    """A knob of one of the pipe's settings objects (`group`: the attribute holding it), read and
    written as an attribute of the pipe (`linker.threshold = 0.5`): a value is checked as the
    config's is, the old one kept when refused, and the remembered candidates are forgotten."""

    def __init__(self, group: str):
        self.group = group

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, pipe, owner=None):
        return self if pipe is None else getattr(getattr(pipe, self.group), self.name)

    def __set__(self, pipe, value) -> None:
        settings = getattr(pipe, self.group)
        old = getattr(settings, self.name)
        setattr(settings, self.name, value)
        try:
            settings.__post_init__()
        except ValueError:
            setattr(settings, self.name, old)
            raise
        pipe.settings_changed()


def users_line() -> int:
    """The stacklevel, for a warnings.warn in the caller, of the first frame outside this package
    and the libraries that call it (spaCy, confection, thinc): a warning names the user's line."""
    import confection
    import spacy
    import thinc

    libraries = tuple(str(Path(module.__file__).parent) for module in (sys.modules[__package__.split(".")[0]],
                                                                        spacy, confection, thinc))
    frame, level = sys._getframe(2), 2
    while frame.f_back is not None and frame.f_code.co_filename.startswith(libraries):
        frame, level = frame.f_back, level + 1
    return level
