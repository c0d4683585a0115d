"""Shards of a corpus and the worker that links them (corpus runs them; corpus_ray on Ray).

A shard is a run of `docs_per_shard` lines of one input file. A ShardLinker loads the pipeline
once, links a shard, writes it under a staging name and renames it, then records it in
`OUT_DIR/_shards/NAME.json` with the sha256 of its input lines, of its output and of the link
settings: shard_is_complete reads that record back."""
import glob
import hashlib
import itertools
import json
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple

from ..cache import file_sha256, lines_sha256, replace_file

RECORDS = "_shards"
OUTPUT_FORMATS = ("jsonl", "parquet")


class CorpusError(ValueError):
    """An input, output folder or shard record the corpus run cannot use."""


def parse_records(lines: Sequence[str], path, format: str = "auto", first_line: int = 1) -> List[dict]:
    """Records with a "text", one per line (blank lines kept as empty documents, so the output
    has one record per input line). format "jsonl": each line a JSON object with a string
    "text"; "text": each line a document; "auto": JSONL when the first non-blank line is a JSON
    object, else text. A bad line stops the read with one sentence naming `path` and its line
    number (`first_line` is the number of lines[0])."""
    if format == "auto":
        first = next((line for line in lines if line.strip()), "")
        format = "jsonl" if first.lstrip().startswith("{") else "text"
    if format == "text":
        return [{"text": line} for line in lines]
    records = []
    for line_no, line in enumerate(lines, start=first_line):
        if not line.strip():
            records.append({"text": ""})
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise CorpusError(f"{path}:{line_no}: expected a JSON object with a string \"text\"; fix that line.")
        records.append(record)
    return records


# An entity whose tags the bundled NER gave a mean probability under this is one it is unsure of.
UNSURE = 0.6


def outside_hint(found: Counter, ner: Optional[str]) -> Optional[str]:
    """One line for `link` when some documents yielded no linked entity or the bundled NER was
    unsure of some entities: what it covers and how to bring another NER; None when all went well or the
    user brought their own NER."""
    if ner is not None or not found["documents"] or not (found["empty"] or found["unsure"]):
        return None
    what = []
    if found["empty"]:
        what.append(f"{found['empty']} of {found['documents']} documents with text yielded no linked entity")
    if found["unsure"]:
        what.append(f"{found['unsure']} entities were found with low confidence")
    return (f"{' and '.join(what).capitalize()}: the bundled NER finds Disease and Chemical mentions as PubMed "
            "abstracts write them; for other text bring your own with --ner (a spaCy pipeline, such as one with "
            "an entity ruler of your terms), and see the README's Limitations.")


def entity_rows(doc, name_of, labels: Sequence[str] = ()) -> List[dict]:
    """The linked entities of a doc as `link` writes them: those with one of `labels` (any case),
    or all when it is empty. name_of: a concept id's canonical name (the linker's canonical_name)."""
    wanted = {label.lower() for label in labels}
    rows = []
    for ent in doc.ents:
        if wanted and ent.label_.lower() not in wanted:
            continue
        rows.append({
            "text": ent.text, "start": ent.start_char, "end": ent.end_char, "label": ent.label_,
            "cui": ent._.cui, "name": name_of(ent._.cui) if ent._.cui else None,
            "score": round(ent._.cui_score, 4) if ent._.cui_score is not None else None,
            "candidates": [[c, round(s, 4)] for c, s in ent._.kb_ents],
        })
    return rows


@dataclass(frozen=True)
class LinkSettings:
    """What a worker needs to build the `link` pipeline (spacy_sapbert.pipe.bundled.demo_pipeline) and
    to write its output; its digest marks which shards in an output folder it made."""

    ner: Optional[str] = None
    model: str = "default"
    index: str = "default"
    threshold: float = 0.7
    k: int = 5
    labels: Tuple[str, ...] = ()
    precision: str = "int8"
    input_format: str = "auto"
    output_format: str = "jsonl"
    batch_size: int = 64
    names: Optional[str] = None

    def digest(self) -> str:
        fields = asdict(self)
        if fields["names"] is None:  # as settings written before names tables were, so their shards are kept
            del fields["names"]
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]

    def pipeline(self, threads: int = 0):
        from ..pipe.bundled import demo_pipeline

        config = {"threshold": self.threshold, "k": max(self.k, 10), "max_entities_per_mention": self.k,
                  "labels": list(self.labels)}
        return demo_pipeline(ner=self.ner, model=self.model, index=self.index, linker_config=config,
                             encoder_config={"precision": self.precision, "threads": threads}, names=self.names)


