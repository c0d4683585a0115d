"""Write spacy_sapbert/assets/formulas.tsv.gz: the molecular formulas of compounds with at most one
carbon atom and two atoms or more, in Hill order, each with its common name, from the chemical database of the
`chemicals` package (MIT; names and formulas from PubChem). A formula that two compounds share,
or of a charged species, is left out; with at most one carbon, a formula names one compound
(isomers need a chain). Run once, by hand: `pip install chemicals==1.5.2` (not a dependency of
the package or its tests), then `python scripts/make_formulas.py`."""
import gzip
import re
from collections import defaultdict
from pathlib import Path

from chemicals.identifiers import pubchem_db

from spacy_sapbert.mentions.formulas import composition, hill

OUTPUT = Path(__file__).resolve().parent.parent / "spacy_sapbert" / "assets" / "formulas.tsv.gz"


def main() -> None:
    if not pubchem_db.loaded_main_db:
        pubchem_db.autoload_main_db()
    pubchem_db.finish_loading()
    names = defaultdict(set)
    for entry in pubchem_db.CAS_index.values():
        # Read as the linker reads a mention's formula, so that a row is found as it is keyed;
        # an isotope's formula ("D2O", "[13C]") reads as none.
        atoms = None if entry.charge or re.search(r"[+-]", entry.formula) else composition(entry.formula)
        if (atoms is None or atoms["C"] > 1 or sum(atoms.values()) < 2
                or not re.search(r"[a-z]{3}", entry.common_name or "")):
            continue  # a name that is a CAS number or a code names nothing a dictionary holds
        names[hill(atoms)].add(entry.common_name)
    rows = sorted((formula, next(iter(found))) for formula, found in names.items() if len(found) == 1)
    with gzip.open(OUTPUT, "wt", encoding="utf-8", compresslevel=9) as out:
        out.write("".join(f"{formula}\t{name}\n" for formula, name in rows))
    print(f"{len(rows)} formulas → {OUTPUT} ({OUTPUT.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
