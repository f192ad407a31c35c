# Everything runs in a local virtual environment made from python3.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: quickstart test test-all lint browser clean

$(BIN)/bench: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: this version resolves to the CPU build on CI machines
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

# trains into runs/quickstart (the committed results under leaderboards/quickstart stay as they are)
quickstart: $(BIN)/bench
	$(BIN)/bench sweep leaderboards/quickstart.yaml --out runs/quickstart --executor processes --workers 2

lint: $(BIN)/bench
	$(BIN)/ruff check .

# headless Chromium for the site test (Debian's package; needs root and apt, else it is skipped
# unless REQUIRE_BROWSER is set, as CI does)
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
		>/dev/null; } || echo "no chromium here: the site's browser test will be skipped"

# CI's command: every test but those marked slow (real processes killed, interrupted or
# relaunched, many-step trainings), so that a clean-clone CI stays under its 20 minutes
test: lint browser
	$(BIN)/pytest -q -m "not slow" --durations=15  # the slowest, so the CI log shows where time goes

# everything, the slow tests included (run before a change to sweeps, executors or resumption)
test-all: lint browser
	$(BIN)/pytest -q --durations=15

clean:
	rm -rf $(VENV) runs .pytest_cache
