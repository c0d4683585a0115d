"""The abbreviation detector behind the factory "abbreviation_detector": scispaCy's
AbbreviationDetector where scispaCy is installed (it registers the factory itself), else the
copy of it in schwartz_hearst.py, registered here, so that the runtime needs no scispaCy (whose
nmslib and scikit-learn add 110 MB) and a pipeline saved with either loads with the other."""
from spacy.language import Language

try:
    from scispacy.abbreviation import AbbreviationDetector, find_abbreviation  # registers its factory
except ImportError:
    from ..mentions.schwartz_hearst import AbbreviationDetector, find_abbreviation

    try:
        Language.factory("abbreviation_detector", func=AbbreviationDetector)
    except ValueError:  # another package registered a detector under that name: it stays
        pass

__all__ = ["AbbreviationDetector", "find_abbreviation"]
