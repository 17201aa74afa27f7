"""The project's tools, outside the installed package: each is run from a checkout as
`python scripts/GROUP/NAME.py` (it puts the checkout on sys.path) and imported by tests and by
other tools as `scripts.GROUP.NAME`.

- benchmarks/: speed, memory and fault benchmarks (`make bench`, `make bench-scale`), each writing
  its file under bench/;
- evaluation/: the PHI evaluation and its generators, the literature audit, the trainer checks;
- models/: the builders of the shipped models and lists (KenLM, the PHI detector, the name lists);
- figures/: the renderers of README's and docs/' figures from bench/ (`make figures`);
- data/: fetching MEDLINE and PMC, and the samples in data/."""
