"""The `spacy-sapbert` command line: build-index, link, info."""
import importlib.util
import json
import logging
import shutil
import sys
from enum import Enum
from pathlib import Path
from typing import Dict, List, Optional

import typer
from wasabi import msg

from .assets import DEFAULT, MESH_LABEL_TYPES
from .kb.formats import KB_FORMATS
from .search.builders import INDEX_TYPES

app = typer.Typer(
    help="Link biomedical entity mentions to ontology concepts with SapBERT-style embeddings.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


# build-index's --format: the readers' registry (kb.formats.KB_FORMATS) as a choice.
KBFormat = Enum("KBFormat", {name: name for name in KB_FORMATS}, type=str)


# The FAISS index types (index.INDEX_TYPES) as a choice: hnsw-sq8 is IndexType.hnsw_sq8.
IndexType = Enum("IndexType", {t.replace("-", "_"): t for t in INDEX_TYPES}, type=str)


class Precision(str, Enum):
    int8 = "int8"
    fp32 = "fp32"


# The flags a command line user typed, for the config keys the library's messages name.
_FLAGS = {"encoder.model": "--model", "encoder.precision": "--precision", "index.index": "--index",
          "index.names": "--names", "fix labels in the sapbert_linker config": "fix --labels or leave it out"}


def _fail(err: Exception) -> None:
    text = str(err)
    for key, flag in _FLAGS.items():
        text = text.replace(key, flag)
    msg.fail(text)
    raise typer.Exit(1)


def _check_link_arguments(text: Optional[str], input: Optional[Path], names: Optional[str],
                          threshold: float = 0.7) -> None:
    """One sentence naming the option, before a pipeline is made."""
    if (text is None) == (input is None):
        _fail(ValueError("Give either a TEXT argument or --input FILE, not both and not neither."))
    if text is not None and not text.strip():
        _fail(ValueError("TEXT is empty; give the text to link, or --input FILE."))
    if input is not None and str(input) != "-" and not _is_corpus_input(input) and not input.is_file():
        _fail(ValueError(f"--input {str(input)!r} does not exist; give a JSONL or text file, a folder or a glob of "
                         "them, or '-' for standard input."))
    if not 0 <= threshold <= 1:
        _fail(ValueError(f"--threshold ({threshold}) must lie in [0, 1] (0 keeps every concept)."))
    if names is not None and not Path(names).expanduser().is_file():
        _fail(ValueError(f"--names {names!r} is not a file; give a tab-separated file of names and concept ids, "
                         "one pair per line."))


def _user_errors() -> tuple:
    from .cache import ResourceError
    from .encoders.base import EncoderError
    from .search.index import ConceptIndexError
    from .kb.concepts import KBFormatError

    return (KBFormatError, ConceptIndexError, EncoderError, ResourceError, FileNotFoundError)


class _CliFormatter(logging.Formatter):
    """First use's lines as a Python process shows them ("spacy-sapbert: Building …"); other
    records as level, logger and message."""

    def __init__(self):
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        from .cache import FIRST_USE_FORMAT, first_use

        if record.name == first_use.name and record.levelno == logging.INFO:
            return FIRST_USE_FORMAT.format(record)
        return super().format(record)


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress details.")):
    # What first use builds, as a Python process shows it (cache.first_use); the rest as before.
    handler = logging.StreamHandler()
    handler.setFormatter(_CliFormatter())
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])
    # Colours and icons for a terminal only: output redirected to a file or a pipe stays plain text.
    msg.pretty = sys.stdout.isatty()
    if not verbose:
        try:  # only where the gpu or train extra brought transformers
            from transformers.utils import logging as hf_logging
        except ModuleNotFoundError:
            return
        hf_logging.disable_progress_bar()