@dataclass(frozen=True)
class Shard:
    """Lines [start, start + n_lines) of `source` (0-based), beginning at byte `offset`,
    written as OUT_DIR/`name`.EXT."""

    source: str
    start: int
    n_lines: int
    name: str
    offset: int = 0

    def read_lines(self) -> List[str]:
        with open(self.source, "rb") as handle:
            handle.seek(self.offset)
            raw = list(itertools.islice(handle, self.n_lines))
        try:
            lines = [line.decode("utf-8") for line in raw]
        except UnicodeDecodeError as err:
            raise CorpusError(f"{self.source}: is not valid UTF-8 ({err.reason}); re-encode it as UTF-8.") from None
        if self.offset == 0 and lines:
            lines[0] = lines[0].lstrip("\ufeff")
        return [line.rstrip("\r\n") for line in lines]


@dataclass
class ShardResult:
    name: str
    documents: int
    mentions: int
    seconds: float
    peak_rss_mb: float = 0.0  # of the worker process that linked it, when it was done
    worker: int = 0  # that process's id


def input_files(pattern: str) -> List[Path]:
    """The files a glob (or a folder: every file in it) names, sorted, so shard order and names
    never depend on the file system."""
    path = Path(pattern)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    else:
        files = sorted(Path(p) for p in glob.glob(pattern, recursive=True) if Path(p).is_file())
    if not files:
        raise CorpusError(f"--input {pattern}: matches no file; give a folder or a glob such as 'DIR/*.jsonl'.")
    return files


