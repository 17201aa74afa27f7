"""Engines that more than one stage uses: they know documents and arrays, never a run folder
(a stage's own helpers live in its package under pipeline/stages/)."""