def _label_types_option(label_types: Optional[str], format: "KBFormat") -> dict:
    """build-index's --label-types, parsed and checked (MeSH's default map for a mesh KB)."""
    from .search.index import check_label_types

    try:
        mapping = json.loads(label_types) if label_types else (MESH_LABEL_TYPES if format == KBFormat.mesh else {})
    except json.JSONDecodeError as err:
        _fail(ValueError(f"--label-types is not valid JSON ({err.msg}); give e.g. '{{\"Disease\": [\"C\"]}}'."))
    try:
        check_label_types(mapping, "--label-types")
    except _user_errors() as err:
        _fail(err)
    return mapping


@app.command("build-index")
def build_index(
    kb: Path = typer.Option(..., "--kb", help="Knowledge-base file (MRCONSO.RRF for umls), or a knowledge base by name: mesh, mondo, hpo, go, chebi, doid, umls:META_FOLDER (indexed into the cache, where the linker's index = NAME finds it)."),
    format: KBFormat = typer.Option(KBFormat.jsonl, "--format", help="Format of --kb."),
    output: Optional[Path] = typer.Option(None, "--output", help="Directory to write the index to (for a named knowledge base: instead of the cache)."),
    model: str = typer.Option(DEFAULT, "--model", help="Model directory or Hugging Face name."),
    index_type: IndexType = typer.Option(IndexType.flat, "--index-type", help="FAISS index type."),
    pooling: str = typer.Option("auto", "--pooling", help="cls, mean, mention (a contextual model's), or auto (the model's own)."),
    max_length: int = typer.Option(25, "--max-length", help="Tokens per name."),
    device: str = typer.Option("auto", "--device", help="cpu, cuda or auto."),
    batch_size: int = typer.Option(256, "--batch-size", help="Names per forward pass."),
    supplementary: Optional[Path] = typer.Option(None, "--supplementary", help="mesh: the supplementary-concept TSV."),
    trees: Optional[str] = typer.Option(None, "--trees", help="mesh: comma-separated tree prefixes to keep, e.g. C,F03,D."),
    mrsty: Optional[Path] = typer.Option(None, "--mrsty", help="umls: MRSTY.RRF for semantic types."),
    sources: Optional[str] = typer.Option(None, "--sources", help="umls: comma-separated SABs to keep."),
    label_types: Optional[str] = typer.Option(
        None, "--label-types", help='JSON {"Disease": ["C", "F03"]} stored as the index\'s default label→type map.'
    ),
    ef_search: Optional[int] = typer.Option(None, "--ef-search", help="hnsw types: candidates kept while searching (default 256; 1024 keeps recall@10 at 0.99 for 4M names)."),
    precision: Optional[Precision] = typer.Option(None, "--precision", help="fp32 (torch, exact; the default for a file where torch is installed), or int8 (ONNX Runtime: 6.6x the names/s on 2 CPU cores, no torch; the default for a named knowledge base and without torch, as the linker encodes)."),
    work_dir: Optional[Path] = typer.Option(None, "--work-dir", help="Where name vectors stream to disk while building (default: OUTPUT.partial); a rerun resumes there."),
    chunk_size: int = typer.Option(65_536, "--chunk-size", help="Names encoded between two resume points."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace what --output already holds."),
):
    """Embed every name of a knowledge base and write a FAISS concept index.

    The vectors stream to --work-dir chunk by chunk, so a KB with more names than fit in memory
    as float32 builds, and a killed build resumes from its last chunk when run again."""
    from .encoders.models import resolve_model
    from .search.index import ConceptIndex
    from .encoders.loading import load_encoder
    from .kb.formats import load_kb
    from .kb.named import is_named

    if is_named(str(kb)) and not kb.exists():
        return _build_named_index(str(kb), output, model, precision or Precision.int8, overwrite)
    if output is None:
        _fail(ValueError(f"--output is needed to index the file {kb}; only a knowledge base by name is indexed into "
                         "the cache."))
    precision = precision or (Precision.fp32 if importlib.util.find_spec("torch") else Precision.int8)  # as linking
    mapping = _label_types_option(label_types, format)
    _refuse_non_empty(output, overwrite)
    try:
        knowledge_base = load_kb(kb, format.value, **_kb_options(format, supplementary, trees, mrsty, sources))
        msg.info(f"{kb}: {len(knowledge_base)} concepts, {knowledge_base.n_names} names")
        encoder = _names_encoder(load_encoder(resolve_model(model, precision.value), precision.value, pooling=pooling,
                                              max_length=max_length, device=device, batch_size=batch_size), model)
        work = work_dir or output.with_name(output.name + ".partial")
        if (work / "progress.json").exists():
            msg.info(f"Resuming the build whose vectors are in {work}")
        index = ConceptIndex.build(knowledge_base, encoder, index_type=index_type.value, show_progress=True,
                                   work_dir=work, chunk_size=chunk_size)
        if ef_search is not None:
            index.set_ef_search(ef_search)
    except (ValueError, OSError) + _user_errors() as err:
        _fail(err)
    index.meta.update(label_types=mapping, model=model)  # the model as named, not this machine's path to it
    index.save(output)
    shutil.rmtree(work, ignore_errors=True)
    msg.good(f"Wrote {index} to {output}")


def _names_encoder(encoder, model: str):
    """The encoder that embeds an index's names for `encoder` (loaded from `model`): a query
    encoder trained against frozen keys searches its teacher's vectors, so its teacher embeds
    them, as the bundled index's are (the default model's teacher: base); else `encoder`."""
    if not getattr(encoder, "teacher_model", None):
        return encoder
    from .encoders.loading import exact_encoder

    teacher = exact_encoder(encoder)
    teacher.batch_size = encoder.batch_size
    msg.info(f"{model} searches the vectors of its teacher, {teacher.name_or_path}, which embeds the names")
    return teacher


def _refuse_non_empty(output: Path, overwrite: bool) -> None:
    if output.exists() and (not output.is_dir() or any(output.iterdir())) and not overwrite:
        _fail(ValueError(f"{output} already exists and is not empty; give another --output, or --overwrite to "
                         "replace it."))


def _kb_options(format: "KBFormat", supplementary: Optional[Path], trees: Optional[str], mrsty: Optional[Path],
                sources: Optional[str]) -> Dict[str, object]:
    """The reader options of build-index's --format mesh and umls."""
    if format == KBFormat.mesh:
        return {"supplementary": supplementary, "tree_prefixes": trees.split(",") if trees else None}
    if format == KBFormat.umls:
        return {"mrsty": mrsty, "sources": sources.split(",") if sources else None}
    return {}


def _build_named_index(name: str, output: Optional[Path], model: str, precision: "Precision", overwrite: bool) -> None:
    """`build-index --kb NAME`: the index the linker's `index = NAME` searches, made as it would
    make it on first use (the pipe's encoder), into the cache or `output`."""
    import time

    from .pipe.loaders import EncoderLoader
    from .search.resolve import named_index_path

    if output is not None:
        _refuse_non_empty(output, overwrite)
        shutil.rmtree(output, ignore_errors=True)
    start = time.perf_counter()
    try:
        encoder = EncoderLoader(model=model, precision=precision.value).load()
        path = named_index_path(name, encoder, output)
    except (ValueError, OSError) + _user_errors() as err:
        _fail(err)
    msg.good(f"The {name} index is in {path} ({_megabytes(path):.0f} MB, {time.perf_counter() - start:.0f} s); "
             f'the linker finds it with config={{"index": {{"index": "{name}"}}}}.')


@app.command("convert-index")
def convert_index(
    source: Path = typer.Argument(..., help="An exact (flat or hnsw) index directory, or a scalar-quantised one for its graph."),
    output: Path = typer.Argument(..., help="Directory to write the converted index to."),
    index_type: IndexType = typer.Option(IndexType.hnsw_sq8, "--index-type", help="FAISS index type to convert to."),
    dim: Optional[int] = typer.Option(None, "--dim", help="Project names onto this many leading singular directions first (smaller, approximate)."),
    compress_kb: bool = typer.Option(False, "--compress-kb", help="Store the KB gzip-compressed (kb.jsonl.gz), as the bundled index does."),
    graph: bool = typer.Option(False, "--graph", help="sq types: build the search graph over the codes now and store its links (graph.npz), so that first use sets them instead of building them, as the bundled index does."),
    row_files: bool = typer.Option(False, "--row-files", help="Store the rows' names and exact-name keys and the answer scheme's answers, so that first use reads no KB, as the bundled index does."),
    ef_search: Optional[int] = typer.Option(None, "--ef-search", help="hnsw types: candidates kept while searching (default 256; 1024 keeps recall@10 at 0.99 for 4M names)."),
    prefer: str = typer.Option("", "--prefer", help="Comma-separated id patterns (regular expressions matching whole ids), best first: a name several concepts of one label bear is kept only for the best (e.g. 'D[0-9]+,C[0-9]+': MeSH descriptors, then supplementary concepts, then the rest)."),
    answer_scheme: str = typer.Option("", "--answer-scheme", help="Comma-separated id patterns the index answers in, recorded for index.scheme 'auto' (kb.schemes): a concept none of whose ids match answers as its nearest broader concepts that do; 'medic' for MeSH and OMIM."),
):
    """Re-index an index's vectors as another FAISS type (e.g. compress it), without encoding."""
    from .kb.schemes import MEDIC_SCHEME
    from .search.index import ConceptIndex

    try:
        patterns = [p for p in prefer.split(",") if p]
        index = ConceptIndex.load(source).converted(index_type.value, dim=dim, prefer=patterns)
        if answer_scheme:
            index.meta["answer_scheme"] = (list(MEDIC_SCHEME) if answer_scheme == "medic"
                                           else [p for p in answer_scheme.split(",") if p])
        if ef_search is not None:
            index.set_ef_search(ef_search)
        index.save(output, compress_kb=compress_kb, graph=graph, row_files=row_files)
    except _user_errors() as err:
        _fail(err)
    msg.good(f"Wrote {index} ({_megabytes(output):.0f} MB) to {output}")


class InputFormat(str, Enum):
    auto = "auto"
    jsonl = "jsonl"
    text = "text"


def _read_inputs(path: Path, format: str = "auto") -> List[dict]:
    """Records with a "text": one per line of `path` ("-": standard input); corpus.parse_records."""
    from .corpus.shards import parse_records

    handle = sys.stdin if str(path) == "-" else path.open(encoding="utf-8-sig")
    try:
        try:
            lines = [line.rstrip("\r\n") for line in handle]
        except UnicodeDecodeError as err:
            raise ValueError(f"{path}: is not valid UTF-8 ({err.reason}); re-encode it as UTF-8.") from None
    finally:
        if handle is not sys.stdin:
            handle.close()
    return parse_records(lines, path, format)


class Engine(str, Enum):
    local = "local"
    ray = "ray"


class OutputFormat(str, Enum):
    jsonl = "jsonl"
    parquet = "parquet"


def _is_corpus_input(input: Optional[Path]) -> bool:
    """A folder or a glob: link a corpus into an output folder, shard by shard."""
    return input is not None and str(input) != "-" and (input.is_dir() or any(c in str(input) for c in "*?["))


def _link_corpus(input: Path, output: Optional[Path], settings, engine: str, workers: Optional[int],
                 address: Optional[str], docs_per_shard: int) -> None:
    from .corpus.linking import link_corpus

    if output is None:
        _fail(ValueError(f"--input {input} names several documents files: give --output OUT_DIR for their shards."))
    summary = link_corpus(str(input), output, settings, engine=engine, workers=workers, address=address,
                          docs_per_shard=docs_per_shard)
    msg.good(f"Linked {summary.documents} documents ({summary.mentions} mentions) in "
             f"{summary.shards - summary.skipped} shards in {summary.seconds:.1f} s "
             f"({summary.mentions_per_s:.0f} mentions/s) into {output}; "
             f"{summary.skipped} of {summary.shards} shards were complete already.")


@app.command("link")
def link(
    text: Optional[str] = typer.Argument(None, help="Text to link (or use --input)."),
    input: Optional[Path] = typer.Option(None, "--input", help="JSONL with a \"text\" field, or plain text, one document per line ('-': standard input)."),
    input_format: InputFormat = typer.Option(InputFormat.auto, "--format", help="jsonl, text, or auto (JSONL when the first line is a JSON object)."),
    labels: str = typer.Option("", "--labels", help="Comma-separated entity labels to link (default: all)."),
    k: int = typer.Option(5, "--candidates", "--k", help="Candidate concepts written per mention (the JSONL's \"candidates\"; at most 10). --k: an older name of this option."),
    output: Optional[Path] = typer.Option(None, "--output", help="Write linked documents as JSONL here."),
    ner: Optional[str] = typer.Option(None, "--ner", help="spaCy pipeline (name or path) whose NER sets doc.ents."),
    model: str = typer.Option(DEFAULT, "--model", help="Model directory or Hugging Face name."),
    index: str = typer.Option(DEFAULT, "--index", help="default (the bundled index), a knowledge base by name (mesh, hpo, …: `spacy-sapbert info` lists them) or a directory from build-index."),
    names: Optional[str] = typer.Option(None, "--names", help="A names table added to the index's names: a name and a concept id per line, tab-separated, and for an id the index no longer holds its current id after another tab (the linker's index.names)."),
    threshold: float = typer.Option(0.7, "--threshold", help="Below this score a mention gets no concept."),
    batch_size: int = typer.Option(64, "--batch-size", help="Documents per batch."),
    precision: Precision = typer.Option(Precision.int8, "--precision", help="int8 (ONNX Runtime, fast) or fp32 (torch, exact) mention encoding."),
    engine: Engine = typer.Option(Engine.local, "--engine", help="For a corpus (--input a folder or 'DIR/*.jsonl'): local (this process) or ray (a pool of workers, one pipeline each)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Ray workers (one CPU each; default: every CPU of the cluster)."),
    address: Optional[str] = typer.Option(None, "--address", help="Join this Ray cluster (e.g. 'auto' or 'HOST:6379'); default: start a local one."),
    docs_per_shard: int = typer.Option(1000, "--docs-per-shard", help="Documents (input lines) per output shard: the unit of restart."),
    output_format: OutputFormat = typer.Option(OutputFormat.jsonl, "--output-format", help="Corpus shards as jsonl, or parquet (needs pyarrow)."),
):
    """Run NER, abbreviation detection and the linker; print a table or write JSONL.

    With --input a folder or a glob, link a corpus into --output OUT_DIR, one shard per
    --docs-per-shard lines of each file; a rerun skips the shards already complete."""
    from .corpus.shards import CorpusError, LinkSettings, ShardLinker

    _check_link_arguments(text, input, names, threshold)
    settings = LinkSettings(ner=ner, model=model, index=index, names=names, threshold=threshold, k=k,
                            labels=tuple(x for x in labels.split(",") if x), precision=precision.value,
                            input_format=input_format.value, output_format=output_format.value,
                            batch_size=batch_size)
    if _is_corpus_input(input):
        try:
            return _link_corpus(input, output, settings, engine.value, workers, address, docs_per_shard)
        except (CorpusError, OSError) + _user_errors() as err:
            _fail(err)
    if engine != Engine.local or output_format != OutputFormat.jsonl:
        _fail(ValueError("--engine ray and --output-format parquet apply to a corpus: give --input a folder or a glob."))
    try:
        records = [{"text": text}] if text is not None else _read_inputs(input, input_format.value)
        linker = ShardLinker(settings, ".")
    except (ValueError, OSError) + _user_errors() as err:
        _fail(err)
    from tqdm.auto import tqdm

    linked = tqdm(linker.link_records(records), total=len(records), desc="linking", unit="doc",
                  disable=len(records) < 100 or output is None)
    out = output.open("w", encoding="utf-8") if output else None
    try:
        for record in linked:
            if out:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            else:
                _show(record)
    finally:
        if out:
            out.close()
            msg.good(f"Wrote {len(records)} documents to {output}")
    _say_what_the_ner_covers(linker, ner)


def _show(record: dict) -> None:
    """A linked document's entities as a table, or a line where it has none."""
    if not record["entities"]:
        msg.text("No entity found." if record["text"].strip() else "(an empty document)")
        return
    table = [(r["text"], r["label"], r["cui"] or "NIL", r["name"] or "", r["score"]) for r in record["entities"]]
    msg.table(table, header=("mention", "label", "concept", "canonical name", "score"), divider=True, max_col=60)


def _say_what_the_ner_covers(linker, ner: Optional[str]) -> None:
    from .corpus.shards import outside_hint

    hint = outside_hint(linker.found, ner)
    if hint:  # on stderr, so that the table or the records piped on stdout stay clean
        typer.echo(f"\u2139 {hint}", err=True)


@app.command("export-onnx")
def export_onnx_command(
    output: Path = typer.Argument(..., help="Directory to write the ONNX encoder to."),
    model: str = typer.Option(DEFAULT, "--model", help="Model directory (default: the bundled default model)."),
    precision: Precision = typer.Option(Precision.int8, "--precision", help="int8 (quantised weights) or fp32."),
    pooling: str = typer.Option("auto", "--pooling", help="cls, mean, mention (a contextual model's), or auto (the model's own)."),
    max_length: int = typer.Option(25, "--max-length", help="Tokens per mention."),
    calibration: Optional[Path] = typer.Option(
        None, "--calibration", help="Index directory or KB file whose names set the int8 activation scales: the "
        "names the model will search (default: the bundled index's)."),
):
    """Export a model to ONNX for fast CPU linking; pass the directory as the linker's `model`."""
    from .encoders.models import resolve_model
    from .encoders.export import export_onnx

    try:
        path = export_onnx(resolve_model(model), output, pooling=pooling, max_length=max_length,
                           precision=precision.value, calibration=calibration, source_name=model)
    except _user_errors() as err:
        _fail(err)
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    msg.good(f"Wrote the {precision.value} ONNX encoder ({size / 1e6:.1f} MB) to {path}")


def _is_spacy_meta(path: Path) -> bool:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(meta, dict) and "lang" in meta and "pipeline" in meta


@app.command("info")
def info(path: Optional[Path] = typer.Argument(None, help="An index directory, or a pipeline directory holding sapbert_linker; none: the knowledge bases the linker knows by name.")):
    """Show what an index (or a saved pipeline's linker) was built from; with no PATH, the
    knowledge bases by name and which of them are indexed in the cache."""
    from .search.index import META_FILE

    if path is None:
        return _named_info()

    # A saved pipeline's own meta.json is spaCy's; its linker keeps the index in <component>/index.
    candidates = [path / META_FILE, path / "index" / META_FILE, *sorted(path.glob(f"*/index/{META_FILE}"))]
    meta_path = next((p for p in candidates if p.exists() and not _is_spacy_meta(p)), None)
    if meta_path is None:
        _fail(FileNotFoundError(f"{path} holds no concept index ({META_FILE}); give an index or pipeline directory."))
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        _fail(ValueError(f"{meta_path} is not a valid index meta.json ({err}); rebuild the index."))
    rows = [(key, value) for key, value in meta.items() if key not in ("files", "label_types")]
    rows.append(("label_types", json.dumps(meta.get("label_types", {}))))
    files = meta.get("files") if isinstance(meta.get("files"), dict) else {}
    size = sum(f.get("bytes", 0) for f in files.values() if isinstance(f, dict) and isinstance(f.get("bytes", 0), int))
    rows.append(("size", f"{size / 1e6:.1f} MB" if files else "unknown (no file records)"))
    supplement = meta_path.parent / "supplement" / "meta.json"
    if supplement.is_file():  # search.supplement: more names, searched beside the index
        extra = json.loads(supplement.read_text(encoding="utf-8"))
        rows.append(("supplement", f"{extra.get('kb_name', '')}: {extra.get('n_concepts', 0):,} concepts, "
                                   f"{extra.get('n_names', 0):,} names ({extra.get('index_type', '')}, "
                                   f"{_megabytes(supplement.parent):.1f} MB)"))
    msg.table(rows, title=str(meta_path.parent), divider=True)
    if meta_path.parent != path:
        _linker_settings(path)


def _linker_settings(path: Path) -> None:
    """A saved pipeline's sapbert_linker settings, as its config.cfg records them (sub-configs'
    keys dotted: encoder.model)."""
    from spacy.util import load_config

    config_file = path / "config.cfg"
    if not config_file.is_file():
        return
    components = load_config(config_file, interpolate=False).get("components", {})
    for name, settings in components.items():
        if settings.get("factory") != "sapbert_linker":
            continue
        ordered = sorted(settings.items(), key=lambda item: isinstance(item[1], dict))  # its own keys first
        rows = [(f"{key}.{sub}" if isinstance(value, dict) else key, inner)
                for key, value in ordered if key != "factory"
                for sub, inner in (value.items() if isinstance(value, dict) else [(None, value)])
                if not str(sub).startswith("@")]
        msg.table([(key, json.dumps(value)) for key, value in rows], title=f"{path} ({name})", divider=True)


def _megabytes(folder: Path) -> float:
    """The size of the files directly in `folder` (an index directory), in MB."""
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file()) / 1e6


