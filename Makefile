# Every command a reader or CI needs. `make book` builds the HTML, `make test` runs all tests.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Tools (jupyter-book, the notebook kernel) come from the venv.
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: venv book test portability refresh lab bench train linkcheck translations chapter-costs clean

venv: $(STAMP)

# Reinstalls when requirements.txt or pyproject.toml change. --no-compile: Python compiles a module when it is
# first imported, not every file of every wheel at install (most of torch's are never imported here).
$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --progress-bar off --no-compile -r requirements.txt
	$(PY) -m pip install --progress-bar off --no-compile -e .
	touch $(STAMP)

# --all rebuilds every page so -W sees every warning, not just those of changed pages. The English edition is
# the site's root; the Chinese one (book/zh/, _config_zh.yml) is built on its own and copied to _build/html/zh/.
book: venv
	$(VENV)/bin/jupyter-book build . -W --keep-going --all
	rm -rf _build/zh _build/html/zh
	$(VENV)/bin/jupyter-book build book/zh --config $(abspath _config_zh.yml) --toc $(abspath _toc_zh.yml) --path-output _build/zh \
		-W --keep-going --all
	cp -r _build/zh/_build/html _build/html/zh
	@echo "HTML: _build/html/index.html (English), _build/html/zh/index.html (中文)"

# One worker per core (pytest-xdist). A test file stays in one worker, except the chapters' simulated-Colab runs,
# which are handed out one by one (tests/conftest.py). The slowest tests are listed at the end, so a regression in
# time shows in the log.
test: venv
	$(PY) -m pytest -n auto --durations=30

# The notebooks' stored outputs on an older CPU, emulated: ATen's generic kernels, MKL's SSE4.2 code path.
portability: venv
	ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 $(PY) -m pytest book/

# Re-execute notebooks in place (fresh kernel each): make refresh, or make refresh NB=book/01_attention_by_hand.ipynb;
# then copy the new code and outputs into the Chinese notebooks (book/zh/).
refresh: venv
	$(PY) scripts/refresh_notebooks.py $(NB)
	$(PY) scripts/translations.py

# Each chapter run top to bottom, timed, its peak memory recorded (book/chapter_costs.json); the figures go into
# each chapter's first screen and run_it_yourself.md, in both editions. Run it on a quiet machine.
chapter-costs: venv
	$(PY) scripts/chapter_costs.py $(NB)

# The Chinese edition: copy code cells and outputs from the English notebooks into book/zh/, list the Markdown
# cells and pages whose English changed since they were translated (see scripts/translations.py).
translations:
	python3 scripts/translations.py

lab: venv
	$(VENV)/bin/jupyter lab book

bench: venv
	$(PY) -m transformer_steps.course.bench

train: venv
	$(PY) -m transformer_steps.train

# External links (bibliography URLs, GitHub, Colab): a report that never fails the build, since a machine
# without internet sees every one as broken. Report: _build/linkcheck/_build/html/output.txt
linkcheck: venv
	-$(VENV)/bin/jupyter-book build . --builder linkcheck --path-output _build/linkcheck
	@echo "linkcheck report: _build/linkcheck/_build/html/output.txt"

clean:
	rm -rf _build