def _shard_offsets(path: Path, every: int) -> Tuple[int, List[int]]:
    """(the file's line count, the byte offset where each run of `every` lines begins), in one
    pass over its bytes, so a shard is read by seeking rather than by reading all before it."""
    import numpy as np

    starts, count, position, last = [0], 0, 0, b"\n"
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            newlines = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == ord("\n"))
            lines_ended = count + 1 + np.arange(len(newlines))
            starts += (position + newlines[lines_ended % every == 0] + 1).tolist()
            count, position, last = count + len(newlines), position + len(block), block[-1:]
    n_lines = count + (last != b"\n")
    return n_lines, starts[: -(-n_lines // every)]


def plan_shards(files: Sequence[Path], docs_per_shard: int) -> List[Shard]:
    """Cut each file into shards of `docs_per_shard` lines, named FILE-STEM.NNNNN (a file stem
    given twice, from two folders, is refused rather than overwritten)."""
    if docs_per_shard < 1:
        raise CorpusError(f"--docs-per-shard must be at least 1, not {docs_per_shard}.")
    seen = {}
    shards = []
    for path in files:
        stem = path.name.split(".")[0] or path.name
        if stem in seen:
            raise CorpusError(f"--input: {seen[stem]} and {path} would write the same output shards "
                              f"({stem}.*); rename one of them.")
        seen[stem] = path
        n_lines, offsets = _shard_offsets(path, docs_per_shard)
        for number, (start, offset) in enumerate(zip(range(0, n_lines, docs_per_shard), offsets)):
            shards.append(Shard(str(path), start, min(docs_per_shard, n_lines - start), f"{stem}.{number:05d}", offset))
    return shards


def _output_path(out_dir: Path, shard: Shard, settings: LinkSettings) -> Path:
    return out_dir / f"{shard.name}.{settings.output_format}"


def _record_path(out_dir: Path, shard: Shard) -> Path:
    return out_dir / RECORDS / f"{shard.name}.json"


def shard_is_complete(out_dir: Path, shard: Shard, settings: LinkSettings) -> bool:
    """Whether OUT_DIR holds this shard, whole and made from these very input lines."""
    record_path, output = _record_path(out_dir, shard), _output_path(out_dir, shard, settings)
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        return (record.get("settings") == settings.digest() and record.get("source") == shard.source
                and record.get("start") == shard.start and record.get("n_lines") == shard.n_lines
                and record.get("input_sha256") == lines_sha256(shard.read_lines())
                and record.get("output_sha256") == file_sha256(output))
    except (OSError, ValueError, AttributeError):
        return False


def parquet_modules():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise CorpusError("--output-format parquet needs pyarrow: pip install pyarrow==25.0.1") from None
    return pyarrow, pyarrow.parquet


def _parquet_table(pa, records: List[dict]):
    """The records as one table: the input's fields as they come, and "entities" with one fixed
    type in every shard (candidates as {cui, score} structs), so a reader can take the folder as
    one dataset."""
    candidate = pa.struct([("cui", pa.string()), ("score", pa.float64())])
    entity = pa.struct([("text", pa.string()), ("start", pa.int64()), ("end", pa.int64()), ("label", pa.string()),
                        ("cui", pa.string()), ("name", pa.string()), ("score", pa.float64()),
                        ("candidates", pa.list_(candidate))])
    entities = [[{**e, "candidates": [{"cui": c, "score": v} for c, v in e["candidates"]]} for e in r["entities"]]
                for r in records]
    table = pa.Table.from_pylist([{k: v for k, v in r.items() if k != "entities"} for r in records])
    return table.append_column(pa.field("entities", pa.list_(entity)), pa.array(entities, pa.list_(entity)))


def _write_output(path: Path, records: List[dict], output_format: str) -> None:
    if output_format == "parquet":
        pa, pq = parquet_modules()
        pq.write_table(_parquet_table(pa, records), path)
        return
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


class ShardLinker:
    """Loads the pipeline once, then links whole shards into `out_dir` (the worker of both
    engines: corpus_ray wraps it as a Ray actor)."""

    def __init__(self, settings: LinkSettings, out_dir: str, threads: int = 0):
        self.settings = settings
        self.out_dir = Path(out_dir)
        self.nlp = settings.pipeline(threads)
        self.name_of = self.nlp.get_pipe("sapbert_linker").canonical_name
        self.found: Counter = Counter()

    def link_records(self, records: List[dict]) -> Iterator[dict]:
        """Each record with its linked entities; `self.found` counts, as they go, the documents
        with text, those that yielded no linked entity, and the entities the NER was unsure of."""
        texts = (record["text"] for record in records)
        for record, doc in zip(records, self.nlp.pipe(texts, batch_size=self.settings.batch_size)):
            rows = entity_rows(doc, self.name_of, self.settings.labels)
            if doc.text.strip():  # of the entities written: those of --labels
                self.found["documents"] += 1
                self.found["empty"] += not any(row["cui"] for row in rows)
                self.found["unsure"] += sum(1 for ent in doc.ents if ent.has_extension("ner_score")
                                            and ent._.ner_score is not None and ent._.ner_score < UNSURE)
            yield {**record, "entities": rows}

    def run(self, shard: Shard) -> ShardResult:
        start = time.perf_counter()
        lines = shard.read_lines()
        records = parse_records(lines, shard.source, self.settings.input_format, shard.start + 1)
        linked = list(self.link_records(records))
        output = _output_path(self.out_dir, shard, self.settings)
        replace_file(output, lambda path: _write_output(path, linked, self.settings.output_format))
        record = {"settings": self.settings.digest(), "source": shard.source, "start": shard.start,
                  "n_lines": shard.n_lines, "input_sha256": lines_sha256(lines),
                  "output_sha256": file_sha256(output), "documents": len(linked),
                  "mentions": sum(len(r["entities"]) for r in linked)}
        replace_file(_record_path(self.out_dir, shard),
                            lambda path: path.write_text(json.dumps(record, indent=1), encoding="utf-8"))
        peak = _peak_rss_mb()
        return ShardResult(shard.name, len(linked), record["mentions"], time.perf_counter() - start, peak, os.getpid())


def _peak_rss_mb() -> float:
    """This process's peak resident memory in MB, where the platform tells it (not on Windows,
    which has no `resource` module: 0 there)."""
    try:
        import resource
    except ImportError:
        return 0.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