def _named_info() -> None:
    from .cache import cache_dir
    from .kb.named import NAMED_KBS
    from .search.resolve import named_index_prefix

    rows = []
    for name, named in NAMED_KBS.items():
        built = sorted(d for d in cache_dir().glob(f"{named_index_prefix(name)}*") if d.is_dir())
        size = sum(_megabytes(d) for d in built)
        rows.append((name, named.what, named.measured or "", f"indexed ({size:.0f} MB)" if built else "not yet"))
    rows.append(("umls:META_FOLDER", "a UMLS release (MRCONSO.RRF, MRSTY.RRF)", "", ""))
    import textwrap

    # The descriptions wrapped, so that the table fits a terminal of 100 columns.
    rows = [(name, textwrap.wrap(what, 40) or [""], *rest) for name, what, *rest in rows]
    msg.table(rows, header=("index", "knowledge base", "first use on 2 CPU cores", "in the cache"), divider=True,
              multiline=True, max_col=40, spacing=2,
              title='Knowledge bases by name: config={"index": {"index": NAME}}, or build-index --kb NAME')


# Other installed packages add commands through this entry-point group (the training package,
# spacy-sapbert-training in the repository's training/ folder, adds `evaluate`), so the runtime
# never imports them itself.
COMMAND_GROUP = "spacy_sapbert_commands"
# What the training package adds, said in one sentence where it is not installed.
TRAINING_COMMANDS = ("evaluate",)


def _add_plugin_commands() -> None:
    from importlib.metadata import entry_points

    added = set()
    for entry in entry_points(group=COMMAND_GROUP):
        app.command(entry.name)(entry.load())
        added.add(entry.name)
    for name in TRAINING_COMMANDS:
        if name not in added:
            app.command(name, context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
                        add_help_option=False, help="(needs the training package)")(_needs_training(name))


def _needs_training(name: str):
    def command(ctx: typer.Context) -> None:
        msg.fail(f"`spacy-sapbert {name}` is part of the training package, which lives in the repository's "
                 "training/ folder and is not installed here: from a checkout, `pip install -e training` "
                 "(or `make install-dev`).", exits=1)

    return command


def run() -> None:
    """The `spacy-sapbert` console script: the runtime's commands plus installed plugins'."""
    _add_plugin_commands()
    app()


if __name__ == "__main__":
    sys.exit(run())
