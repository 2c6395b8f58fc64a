"""Management commands of the contrib.store app."""
