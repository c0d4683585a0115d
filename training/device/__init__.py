"""Pretraining on a lent GPU machine (the device tool): the kit that travels there (kit) and the
dev packs that score a run between its timed slices (devpack). Logistics of borrowed hardware,
kept apart from the training code itself."""
