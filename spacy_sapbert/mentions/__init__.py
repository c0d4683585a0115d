"""What turns an entity into the strings searched for it, spaCy's face apart (pipe/) and the
search apart (candidates): short forms and their long forms (`abbreviations`), parenthetical
pairs (`parenthetical`), chemical formulas and element symbols (`formulas`, `elements`). The pipe
and the evaluation harness both call these."""
