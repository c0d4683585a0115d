"""`sapbert_ner`: a token classifier over wordpieces (MiniLM fine-tuned for BIO tags, exported to
int8 ONNX) as a spaCy component that sets `doc.ents`, run with ONNX Runtime and `tokenizers`
only, so a pipeline that uses it never imports torch.

A document's text is cut into wordpiece windows of `max_length` that overlap by `stride`; each
wordpiece takes its tags from the window where it lies furthest from an edge. Spans are read off
the tags (decode_tags), widened to whole spaCy tokens, and set as the document's entities,
replacing any it had. Each entity's `_.ner_score` is the mean probability of its tags.

The directory a model lives in holds `model.onnx`, `tokenizer.json` and `tagger.json` (its tags,
window and how it was made); training.tagger writes it.
"""
import json
import os
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
from spacy.language import Language
from spacy.tokens import Doc, Span
from spacy.util import filter_spans

TAGGER_META = "tagger.json"
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
FORMAT_VERSION = 1

if not Span.has_extension("ner_score"):
    Span.set_extension("ner_score", default=None)


class TaggerError(ValueError):
    """A tagger directory that cannot be read: one sentence saying which file and why."""


def bio_tags(labels: Sequence[str]) -> List[str]:
    """The tag set of `labels`: "O", then B- and I- of each label in order."""
    return ["O"] + [f"{prefix}-{label}" for label in labels for prefix in ("B", "I")]


def decode_tags(tags: Sequence[str], offsets: Sequence[Tuple[int, int]], probs: Optional[Sequence[float]] = None
                ) -> List[Tuple[int, int, str, float]]:
    """Character spans (start, end, label, mean tag probability) from one text's wordpiece tags.

    A span opens at a B- tag, or at an I- tag that does not continue a span of its label, and
    runs over the I- tags of its label that follow. Wordpieces with empty offsets (special
    tokens) are skipped."""
    spans: List[Tuple[int, int, str, float]] = []
    label, start, end, scores = None, 0, 0, []
    for i, (tag, (s, e)) in enumerate(zip(tags, offsets)):
        if s == e:
            continue
        prefix, _, tag_label = tag.partition("-")
        if prefix == "I" and tag_label == label:
            end = e
            scores.append(probs[i] if probs is not None else 1.0)
            continue
        if label is not None:
            spans.append((start, end, label, float(np.mean(scores))))
        label = tag_label if prefix in ("B", "I") else None
        start, end, scores = s, e, [probs[i] if probs is not None else 1.0]
    if label is not None:
        spans.append((start, end, label, float(np.mean(scores))))
    return spans


def windows(n: int, size: int, stride: int) -> List[Tuple[int, int]]:
    """[start, end) windows of at most `size` over n wordpieces, each overlapping the last by `stride`."""
    if n <= size:
        return [(0, n)]
    step = size - stride
    starts = list(range(0, n - size, step)) + [n - size]
    return [(s, s + size) for s in starts]


def best_window(position: int, spans: Sequence[Tuple[int, int]]) -> int:
    """The window in which `position` lies furthest from an edge."""
    return max(range(len(spans)), key=lambda w: min(position - spans[w][0], spans[w][1] - 1 - position))


class TokenTagger:
    """A tagger directory (model.onnx, tokenizer.json, tagger.json) run with ONNX Runtime."""

    def __init__(self, path: Union[str, Path], batch_size: int = 16):
        from tokenizers import Tokenizer

        self.path = Path(path)
        meta_file = self.path / TAGGER_META
        try:
            meta = json.loads(meta_file.read_text())
        except FileNotFoundError:
            raise TaggerError(f"{meta_file} is missing, so {self.path} is not a sapbert_ner model; "
                              "train one with `spacy project run ner`.") from None
        except json.JSONDecodeError as err:
            raise TaggerError(f"{meta_file} line {err.lineno} is not JSON ({err.msg}); copy the model again.") from None
        if meta.get("format_version") != FORMAT_VERSION:
            raise TaggerError(f"{meta_file} has format version {meta.get('format_version')!r}, but this "
                              f"spacy-sapbert reads {FORMAT_VERSION}; train or export the tagger again.")
        for name in (MODEL_FILE, TOKENIZER_FILE):
            if not (self.path / name).exists():
                raise TaggerError(f"{self.path / name} is missing; copy the whole model directory again.")
        self.meta = meta
        self.tags: List[str] = meta["tags"]
        self.max_length = int(meta["max_length"])
        self.stride = int(meta["stride"])
        self.batch_size = batch_size
        self.tokenizer = Tokenizer.from_file(str(self.path / TOKENIZER_FILE))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.cls_id, self.sep_id = meta["cls_id"], meta["sep_id"]
        self._session = None
        self._session_pid = None

    @property
    def labels(self) -> List[str]:
        return list(dict.fromkeys(tag[2:] for tag in self.tags if tag != "O"))

    def session(self):
        """The ONNX Runtime session, made again in a forked child (its threads do not survive a fork)."""
        if self._session is None or self._session_pid != os.getpid():
            import onnxruntime

            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            self._session = onnxruntime.InferenceSession(str(self.path / MODEL_FILE), options,
                                                         providers=["CPUExecutionProvider"])
            self._session_pid = os.getpid()
        return self._session

    def __getstate__(self) -> dict:
        return dict(self.__dict__, _session=None, _session_pid=None)

    def spans(self, texts: Sequence[str]) -> List[List[Tuple[int, int, str, float]]]:
        """Each text's character spans (start, end, label, score)."""
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        pieces = []  # (text index, window start, window end)
        for t, encoding in enumerate(encodings):
            for start, end in windows(len(encoding.ids), self.max_length - 2, self.stride):
                pieces.append((t, start, end))
        probs: Dict[Tuple[int, int], np.ndarray] = {}
        order = sorted(range(len(pieces)), key=lambda p: pieces[p][2] - pieces[p][1])
        for b in range(0, len(order), self.batch_size):
            batch = [pieces[p] for p in order[b:b + self.batch_size]]
            width = max(end - start for _, start, end in batch) + 2
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for row, (t, start, end) in enumerate(batch):
                window = [self.cls_id, *encodings[t].ids[start:end], self.sep_id]
                ids[row, :len(window)] = window
                mask[row, :len(window)] = 1
            logits = self.session().run(None, {"input_ids": ids, "attention_mask": mask,
                                               "token_type_ids": np.zeros_like(ids)})[0]
            logits = logits - logits.max(-1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(-1, keepdims=True)
            for row, (t, start, end) in enumerate(batch):
                probs[(t, start)] = p[row, 1:1 + end - start]
        results = []
        for t, encoding in enumerate(encodings):
            n = len(encoding.ids)
            spans = windows(n, self.max_length - 2, self.stride)
            text_probs = np.zeros((n, len(self.tags)), dtype=np.float32)
            for i in range(n):
                w = best_window(i, spans) if len(spans) > 1 else 0
                text_probs[i] = probs[(t, spans[w][0])][i - spans[w][0]]
            best = text_probs.argmax(-1) if n else np.zeros(0, dtype=np.int64)
            tags = [self.tags[k] for k in best]
            results.append(decode_tags(tags, encoding.offsets, text_probs[np.arange(n), best]))
        return results


class SapbertNER:
    """The spaCy face of a TokenTagger: sets each document's entities from the tagger's spans."""

    def __init__(self, nlp: Language, name: str, model: Optional[str], batch_size: int):
        self.name = name
        self.model = model
        self.batch_size = batch_size
        self.tagger: Optional[TokenTagger] = TokenTagger(model, batch_size) if model else None

    @property
    def labels(self) -> Tuple[str, ...]:
        return tuple(self.tagger.labels) if self.tagger else ()

    def _require(self) -> TokenTagger:
        if self.tagger is None:
            raise TaggerError(f"The {self.name} pipe has no model; give its config a `model` directory "
                              "or load a saved pipeline.")
        return self.tagger

    def set_annotations(self, docs: Sequence[Doc]) -> None:
        for doc, spans in zip(docs, self._require().spans([doc.text for doc in docs])):
            ents = []
            for start, end, label, score in spans:
                span = doc.char_span(start, end, label=label, alignment_mode="expand")
                if span is not None and span.text.strip():
                    # kept in doc.user_data under the span's offsets and label, so doc.ents' spans read it
                    span._.ner_score = score
                    ents.append(span)
            doc.ents = filter_spans(ents)

    def __call__(self, doc: Doc) -> Doc:
        self.set_annotations([doc])
        return doc

    def pipe(self, stream: Iterable[Doc], batch_size: int = 128) -> Iterator[Doc]:
        from spacy.util import minibatch

        for docs in minibatch(stream, size=self.batch_size):
            self.set_annotations(docs)
            yield from docs

    def score(self, examples, **kwargs) -> dict:
        """Span precision, recall and F1, overall and per label, as spaCy's own ner scores them."""
        from spacy.scorer import get_ner_prf

        return get_ner_prf(examples)

    def initialize(self, get_examples: Optional[Callable] = None, nlp: Optional[Language] = None) -> None:
        self._require()

    def to_disk(self, path: Union[str, Path], exclude: Iterable[str] = ()) -> None:
        import shutil

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tagger = self._require()
        for name in (MODEL_FILE, TOKENIZER_FILE, TAGGER_META):
            if (tagger.path / name).resolve() != (path / name).resolve():
                shutil.copyfile(tagger.path / name, path / name)

    def from_disk(self, path: Union[str, Path], exclude: Iterable[str] = ()) -> "SapbertNER":
        self.tagger = TokenTagger(path, self.batch_size)
        self.model = str(path)
        return self


@Language.factory(
    "sapbert_ner",
    assigns=["doc.ents", "token.ent_iob", "token.ent_type"],
    default_config={"model": None, "batch_size": 16},
    default_score_weights={"ents_f": 1.0, "ents_p": 0.0, "ents_r": 0.0, "ents_per_type": None},
)
def make_sapbert_ner(nlp: Language, name: str, model: Optional[str], batch_size: int) -> SapbertNER:
    """A token classifier exported to ONNX that sets doc.ents (see the module docstring).

    model: a directory written by training.tagger (None: filled in by spacy.load from the
        pipeline's saved files).
    batch_size: wordpiece windows per ONNX Runtime call.
    """
    return SapbertNER(nlp, name, model, batch_size)
